/**
 * What the JIT does when ptxas spills a variant's kernel (the plan's register model is an estimate: the interpreter's
 * reserve was measured on the Tree-LSTM, and a model with more matrices, or another ptxas, needs more): plan the
 * variant again with registers per thread kept free (`PlanOptions.headroom`) until the kernel changes — the staging
 * choices grow frugal first (codegen/staging.ts), then gradients, then weights, leave the registers — and compile
 * that, up to MAX_SPILL_REPLANS times; never a refusal the planner could have avoided. The policy is apart from the
 * GPU so that it is tested with nvcc alone (test/vpps-spill-retry.test.ts).
 */
import { KernelSpillError } from "../../../cuda/index.js";
import type { GradientStrategy } from "../plan/plan.js";
import { planVpps, type VppsPlan, VppsPlanError } from "../plan/plan.js";
import { backwardStage, binaryCellBackward, forwardStage, groupWaits, stageLoads, tileMode } from "./staging.js";

/** Registers per thread the headroom grows by between two plans tried (the allocation granularity of ptxas). */
export const SPILL_HEADROOM_STEP = 8;
/** Plans tried after the first spills, at most. */
export const MAX_SPILL_REPLANS = 4;

/** What of a plan the generated kernel depends on through registers: two plans alike here compile alike. */
function footprint(plan: VppsPlan): string {
  return JSON.stringify([
    plan.weightRegs,
    plan.gradientRegs,
    plan.matrices.map((m) => [m.gradients, forwardStage(m, plan), backwardStage(m, plan)]),
    plan.transposed.map((t) => t.name),
    plan.slots.map((s) => [s.chunks, s.gradientChunks]),
    tileMode(plan),
    groupWaits(plan),
    binaryCellBackward(plan),
    stageLoads(plan),
  ]);
}

/**
 * The next plan of the same variant (CTAs per SM, rows per warp, transposed copies or not) with more registers kept
 * free whose kernel differs from `plan`'s, or undefined when none fits any more.
 */
export function moreFrugalPlan(plan: VppsPlan, gradients: GradientStrategy | "auto"): VppsPlan | undefined {
  const matrices = plan.matrices.map(({ name, rows, cols }) => ({ name, rows, cols }));
  const was = footprint(plan);
  for (let headroom = plan.budget.headroom + SPILL_HEADROOM_STEP; ; headroom += SPILL_HEADROOM_STEP) {
    if (headroom >= plan.budget.limitPerThread) return undefined;
    let next: VppsPlan;
    try {
      next = planVpps(matrices, plan.device, {
        ctasPerSm: plan.ctasPerSm,
        rowsPerWarp: plan.rowsPerWarp,
        gradients,
        transposed: plan.transposed.length > 0,
        // the matrices this plan keeps off chip stay there; the planner may add more for the headroom
        ...(plan.offChip.length > 0 ? { offChip: plan.offChip.map((i) => plan.matrices[i]!.name) } : {}),
        headroom,
      });
    } catch (e) {
      if (e instanceof VppsPlanError) return undefined; // the weights alone no longer fit
      throw e;
    }
    if (footprint(next) !== was) return next;
  }
}

/**
 * After the kernel of `plan` (the `replans`-th plan made again, 0 for the first) spilled with `spill`: the next plan
 * to compile, announced by a one-line `notice`; or, when MAX_SPILL_REPLANS are spent or nothing more frugal fits,
 * the last spill is thrown, its message saying what was tried.
 */
export function planAfterSpill(
  plan: VppsPlan,
  replans: number,
  gradients: GradientStrategy | "auto",
  spill: KernelSpillError,
  notice: (line: string) => void,
): VppsPlan {
  const next = replans < MAX_SPILL_REPLANS ? moreFrugalPlan(plan, gradients) : undefined;
  if (next === undefined) {
    throw new KernelSpillError(
      `${spill.message} (planned ${replans + 1} time(s), the last with ${plan.budget.headroom} registers per thread ` +
        "kept free)",
      spill.kernel,
      spill.registers,
      spill.localBytes,
    );
  }
  notice(
    `vpps: ${spill.kernel}: ptxas spilled ${spill.localBytes} bytes per thread; planned again with ` +
      `${next.budget.headroom} registers per thread kept free (${next.weightRegs} for weights, ` +
      `${next.gradientRegs} for gradients) and compiling that`,
  );
  return next;
}

/**
 * `attempt(plan)` compiles and checks the kernel of `plan`, throwing KernelSpillError when it spills; on a spill it
 * is tried again with the plan planAfterSpill gives. Returns the first plan that compiled without spilling with what
 * `attempt` returned; when none does, the last spill is thrown. Any other error ends the tries at once.
 */
export function planUntilNoSpill<T>(
  first: VppsPlan,
  gradients: GradientStrategy | "auto",
  attempt: (plan: VppsPlan) => T,
  notice: (line: string) => void,
): { plan: VppsPlan; result: T } {
  let plan = first;
  for (let replans = 0; ; replans++) {
    try {
      return { plan, result: attempt(plan) };
    } catch (e) {
      if (!(e instanceof KernelSpillError)) throw e;
      plan = planAfterSpill(plan, replans, gradients, e, notice);
    }
  }
}
