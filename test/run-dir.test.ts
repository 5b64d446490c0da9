// --out: the output directory of `vpps train` is checked before any training (a
// file, under a file, not writable: one line naming the path), locked against a second run (a live lock is refused
// naming its pid, a dead one taken over with a line), refused when it holds another run unless --force; state.json
// is written atomically, `--resume` falls back to the newest intact checkpoint when it is lost, and leftover
// temporary files are removed. The CLI runs in this process (test/cli-inprocess.ts) on a tiny Tree-LSTM.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  statSync,
  truncateSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { readCheckpoint } from "../src/train/checkpoint.js";
import { isRunTemp, LOCK_FILE, RunDir } from "../src/train/run-dir.js";
import { UserError } from "../src/util/errors.js";
import { writeFileAtomic } from "../src/util/files.js";
import { deriveKey, RandomStream } from "../src/util/random.js";
import { vppsInProcess } from "./cli-inprocess.js";

const tiny = ["--hidden", "4", "--embed", "4", "--max-sentences", "40", "--batch", "8"];
const tmp = (name: string) => mkdtempSync(join(tmpdir(), `vpps-rundir-${name}-`));
const train = (...args: string[]) => vppsInProcess("train", "treelstm", ...tiny, ...args);

/** One line on stderr, `vpps: ` and the message, exit status 1, and no epoch trained. */
function assertRefused(r: { code: number; stdout: string; stderr: string }, message: RegExp): void {
  assert.equal(r.code, 1, r.stderr);
  const lines = r.stderr.trimEnd().split("\n");
  assert.equal(lines.length, 1, `one line: ${r.stderr}`);
  assert.match(lines[0]!, /^vpps: /);
  assert.match(lines[0]!, message);
  assert.doesNotMatch(r.stdout, /^epoch \d/m, "nothing trained");
}

describe("--out is checked before any training", () => {
  test("an existing file, or a path under a file, is one line naming the path", async () => {
    const dir = tmp("file");
    const file = join(dir, "a-file");
    writeFileSync(file, "x");
    assertRefused(await train("--out", file), new RegExp(`--out ${file} is a file, not a directory`));
    assertRefused(
      await train("--out", join(file, "sub", "dir")),
      new RegExp(`--out ${file}/sub/dir cannot be created: ${file} is a file, not a directory`),
    );
    assertRefused(await train("--resume", file), new RegExp(`--resume ${file} is a file, not a directory`));
    assert.equal(readFileSync(file, "utf8"), "x");
  });

  test("a directory that cannot be written is one line, before training", async (t) => {
    let target: string;
    if (process.getuid?.() === 0) {
      // root writes anywhere a mode allows: sysfs refuses even root new files
      if (!existsSync("/sys/kernel") || !statSync("/sys/kernel").isDirectory()) {
        t.skip("running as root without /sys/kernel: no directory here refuses writes");
        return;
      }
      target = "/sys/kernel";
    } else {
      target = tmp("readonly");
      chmodSync(target, 0o500);
    }
    assertRefused(await train("--out", target), new RegExp(`--out ${target} is not writable \\(permission denied\\)`));
  });

  test("directories made for --out are removed again when the run fails before writing anything", async () => {
    const dir = tmp("created");
    const out = join(dir, "new", "deeper");
    const r = await train("--out", out, "--data", join(dir, "no-such-data"));
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^vpps: --data /);
    assert.deepEqual(readdirSync(dir), [], "no directory left behind");
  });
});

describe("the lock on --out", () => {
  test("a run holding the lock is named by its pid; the lock is left alone", async () => {
    const out = tmp("live");
    const lock = join(out, LOCK_FILE);
    const live = process.ppid; // the test runner: alive, and not this process
    writeFileSync(lock, `${live} ${hostname()}\n`);
    assertRefused(
      await train("--out", out),
      new RegExp(`--out ${out} is in use by another vpps run \\(pid ${live}\\); wait for it to finish`),
    );
    assert.equal(readFileSync(lock, "utf8"), `${live} ${hostname()}\n`);
  });

  test("a lock whose process is gone is taken over with a line; the lock is removed when the run ends", async () => {
    const out = tmp("stale");
    const gone = spawnSync(process.execPath, ["-e", ""]).pid!;
    writeFileSync(join(out, LOCK_FILE), `${gone} ${hostname()}\n`);
    const r = await train("--out", out, "--epochs", "1");
    assert.equal(r.code, 0, r.stderr);
    assert.match(
      r.stdout,
      new RegExp(`--out ${out}: taking over the lock of process ${gone}, which is no longer running`),
    );
    assert.ok(existsSync(join(out, "epoch-1.safetensors")));
    assert.ok(!existsSync(join(out, LOCK_FILE)), "released");
    // a failing run releases it too
    const bad = await train("--out", out, "--epochs", "1");
    assert.equal(bad.code, 1);
    assert.ok(!existsSync(join(out, LOCK_FILE)));
  });
});

