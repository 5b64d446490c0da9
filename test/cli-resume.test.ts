// Resuming: `vpps train --resume <dir>` continues the run that was saved — its data, optimiser, rate, seed,
// batch, clip, engine and model options come from the run, not from the command line's defaults — and a flag given
// explicitly either overrides with a printed line or is refused (the data, the model's shape). `--epochs` is the
// run's total. The CLI runs in this process (test/cli-inprocess.ts) on a tiny Tree-LSTM.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { syntheticTrees } from "../src/data/synthetic.js";
import { formatTree } from "../src/data/tree.js";
import { readCheckpoint } from "../src/train/checkpoint.js";
import type { RunState } from "../src/train/run-state.js";
import { vppsInProcess } from "./cli-inprocess.js";

const tmp = (name: string) => mkdtempSync(join(tmpdir(), `vpps-resume-${name}-`));

function dataDir(seed: number): string {
  const dir = tmp("data");
  writeFileSync(join(dir, "train.txt"), `${syntheticTrees(48, seed).map(formatTree).join("\n")}\n`);
  writeFileSync(
    join(dir, "dev.txt"),
    `${syntheticTrees(16, seed + 1)
      .map(formatTree)
      .join("\n")}\n`,
  );
  return dir;
}

const data = dataDir(31);
// every setting differs from its default, so that a resume falling back to a default would show
const settings = [
  ["--data", data],
  ["--optimizer", "adam"],
  ["--lr", "0.02"],
  ["--seed", "5"],
  ["--batch", "6"],
  ["--clip", "2"],
  ["--hidden", "4"],
  ["--embed", "3"],
  ["--dropout", "0.1"],
  ["--max-sentences", "30"],
].flat();
const train = (...args: string[]) => vppsInProcess("train", "treelstm", ...args);
const state = (dir: string) => JSON.parse(readFileSync(join(dir, "state.json"), "utf8")) as RunState;

/** A run of 1 epoch (of a total of `total`) with every setting, in a new directory. */
async function oneEpoch(total = 2): Promise<string> {
  const out = tmp("run");
  const r = await train(...settings, "--epochs", "1", "--out", out);
  assert.equal(r.code, 0, r.stderr);
  if (total !== 1) {
    // what the run was asked for: edit the recorded target, as a run started with --epochs <total> and killed
    const s = state(out);
    s.training.epochs = total;
    writeFileSync(join(out, "state.json"), JSON.stringify(s));
  }
  return out;
}

function oneLineRefusal(r: { code: number; stdout: string; stderr: string }, message: RegExp): void {
  assert.equal(r.code, 1, r.stderr);
  assert.equal(r.stderr.trimEnd().split("\n").length, 1, r.stderr);
  assert.match(r.stderr, message);
  assert.doesNotMatch(r.stdout, /^epoch \d/m);
}

