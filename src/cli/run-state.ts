import { readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import type { AnyTask, ModelOptions } from "../models/task.js";
import { readCheckpoint } from "../train/checkpoint.js";
import { checkpointEpochs } from "../train/run-dir.js";
import { checkRunState, type RunState } from "../train/run-state.js";
import { fsErrorReason } from "../util/files.js";
import { cut } from "../util/text.js";
import { CliError } from "./errors.js";

/** A run saved with `--out`: its state, its last checkpoint, and the model options and vocabulary to rebuild it. */
export interface SavedRun {
  /** The run's directory, absolute. */
  dir: string;
  state: RunState;
  checkpoint: string;
  /** `current` with the options the run's model was built with. */
  options: ModelOptions;
  vocab: unknown;
}

/**
 * Reads `<dir>/state.json` of a run of `task` (given as `flag dir` on the command line) and finds its last
 * checkpoint; names what is missing or malformed. When state.json is missing or corrupt (a kill while it was
 * written by an older vpps, a disk error), the newest intact checkpoint, which carries the run state as of its
 * epoch, stands in for it, and `note` says so in one line.
 */
export function readRun(
  task: AnyTask,
  dir: string,
  flag: string,
  current: ModelOptions,
  note: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
): SavedRun {
  const root = resolve(dir);
  let isDir: boolean;
  try {
    isDir = statSync(root).isDirectory();
  } catch (e) {
    throw new CliError(`${flag} ${dir}: the directory ${fsErrorReason(e)} (give the --out directory of a run)`);
  }
  if (!isDir) throw new CliError(`${flag} ${dir} is a file; give the --out directory of a run`);
  const path = join(root, "state.json");
  let state: RunState | undefined;
  let why: string;
  try {
    // strict UTF-8: a damaged byte in a word of the vocabulary must not silently become U+FFFD (two such words merge)
    const raw = new TextDecoder("utf-8", { fatal: true }).decode(readFileSync(path));
    state = checkRunState(JSON.parse(raw));
    why = state.epochs.length === 0 ? "without a finished epoch" : "";
    if (why !== "") state = undefined;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    why =
      code === "ENOENT"
        ? "missing"
        : code !== undefined
          ? `unreadable (${fsErrorReason(e)})`
          : e instanceof SyntaxError
            ? `not valid JSON (${cut(e.message, 80)})`
            : `malformed (${cut((e as Error).message, 200)})`;
  }
  let checkpoint: string;
  if (state !== undefined) {
    checkpoint = join(root, `epoch-${state.epochs[state.epochs.length - 1]!.epoch}.safetensors`);
    try {
      statSync(checkpoint);
    } catch {
      throw new CliError(`${flag} ${dir}: the checkpoint ${checkpoint} that state.json names is missing`);
    }
  } else {
    const found = newestIntactCheckpoint(root);
    if (found === undefined) {
      throw new CliError(
        why === "missing"
          ? `${flag} ${dir}: no state.json there and no checkpoint of a run (they are written by a run with --out)`
          : `${flag} ${dir}: state.json is ${why}, and no intact checkpoint holds the run's state`,
      );
    }
    ({ state, checkpoint } = found);
    note(
      `${flag} ${dir}: state.json is ${why}; continuing from the newest intact checkpoint ${checkpoint}` +
        (found.skipped.length > 0 ? ` (skipped: ${found.skipped.join("; ")})` : ""),
    );
  }
  if (state.model !== task.name) {
    throw new CliError(`${flag} ${dir}: the run trained model '${state.model}', not '${task.name}'`);
  }
  let options: ModelOptions;
  let vocab: unknown;
  try {
    options = task.restoreOptions(state.options, current);
  } catch (e) {
    throw new CliError(`${flag} ${dir}: state.json: ${(e as Error).message}`);
  }
  try {
    vocab = task.vocabulary.fromJSON(state.vocabulary);
  } catch (e) {
    throw new CliError(`${flag} ${dir}: state.json's vocabulary: ${(e as Error).message}`);
  }
  return { dir: root, state, checkpoint, options, vocab };
}

/** The newest checkpoint in `dir` that reads back whole with its run state, and why newer ones were skipped. */
function newestIntactCheckpoint(dir: string): { state: RunState; checkpoint: string; skipped: string[] } | undefined {
  const skipped: string[] = [];
  for (const epoch of checkpointEpochs(dir)) {
    const path = join(dir, `epoch-${epoch}.safetensors`);
    try {
      const ckpt = readCheckpoint(path);
      if (ckpt.run === undefined) throw new Error("it holds no run state (an older vpps wrote it)");
      const state = checkRunState(ckpt.run);
      const last = state.epochs[state.epochs.length - 1];
      if (last?.epoch !== epoch) throw new Error(`its run state ends at epoch ${last?.epoch}`);
      return { state, checkpoint: path, skipped };
    } catch (e) {
      skipped.push(`epoch-${epoch}.safetensors: ${(e as Error).message.replace(`${path}: `, "")}`);
    }
  }
  return undefined;
}
