/**
 * Matrices kept off chip (plan/types.ts Placement): the planner's choice and its reasons, the offChip option, and
 * the emulator against the CPU engine with some or all matrices off chip — Tree-LSTM fused and from plain ops, random
 * graphs over every op, SGD and Adam, random interleavings; and, compiled with nvcc, the off-chip kernel that leaves
 * the fewest registers free (the other off-chip kernels compile in test/sweeps/vpps-offchip.test.ts, `npm run
 * test:sweeps`; test/vpps-offchip-nvcc.ts lists them).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type DeviceModel, H100_SXM, H200 } from "../src/cuda/hw/device-model.js";
import { syntheticTrees } from "../src/data/synthetic.js";
import { Vocabulary } from "../src/data/vocab.js";
import { formatPlan } from "../src/engines/vpps/plan/format.js";
import { createModelLayout } from "../src/engines/vpps/plan/layout.js";
import {
  chooseOffChip,
  enumeratePlans,
  type PlanOptions,
  planVpps,
  VppsPlanError,
} from "../src/engines/vpps/plan/plan.js";
import { type ScheduleOptions, VppsScheduler } from "../src/engines/vpps/schedule/scheduler.js";
import { emulateBatch } from "../src/engines/vpps/script/emulate-batch.js";
import { instructionWords, Opcode } from "../src/engines/vpps/script/format.js";
import { ComputationGraph, type Expression } from "../src/graph/graph.js";
import { onChipMatrices, type ParameterCollection } from "../src/model/parameters.js";
import { type CellFormulation, TreeLstmModel } from "../src/models/treelstm/model.js";
import { buildRandomVppsGraph, randomVppsModel } from "./random-graph.js";
import { describeTreeLstmCompile } from "./vpps-nvcc.js";
import { freeRegisters, OFF_CHIP_CASES, offChipKernels, offChipKernelsOf, treeLstm } from "./vpps-offchip-nvcc.js";
import { tensorDifference as firstDifference, referenceSgdBatch, type SgdReference } from "./vpps-reference.js";
import { adamTrajectories } from "./vpps-trajectories.js";

/** A small GPU: few CTAs, so that the on-chip matrices spread over several slots and processors share work. */
const SMALL: DeviceModel = { ...H100_SXM, name: "small test GPU", smCount: 3 };
const LR = 0.1;

const names = (plan: { matrices: readonly { name: string; placement: string }[] }) =>
  plan.matrices.filter((m) => m.placement === "off-chip").map((m) => m.name);

/** Instructions of the given opcodes in all processors' scripts. */
function countOpcodes(script: Uint32Array, ctas: number, ops: readonly Opcode[]): number {
  let n = 0;
  for (let c = 0; c < ctas; c++) {
    for (let at = ctas + 1 + script[c]!; at < ctas + 1 + script[c + 1]!; at += instructionWords(script, at)) {
      if (ops.includes(script[at]! & 0xff)) n++;
    }
  }
  return n;
}