describe("an --out holding another run", () => {
  test("is refused unless --force, which removes the old run's files (no stale epochs remain)", async () => {
    const out = tmp("other");
    assert.equal((await train("--out", out, "--epochs", "3")).code, 0);
    assertRefused(
      await train("--out", out, "--epochs", "1"),
      new RegExp(
        `--out ${out} already holds another run \\(state.json and 3 checkpoint\\(s\\)\\); continue it with --resume ${out}, choose another directory, or add --force to replace it`,
      ),
    );
    assert.ok(existsSync(join(out, "epoch-3.safetensors")), "the old run is untouched");
    const forced = await train("--out", out, "--epochs", "1", "--force");
    assert.equal(forced.code, 0, forced.stderr);
    assert.match(forced.stdout, new RegExp(`--force: removed another run from ${out} \\(state.json and 3 checkpoint`));
    assert.deepEqual(readdirSync(out).sort(), ["epoch-1.safetensors", "state.json"]);
  });

  test("of another model: refused, naming the model", async () => {
    const out = tmp("model");
    writeFileSync(join(out, "state.json"), JSON.stringify({ model: "bilstm-tagger" }));
    assertRefused(
      await train("--out", out),
      new RegExp(
        `--out ${out} already holds a run of model 'bilstm-tagger' \\(state.json\\); choose another directory`,
      ),
    );
  });

  test("--resume into another --out that holds a run is refused too", async () => {
    const a = tmp("ra");
    const b = tmp("rb");
    assert.equal((await train("--out", a, "--epochs", "1")).code, 0);
    assert.equal((await train("--out", b, "--epochs", "1")).code, 0);
    assertRefused(await train("--resume", a, "--out", b, "--epochs", "2"), /--out .* already holds another run/);
  });
});

