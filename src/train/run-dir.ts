/**
 * A run's output directory: checked (and created) before any training, locked against a second run writing into
 * it, cleared of temporary files a killed writer left, and refused when it holds another run. Failures are
 * RunDirError, one line naming the path and what to do.
 */

import {
  closeSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmdirSync,
  rmSync,
  statSync,
  writeSync,
} from "node:fs";
import { hostname } from "node:os";
import { dirname, join, resolve } from "node:path";
import { UserError } from "../util/errors.js";
import { fsErrorReason, TEMP_INFIX } from "../util/files.js";

/** An output (or resume) directory that cannot be used: not creatable or writable, locked, holding another run. */
export class RunDirError extends UserError {
  constructor(message: string) {
    super(message);
    this.name = "RunDirError";
  }
}

/** The lock file a run holds in its output directory while it runs: `<pid> <host>`. */
export const LOCK_FILE = "vpps.lock";

const CHECKPOINT = /^epoch-(\d+)\.safetensors$/;

/** The epoch numbers of the checkpoints in `dir`, newest first. */
export function checkpointEpochs(dir: string): number[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  return names
    .map((n) => CHECKPOINT.exec(n))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => Number(m[1]))
    .sort((a, b) => b - a);
}

/**
 * `dir` as an absolute path, made a usable directory: created with its missing parents (each named in `created`,
 * outermost first, so that a run that fails before writing anything can remove them again), or checked to be a
 * directory. A path that is a file or lies under one, or a parent that cannot be written, is a RunDirError naming
 * the path. Writability of `dir` itself is proven by taking its lock (`RunDirLock`).
 */
function prepareOutDir(dir: string, flag = "--out"): { path: string; created: string[] } {
  if (dir.trim() === "") throw new RunDirError(`${flag} is empty; give a directory`);
  const path = resolve(dir);
  const missing: string[] = [];
  let at = path;
  for (;;) {
    let isDir: boolean;
    try {
      isDir = statSync(at).isDirectory();
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENOENT" && dirname(at) !== at) {
        missing.unshift(at);
        at = dirname(at);
        continue;
      }
      if (code === "ENOTDIR") {
        // a file somewhere above: keep walking up to name it
        missing.unshift(at);
        at = dirname(at);
        continue;
      }
      throw new RunDirError(`${flag} ${dir} cannot be used: ${at} ${fsErrorReason(e)}`);
    }
    if (!isDir) {
      throw new RunDirError(
        at === path
          ? `${flag} ${dir} is a file, not a directory; give a directory for the checkpoints`
          : `${flag} ${dir} cannot be created: ${at} is a file, not a directory`,
      );
    }
    break;
  }
  const created: string[] = [];
  for (const d of missing) {
    try {
      mkdirSync(d);
      created.push(d);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "EEXIST" && statSync(d).isDirectory()) continue;
      removeCreated(created);
      throw new RunDirError(`${flag} ${dir} cannot be created in ${dirname(d)} (${fsErrorReason(e)})`);
    }
  }
  // the files a run writes must be writable as files: a directory (or a pipe, a device) in the place of state.json,
  // a checkpoint or the lock would stop the run only after its first epoch, at the rename
  let names: string[] = [];
  try {
    names = readdirSync(path);
  } catch (e) {
    removeCreated(created);
    throw new RunDirError(`${flag} ${dir} cannot be listed (${fsErrorReason(e)})`);
  }
  for (const name of names) {
    if (!(name === "state.json" || name === LOCK_FILE || CHECKPOINT.test(name) || isRunTemp(name))) continue;
    let regular = true;
    try {
      regular = lstatSync(join(path, name)).isFile();
    } catch {
      // gone meanwhile
    }
    if (!regular) {
      removeCreated(created);
      throw new RunDirError(
        `${flag} ${dir}: ${join(path, name)} is not a regular file (a directory or another kind); move it away or ` +
          "choose another directory (vpps writes its own file under that name)",
      );
    }
  }
  return { path, created };
}

/** Removes the directories `prepareOutDir` created (innermost first) while they are empty. */
function removeCreated(created: readonly string[]): void {
  for (const d of [...created].reverse()) {
    try {
      rmdirSync(d);
    } catch {
      return; // not empty (or gone): leave it and its parents
    }
  }
}

/** Locks held by this process, by directory, with how many holders. */
const held = new Map<string, number>();

function processIsAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM"; // alive, another user's
  }
}