describe("VPPS planner: matrices off chip", () => {
  test("Tree-LSTM 1024/1024 and 1536/256 plan (no refusal): the fewest matrices off chip, with their reasons", () => {
    for (const device of [H100_SXM, H200]) {
      const big = planVpps(treeLstm(1024, 1024), device);
      assert.deepEqual(names(big), ["U_iou"], device.name);
      const u = big.matrices[1]!;
      assert.equal(u.partitionCount, 0);
      assert.deepEqual(u.partitions, []);
      assert.equal(u.gradients, "device");
      assert.match(
        u.placementReason,
        /^off chip: needed for the rest to fit \(with it in registers the weights take at least \d+ registers\/thread; the budget is \d+ on NVIDIA H(1|2)00/,
      );
      for (const m of big.matrices) if (m.name !== "U_iou") assert.equal(m.placementReason, "registers: fits");
      assert.ok(big.weightRegs + big.gradientRegs <= big.budget.forParameters);
      const wide = planVpps(treeLstm(1536, 256), device);
      // U_iou alone leaves the rest over the budget (rows of 48 chunks also widen the interpreter's reserve)
      assert.deepEqual(names(wide), ["U_iou", "U_f1"], device.name);
      assert.ok(wide.weightRegs <= wide.budget.forParameters);
      // every variant keeps the same matrices off chip
      const plans = enumeratePlans(treeLstm(1536, 256), device);
      assert.ok(plans.length > 0);
      for (const p of plans) assert.deepEqual(names(p), ["U_iou", "U_f1"]);
    }
  });

  test("the fewest: no matrix is off chip whose return would still fit; a model that fits keeps all", () => {
    for (const [H, E] of [
      [256, 256],
      [512, 256],
      [1024, 1024],
      [1536, 256],
      [2048, 2048],
    ] as const) {
      const ms = treeLstm(H, E);
      const plan = planVpps(ms, H100_SXM);
      if (H <= 512) assert.deepEqual(names(plan), [], `${H}/${E} fits in registers`);
      for (const m of plan.matrices) {
        if (m.placement !== "off-chip") continue;
        // bringing it back breaks the fit (checked by forcing every other one off chip)
        const others = names(plan).filter((n) => n !== m.name);
        const choice = chooseOffChip(ms, H100_SXM, { offChip: others });
        assert.equal(choice.offChip[m.index], true, `${H}/${E}: ${m.name} could come back on chip`);
      }
    }
  });

  test("gradients 'registers': more matrices off chip so that every on-chip gradient is in registers", () => {
    const plan = planVpps(treeLstm(1536, 256), H100_SXM, { gradients: "registers" });
    for (const m of plan.matrices) assert.equal(m.gradients, m.placement === "off-chip" ? "device" : "registers");
    assert.ok(names(plan).length >= 3, names(plan).join());
    assert.match(plan.matrices[1]!.placementReason, /weights and gradients/);
  });

  test("offChip forces matrices off chip, 'all' every one; the reason says so", () => {
    const forced = planVpps(treeLstm(256, 256), H100_SXM, { offChip: ["U_f2", "W_out"] });
    assert.deepEqual(names(forced), ["U_f2", "W_out"]);
    assert.equal(forced.matrices[3]!.placementReason, "off chip: forced (offChip)");
    assert.equal(forced.matrices[0]!.placementReason, "registers: fits");
    const all = planVpps(treeLstm(256, 256), H100_SXM, { offChip: "all" });
    assert.deepEqual(names(all), ["W_iou", "U_iou", "U_f1", "U_f2", "W_out"]);
    assert.equal(all.weightRegs, 0);
    assert.deepEqual(all.slots, []);
    assert.equal(all.matrices[0]!.placementReason, "off chip: forced (offChip all)");
    // nothing in registers: two CTAs per SM fit
    assert.equal(all.ctasPerSm, 2);
    const text = formatPlan(all);
    assert.match(text, /^U_iou +768x512 +off chip +- +0 +any \(tiles\) +- +- +device$/m);
    assert.match(text, /^ {2}U_iou: off chip: forced \(offChip all\)$/m);
  });

  test("an offChip name that is not a matrix is refused in one line naming it and the valid names", () => {
    assert.throws(
      () => planVpps(treeLstm(256, 256), H100_SXM, { offChip: ["U_iou", "Wiou"] }),
      (e: Error) => {
        assert.ok(e instanceof VppsPlanError);
        assert.equal(
          e.message,
          "VPPS: offChip names 'Wiou', which is not a weight matrix of this model; the matrices are W_iou, U_iou, U_f1, U_f2, W_out (or \"all\")",
        );
        return true;
      },
    );
  });

  test("a master copy past 32-bit offsets is the one size refusal left, in one line", () => {
    assert.throws(
      () => planVpps(treeLstm(100_000, 100_000), H100_SXM),
      /VPPS: the model's weight matrices hold \d+ floats, more than the 4294967296 \(2\^32\) that the kernel's 32-bit offsets address; choose smaller hidden or embedding sizes$/,
    );
  });
});

function treeBatch(count: number, seed: number, H: number, E: number, cell: CellFormulation) {
  const trees = syntheticTrees(count, seed);
  const vocab = Vocabulary.fromTrees(trees);
  const model = new TreeLstmModel({ vocabSize: 60, embed: E, hidden: H, seed, cell });
  const cg = new ComputationGraph();
  const loss = model.buildBatchLoss(cg, trees, vocab);
  return { pc: model.params, cg, loss, model, trees, vocab };
}

function compare(pc: ParameterCollection, ref: SgdReference, got: ReturnType<typeof emulateBatch>): string {
  if (!(Math.abs(ref.loss - got.loss) <= 1e-5 * Math.max(1, Math.abs(ref.loss)))) {
    return `loss: CPU ${ref.loss}, VPPS ${got.loss}`;
  }
  for (const [i, p] of pc.all.entries()) {
    const d =
      firstDifference(`gradient of ${p.name}`, ref.gradients[i]!, got.gradients[i]!) ||
      stepDifference(`update of ${p.name}`, p.value, ref.values[i]!, got.values[i]!);
    if (d) return d;
  }
  return "";
}

/**
 * First element whose update step (new − old) differs by more than 2e-4 of the largest step plus two units in the
 * last place of the weight: the new weight is rounded to fp32, and x̄ summed by tiles on several processors in an
 * interleaving's order moves a gradient in its last bits, which may round a tiny step of a large weight to the
 * neighbouring float.
 */
function stepDifference(what: string, before: Float32Array, expected: Float32Array, actual: Float32Array): string {
  let scale = 0;
  for (let k = 0; k < before.length; k++) scale = Math.max(scale, Math.abs(expected[k]! - before[k]!));
  for (let k = 0; k < before.length; k++) {
    const tol = 1e-12 + 2e-4 * scale + 2 * 2 ** -23 * Math.abs(before[k]!);
    const d = Math.abs(expected[k]! - actual[k]!);
    if (!(d <= tol)) {
      return `${what}[${k}]: CPU step ${expected[k]! - before[k]!}, VPPS step ${actual[k]! - before[k]!} (tolerance ${tol.toExponential(1)})`;
    }
  }
  return "";
}

/** Schedules one batch and compares it with the CPU engine over `seeds` × two interleavings; returns mismatches. */
function sgdMismatches(
  pc: ParameterCollection,
  cg: ComputationGraph,
  loss: Expression,
  plan: PlanOptions,
  clip: number,
  seeds: number,
  opts: ScheduleOptions = {},
  check?: (sched: ReturnType<VppsScheduler["schedule"]>, ctas: number) => void,
): string[] {
  const ref = referenceSgdBatch(pc, loss, LR, clip);
  const model = createModelLayout(pc.all, planVpps(onChipMatrices(pc), SMALL, plan));
  const sched = new VppsScheduler(model, { exportGradients: true, ...opts }).schedule(cg, loss);
  check?.(sched, model.plan.ctas);
  const values = pc.all.map((p) => p.value);
  const out: string[] = [];
  for (let seed = 1; seed <= seeds; seed++) {
    for (const interleaving of ["random", "greedy"] as const) {
      const got = emulateBatch(model, sched, cg, values, { seed, interleaving, learningRate: LR, clip });
      const d = compare(pc, ref, got);
      if (d) out.push(`${interleaving} seed ${seed}: ${d}`);
    }
  }
  return out;
}

describe("VPPS emulator with matrices off chip, against the CPU engine", () => {
  const placements: { name: string; offChip: readonly string[] | "all" }[] = [
    { name: "U_iou off chip", offChip: ["U_iou"] },
    { name: "W_iou, U_f2 and W_out off chip", offChip: ["W_iou", "U_f2", "W_out"] },
    { name: "every matrix off chip", offChip: "all" },
  ];
  for (const cell of ["fused", "ops"] as const) {
    for (const p of placements) {
      test(`Tree-LSTM (${cell} cell), ${p.name}: SGD loss, gradients and updated weights`, () => {
        for (const [count, seed, clip, plan] of [
          [1, 51, 5, { ctasPerSm: 1, rowsPerWarp: 1 }],
          [4, 52, 0, { ctasPerSm: 2, rowsPerWarp: 2, transposed: true }],
          [9, 53, 1, { ctasPerSm: 1, rowsPerWarp: 1, gradients: "gemm" }],
        ] as const) {
          const { pc, cg, loss } = treeBatch(count, seed, 12, 7, cell);
          const out = sgdMismatches(pc, cg, loss, { ...plan, offChip: p.offChip }, clip, 3, {}, (sched, ctas) => {
            // an off-chip matrix's products are tiles, its W̄ tiles after the backward pass, its update sgd.master
            // short forward lists of an off-chip matrix: tiles over column slices, adding into outputs zeroed in step 0
            assert.ok(countOpcodes(sched.script, ctas, [Opcode.TileAcc]) > 0, "split forward tiles");
            assert.ok(countOpcodes(sched.script, ctas, [Opcode.TileWbar]) > 0, "W̄ tiles");
            assert.equal(sched.zeroGradients, true);
            if (sched.update === "kernel") {
              assert.ok(countOpcodes(sched.script, ctas, [Opcode.SgdMaster]) > 0, "sgd.master");
              assert.equal(countOpcodes(sched.script, ctas, [Opcode.Norm2Grads]) > 0, clip !== 0 || true);
            }
          });
          assert.deepEqual(out.slice(0, 3), [], `${count} tree(s), seed ${seed}`);
        }
      });
    }
  }

  test("random graphs over every op with random matrices off chip (and tiles for the rest): SGD", () => {
    for (let seed = 1; seed <= 24; seed++) {
      const { pc, build } = randomVppsModel(seed);
      const cg = new ComputationGraph();
      const loss = buildRandomVppsGraph(cg, build, seed);
      const matrices = onChipMatrices(pc).map((m) => m.name);
      const offChip = seed % 4 === 0 ? "all" : matrices.filter((_, k) => (seed >> k) % 2 === 1);
      const plan: PlanOptions = {
        ctasPerSm: seed % 2 === 0 ? 2 : 1,
        rowsPerWarp: 1 + (seed % 3),
        gradients: seed % 5 === 0 ? "gemm" : "auto",
        transposed: seed % 3 === 1,
        offChip,
      };
      const opts = seed % 3 === 2 ? { tileEntries: 2 } : {};
      const out = sgdMismatches(pc, cg, loss, plan, seed % 3 === 0 ? 0 : 2, 2, opts);
      assert.deepEqual(out.slice(0, 3), [], `random graph seed ${seed} (${cg.size} nodes), offChip ${String(offChip)}`);
    }
  });

  test("Adam: Tree-LSTM (fused and plain ops) and random graphs with matrices off chip, 3 steps", () => {
    const loose = { count: 0, total: 0 };
    for (const [cell, offChip, clip] of [
      ["fused", ["U_iou", "W_out"], 1],
      ["ops", "all", 5],
      ["fused", "all", 0],
    ] as const) {
      const trees = syntheticTrees(12, 61);
      const vocab = Vocabulary.fromTrees(trees);
      const model = new TreeLstmModel({ vocabSize: 60, embed: 7, hidden: 12, seed: 4, cell });
      const graphs = (k: number) => {
        const cg = new ComputationGraph();
        return { cg, loss: model.buildBatchLoss(cg, trees.slice(4 * k, 4 * k + 1 + k), vocab) };
      };
      const out = adamTrajectories(model.params, graphs, SMALL, { rowsPerWarp: 1, offChip }, clip, 0.01, 3, loose);
      assert.deepEqual(out.slice(0, 3), [], `${cell}, offChip ${String(offChip)}`);
    }
    for (let seed = 1; seed <= 8; seed++) {
      const { pc, build } = randomVppsModel(seed);
      const graphs = (k: number) => {
        const cg = new ComputationGraph();
        return { cg, loss: buildRandomVppsGraph(cg, build, 100 * seed + k) };
      };
      const matrices = onChipMatrices(pc).map((m) => m.name);
      const offChip = seed % 2 === 0 ? "all" : matrices.filter((_, k) => k % 2 === 0);
      const plan: PlanOptions = { ctasPerSm: 1, rowsPerWarp: 1, gradients: seed % 3 === 0 ? "gemm" : "auto", offChip };
      const out = adamTrajectories(
        pc,
        graphs,
        SMALL,
        plan,
        seed % 3 === 0 ? 0 : 1,
        0.05,
        3,
        loose,
        seed % 2 ? 2 : undefined,
      );
      assert.deepEqual(out.slice(0, 3), [], `random graph seed ${seed}`);
    }
    assert.ok(loose.count <= 0.01 * loose.total, `${loose.count} of ${loose.total} steps compared loosely`);
  });
});

/** A kernel source without its header's device name and plan digest (the only lines a device model changes). */
const withoutDevice = (source: string, device: DeviceModel) =>
  source.replaceAll(device.name, "DEVICE").replace(/plan [0-9a-f]{12}/g, "plan DIGEST");

describe("VPPS kernels with matrices off chip under nvcc: npm test's sample and the sweep", () => {
  test("the H200's kernels are the H100's (compiling once covers both), each with a matrix off chip", () => {
    for (const c of OFF_CHIP_CASES) {
      const h100 = offChipKernelsOf(c, H100_SXM);
      const h200 = offChipKernelsOf(c, H200);
      assert.ok(h100.length > 0, `${c.H}/${c.E}: no plan`);
      // the H200 model is the H100's SM with another name: the same kernels, which compiling once covers
      assert.deepEqual(
        h200.map((k) => withoutDevice(k.source, H200)),
        h100.map((k) => withoutDevice(k.source, H100_SXM)),
        `${c.H}/${c.E}: H200 kernels differ from the H100's beyond the header`,
      );
      for (const k of h100) assert.ok(k.plan.offChip.length > 0, `${k.name}: nothing off chip`);
    }
  });

  test("sample and sweep together are every kernel once; the sample is one that leaves the fewest registers free", () => {
    const kernels = offChipKernels();
    const sample = kernels.filter((k) => k.sample);
    assert.equal(sample.length, 1);
    assert.equal(kernels.length, OFF_CHIP_CASES.flatMap((c) => offChipKernelsOf(c, H100_SXM)).length);
    assert.ok(kernels.length >= 3 * sample.length, `the sweep holds the most: ${kernels.length}`);
    assert.equal(freeRegisters(sample[0]!.plan), Math.min(...kernels.map((k) => freeRegisters(k.plan))));
    assert.ok(sample[0]!.plan.offChip.length > 0);
  });
});

describeTreeLstmCompile(
  "VPPS kernels with matrices off chip compile for sm_90 without spills (nvcc -Xptxas -v): a sample",
  "the off-chip Tree-LSTM plan that leaves the fewest registers free",
  offChipKernels().filter((k) => k.sample),
);
