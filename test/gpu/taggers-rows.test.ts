// The taggers with --rnn persistent (a batch as lookupRows → rnn → affineRows → tanh → affineRows → the summed row
// loss, src/ops/rows.ts) on the eager engine against the CPU engine: a batch node by node (values, gradients, parameter
// gradients, touched rows), 3 SGD steps, the gradients bit for bit from run to run (no float atomics), and a WikiNER
// batch at the paper's sizes. Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { cudaAvailable } from "../../src/cuda/index.js";
import { splitSyntheticTagged } from "../../src/data/synthetic-tagged.js";
import { CpuEngine } from "../../src/engines/cpu.js";
import { EagerEngine } from "../../src/engines/eager/engine.js";
import type { Engine } from "../../src/engines/engine.js";
import { createEngine } from "../../src/engines/index.js";
import { ComputationGraph } from "../../src/graph/graph.js";
import type { ParameterCollection } from "../../src/model/parameters.js";
import { biLstmTask } from "../../src/models/bilstm/task.js";
import type { TaggerVocabulary } from "../../src/models/bilstm/vocabulary.js";
import { charBiLstmTask } from "../../src/models/bilstm-char/task.js";
import { makeTrainer } from "../../src/optim/trainers.js";
import { compareWithCpu } from "../op-suite.js";
import { eager } from "./engines.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

type TaggerTask = typeof charBiLstmTask;
const TASKS: readonly TaggerTask[] = [biLstmTask as unknown as TaggerTask, charBiLstmTask];
/** Hidden sizes the persistent kernels take (multiples of 4: the word LSTM 24, the character LSTMs embed/2 = 8). */
const SMALL = { ...charBiLstmTask.defaults, embed: 16, hidden: 24, mlp: 12, charEmbed: 8, rnn: "persistent" as const };

const WIKINER = [
  join(import.meta.dirname, "..", "..", "..", "shared", "data", "wikiner"),
  join(import.meta.dirname, "..", "..", ".gpu-data", "wikiner"),
].find((d) => existsSync(join(d, "dev.txt")));

const synthetic = splitSyntheticTagged(8).train.slice(0, 200);

/** Three batches of 6 sentences with SGD (clipping at 1): the losses, then the weights on the host. */
function trainSteps(task: TaggerTask, vocab: TaggerVocabulary, make: (p: ParameterCollection) => Engine) {
  const model = task.create(SMALL, vocab, 4);
  const engine = make(model.params);
  const trainer = makeTrainer("sgd", { learningRate: 0.2, clipThreshold: 1 });
  const losses: number[] = [];
  try {
    for (let step = 0; step < 3; step++) {
      const cg = new ComputationGraph();
      const loss = model.buildBatchLoss(cg, synthetic.slice(6 * step, 6 * step + 6));
      losses.push(engine.forwardScalar(loss));
      engine.backward(loss);
      engine.update(trainer);
    }
    engine.syncToHost();
  } finally {
    engine.dispose();
  }
  return { losses, params: model.params };
}

describe("the taggers' --rnn persistent (row-batch) path on the eager engine against the CPU engine", { skip }, () => {
  for (const task of TASKS) {
    test(`${task.name}: a batch of 6 sentences, node by node`, async () => {
      const vocab = task.vocabulary.build(synthetic, SMALL);
      const batch = synthetic.slice(0, 6);
      const make = () => {
        const m = task.create(SMALL, vocab, 2);
        return { params: m.params, build: (cg: ComputationGraph) => m.buildBatchLoss(cg, batch) };
      };
      const d = await compareWithCpu(make, eager);
      console.log(`  ${task.name} --rnn persistent on eager: ${d || "equal"}`);
      assert.equal(d, "");
    });

    test(`${task.name}: 3 SGD steps: the losses and then the weights equal the CPU engine's`, () => {
      const vocab = task.vocabulary.build(synthetic, SMALL);
      const want = trainSteps(task, vocab, (p) => new CpuEngine(p));
      const got = trainSteps(task, vocab, (p) => createEngine("eager", p));
      console.log(
        `  ${task.name}: losses ${got.losses.map((l) => l.toFixed(5))}, CPU ${want.losses.map((l) => l.toFixed(5))}`,
      );
      got.losses.forEach((l, k) => {
        assert.ok(
          Math.abs(l - want.losses[k]!) <= 1e-4 * Math.max(1, want.losses[k]!),
          `loss ${k}: ${l}, CPU ${want.losses[k]}`,
        );
      });
      for (const p of want.params.all) {
        const a = got.params.get(p.name).value;
        let scale = 0;
        for (const x of p.value) scale = Math.max(scale, Math.abs(x));
        for (let k = 0; k < a.length; k++) {
          if (Math.abs(a[k]! - p.value[k]!) > 2e-4 * scale + 2.4e-7 * Math.abs(p.value[k]!)) {
            assert.fail(`'${p.name}'[${k}] after 3 steps: ${a[k]}, CPU ${p.value[k]}`);
          }
        }
      }
    });

    test(`${task.name}: the gradients are the same bits on every run (fixed-order sums, no atomics)`, () => {
      const vocab = task.vocabulary.build(synthetic, SMALL);
      const batch = synthetic.slice(0, 12);
      const run = () => {
        const m = task.create(SMALL, vocab, 3);
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
      const data = task.data.fromDirectory(WIKINER!, {});
      const vocab = task.vocabulary.build(data.train, task.defaults);
      const batch = data.train.slice(0, 32);
      const make = () => {
        const m = task.create({ ...task.defaults, rnn: "persistent" as const }, vocab, 1);
        return { params: m.params, build: (cg: ComputationGraph) => m.buildBatchLoss(cg, batch) };
      };
      const d = await compareWithCpu(make, eager, { everyNode: false });
      console.log(`  ${task.name} WikiNER batch of 32, --rnn persistent, on eager: ${d || "equal"}`);
      assert.equal(d, "");
    }
  });
});
