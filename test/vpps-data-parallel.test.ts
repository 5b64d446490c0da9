// VPPS's data-parallel (gradient-export) mode without a GPU: the script of every rank ends after backward with the
// gradients exported (schedule option `update: "host"`), the emulator runs it, and the lists that the runtime hands
// the device (runtime/dp-lists.ts: the copy into the shared layout, the update) run on the host as the device runs
// them, with a fake reducer in between. Export mode plus the external update must train like the in-kernel update:
// one rank equals the kernel's own update of the same batch, and two ranks whose "all-reduce" sums into each other's
// buffers equal one launch of the two batches together.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type DeviceModel, H100_SXM } from "../src/cuda/hw/device-model.js";
import { syntheticTrees } from "../src/data/synthetic.js";
import type { TreeNode } from "../src/data/tree.js";
import { Vocabulary } from "../src/data/vocab.js";
import { createModelLayout, type ModelLayout } from "../src/engines/vpps/plan/layout.js";
import { ADAM_DEFAULTS, type AdamStep, adamStep, momentLayout } from "../src/engines/vpps/plan/moments.js";
import { type PlanOptions, planVpps } from "../src/engines/vpps/plan/plan.js";
import {
  copyList,
  copyListWords,
  type DpBases,
  dpLayout,
  dpStepOnHost,
  touchedPairs,
  unionSlots,
  unitePairs,
  updateList,
  updateListWords,
} from "../src/engines/vpps/runtime/dp-lists.js";
import { VppsScheduler } from "../src/engines/vpps/schedule/scheduler.js";
import { emulateBatch, emulateLaunch, readBatchResults } from "../src/engines/vpps/script/emulate-batch.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { onChipMatrices } from "../src/model/parameters.js";
import { TreeLstmModel } from "../src/models/treelstm/model.js";

const SMALL: DeviceModel = { ...H100_SXM, name: "small test GPU", smCount: 3 };
const LR = 0.1;
const STEPS = 4;

interface World {
  values: Float32Array[];
  moments: Float32Array | undefined;
}

function setup(plan: PlanOptions) {
  const trees = syntheticTrees(8, 31);
  const vocab = Vocabulary.fromTrees(trees);
  const model = new TreeLstmModel({ vocabSize: 60, embed: 7, hidden: 12, seed: 5, dropout: 0 });
  const layout = createModelLayout(model.params.all, planVpps(onChipMatrices(model.params), SMALL, plan));
  const graph = (batch: readonly TreeNode[]) => {
    const cg = new ComputationGraph();
    return { cg, loss: model.buildBatchLoss(cg, batch, vocab) };
  };
  return { trees, model, layout, graph };
}

const world = (model: TreeLstmModel, layout: ModelLayout, adam: boolean): World => ({
  values: model.params.all.map((p) => Float32Array.from(p.value)),
  moments: adam ? new Float32Array(momentLayout(layout).floats) : undefined,
});

/** One step of the in-kernel update (or the plan's own host update) on `batch`: the reference. */
function kernelStep(
  layout: ModelLayout,
  g: { cg: ComputationGraph; loss: ReturnType<TreeLstmModel["buildBatchLoss"]> },
  w: World,
  clip: number,
  adam: AdamStep | undefined,
): number {
  const sched = new VppsScheduler(layout, { optimizer: adam ? "adam" : "sgd" }).schedule(g.cg, g.loss);
  const opts = { seed: 1, learningRate: LR, clip, ...(adam ? { adam } : {}) };
  const out = emulateBatch(layout, sched, g.cg, w.values, opts, w.moments);
  w.values = out.values.map((v) => Float32Array.from(v));
  if (out.moments) w.moments = Float32Array.from(out.moments);
  return out.loss;
}

/**
 * One data-parallel step: each rank's batch in export mode on the emulator, its gradients copied to the shared
 * layout, `allReduce` over the ranks' device memories, and the update list applied on every rank. Returns the
 * ranks' losses; every world is updated.
 */
