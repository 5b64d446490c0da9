// The taggers with --rnn persistent (a batch as lookupRows → rnn → affineRows → tanh → affineRows → the summed row
// loss, src/ops/rows.ts) on the eager engine against the CPU engine: a batch node by node (values, gradients, parameter
// gradients, touched rows), 3 SGD steps, the gradients bit for bit from run to run (no float atomics), and a WikiNER
// batch at the paper's sizes; then the same on the GPU autobatch engine (which runs these nodes one by one, with the
// eager engine's rnn code): both strategies and both GEMM modes node by node, 3 SGD steps and 3 Adam steps on each
// strategy, a WikiNER batch. Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { cudaAvailable } from "../../src/cuda/index.js";
import { CpuEngine } from "../../src/engines/cpu.js";
import { EagerEngine } from "../../src/engines/eager/engine.js";
import { createEngine } from "../../src/engines/index.js";
import { ComputationGraph } from "../../src/graph/graph.js";
import { SparsePersistentRnnLayer } from "../../src/rnn/index.js";
import { compareWithCpu } from "../op-suite.js";
import { autobatch, eager } from "./engines.js";
import {
  assertTrainedLike,
  batchLossCase,
  type Optimizer,
  SMALL,
  synthetic,
  TASKS,
  trainSteps,
  WIKINER,
  wikinerBatch,
} from "./tagger-setup.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

/** The small sizes with one rnn op per batch (the persistent kernels take them: hidden sizes are multiples of 4). */
const PERSISTENT = { ...SMALL, rnn: "persistent" as const };

describe("the taggers' --rnn persistent (row-batch) path on the eager engine against the CPU engine", { skip }, () => {
  for (const task of TASKS) {
    test(`${task.name}: a batch of 6 sentences, node by node`, async () => {
      const vocab = task.vocabulary.build(synthetic, PERSISTENT);
      const batch = synthetic.slice(0, 6);
      const d = await compareWithCpu(batchLossCase(task, PERSISTENT, vocab, 2, batch), eager);
      console.log(`  ${task.name} --rnn persistent on eager: ${d || "equal"}`);
      assert.equal(d, "");
    });

    test(`${task.name}: 3 SGD steps: the losses and then the weights equal the CPU engine's`, () => {
      const vocab = task.vocabulary.build(synthetic, PERSISTENT);
      const want = trainSteps(task, PERSISTENT, vocab, "sgd", (p) => new CpuEngine(p));
      const got = trainSteps(task, PERSISTENT, vocab, "sgd", (p) => createEngine("eager", p));
      console.log(
        `  ${task.name}: losses ${got.losses.map((l) => l.toFixed(5))}, CPU ${want.losses.map((l) => l.toFixed(5))}`,
      );
      assertTrainedLike("eager", got, want, "sgd");
    });

    test(`${task.name}: the gradients are the same bits on every run (fixed-order sums, no atomics)`, () => {
      const vocab = task.vocabulary.build(synthetic, PERSISTENT);
      const batch = synthetic.slice(0, 12);
      const run = () => {
        const m = task.create(PERSISTENT, vocab, 3);
        const e = new EagerEngine(m.params);
        try {
          const cg = new ComputationGraph();
          const loss = m.buildBatchLoss(cg, batch);
          const value = e.forwardScalar(loss);
          e.backward(loss);
          return { value, grads: m.params.all.map((p) => e.device.readGradient(p.index)) };
        } finally {
          e.dispose();
        }
      };
      const a = run();
      const b = run();
      assert.equal(a.value, b.value);
      for (const [k, g] of a.grads.entries()) assert.deepEqual(g, b.grads[k], `gradient ${k}`);
    });
  }

  test("WikiNER, the paper's sizes (256): a batch of 32 sentences (loss and parameter gradients)", {
    skip: WIKINER ? false : "WikiNER not found",
  }, async () => {
    for (const task of TASKS) {
      const { vocab, batch } = wikinerBatch(task, 32);
      const make = batchLossCase(task, { ...task.defaults, rnn: "persistent" as const }, vocab, 1, batch);
      const d = await compareWithCpu(make, eager, { everyNode: false });
      console.log(`  ${task.name} WikiNER batch of 32, --rnn persistent, on eager: ${d || "equal"}`);
      assert.equal(d, "");
    }
  });
});