/**
 * The lock of a run directory: a file holding the pid and host of the run writing there. A second run is refused
 * naming the first's pid; a lock whose process is gone (killed) is taken over with a line through `note`.
 * Re-entrant within a process (counted).
 */
class RunDirLock {
  private released = false;

  private constructor(readonly dir: string) {}

  static acquire(dir: string, note: (line: string) => void, flag = "--out"): RunDirLock {
    const path = join(dir, LOCK_FILE);
    const count = held.get(dir);
    if (count !== undefined) {
      held.set(dir, count + 1);
      return new RunDirLock(dir);
    }
    const me = `${process.pid} ${hostname()}\n`;
    for (let attempt = 0; attempt < 3; attempt++) {
      let fd: number;
      try {
        fd = openSync(path, "wx");
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST") {
          throw new RunDirError(`${flag} ${dir} is not writable (${fsErrorReason(e)})`);
        }
        let text = "";
        try {
          text = readFileSync(path, "utf8");
        } catch {
          // removed meanwhile: try again
        }
        const [pidText, host] = text.trim().split(/\s+/);
        const pid = Number(pidText);
        const known = Number.isSafeInteger(pid) && pid > 0;
        const elsewhere = host !== undefined && host !== hostname();
        if (known && (elsewhere || (pid !== process.pid && processIsAlive(pid)))) {
          throw new RunDirError(
            `${flag} ${dir} is in use by another vpps run (pid ${pid}${elsewhere ? ` on ${host}` : ""}); wait for it ` +
              `to finish or choose another directory (delete ${path} only if that process is not vpps)`,
          );
        }
        note(
          known
            ? `${flag} ${dir}: taking over the lock of process ${pid}, which is no longer running`
            : `${flag} ${dir}: taking over an unreadable lock file (left by an interrupted run)`,
        );
        try {
          rmSync(path, { force: true });
        } catch (e) {
          throw new RunDirError(`${flag} ${dir}: the lock ${path} cannot be replaced (${fsErrorReason(e)})`);
        }
        continue;
      }
      try {
        writeSync(fd, me);
      } catch (e) {
        // a full disk or quota: the lock cannot be written, so the run could not save either
        closeSync(fd);
        rmSync(path, { force: true });
        throw new RunDirError(
          `${flag} ${dir}: cannot write the lock ${path} (${fsErrorReason(e)}); free space there or choose another directory`,
        );
      }
      closeSync(fd);
      held.set(dir, 1);
      return new RunDirLock(dir);
    }
    throw new RunDirError(`${flag} ${dir}: another run took the lock ${path} at the same time; try again`);
  }

  /** Releases this hold; the last one removes the lock file. */
  release(): void {
    if (this.released) return;
    this.released = true;
    const count = held.get(this.dir) ?? 1;
    if (count > 1) {
      held.set(this.dir, count - 1);
      return;
    }
    held.delete(this.dir);
    rmSync(join(this.dir, LOCK_FILE), { force: true });
  }
}

/**
 * The temporary file of an atomic write vpps makes in a run directory (util/files.ts: `<file>.tmp-<pid>` of
 * state.json or a checkpoint). Nothing else is ever removed as a leftover: a user's `notes.tmp-1.txt` stays.
 */
const RUN_TEMP = new RegExp(`^(state\\.json|epoch-\\d+\\.safetensors)${TEMP_INFIX.replace(".", "\\.")}\\d+$`);

/** Whether `name` is the leftover of one of vpps's own atomic writes in a run directory. */
export function isRunTemp(name: string): boolean {
  return RUN_TEMP.test(name);
}

/** Removes the temporary files of vpps's writers that were killed (isRunTemp); returns their names. */
function removeLeftoverTemps(dir: string): string[] {
  const removed: string[] = [];
  for (const name of readdirSync(dir)) {
    if (!isRunTemp(name)) continue;
    try {
      if (!lstatSync(join(dir, name)).isFile()) continue; // not what vpps writes: left alone
    } catch {
      continue;
    }
    rmSync(join(dir, name), { force: true });
    removed.push(name);
  }
  return removed;
}

/** Another run's files that `--force` replaces, removed only once the new run writes its first file. */
interface Replaced {
  readonly what: string;
  readonly files: string;
  readonly epochs: readonly number[];
}

/**
 * Refuses an output directory that holds a run other than the one being resumed (`resumeDir`): its checkpoints
 * and state would be mixed with the new run's. With `force`, returns what that run is, for removal later
 * (RunDir.replaceOtherRun), so that a new run that fails before it writes anything leaves the old one as it was.
 */
