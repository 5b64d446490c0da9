// The VPPS kernels with matrices off chip under nvcc: every variant of the Tree-LSTM at 1024/1024 and 1536/256 (the
// default placement) and at 256/256 with every matrix off chip. `npm test` compiles a sample (test/vpps-offchip.test.ts:
// the plan that leaves the fewest registers free), the exhaustive sweep the rest (test/sweeps/vpps-offchip.test.ts,
// `npm run test:sweeps`), both with test/vpps-nvcc.ts's check: no stack frame, no spill, within the plan's budget.

import assert from "node:assert/strict";
import { type DeviceModel, H100_SXM } from "../src/cuda/hw/device-model.js";
import { generateKernelSource, kernelName } from "../src/engines/vpps/codegen/template.js";
import { enumeratePlans, type MatrixSpec, type VppsPlan } from "../src/engines/vpps/plan/plan.js";
import { onChipMatrices } from "../src/model/parameters.js";
import { treeLstmTask } from "../src/models/treelstm/task.js";
import type { TreeLstmKernel } from "./vpps-nvcc.js";

/** The Tree-LSTM's matrices exactly as the model builds them (the fused cell's shapes; E and vectors stay off chip). */
export function treeLstm(H: number, E: number): MatrixSpec[] {
  return onChipMatrices(treeLstmTask.parameterShapes({ hidden: H, embed: E, cell: "fused", dropout: 0 }, 1));
}

export const OFF_CHIP_CASES = [
  { H: 1024, E: 1024, offChip: undefined },
  { H: 1536, E: 256, offChip: undefined },
  { H: 256, E: 256, offChip: "all" as const },
] as const;

/** Registers a plan leaves free of its per-thread limit: the fewer, the nearer ptxas is to spilling. */
export const freeRegisters = (p: VppsPlan) => p.budget.limitPerThread - p.weightRegs - p.gradientRegs;

/** One case's kernels on `device`: every variant the planner enumerates. */
export function offChipKernelsOf(
  { H, E, offChip }: (typeof OFF_CHIP_CASES)[number],
  device: DeviceModel,
): { plan: VppsPlan; name: string; source: string }[] {
  const spec = { model: `treelstm_h${H}_e${E}${offChip ? "_offchip" : ""}` };
  return enumeratePlans(treeLstm(H, E), device, "auto", false, offChip).map((plan) => ({
    plan,
    name: kernelName(plan, spec),
    source: generateKernelSource(plan, spec),
  }));
}

/**
 * Every off-chip kernel of the sweep (on the H100; the H200's are the same kernels, test/vpps-offchip.test.ts checks).
 * The sample: the plan that leaves the fewest registers free, of those the one with the most rows per warp.
 */
export function offChipKernels(): TreeLstmKernel[] {
  const all = OFF_CHIP_CASES.flatMap((c) => offChipKernelsOf(c, H100_SXM));
  const tightest = all.reduce((a, b) => {
    const d = freeRegisters(b.plan) - freeRegisters(a.plan);
    return d < 0 || (d === 0 && b.plan.rowsPerWarp > a.plan.rowsPerWarp) ? b : a;
  });
  const kernels = all.map((k) => ({ ...k, sample: k === tightest }));
  assert.equal(new Set(kernels.map((k) => k.name)).size, kernels.length, "kernel names must be unique");
  return kernels;
}
