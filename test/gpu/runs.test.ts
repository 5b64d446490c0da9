// Resuming on a real GPU: a resumed Adam run equals an uninterrupted one on the engines that keep Adam's moments on
// the device (eager and autobatch: DeviceParameters; VPPS: inside its kernel) — the moments are read back into the
// trainer for the checkpoint and uploaded again on resume; and the device update refuses a NaN or ∞ gradient (its
// kernels check the global norm first and change nothing), reported at the next update or sync, naming the
// parameter. Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { cudaAvailable } from "../../src/cuda/index.js";
import { createEngine } from "../../src/engines/index.js";
import { VppsEngine } from "../../src/engines/vpps/engine.js";
import { ComputationGraph } from "../../src/graph/graph.js";
import { ParameterCollection } from "../../src/model/parameters.js";
import { treeLstmTask } from "../../src/models/treelstm/task.js";
import { input, matVec, pickNegLogSoftmax } from "../../src/ops/index.js";
import { AdamTrainer, makeTrainer, NonFiniteUpdateError } from "../../src/optim/trainers.js";
import { readCheckpoint } from "../../src/train/checkpoint.js";
import { type RunState, train } from "../../src/train/loop.js";
import { RunDir } from "../../src/train/run-dir.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const cacheDir = process.env["VPPS_TEST_CACHE"] ?? join(tmpdir(), "vpps-test-kernels");
const data = treeLstmTask.data.synthetic.make(3);
const trainSet = data.train.slice(0, 64);
const vocab = treeLstmTask.vocabulary.build(trainSet);
const options = { hidden: 64, embed: 48, cell: "fused" as const, dropout: 0 };

function run(engine: string, epochs: number, outDir: string, resume?: { checkpoint: string; done: number }) {
  const previous = resume
    ? (JSON.parse(readFileSync(join(outDir, "state.json"), "utf8")) as RunState).epochs
    : undefined;
  const runDir = RunDir.open(outDir);
  try {
    return trainIn(runDir);
  } finally {
    runDir.close();
  }

  function trainIn(runDir: RunDir) {
    return train({
      task: treeLstmTask,
      options,
      train: trainSet,
      dev: data.dev.slice(0, 16),
      vocab,
      epochs,
      batch: 8,
      learningRate: 0.01,
      optimizer: "adam",
      seed: 4,
      clipThreshold: 1,
      makeEngine: (p) =>
        engine === "vpps"
          ? new VppsEngine(p, { cacheDir, variants: { rowsPerWarp: 1 } })
          : createEngine(engine, p, { batching: "agenda", device: "auto" }),
      runDir,
      ...(resume ? { resume: { checkpoint: resume.checkpoint, epochsDone: resume.done, previous: previous! } } : {}),
    });
  }
}

/** The largest |a − e| / (1 + |e|) over every tensor (weights and moments), with where. */
function largestDifference(a: string, e: string): { value: number; where: string } {
  const A = readCheckpoint(a).tensors;
  const E = readCheckpoint(e).tensors;
  let worst = { value: 0, where: "" };
  for (const [name, t] of E) {
    const x = A.get(name);
    assert.ok(x, `tensor ${name} in both`);
    for (let k = 0; k < t.data.length; k++) {
      const d = Math.abs(x.data[k]! - t.data[k]!) / (1 + Math.abs(t.data[k]!));
      if (d > worst.value) worst = { value: d, where: `${name}[${k}]` };
    }
  }
  return worst;
}

