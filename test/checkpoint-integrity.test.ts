// Nothing corrupt or foreign loads silently: a checkpoint carries a SHA-256 per tensor and the run identity (model,
// shape, optimiser, seed, the data's content fingerprint), checked on resume and eval; weights beyond ±2^64 (whose
// square overflows float32) are refused; the data are known by content, so changed data are refused on resume and
// the same data moved resume. The cases (bits, values, tensors, settings, file edits, directory names) are generated
// from a seeded generator, so a new seed is a new probe of the same classes. The CLI runs in-process.

import assert from "node:assert/strict";
import { cpSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { CheckpointError } from "../src/model/safetensors.js";
import { firstOutOfRange, MAX_MAGNITUDE, readCheckpoint } from "../src/train/checkpoint.js";
import type { RunState } from "../src/train/run-state.js";
import { RandomStream } from "../src/util/random.js";
import { type CliResult, cli, copyRun, dataDir, hasTrace, TINY, tempDir } from "./cli-harness.js";
import { flipDataBit, rawHeader, stripChecksums, writeRawSafetensors } from "./safetensors-raw.js";

const SEED = Number(process.env.VPPS_PROBE_SEED ?? 40);
const rng = new RandomStream(SEED);
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rng.uniform() * xs.length)]!;
const int = (n: number): number => Math.floor(rng.uniform() * n);

const train = (...args: string[]) => cli("train", "treelstm", ...args);
const state = (dir: string) => JSON.parse(readFileSync(join(dir, "state.json"), "utf8")) as RunState;

/** A refusal: status 1, one line on stderr starting `vpps: `, no trace. */
function refused(r: CliResult, pattern: RegExp): void {
  assert.equal(r.code, 1, `expected a refusal; got status ${r.code}: ${r.stderr}`);
  assert.ok(!hasTrace(r.stderr), r.stderr);
  const lines = r.stderr.split("\n").filter((l) => l.startsWith("vpps: "));
  assert.equal(lines.length, 1, r.stderr);
  assert.match(lines[0]!, pattern);
}

const data = dataDir(30);
const base = join(tempDir("integrity"), "run");

