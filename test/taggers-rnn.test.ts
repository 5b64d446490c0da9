// The taggers with --rnn persistent (their BiLSTMs as one rnn op per batch, src/models/bilstm/packed.ts) against
// --rnn steps (an affine and a cell per word): with the steps model's parameters (gate rows reordered), losses and
// gradients are equal on the CPU engines; float64 gradient checks; the batch is a handful of row-batch nodes; the GPU
// autobatch engine (on its emulated device) runs the batch node by node like the CPU engine; VPPS refuses the row ops
// in one line; --density prunes every BiLSTM's W_hh (the model computes as a dense one holding W_hh ⊙ mask).

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { syntheticTaggedSentences } from "../src/data/synthetic-tagged.js";
import { AutobatchCpuEngine } from "../src/engines/autobatch/cpu-batched.js";
import { CpuEngine } from "../src/engines/cpu.js";
import type { Engine } from "../src/engines/engine.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { opName, UnsupportedOpError } from "../src/graph/opcodes.js";
import type { ParameterCollection } from "../src/model/parameters.js";
import { swapGateOrder } from "../src/models/bilstm/packed.js";
import { biLstmTask, type TaggerTaskModel } from "../src/models/bilstm/task.js";
import { charBiLstmTask } from "../src/models/bilstm-char/task.js";
import { AdamTrainer, SimpleSGDTrainer } from "../src/optim/trainers.js";
import { keptPerRow, maskCounts, pruneByMagnitude } from "../src/rnn/index.js";
import { gradientCheck } from "./helpers.js";
import { CPU_SIDE_ENGINES, compareWithCpu } from "./op-suite.js";

type TaggerTask = typeof charBiLstmTask;
const TASKS: readonly TaggerTask[] = [biLstmTask as unknown as TaggerTask, charBiLstmTask];
const TINY = { embed: 4, hidden: 3, mlp: 3, splitSeed: 1, charEmbed: 2, minCount: 5, density: 1 };
const SENTENCES = syntheticTaggedSentences(40, 4);

/** The LSTM parameters (gate rows reordered between the formulations) and their hidden sizes. */
function lstmParameter(name: string, hidden: number, embed: number): number | null {
  if (/^(Wx|Wh|b)_(f|b)$/.test(name)) return hidden;
  if (/^(Wx|Wh|b)_c(f|b)$/.test(name)) return embed / 2;
  return null;
}

/** The steps model and a persistent one holding the same function (the LSTMs' gate rows reordered). */
function pair(task: TaggerTask) {
  const vocab = task.vocabulary.build(SENTENCES, TINY);
  const steps = task.create({ ...TINY, rnn: "steps" }, vocab, 2) as TaggerTaskModel;
  const persistent = task.create({ ...TINY, rnn: "persistent" }, vocab, 2) as TaggerTaskModel;
  for (const p of steps.params.all) {
    const h = lstmParameter(p.name, TINY.hidden, TINY.embed);
    persistent.params.get(p.name).value.set(h === null ? p.value : swapGateOrder(p.value, h));
  }
  return { steps, persistent };
}

function lossAndGradients(params: ParameterCollection, engine: Engine, build: (cg: ComputationGraph) => unknown) {
  for (const p of params.all) p.grad.fill(0);
  const cg = new ComputationGraph();
  const loss = build(cg) as Parameters<Engine["forwardScalar"]>[0];
  const value = engine.forwardScalar(loss);
  engine.backward(loss);
  return { value, grads: new Map(params.all.map((p) => [p.name, Float32Array.from(p.grad)])) };
}