describe("a resumed Adam run on a GPU engine equals an uninterrupted one", { skip }, () => {
  for (const engine of ["eager", "autobatch", "vpps"]) {
    test(`${engine}: 2 epochs straight vs 1 + resume 1 (weights and moments, fp32 noise allowed)`, () => {
      const a = mkdtempSync(join(tmpdir(), `vpps-gpu-run-a-${engine}-`));
      const b = mkdtempSync(join(tmpdir(), `vpps-gpu-run-b-${engine}-`));
      run(engine, 2, a);
      run(engine, 1, b);
      const first = readCheckpoint(join(b, "epoch-1.safetensors"));
      const v = first.tensors.get("adam.v/W_iou")!.data;
      assert.ok(
        v.some((x) => x > 0),
        "the device's moments reached the checkpoint (syncTrainerToHost)",
      );
      assert.equal(first.optimizer?.updates, trainSet.length / 8);
      run(engine, 2, b, { checkpoint: join(b, "epoch-1.safetensors"), done: 1 });
      const d = largestDifference(join(b, "epoch-2.safetensors"), join(a, "epoch-2.safetensors"));
      console.log(`${engine}: largest relative difference after resume ${d.value.toExponential(2)} at ${d.where}`);
      // moments started from zero on resume would move the weights by about the learning rate (1e-2)
      assert.ok(d.value < 1e-4, `${engine}: ${d.value} at ${d.where}`);
      assert.equal(readCheckpoint(join(b, "epoch-2.safetensors")).optimizer?.updates, (2 * trainSet.length) / 8);
    });
  }

  test("vpps: setAdamMoments uploads what adamMoments reads back, bit for bit", () => {
    const model = treeLstmTask.create(options, vocab, 5);
    const engine = new VppsEngine(model.params, { cacheDir, variants: { rowsPerWarp: 1 } });
    try {
      const given = model.params.all.map((p, i) => ({
        m: Float32Array.from({ length: p.value.length }, (_, k) => (i + 1) * 1e-3 + k * 1e-6),
        v: Float32Array.from({ length: p.value.length }, (_, k) => (i + 1) * 1e-4 + k * 1e-7),
      }));
      engine.vpps.setOptimizer("adam");
      engine.vpps.setAdamMoments(given);
      assert.deepEqual(engine.vpps.adamMoments(), given);
    } finally {
      engine.dispose();
    }
  });
});

describe("the device update refuses a non-finite gradient", { skip }, () => {
  for (const engine of ["eager", "autobatch"]) {
    for (const optimizer of ["sgd", "adam"]) {
      for (const clip of [0, 5]) {
        test(`${engine}, ${optimizer}, clip ${clip}: nothing changes; the next sync names the parameter`, () => {
          const pc = new ParameterCollection({ seed: 1 });
          const W = pc.addParameters([3, 2], undefined, "W");
          // inputs must be finite (input refuses NaN), so the NaN comes from an overflow: 10 · 3e38 is ∞ in float32,
          // every logit is ∞, and the log-softmax (∞ − ∞) and its gradient are NaN
          W.value.fill(10);
          const initial = Float32Array.from(W.value);
          const e = createEngine(engine, pc, { batching: "agenda", device: "auto" });
          try {
            const trainer = makeTrainer(optimizer, { learningRate: 0.1, clipThreshold: clip });
            const cg = new ComputationGraph();
            const loss = pickNegLogSoftmax(matVec(W, input(cg, [3e38, 1])), 0);
            assert.ok(Number.isNaN(e.forwardScalar(loss)));
            e.backward(loss);
            e.update(trainer); // queued; the kernels see the NaN norm and return
            assert.throws(
              () => e.syncToHost(),
              (err: unknown) =>
                err instanceof NonFiniteUpdateError &&
                err.parameter === "W" &&
                err.updatesBefore === 0 &&
                /parameter 'W' holds NaN at element \d; refusing to apply update 1/.test(err.message),
            );
            e.syncToHost(); // checked once: this one downloads
            assert.deepEqual(W.value, initial, "the weights are as they were");
            if (trainer instanceof AdamTrainer) {
              e.syncTrainerToHost?.(trainer);
              assert.ok(
                trainer.moments(W)!.v.every((x) => x === 0),
                "the moments are as they were",
              );
            }
          } finally {
            e.dispose();
          }
        });
      }
    }
  }
});