describe("the taggers' --rnn persistent path on the GPU autobatch engine against the CPU engine", { skip }, () => {
  const ways = [autobatch("depth", "cublas"), autobatch("agenda", "cublas"), autobatch("agenda", "kernels")];
  for (const task of TASKS) {
    test(`${task.name}: a batch of 6 sentences, node by node (depth and agenda, cuBLAS and our GEMMs)`, async () => {
      const vocab = task.vocabulary.build(synthetic, PERSISTENT);
      const batch = synthetic.slice(0, 6);
      for (const engine of ways) {
        const d = await compareWithCpu(batchLossCase(task, PERSISTENT, vocab, 2, batch), engine);
        console.log(`  ${task.name} --rnn persistent on ${engine.name}: ${d || "equal"}`);
        assert.equal(d, "", engine.name);
      }
    });

    for (const optimizer of ["sgd", "adam"] as Optimizer[]) {
      test(`${task.name}: 3 ${optimizer} steps on depth and agenda: the losses and then the weights equal the CPU's`, () => {
        const vocab = task.vocabulary.build(synthetic, PERSISTENT);
        const want = trainSteps(task, PERSISTENT, vocab, optimizer, (p) => new CpuEngine(p));
        for (const batching of ["depth", "agenda"] as const) {
          const got = trainSteps(task, PERSISTENT, vocab, optimizer, (p) => createEngine("autobatch", p, { batching }));
          console.log(
            `  ${task.name} autobatch ${batching} ${optimizer}: losses ${got.losses.map((l) => l.toFixed(5))}, ` +
              `CPU ${want.losses.map((l) => l.toFixed(5))}`,
          );
          assertTrainedLike(`autobatch ${batching}`, got, want, optimizer);
        }
      });
    }

    test(`${task.name}: two batches of different sizes on one engine, twice each (workspaces renewed per graph)`, () => {
      const vocab = task.vocabulary.build(synthetic, PERSISTENT);
      const m = task.create(PERSISTENT, vocab, 5);
      const cpu = new CpuEngine(m.params);
      const e = createEngine("autobatch", m.params);
      try {
        for (const batch of [synthetic.slice(0, 3), synthetic.slice(10, 19), synthetic.slice(0, 3)]) {
          const want = cpu.forwardScalar(m.buildBatchLoss(new ComputationGraph(), batch));
          const cg = new ComputationGraph();
          const loss = m.buildBatchLoss(cg, batch);
          const got = e.forwardScalar(loss);
          e.backward(loss);
          assert.ok(Math.abs(got - want) <= 1e-4 * Math.max(1, Math.abs(want)), `loss ${got}, CPU ${want}`);
        }
      } finally {
        e.dispose();
      }
    });
  }

  for (const task of TASKS) {
    test(`${task.name} --density 0.25: 3 Adam steps equal the CPU's; one sparse layer per W_hh across batches`, () => {
      const opts = { ...PERSISTENT, density: 0.25 };
      const vocab = task.vocabulary.build(synthetic, opts);
      const want = trainSteps(task, opts, vocab, "adam", (p) => new CpuEngine(p));
      const layers: number[] = [];
      const got = trainSteps(task, opts, vocab, "adam", (p) => {
        const e = createEngine("autobatch", p);
        // after each update: the sparse layers alive beside those before this engine
        const before = SparsePersistentRnnLayer.alive;
        const update = e.update.bind(e);
        e.update = (t) => {
          update(t);
          layers.push(SparsePersistentRnnLayer.alive - before);
        };
        return e;
      });
      console.log(`  ${task.name} --density 0.25 on autobatch: sparse layers after each step ${layers}`);
      assertTrainedLike("autobatch --density 0.25", got, want, "adam");
      const recurrent = got.params.all.filter((p) => /^Wh_c?[fb]$/.test(p.name)).length;
      assert.ok(layers[0]! >= 1 && layers[0]! <= recurrent, `${layers[0]} sparse layers for ${recurrent} W_hh`);
      assert.deepEqual(layers, [layers[0], layers[0], layers[0]], "a new batch made new sparse layers");
    });
  }

  test("WikiNER, the paper's sizes (256): a batch of 32 sentences on agenda (cuBLAS)", {
    skip: WIKINER ? false : "WikiNER not found",
  }, async () => {
    for (const task of TASKS) {
      const { vocab, batch } = wikinerBatch(task, 32);
      const make = batchLossCase(task, { ...task.defaults, rnn: "persistent" as const }, vocab, 1, batch);
      const d = await compareWithCpu(make, autobatch("agenda", "cublas"), { everyNode: false });
      console.log(`  ${task.name} WikiNER batch of 32, --rnn persistent, on autobatch agenda: ${d || "equal"}`);
      assert.equal(d, "");
    }
  });
});