function exportStep(
  layout: ModelLayout,
  graphs: { cg: ComputationGraph; loss: ReturnType<TreeLstmModel["buildBatchLoss"]> }[],
  worlds: World[],
  clip: number,
  adam: AdamStep | undefined,
): number[] {
  const dpl = dpLayout(layout);
  const M = layout.plan.masterFloats;
  const bases: DpBases = { master: 0, grads: M, rest: 2 * M, pool: 2 * M + dpl.restCapacity };
  const ranks = graphs.map((g, r) => {
    const sched = new VppsScheduler(layout, { update: "host" }).schedule(g.cg, g.loss);
    assert.equal(sched.update, "host");
    const w = worlds[r]!;
    const { mem } = emulateLaunch(layout, sched, g.cg, w.values, { seed: 2 + r, learningRate: LR, clip });
    const device = new Float32Array(bases.pool + sched.layout.poolFloats);
    device.set(mem.master, bases.master);
    device.set(mem.pool, bases.pool);
    // the register gradients the kernel exported; GEMM-strategy matrices: what the runtime's cuBLAS GEMM forms
    const grads = readBatchResults(layout, sched, w.values, mem, { learningRate: 0, clip: 0 }).gradients;
    for (const p of layout.params) {
      const m = layout.matrixOf[p.index]!;
      if (m >= 0) device.set(grads[p.index]!, bases.grads + layout.plan.matrices[m]!.masterOffset);
    }
    return { sched, device, loss: mem.pool[sched.lossOffset]! };
  });
  // the exchange of touched rows (allGatherHost), then each rank's copy list
  const union = unitePairs(
    layout,
    ranks.map((r) => touchedPairs(r.sched.layout)),
  );
  const { slot, used } = unionSlots(layout, dpl, union);
  for (const r of ranks) {
    const list = new Uint32Array(copyListWords(layout, r.sched.layout));
    const n = copyList(layout, dpl, r.sched.layout, union, slot, bases, list, 0);
    dpStepOnHost.copy(r.device, bases, used, list, n);
  }
  // the fake reducer: every rank's grads and rest summed into every rank's
  for (const [at, n] of [
    [bases.grads, M],
    [bases.rest, used],
  ] as const) {
    const sum = new Float32Array(n);
    for (const r of ranks) for (let i = 0; i < n; i++) sum[i] = Math.fround(sum[i]! + r.device[at + i]!);
    for (const r of ranks) r.device.set(sum, at);
  }
  const list = new Uint32Array(updateListWords(layout, union, adam !== undefined));
  const entries = updateList(layout, dpl, union, slot, bases, list, 0, adam !== undefined);
  ranks.forEach((r, k) => {
    const w = worlds[k]!;
    dpStepOnHost.step(r.device, w.moments, list, entries, LR, clip, adam);
    w.values = layout.params.map((p) => {
      const m = layout.matrixOf[p.index]!;
      const at =
        m >= 0 ? bases.master + layout.plan.matrices[m]!.masterOffset : bases.pool + layout.paramOffset[p.index]!;
      return r.device.slice(at, at + p.rows * p.cols);
    });
  });
  return ranks.map((r) => r.loss);
}

function maxRelDiff(a: readonly Float32Array[], b: readonly Float32Array[]): number {
  let worst = 0;
  a.forEach((x, i) => {
    for (let k = 0; k < x.length; k++) {
      const d = Math.abs(x[k]! - b[i]![k]!) / Math.max(1, Math.abs(x[k]!));
      if (d > worst) worst = d;
    }
  });
  return worst;
}