describe("--resume continues the saved run", () => {
  test("without repeating any flag: the same weights and Adam moments as an uninterrupted run", async () => {
    const straight = tmp("straight");
    const s = await train(...settings, "--epochs", "2", "--out", straight);
    assert.equal(s.code, 0, s.stderr);
    const out = await oneEpoch(2);
    const r = await train("--resume", out);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /data: .*: 30 training trees, 16 dev trees/);
    assert.match(r.stdout, /hidden 4, embedding 3; adam lr 0.02, batch 6, seed 5, engine cpu/);
    assert.doesNotMatch(r.stdout, /overrides/);
    assert.deepEqual(
      readCheckpoint(join(out, "epoch-2.safetensors")).tensors,
      readCheckpoint(join(straight, "epoch-2.safetensors")).tensors,
    );
    const t = state(out).training;
    // the data's fingerprint: the run's own (checkpoint-integrity.test.ts checks what it is)
    assert.deepEqual(t.dataFingerprint, state(straight).training.dataFingerprint);
    assert.deepEqual(
      { ...t, data: t.data, dataFingerprint: undefined },
      {
        data,
        dataFingerprint: undefined,
        dataSeed: 5,
        maxSentences: 30,
        epochs: 2,
        engine: "cpu",
        batching: "agenda",
        device: "auto",
        modelOptions: { hidden: 4, embed: 3, cell: "fused", dropout: 0.1 },
        optimizer: "adam",
        learningRate: 0.02,
        batch: 6,
        seed: 5,
        clip: 2,
        shuffle: "examples",
      },
    );
    assert.ok(
      state(out).epochs.every((e) => e.devSet === data),
      "every epoch on the same dev set",
    );
  });

  test("the synthetic task is regenerated from the run's seed, whatever --seed says now", async () => {
    const out = tmp("synthetic");
    assert.equal(
      (
        await train(
          "--hidden",
          "4",
          "--embed",
          "4",
          "--max-sentences",
          "20",
          "--seed",
          "7",
          "--epochs",
          "1",
          "--out",
          out,
        )
      ).code,
      0,
    );
    const r = await train("--resume", out, "--epochs", "2", "--seed", "8");
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /--seed 8 overrides the run's 7/);
    const s = state(out);
    assert.equal(s.training.dataSeed, 7);
    assert.equal(s.training.seed, 8);
    assert.deepEqual(
      s.epochs.map((e) => e.devSet),
      ["synthetic (seed 7)", "synthetic (seed 7)"],
    );
  });

  test("an explicit flag overrides with a printed line; the state records the new value", async () => {
    const out = await oneEpoch(2);
    const r = await train("--resume", out, "--lr", "0.005", "--batch", "4", "--dropout", "0.2", "--clip", "1");
    assert.equal(r.code, 0, r.stderr);
    for (const line of [
      "--lr 0.005 overrides the run's 0.02",
      "--batch 4 overrides the run's 6",
      "--dropout 0.2 overrides the run's 0.1",
      "--clip 1 overrides the run's 2",
    ]) {
      assert.ok(r.stdout.split("\n").includes(line), `${line} in:\n${r.stdout}`);
    }
    const t = state(out).training;
    assert.deepEqual([t.learningRate, t.batch, t.modelOptions?.dropout, t.clip], [0.005, 4, 0.2, 1]);
    // an explicit flag equal to the run's value is no override
    const same = await train("--resume", out, "--epochs", "3", "--lr", "0.005");
    assert.equal(same.code, 0, same.stderr);
    assert.doesNotMatch(same.stdout, /overrides/);
  });

  test("switching the optimiser: a line, its default rate, and the optimiser state is not carried over", async () => {
    const out = await oneEpoch(2);
    const r = await train("--resume", out, "--optimizer", "sgd");
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^--optimizer sgd overrides the run's adam$/m);
    assert.match(r.stdout, /^learning rate 0.1 \(sgd's default; the run's was 0.02\)$/m);
    assert.match(r.stdout, /was written by adam; sgd starts afresh \(Adam's moments are dropped\)/);
  });

  test("a different --data, --max-sentences or model shape is refused in one line", async () => {
    const out = await oneEpoch(2);
    const other = dataDir(77);
    oneLineRefusal(
      await train("--resume", out, "--data", other),
      new RegExp(
        `^vpps: --resume ${out}: the data in ${other} are not those the run trained on \\(dev.txt differs, train.txt differs\\); resume on the run's own data`,
      ),
    );
    oneLineRefusal(
      await train("--resume", out, "--max-sentences", "10"),
      /^vpps: --max-sentences 10 differs from the run in .*'s 30: a resumed run keeps its training set/,
    );
    oneLineRefusal(
      await train("--resume", out, "--hidden", "8"),
      /^vpps: --hidden 8 differs from the run in .*'s 4: the checkpoint's weights have the run's shape \(leave --hidden out\)/,
    );
    // the same values, given explicitly, are fine
    const same = await train("--resume", out, "--data", data, "--hidden", "4", "--max-sentences", "30");
    assert.equal(same.code, 0, same.stderr);
    assert.equal(state(out).epochs.length, 2);
  });

  test("--epochs is the run's total: its recorded target by default; one already reached is refused", async () => {
    const out = await oneEpoch(3);
    const r = await train("--resume", out);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(state(out).epochs.length, 3, "trained to the total the run was started with");
    oneLineRefusal(
      await train("--resume", out),
      /^vpps: --resume .*: the run has trained 3 epoch\(s\), the 3 it was asked for; --epochs is the total, so give --epochs 4 or more/,
    );
    oneLineRefusal(
      await train("--resume", out, "--epochs", "2"),
      /the run has trained 3 epoch\(s\); --epochs is the total/,
    );
  });

  test("a state.json recording an engine that does not exist: named, and the checkpoint's copy is used", async () => {
    const out = await oneEpoch(2);
    const s = state(out);
    (s.training as { engine: string }).engine = "warp-drive";
    writeFileSync(join(out, "state.json"), JSON.stringify(s));
    // the checkpoint's copy of the state: the run as it was started, with --epochs 1
    const r = await train("--resume", out, "--epochs", "2");
    assert.equal(r.code, 0, r.stderr);
    assert.match(
      r.stdout,
      /^--resume .*: state.json is malformed \(training.engine must be one of cpu, eager, autobatch, vpps; got "warp-drive"\); continuing from the newest intact checkpoint .*epoch-1.safetensors$/m,
    );
    assert.match(r.stdout, /engine cpu$/m);
  });
});
