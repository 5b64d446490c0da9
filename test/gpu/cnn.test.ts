// The CNN (LeNet on MNIST, src/models/cnn/) on the eager engine: GLP4NN's convergence invariance made exact — one
// epoch of training (the mnist package's 8,000 digits, batch 64: 125 batches) with --streams 1 (twice), auto and 4 gives the same losses and weights bit for bit; the first
// batch's loss agrees with the CPU engine (the oracle). Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { cudaAvailable } from "../../src/cuda/index.js";
import { CpuEngine } from "../../src/engines/cpu.js";
import { EagerEngine } from "../../src/engines/eager/engine.js";
import { loadSolver } from "../../src/glp4nn/index.js";
import { ComputationGraph } from "../../src/graph/graph.js";
import { LenetModel } from "../../src/models/cnn/model.js";
import { cnnTask } from "../../src/models/cnn/task.js";
import { makeTrainer } from "../../src/optim/trainers.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const MiB = 1024 ** 2;
const BATCH = 64;
const bits = (a: Float32Array) => new Uint32Array(a.buffer, a.byteOffset, a.length);

describe("LeNet on the eager engine: one epoch, the streams change nothing", { skip }, () => {
  test("--streams 1 (twice), auto and 4: the same loss after every batch and the same weights, bit for bit", async () => {
    const data = cnnTask.data.synthetic.make(1);
    const epoch = data.train;
    console.log(`data: ${data.source}; ${epoch.length} digits, ${Math.ceil(epoch.length / BATCH)} batches of ${BATCH}`);
    const solver = await loadSolver();
    const sizes = cnnTask.defaults;

    // the CPU engine (the oracle) on the first batch
    const reference = new LenetModel(sizes, 7);
    const cpuLoss = new CpuEngine(reference.params).forwardScalar(
      reference.batchLoss(new ComputationGraph(), epoch.slice(0, BATCH)),
    );

    const train = (streams: number | "auto") => {
      const model = new LenetModel(sizes, 7);
      let explained = "";
      const e = new EagerEngine(model.params, {
        poolBytes: 1024 * MiB,
        streams,
        solver,
        explain: (t) => {
          explained += `${t}\n`;
        },
      });
      try {
        const trainer = makeTrainer("adam", { learningRate: 0.001 });
        const cg = new ComputationGraph();
        const losses: number[] = [];
        const t0 = performance.now();
        for (let b = 0; b < epoch.length; b += BATCH) {
          cg.renew();
          const loss = model.batchLoss(cg, epoch.slice(b, b + BATCH));
          losses.push(e.forwardScalar(loss));
          e.backward(loss);
          e.update(trainer);
        }
        e.syncToHost();
        const seconds = (performance.now() - t0) / 1000;
        console.log(
          `streams ${streams}: ${(epoch.length / seconds) | 0} images/s, last loss ${losses.at(-1)?.toFixed(4)}` +
            (e.levelChoice !== undefined ? `; auto chose ${e.levelChoice.streams}` : ""),
        );
        if (explained !== "") console.log(explained);
        return { losses, weights: model.params.all.map((p) => Float32Array.from(p.value)) };
      } finally {
        e.dispose();
      }
    };
    const one = train(1);
    assert.ok(
      Math.abs(one.losses[0]! - cpuLoss) <= 1e-4 * Math.abs(cpuLoss),
      `first loss ${one.losses[0]} on eager, ${cpuLoss} on the CPU`,
    );
    assert.ok(one.losses.at(-1)! < one.losses[0]!, "the loss falls over the epoch");
    // one stream twice first: a run-to-run difference (the clipping norm summed with float atomics) is then
    // told apart from one the pool makes
    for (const streams of [1, "auto", 4] as const) {
      const other = train(streams);
      const which = streams === 1 ? "a second run on one stream" : `streams ${streams}`;
      assert.deepEqual(bits(Float32Array.from(other.losses)), bits(Float32Array.from(one.losses)), `losses, ${which}`);
      other.weights.forEach((w, i) => {
        assert.deepEqual(bits(w), bits(one.weights[i]!), `parameter ${i} after the epoch, ${which}`);
      });
    }
  });
});