const configs: { name: string; plan: PlanOptions; clip: number; adam: boolean }[] = [
  { name: "SGD, clipping, gradients in registers", plan: { ctasPerSm: 1, rowsPerWarp: 1 }, clip: 1, adam: false },
  { name: "Adam, no clipping, rpw 2", plan: { ctasPerSm: 2, rowsPerWarp: 2 }, clip: 0, adam: true },
  {
    name: "Adam, clipping, gradients by GEMM",
    plan: { ctasPerSm: 1, rowsPerWarp: 1, gradients: "gemm" },
    clip: 1,
    adam: true,
  },
  {
    name: "SGD, clipping, U_iou and W_out off chip",
    plan: { ctasPerSm: 1, rowsPerWarp: 1, offChip: ["U_iou", "W_out"] },
    clip: 1,
    adam: false,
  },
  { name: "Adam, clipping, every matrix off chip", plan: { rowsPerWarp: 1, offChip: "all" }, clip: 1, adam: true },
];

describe("VPPS gradient-export mode (data-parallel) on the emulator", () => {
  for (const c of configs) {
    test(`${c.name}: one rank (identity reducer) trains as the in-kernel update, ${STEPS} steps`, () => {
      const { trees, model, layout, graph } = setup(c.plan);
      const ref = world(model, layout, c.adam);
      const dp = world(model, layout, c.adam);
      for (let step = 1; step <= STEPS; step++) {
        const batch = trees.slice(2 * (step - 1), 2 * step);
        const adam = c.adam ? adamStep(ADAM_DEFAULTS, step) : undefined;
        const want = kernelStep(layout, graph(batch), ref, c.clip, adam);
        const [got] = exportStep(layout, [graph(batch)], [dp], c.clip, adam);
        assert.ok(
          Math.abs(want - got!) <= 1e-5 * Math.max(1, Math.abs(want)),
          `step ${step}: loss ${got}, kernel ${want}`,
        );
      }
      const d = maxRelDiff(ref.values, dp.values);
      assert.ok(d <= 1e-5, `weights after ${STEPS} steps differ by ${d} (relative)`);
    });

    test(`${c.name}: two ranks whose all-reduce sums their buffers train as one launch of both batches`, () => {
      const { trees, model, layout, graph } = setup(c.plan);
      const ref = world(model, layout, c.adam);
      const ranks = [world(model, layout, c.adam), world(model, layout, c.adam)];
      for (let step = 1; step <= STEPS; step++) {
        // every step the ranks touch different words, so the union of lookup rows matters
        const a = trees.slice(2 * (step - 1), 2 * (step - 1) + 1);
        const b = trees.slice(2 * (step - 1) + 1, 2 * step);
        const adam = c.adam ? adamStep(ADAM_DEFAULTS, step) : undefined;
        const want = kernelStep(layout, graph([...a, ...b]), ref, c.clip, adam);
        const losses = exportStep(layout, [graph(a), graph(b)], ranks, c.clip, adam);
        const got = losses[0]! + losses[1]!;
        assert.ok(
          Math.abs(want - got) <= 1e-5 * Math.max(1, Math.abs(want)),
          `step ${step}: loss ${got}, one launch ${want}`,
        );
        // the ranks' weights stay equal: the same sums, the same list, the same arithmetic
        assert.equal(maxRelDiff(ranks[0]!.values, ranks[1]!.values), 0, `step ${step}: the ranks' weights differ`);
      }
      const d = maxRelDiff(ref.values, ranks[0]!.values);
      assert.ok(d <= 1e-4, `weights after ${STEPS} steps differ by ${d} (relative)`);
    });
  }

  test("the union of touched rows is sorted, without repeats, the same whatever the ranks' order; foreign rows are refused", () => {
    const { layout } = setup({ ctasPerSm: 1, rowsPerWarp: 1 });
    const table = layout.params.find((p) => p.kind === "lookup")!.index;
    const r0 = Int32Array.of(table, 5, table, 2, table, 9);
    const r1 = Int32Array.of(table, 9, table, 1);
    const u = unitePairs(layout, [r0, r1]);
    assert.deepEqual([...u], [table, 1, table, 2, table, 5, table, 9]);
    assert.deepEqual([...unitePairs(layout, [r1, r0])], [...u]);
    assert.throws(() => unitePairs(layout, [Int32Array.of(table, 1_000_000)]), /rank 0 touched row 1000000/);
  });
});