function checkOtherRun(
  dir: string,
  opts: { model: string; resumeDir?: string; force: boolean; flag?: string },
): Replaced | null {
  const flag = opts.flag ?? "--out";
  const epochs = checkpointEpochs(dir);
  const statePath = join(dir, "state.json");
  let hasState = false;
  try {
    hasState = statSync(statePath).isFile();
  } catch {
    // none
  }
  if (!hasState && epochs.length === 0) return null;
  if (opts.resumeDir !== undefined && sameDir(opts.resumeDir, dir)) return null;
  let model: string | undefined;
  try {
    const m = (JSON.parse(readFileSync(statePath, "utf8")) as { model?: unknown }).model;
    if (typeof m === "string") model = m;
  } catch {
    // unreadable: described by its files alone
  }
  const files = [hasState ? "state.json" : "", epochs.length > 0 ? `${epochs.length} checkpoint(s)` : ""]
    .filter(Boolean)
    .join(" and ");
  const what = model !== undefined && model !== opts.model ? `a run of model '${model}'` : "another run";
  if (!opts.force) {
    const resume = model === undefined || model === opts.model ? `continue it with --resume ${dir}, ` : "";
    throw new RunDirError(
      `${flag} ${dir} already holds ${what} (${files}); ${resume}choose another directory, or add --force to ` +
        "replace it",
    );
  }
  return { what, files, epochs };
}

function sameDir(a: string, b: string): boolean {
  try {
    return realpathSync(a) === realpathSync(b);
  } catch {
    return resolve(a) === resolve(b);
  }
}

/**
 * An opened run directory — the one way in: created if missing, locked, cleared of the temporary files of killed
 * writers; `checkOtherRun` then refuses (or with `force` clears) another run's files once the caller knows which run
 * this is. Whoever opens it closes it; the training loop only writes into it.
 */
export class RunDir {
  private closed = false;
  /** Another run `--force` replaces, still on disk until this run writes (replaceOtherRun). */
  private replaced: Replaced | null = null;

  private constructor(
    /** The absolute path. */
    readonly path: string,
    private readonly lock: RunDirLock,
    private readonly created: readonly string[],
    private readonly flag: string,
    private readonly note: (line: string) => void,
  ) {}

  /**
   * Opens `dir` for a run that will write there (`flag` names the option it came from, for messages; `note` gets
   * the lines about a lock taken over or leftovers removed). Fails with RunDirError, leaving nothing behind.
   */
  static open(dir: string, opts: { flag?: string; note?: (line: string) => void } = {}): RunDir {
    const flag = opts.flag ?? "--out";
    const note = opts.note ?? (() => {});
    const { path, created } = prepareOutDir(dir, flag);
    let lock: RunDirLock | undefined;
    try {
      lock = RunDirLock.acquire(path, note, flag);
      const temps = removeLeftoverTemps(path);
      if (temps.length > 0) {
        note(`removed ${temps.length} leftover temporary file(s) of an interrupted write in ${path}`);
      }
      return new RunDir(path, lock, created, flag, note);
    } catch (e) {
      lock?.release();
      removeCreated(created);
      throw e;
    }
  }

  /**
   * Refuses the directory if it holds a run other than `resumeDir`'s. With `force`, that run is replaced — but only
   * when this run writes its first file (replaceOtherRun): a run that fails before (bad data, no GPU, a model too
   * large) leaves it as it was.
   */
  checkOtherRun(opts: { model: string; resumeDir?: string; force: boolean }): void {
    this.replaced = checkOtherRun(this.path, { ...opts, flag: this.flag });
    if (this.replaced) {
      this.note(
        `--force: ${this.replaced.what} in ${this.path} (${this.replaced.files}) is replaced when this run writes ` +
          "its first checkpoint",
      );
    }
  }

  /** Removes the run that `--force` replaces, if any; called before this run's first write. */
  replaceOtherRun(): void {
    const r = this.replaced;
    if (r === null) return;
    this.replaced = null;
    for (const e of r.epochs) rmSync(join(this.path, `epoch-${e}.safetensors`), { force: true });
    rmSync(join(this.path, "state.json"), { force: true });
    removeLeftoverTemps(this.path);
    this.note(`--force: removed ${r.what} from ${this.path} (${r.files})`);
  }

  /** Releases the lock; the directories `open` created go again if nothing was written into them. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.lock.release();
    removeCreated(this.created);
  }
}