describe("taggers with --rnn persistent", () => {
  test("a run saved before --rnn existed restores as --rnn steps; a saved persistent run keeps it", () => {
    const saved = { embed: 4, hidden: 3, mlp: 3, splitSeed: 1 };
    assert.equal(biLstmTask.restoreOptions(saved, biLstmTask.defaults).rnn, "steps");
    const persistent = biLstmTask.restoreOptions({ ...saved, rnn: "persistent" }, biLstmTask.defaults);
    assert.equal(persistent.rnn, "persistent");
    assert.throws(() => biLstmTask.restoreOptions({ ...saved, rnn: "fused" }, biLstmTask.defaults), /options\.rnn/);
  });

  test("bilstm: a persistent batch is a handful of row-batch nodes, however many words it has", () => {
    const { persistent } = pair(biLstmTask as unknown as TaggerTask);
    const nodes = (n: number) => {
      const cg = new ComputationGraph();
      persistent.buildBatchLoss(cg, SENTENCES.slice(0, n));
      return Array.from(cg.op.subarray(0, cg.size), (op) => opName(op));
    };
    const small = nodes(2);
    const large = nodes(12);
    assert.deepEqual(large, small);
    // besides the parameters and two input nodes (the rnn's batch sizes, the labels)
    assert.deepEqual(
      small.filter((op) => op !== "parameter" && op !== "input"),
      ["lookupRows", "rnn", "affineRows", "tanh", "affineRows", "pickNegLogSoftmaxRows"],
    );
  });

  for (const task of TASKS) {
    test(`${task.name}: the loss and every gradient equal --rnn steps' on the CPU engine and autobatch CPU`, () => {
      const { steps, persistent } = pair(task);
      const batch = SENTENCES.slice(0, 6);
      if (task === charBiLstmTask) {
        const spelled = batch.flatMap((s) => persistent.encode(s).spelled.filter((c) => c !== null));
        assert.ok(spelled.length >= 3, `${spelled.length} spelled words in the batch`);
      }
      const engines = (params: ParameterCollection): Engine[] => [
        new CpuEngine(params),
        new AutobatchCpuEngine(params, { strategy: "depth" }),
        new AutobatchCpuEngine(params, { strategy: "agenda" }),
      ];
      const want = lossAndGradients(steps.params, new CpuEngine(steps.params), (cg) => steps.buildBatchLoss(cg, batch));
      for (const engine of engines(persistent.params)) {
        const got = lossAndGradients(persistent.params, engine, (cg) => persistent.buildBatchLoss(cg, batch));
        assert.ok(Math.abs(got.value - want.value) < 1e-5 * Math.abs(want.value), `loss ${got.value} vs ${want.value}`);
        for (const [name, g] of got.grads) {
          const h = lstmParameter(name, TINY.hidden, TINY.embed);
          const w = want.grads.get(name)!;
          const mapped = h === null ? g : swapGateOrder(g, h);
          for (let i = 0; i < w.length; i++) {
            if (Math.abs(mapped[i]! - w[i]!) > 1e-5 * (1 + Math.abs(w[i]!))) {
              assert.fail(`${task.name}: gradient of ${name}[${i}]: ${mapped[i]} (persistent) vs ${w[i]} (steps)`);
            }
          }
        }
      }
      // the scores of one sentence (evaluation) agree too
      const s = batch[1]!;
      const cgS = new ComputationGraph();
      const cgP = new ComputationGraph();
      const a = new CpuEngine(steps.params);
      const b = new CpuEngine(persistent.params);
      const scoresS = steps.buildScores(cgS, s).map((e) => [...a.valueExact(e)]);
      const scoresP = persistent.buildScores(cgP, s).map((e) => [...b.valueExact(e)]);
      for (let k = 0; k < scoresS.length; k++) {
        for (let j = 0; j < scoresS[k]!.length; j++) assert.ok(Math.abs(scoresS[k]![j]! - scoresP[k]![j]!) < 1e-5);
      }
    });

    test(`${task.name}: float64 gradient check of a persistent batch`, () => {
      const { persistent } = pair(task);
      const { checked, mismatches } = gradientCheck(persistent.params, (cg) =>
        persistent.buildBatchLoss(cg, SENTENCES.slice(0, 3)),
      );
      assert.deepEqual(mismatches.slice(0, 3), [], `${task.name}: ${mismatches.length} of ${checked}`);
      assert.ok(checked > 100, `${checked} elements checked`);
    });

    test(`${task.name}: the GPU autobatch engine (emulated device) equals the CPU engine node by node`, async () => {
      // fresh parameters per run (the CPU engine accumulates into the host's gradients)
      const make = () => {
        const { persistent } = pair(task);
        return {
          params: persistent.params,
          build: (cg: ComputationGraph) => persistent.buildBatchLoss(cg, SENTENCES.slice(0, 4)),
        };
      };
      const autobatch = CPU_SIDE_ENGINES.filter((e) => e.name.startsWith("autobatch GPU"));
      assert.equal(autobatch.length, 2, "both strategies");
      for (const engine of autobatch) assert.equal(await compareWithCpu(make, engine), "", engine.name);
    });

    test(`${task.name}: VPPS, which does not run the row-batch ops, refuses the first (lookupRows) in one line`, async () => {
      const { persistent } = pair(task);
      const refusing = CPU_SIDE_ENGINES.filter((e) => e.name.startsWith("VPPS"));
      assert.equal(refusing.length, 2, "VPPS, both interleavings");
      for (const engine of refusing) {
        const make = () => ({
          params: persistent.params,
          build: (cg: ComputationGraph) => persistent.buildBatchLoss(cg, SENTENCES.slice(0, 2)),
        });
        await assert.rejects(compareWithCpu(make, engine), (e: unknown) => {
          assert.ok(e instanceof UnsupportedOpError, String(e));
          assert.match(e.message, /op 'lookupRows' is not supported: .*--rnn steps/);
          assert.ok(!e.message.includes("\n"));
          return true;
        });
      }
    });
  }

  for (const task of TASKS) {
    test(`${task.name} --density 0.5: computes as the dense model holding W_hh ⊙ mask; dW_hh only at the kept weights`, () => {
      const vocab = task.vocabulary.build(SENTENCES, TINY);
      const sparse = task.create({ ...TINY, rnn: "persistent", density: 0.5 }, vocab, 2) as TaggerTaskModel;
      const dense = task.create({ ...TINY, rnn: "persistent" }, vocab, 2) as TaggerTaskModel;
      const recurrent = sparse.params.all.filter((p) => /^Wh_c?[fb]$/.test(p.name));
      assert.equal(recurrent.length, task === charBiLstmTask ? 4 : 2, "every BiLSTM's W_hh is pruned");
      const trainer = new SimpleSGDTrainer({ learningRate: 0.5 });
      const engine = new CpuEngine(sparse.params);
      // pruned at initialisation: the pruned weights are 0, and the mask the op derives stays the first one
      const first = recurrent.map((p) => pruneByMagnitude(p.value, p.rows, p.cols, 0.5, "row-balanced"));
      recurrent.forEach((p, k) => {
        assert.ok(first[k]!.some((m) => m === 0));
        for (let i = 0; i < p.value.length; i++) {
          if (first[k]![i] === 0) assert.equal(p.value[i], 0, `${p.name}[${i}] pruned but not 0`);
        }
      });
      for (let s = 0; s < 3; s++) {
        const batch = SENTENCES.slice(4 * s, 4 * s + 4);
        const masks = recurrent.map((p) => pruneByMagnitude(p.value, p.rows, p.cols, 0.5, "row-balanced"));
        assert.deepEqual(masks, first, `step ${s}: the mask moved`);
        masks.forEach((m, k) => {
          const H = recurrent[k]!.cols;
          assert.ok(maskCounts(m, 4 * H, H).rowCounts.every((c) => c === keptPerRow(0.5, H)));
        });
        // the dense model with the pruned weights stored as zeros computes the same loss
        for (const p of dense.params.all) {
          const k = recurrent.findIndex((q) => q.name === p.name);
          const v = sparse.params.get(p.name).value;
          p.value.set(k < 0 ? v : v.map((w, i) => (masks[k]![i] ? w : 0)));
        }
        const want = lossAndGradients(dense.params, new CpuEngine(dense.params), (cg) =>
          dense.buildBatchLoss(cg, batch),
        );
        const got = lossAndGradients(sparse.params, engine, (cg) => sparse.buildBatchLoss(cg, batch));
        assert.equal(got.value, want.value, `step ${s}: loss`);
        recurrent.forEach((p, k) => {
          const g = got.grads.get(p.name)!;
          const wanted = want.grads.get(p.name)!.map((v, i) => (masks[k]![i] ? v : 0));
          assert.deepEqual(g, wanted, `step ${s}: gradient of ${p.name}`);
        });
        // SGD: the pruned weights (the dense master copy's) keep their values
        const before = recurrent.map((p) => Float32Array.from(p.value));
        engine.update(trainer);
        recurrent.forEach((p, k) => {
          for (let i = 0; i < p.value.length; i++) {
            if (!masks[k]![i]) assert.equal(p.value[i], before[k]![i], `step ${s}: pruned ${p.name}[${i}] moved`);
          }
        });
      }
    });
  }

  test("--density 0.1 under Adam: the pruned weights stay 0 and the mask stays the initial one", () => {
    const vocab = biLstmTask.vocabulary.build(SENTENCES, TINY);
    const model = biLstmTask.create(
      { ...TINY, hidden: 10, rnn: "persistent", density: 0.1 },
      vocab,
      3,
    ) as TaggerTaskModel;
    const recurrent = model.params.all.filter((p) => /^Wh_[fb]$/.test(p.name));
    const first = recurrent.map((p) => pruneByMagnitude(p.value, p.rows, p.cols, 0.1, "row-balanced"));
    const engine = new CpuEngine(model.params);
    const trainer = new AdamTrainer({ learningRate: 0.05 });
    for (let s = 0; s < 4; s++) {
      lossAndGradients(model.params, engine, (cg) => model.buildBatchLoss(cg, SENTENCES.slice(4 * s, 4 * s + 4)));
      engine.update(trainer);
    }
    recurrent.forEach((p, k) => {
      const kept = first[k]!.reduce((a, m) => a + m, 0);
      assert.equal(kept, 4 * 10 * keptPerRow(0.1, 10));
      for (let i = 0; i < p.value.length; i++) {
        if (first[k]![i] === 0) assert.equal(p.value[i], 0, `${p.name}[${i}] moved off 0`);
      }
      assert.deepEqual(pruneByMagnitude(p.value, p.rows, p.cols, 0.1, "row-balanced"), first[k], `${p.name}'s mask`);
    });
  });

  test("--density needs --rnn persistent; a bad density is refused in one line", () => {
    const vocab = biLstmTask.vocabulary.build(SENTENCES, TINY);
    assert.throws(
      () => biLstmTask.create({ ...TINY, rnn: "steps", density: 0.5 }, vocab, 1),
      /^ShapeError: BiLstmTagger: --density 0\.5 needs --rnn persistent \(/,
    );
    assert.throws(() => biLstmTask.create({ ...TINY, rnn: "persistent", density: 0 }, vocab, 1), /--density must be/);
    // runs saved before --density existed restore dense
    const saved = { embed: 4, hidden: 3, mlp: 3, splitSeed: 1, rnn: "persistent" };
    assert.equal(biLstmTask.restoreOptions(saved, biLstmTask.defaults).density, 1);
    assert.equal(biLstmTask.restoreOptions({ ...saved, density: 0.2 }, biLstmTask.defaults).density, 0.2);
    assert.throws(() => biLstmTask.restoreOptions({ ...saved, density: 2 }, biLstmTask.defaults), /options\.density/);
  });
});