describe("checkpoint integrity and run identity", () => {
  test("the saved run records its identity and data fingerprint in state.json and the checkpoint", async () => {
    const r = await train("--data", data, ...TINY, "--epochs", "2", "--out", base);
    assert.equal(r.code, 0, r.stderr);
    // the checkpoint of epoch 1 stays as it was; state.json names epoch 1 again as the last (a run killed in epoch 2)
    const s = state(base);
    const fp = s.training.dataFingerprint!;
    assert.match(fp.digest, /^sha256:[0-9a-f]{64}$/);
    assert.deepEqual(Object.keys(fp.files), ["dev.txt", "train.txt"]);
    const ckpt = readCheckpoint(join(base, "epoch-2.safetensors"));
    assert.equal(ckpt.checksummed, true);
    assert.deepEqual(ckpt.identity, {
      model: "treelstm",
      options: s.options,
      optimizer: "adam",
      seed: 1,
      data: fp,
    });
    assert.equal(ckpt.epoch, 2);
    assert.deepEqual(s.identity, ckpt.identity, "state.json records the same identity");
    s.training.epochs = 3;
    writeFileSync(join(base, "state.json"), JSON.stringify(s));
  });

  test("a flipped bit anywhere in the tensors is refused on resume and eval, naming the file and the tensor", async () => {
    // generated: 6 (byte, bit) positions over the whole data section
    const size =
      readFileSync(join(base, "epoch-2.safetensors")).length - rawHeader(join(base, "epoch-2.safetensors")).dataStart;
    for (let k = 0; k < 6; k++) {
      const run = copyRun(base);
      const path = join(run, "epoch-2.safetensors");
      const byte = int(size);
      const bit = int(8);
      flipDataBit(path, byte, bit);
      const pattern = new RegExp(
        `^vpps: ${path}: tensor '[^']+' does not match its checksum \\(sha256 [0-9a-f]{12}… written, [0-9a-f]{12}… read\\); the file changed after vpps wrote it`,
      );
      const how =
        k % 2 === 0
          ? await train("--resume", run)
          : await cli("eval", "treelstm", "--run", run, "--data", join(data, "dev.txt"));
      refused(how, pattern);
    }
  });

  test("a changed metadata value is refused (the metadata have their own checksum)", () => {
    const run = copyRun(base);
    const path = join(run, "epoch-2.safetensors");
    const bytes = readFileSync(path);
    // "epoch":"2" → "epoch":"3": same length, so only the checksum can tell
    const text = bytes.toString("latin1");
    const at = text.indexOf('"epoch":"2"');
    assert.ok(at > 0);
    bytes.write('"epoch":"3"', at, "latin1");
    writeFileSync(path, bytes);
    assert.throws(
      () => readCheckpoint(path),
      (e: unknown) =>
        e instanceof CheckpointError && /the metadata do not match the checksum written with them/.test(e.message),
    );
  });

  test("values that are not finite or beyond ±2^64 are refused even without checksums; just below is accepted", () => {
    const dir = tempDir("range");
    const cases: number[] = [Number.NaN, Number.POSITIVE_INFINITY, -Number.POSITIVE_INFINITY, 3e38, -MAX_MAGNITUDE];
    for (let k = 0; k < 8; k++) cases.push((rng.uniform() < 0.5 ? -1 : 1) * 2 ** (64 + rng.uniform() * 63.9));
    for (const value of cases) {
      const n = 1 + int(20);
      const data = new Float32Array(n).map(() => rng.uniform() * 2 - 1);
      const at = int(n);
      data[at] = value;
      const name = pick(["W", "E/x", "lstm.Wi", "adam.m/W"]);
      const path = join(dir, `c${int(1e9)}.safetensors`);
      writeRawSafetensors(path, [
        ["ok", [2], new Float32Array([0.5, -0.5])],
        [name, [n], data],
      ]);
      const stored = new Float32Array([value])[0]!;
      assert.throws(
        () => readCheckpoint(path),
        (e: unknown) =>
          e instanceof CheckpointError &&
          e.message.startsWith(`${path}: tensor '${name}' holds ${stored} at element ${at}`) &&
          !e.message.includes("\n"),
        `value ${value}`,
      );
    }
    const below = new Float32Array([2 ** 63.99, -(2 ** 63.99), 1e-40, 0]);
    assert.equal(firstOutOfRange(below), null);
    const path = join(dir, "fine.safetensors");
    writeRawSafetensors(path, [["W", [4], below]]);
    assert.equal(readCheckpoint(path).checksummed, false);
  });

  test("a checkpoint of another run is refused on resume and eval, naming what differs", async () => {
    // generated: another run differing in one identity field at a time
    const others: [string[], RegExp][] = [
      [["--seed", String(2 + int(100))], /its seed is \d+, the run's 1/],
      [["--optimizer", "sgd"], /its optimiser is sgd, the run's adam/],
      [["--hidden", String(pick([8, 12]))], /its hidden is \d+, the run's 4/],
      [["--data", dataDir(31 + int(50))], /it was trained on other data \((dev\.txt differs, )?train\.txt differs\)/],
    ];
    for (const [flags, what] of others) {
      const other = join(tempDir("other"), "run");
      const r = await train("--data", data, ...TINY, "--epochs", "2", ...flags, "--out", other);
      assert.equal(r.code, 0, r.stderr);
      const run = copyRun(base);
      const path = join(run, "epoch-2.safetensors");
      cpSync(join(other, "epoch-2.safetensors"), path);
      const pattern = new RegExp(
        `^vpps: ${path} belongs to another run than the state.json beside it: .*${what.source}`,
      );
      refused(await train("--resume", run), pattern);
      refused(await cli("eval", "treelstm", "--run", run, "--data", join(data, "dev.txt")), pattern);
    }
  });

  test("a state.json changed after it was written is refused naming the field; without it the checkpoint continues", async () => {
    // generated edits: a setting, a result of an epoch, a word of the vocabulary
    const edits: [(s: RunState) => void, RegExp][] = [
      [
        (s) => void (s.training.learningRate *= 1 + int(9)),
        /its training\.learningRate is [\d.e-]+, the checkpoint's 0\.001/,
      ],
      [(s) => void (s.training.batch = 9 + int(50)), /its training\.batch is \d+, the checkpoint's 8/],
      [
        (s) => void (s.epochs[int(2)]!.trainLoss += 0.5),
        /its epochs\[[01]\]\.trainLoss is [\d.]+, the checkpoint's [\d.]+/,
      ],
      [
        (s) => void ((s.vocabulary as string[])[1 + int(5)] = "zzz"),
        /its vocabulary\[\d\] is "zzz", the checkpoint's "[^"]+"/,
      ],
    ];
    for (const [change, what] of edits) {
      const run = copyRun(base);
      const s = state(run);
      change(s);
      writeFileSync(join(run, "state.json"), JSON.stringify(s));
      const pattern = new RegExp(
        `^vpps: state\\.json beside .*epoch-2\\.safetensors is not what the run wrote with it: ${what.source}`,
      );
      refused(await cli("eval", "treelstm", "--run", run, "--data", join(data, "dev.txt")), pattern);
      refused(await train("--resume", run), pattern);
    }
    const run = copyRun(base);
    rmSync(join(run, "state.json"));
    const r = await train("--resume", run, "--epochs", "3");
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /state\.json is missing; continuing from the newest intact checkpoint/);
  });

  test("another epoch's checkpoint of the same run is refused", async () => {
    const run = copyRun(base);
    cpSync(join(run, "epoch-1.safetensors"), join(run, "epoch-2.safetensors"));
    refused(
      await train("--resume", run),
      /^vpps: .*epoch-2\.safetensors holds epoch 1 of the run, but state.json names it as epoch 2/,
    );
  });

  test("a checkpoint of an older vpps (no checksums, no identity) is accepted with a one-line notice", async () => {
    const run = copyRun(base);
    const path = join(run, "epoch-2.safetensors");
    stripChecksums(path);
    const { header } = rawHeader(path);
    const meta = header.__metadata__ as Record<string, string>;
    delete meta.identity;
    const tensors = readCheckpoint(path).tensors;
    writeRawSafetensors(
      path,
      [...tensors].map(([n, t]) => [n, [...t.shape], t.data] as const),
      meta,
    );
    const r = await train("--resume", run);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`^${path} has no run identity and checksums \\(an older vpps wrote it\\)`, "m"));
    assert.equal(state(run).epochs.length, 3);
  });
});

describe("data known by content", () => {
  test("changed data are refused on resume, naming the file; --accept-data-change continues", async () => {
    // generated edits of one of the files: a byte changed, a line appended, a line dropped
    for (let k = 0; k < 3; k++) {
      const d = join(tempDir("moved"), "d");
      cpSync(data, d, { recursive: true });
      const run = join(tempDir("r"), "run");
      const first = await train("--data", d, ...TINY, "--out", run);
      assert.equal(first.code, 0, first.stderr);
      const file = pick(["train.txt", "dev.txt"]);
      const text = readFileSync(join(d, file), "utf8");
      const lines = text.trimEnd().split("\n");
      const edit = k % 3;
      const edited =
        edit === 0
          ? text.replace(/\(\d/, (m) => `(${(Number(m[1]) + 1) % 5}`)
          : edit === 1
            ? `${text}${lines[0]}\n`
            : `${lines.slice(1).join("\n")}\n`;
      writeFileSync(join(d, file), edited);
      refused(
        await train("--resume", run, "--epochs", "2"),
        new RegExp(`^vpps: --resume ${run}: the data in ${d} are not those the run trained on \\(${file} differs\\)`),
      );
      const r = await train("--resume", run, "--epochs", "2", "--accept-data-change");
      assert.equal(r.code, 0, r.stderr);
      assert.match(
        r.stdout,
        new RegExp(`--accept-data-change: continuing the run on changed data \\(${file} differs\\)`),
      );
    }
  });

  test("the same data moved resume (--data names the new place); gone data say to give it", async () => {
    const d = join(tempDir("src"), "data");
    cpSync(data, d, { recursive: true });
    const run = join(tempDir("r"), "run");
    assert.equal((await train("--data", d, ...TINY, "--out", run)).code, 0);
    // generated new names, one with spaces and non-ASCII
    const moved = join(tempDir("dst"), pick(["data 2", "données", "x.y"]) + String(int(1000)));
    renameSync(d, moved);
    refused(
      await train("--resume", run, "--epochs", "2"),
      /the run's data directory .* is gone; if the data moved, give their new place with --data/,
    );
    const r = await train("--resume", run, "--epochs", "2", "--data", moved);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /are the run's \(same content as in .*\): resuming there/);
    assert.equal(state(run).training.data, moved);
    assert.equal(state(run).epochs.length, 2);
  });
});