describe("state.json and temporary files", () => {
  test("writeFileAtomic leaves the old file or the new one, and no temporary file when it fails", () => {
    const dir = tmp("atomic");
    const path = join(dir, "state.json");
    writeFileAtomic(path, "one\n");
    writeFileAtomic(path, "two\n");
    assert.equal(readFileSync(path, "utf8"), "two\n");
    const blocked = join(dir, "blocked");
    mkdirSync(join(blocked, "inside"), { recursive: true });
    assert.throws(
      () => writeFileAtomic(blocked, "x"),
      (e: unknown) =>
        e instanceof UserError &&
        /^cannot write .*: /.test(e.message) &&
        /EISDIR|ENOTEMPTY|EEXIST/.test(String((e.cause as NodeJS.ErrnoException).code)),
    );
    assert.deepEqual(readdirSync(dir).sort(), ["blocked", "state.json"]);
  });

  test("a lost or corrupt state.json: --resume continues from the newest intact checkpoint, saying so", async () => {
    const a = tmp("fa");
    const b = tmp("fb");
    assert.equal((await train("--out", a, "--epochs", "3", "--optimizer", "adam", "--lr", "0.01")).code, 0);
    assert.equal((await train("--out", b, "--epochs", "3", "--optimizer", "adam", "--lr", "0.01")).code, 0);
    assert.ok(!readdirSync(b).some((n) => n.includes(".tmp-")), "no temporary files after a run");
    // a kill while state.json was written in place left it empty; the newest checkpoint was cut short too
    truncateSync(join(b, "state.json"), 0);
    const third = join(b, "epoch-3.safetensors");
    truncateSync(third, 100);
    unlinkSync(join(b, "epoch-2.safetensors"));
    // epoch 1 is all that is left: train epochs 2 and 3 again, with the run's settings
    const r = await train("--resume", b);
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.split("\n").filter((l) => l.includes("state.json is"));
    assert.equal(lines.length, 1, r.stdout);
    assert.match(
      lines[0]!,
      new RegExp(
        `^--resume ${b}: state.json is not valid JSON \\(.*\\); continuing from the newest intact checkpoint ${b}/epoch-1.safetensors \\(skipped: epoch-3.safetensors: header length \\d+ exceeds the file size 100`,
      ),
    );
    assert.deepEqual(
      readCheckpoint(join(b, "epoch-3.safetensors")).tensors,
      readCheckpoint(join(a, "epoch-3.safetensors")).tensors,
      "the run continued as if nothing had happened",
    );
    const state = JSON.parse(readFileSync(join(b, "state.json"), "utf8")) as { epochs: unknown[] };
    assert.equal(state.epochs.length, 3);
  });

  test("a malformed field in state.json is named, and the checkpoint's copy is used", async () => {
    const out = tmp("field");
    assert.equal((await train("--out", out, "--epochs", "1", "--lr", "0.01")).code, 0);
    const path = join(out, "state.json");
    const state = JSON.parse(readFileSync(path, "utf8")) as { training: { learningRate: unknown } };
    state.training.learningRate = -1;
    writeFileSync(path, JSON.stringify(state));
    const r = await train("--resume", out, "--epochs", "2");
    assert.equal(r.code, 0, r.stderr);
    assert.match(
      r.stdout,
      /state.json is malformed \(training.learningRate must be a positive number; got -1\); continuing/,
    );
    assert.match(r.stdout, /adam lr 0.01,/, "the rate the run recorded");
  });

  test("without any intact checkpoint, the refusal names both", async () => {
    const out = tmp("none");
    writeFileSync(join(out, "state.json"), "{");
    assertRefused(
      await train("--resume", out),
      new RegExp(`--resume ${out}: state.json is not valid JSON .*, and no intact checkpoint holds the run's state`),
    );
  });

  test("leftover temporary files of an interrupted write are removed, with a line", async () => {
    const out = tmp("temps");
    assert.equal((await train("--out", out, "--epochs", "1")).code, 0);
    writeFileSync(join(out, "state.json.tmp-99999"), "{");
    writeFileSync(join(out, "epoch-2.safetensors.tmp-4242"), "");
    const r = await train("--resume", out, "--epochs", "2");
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`removed 2 leftover temporary file\\(s\\) of an interrupted write in ${out}`));
    assert.deepEqual(readdirSync(out).sort(), ["epoch-1.safetensors", "epoch-2.safetensors", "state.json"]);
  });

  test("only vpps's own temporaries go: generated names with '.tmp-' that vpps never writes stay", () => {
    const random = new RandomStream(deriveKey(7, "temp-names"));
    const rng = () => random.uniform();
    const pick = <T>(xs: readonly T[]) => xs[Math.floor(rng() * xs.length)]!;
    const word = () => Array.from({ length: 1 + Math.floor(rng() * 6) }, () => pick([..."abcxyz019._-"])).join("");
    for (let round = 0; round < 20; round++) {
      const dir = tmp("temp-names");
      const theirs = new Set<string>();
      const ours = new Set<string>();
      for (let i = 0; i < 8; i++) {
        // a user's file that merely contains the infix, or looks almost like ours
        theirs.add(
          pick([
            () => `${word()}.tmp-${word()}`,
            () => `experiment.tmp-notes-${i}.txt`,
            () => `state.json.tmp-${word()}x`,
            () => `epoch-${word()}x.safetensors.tmp-${i}`,
            () => `state.json.tmp-${i}.bak`,
            () => `my-state.json.tmp-${i}`,
          ])(),
        );
        ours.add(
          rng() < 0.5
            ? `state.json.tmp-${1 + Math.floor(rng() * 99999)}`
            : `epoch-${Math.floor(rng() * 50)}.safetensors.tmp-${1 + Math.floor(rng() * 99999)}`,
        );
      }
      for (const n of ours) theirs.delete(n);
      for (const n of [...theirs, ...ours]) writeFileSync(join(dir, n), "x");
      for (const n of theirs) assert.equal(isRunTemp(n), false, n);
      for (const n of ours) assert.equal(isRunTemp(n), true, n);
      const notes: string[] = [];
      RunDir.open(dir, { note: (l) => notes.push(l) }).close();
      assert.deepEqual(readdirSync(dir).sort(), [...theirs].sort(), "exactly vpps's temporaries removed");
      assert.match(notes.join("\n"), new RegExp(`removed ${ours.size} leftover temporary file`));
    }
  });
});

describe("--force replaces another run only once the new run has trained", () => {
  test("a new run that fails before its first checkpoint (mistyped --data) leaves the old run as it was", async () => {
    const out = tmp("force-bad");
    assert.equal((await train("--out", out, "--epochs", "2")).code, 0);
    const before = new Map(readdirSync(out).map((n) => [n, readFileSync(join(out, n))]));
    const r = await train("--out", out, "--epochs", "1", "--force", "--data", join(out, "no-such-data"));
    assert.equal(r.code, 1, r.stdout);
    assert.match(r.stderr, /^vpps: .*no-such-data/m);
    assert.doesNotMatch(r.stdout, /--force: removed/);
    const after = new Map(readdirSync(out).map((n) => [n, readFileSync(join(out, n))]));
    assert.deepEqual([...after.keys()].sort(), [...before.keys()].sort(), "the old run's files are all there");
    for (const [n, bytes] of before) assert.ok(after.get(n)!.equals(bytes), `${n} unchanged`);
  });
});
