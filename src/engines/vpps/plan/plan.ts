/**
 * Weight distribution for VPPS: which persistent CTA holds which rows of which weight matrix in its registers —
 * the register budget, the rpw values worth compiling, the plan of one (ctasPerSm, rpw), and the refusal that says
 * why a model does not fit. The vocabulary and the plan's types are types.ts; the deal itself is deal.ts.
 */
import { type DeviceModel, registersPerThread } from "../../../cuda/hw/device-model.js";
import { UserError } from "../../../util/errors.js";
import {
  addTransposed,
  buildPlan,
  ceilDiv,
  deal,
  keepsCtasBusy,
  placeGradients,
  registersOf,
  sizeOf,
  weightRegistersAtLeast,
} from "./deal.js";
import {
  type GradientStrategy,
  INTERPRETER_RESERVED_REGS,
  MAX_ROWS_PER_WARP,
  type MatrixSpec,
  type PlanOptions,
  type RegisterBudget,
  THREADS_PER_CTA,
  type VppsPlan,
  WARPS_PER_CTA,
} from "./types.js";

export type {
  GradientStrategy,
  HeldMatrix,
  MatrixPlan,
  MatrixSpec,
  PartitionAssignment,
  PlanOptions,
  RegisterBudget,
  SlotLayout,
  TransposedPlan,
  VppsPlan,
} from "./types.js";
export {
  INTERPRETER_RESERVED_REGS,
  MAX_ROWS_PER_WARP,
  MIN_BUSY_CTA_FRACTION,
  THREADS_PER_CTA,
  TRANSPOSED_RESERVE,
  WARPS_PER_CTA,
} from "./types.js";

/**
 * A model whose weights do not fit in the registers of the device: the budget, what the model needs, and which
 * matrices could stay off chip, in one line (`vpps plan` and `vpps train --engine vpps` print it as their refusal).
 */
export class VppsPlanError extends UserError {}

/** The registers per thread of a 256-thread CTA at `ctasPerSm`, less the interpreter's reserve and `headroom`. */
export function registerBudget(device: DeviceModel, ctasPerSm: 1 | 2, headroom = 0): RegisterBudget {
  const limitPerThread = registersPerThread(device, THREADS_PER_CTA, ctasPerSm);
  return {
    limitPerThread,
    interpreterReserve: INTERPRETER_RESERVED_REGS,
    headroom,
    forParameters: Math.max(0, limitPerThread - INTERPRETER_RESERVED_REGS - headroom),
  };
}

function validateMatrices(matrices: readonly MatrixSpec[]): void {
  if (matrices.length === 0) throw new Error("planVpps: the model has no 2-D weight matrices to keep on chip");
  const seen = new Set<string>();
  for (const m of matrices) {
    for (const key of ["rows", "cols"] as const) {
      if (!Number.isInteger(m[key]) || m[key] <= 0) {
        throw new Error(`planVpps: matrix '${m.name}' must have a positive integer ${key}; got ${m[key]}`);
      }
    }
    if (seen.has(m.name)) throw new Error(`planVpps: matrix name '${m.name}' appears twice; names must be unique`);
    seen.add(m.name);
  }
}

/**
 * rpw values worth compiling for one ctasPerSm and gradient option: the deal fits, keeps enough CTAs busy, and
 * keeps in registers every gradient that rpw = 1 keeps there. A larger rpw saves some atomics and x̄ traffic; a
 * gradient moved off chip costs a collection copy per use and a GEMM per batch, so such an rpw is not offered.
 */
export function validRowsPerWarp(
  matrices: readonly MatrixSpec[],
  device: DeviceModel,
  ctasPerSm: 1 | 2,
  gradients: GradientStrategy | "auto" = "auto",
  headroom = 0,
): number[] {
  validateMatrices(matrices);
  const budget = registerBudget(device, ctasPerSm, headroom);
  const ctas = device.smCount * ctasPerSm;
  const finest = placeGradients(matrices, deal(matrices, ctas, 1), budget.forParameters, gradients);
  if (finest === undefined) return [];
  const valid: number[] = [1];
  for (let rpw = 2; rpw <= MAX_ROWS_PER_WARP; rpw++) {
    const d = deal(matrices, ctas, rpw);
    if (!keepsCtasBusy(d)) continue;
    const placed = placeGradients(matrices, d, budget.forParameters, gradients);
    if (placed !== undefined && finest.registerGrad.every((r, i) => !r || placed.registerGrad[i])) valid.push(rpw);
  }
  return valid;
}

/**
 * Plans the distribution of `matrices` over the registers of `device`. Throws, with the budget, what the model needs
 * and which matrices could stay off chip, when the weights do not fit even with rpw = 1 and one CTA per SM.
 */
export function planVpps(matrices: readonly MatrixSpec[], device: DeviceModel, options: PlanOptions = {}): VppsPlan {
  validateMatrices(matrices);
  const gradients = options.gradients ?? "auto";
  if (options.rowsPerWarp !== undefined && (!Number.isInteger(options.rowsPerWarp) || options.rowsPerWarp < 1)) {
    throw new Error(`planVpps: rowsPerWarp must be a positive integer; got ${options.rowsPerWarp}`);
  }
  const headroom = options.headroom ?? 0;
  if (!Number.isInteger(headroom) || headroom < 0) {
    throw new Error(`planVpps: headroom must be a non-negative integer; got ${options.headroom}`);
  }
  const fits = (c: 1 | 2) =>
    weightRegistersAtLeast(matrices, device.smCount * c, options.rowsPerWarp ?? 1) <=
    registerBudget(device, c, headroom).forParameters;
  const tried = options.ctasPerSm ? [options.ctasPerSm] : ([1, 2] as const);
  if (!tried.some(fits)) {
    throw new VppsPlanError(refusal(matrices, device, tried[0]!, options.rowsPerWarp ?? 1, gradients, headroom));
  }
  const ctasPerSm = options.ctasPerSm ?? chooseCtasPerSm(matrices, device, gradients, headroom);
  const budget = registerBudget(device, ctasPerSm, headroom);
  const ctas = device.smCount * ctasPerSm;
  const valid = validRowsPerWarp(matrices, device, ctasPerSm, gradients, headroom);
  const rpw = options.rowsPerWarp ?? valid[0] ?? 1;
  const d = deal(matrices, ctas, rpw);
  const placed = placeGradients(matrices, d, budget.forParameters, gradients);
  if (placed === undefined) throw new VppsPlanError(refusal(matrices, device, ctasPerSm, rpw, gradients, headroom));
  if (options.transposed !== true) return buildPlan(matrices, device, ctasPerSm, budget, d, placed, valid);
  const withCopies = addTransposed(matrices, d, placed, budget.limitPerThread - headroom);
  return buildPlan(matrices, device, ctasPerSm, budget, withCopies.deal, { ...placed, ...withCopies }, valid);
}

/** Two CTAs per SM expose more parallelism but halve the registers; take it only when everything still fits. */
function chooseCtasPerSm(
  matrices: readonly MatrixSpec[],
  device: DeviceModel,
  gradients: GradientStrategy | "auto",
  headroom: number,
): 1 | 2 {
  const budget = registerBudget(device, 2, headroom);
  const placed = placeGradients(matrices, deal(matrices, device.smCount * 2, 1), budget.forParameters, gradients);
  const allInRegisters = placed !== undefined && (gradients === "gemm" || placed.registerGrad.every((r) => r));
  return allInRegisters ? 2 : 1;
}

/** The most partitions a refusal deals to count the registers exactly (a few ms). */
const MAX_DEALT_PARTITIONS = 1_000_000;

function refusal(
  matrices: readonly MatrixSpec[],
  device: DeviceModel,
  ctasPerSm: 1 | 2,
  rpw: number,
  gradients: GradientStrategy | "auto",
  headroom: number,
): string {
  const budget = registerBudget(device, ctasPerSm, headroom);
  const ctas = device.smCount * ctasPerSm;
  // A model of millions of partitions is described from arithmetic alone: dealing its rows would take long, or fail.
  const partitions = matrices.reduce((n, m) => n + ceilDiv(m.rows, WARPS_PER_CTA * rpw), 0);
  const farBeyond = (ms: readonly MatrixSpec[]) => weightRegistersAtLeast(ms, ctas, rpw) > budget.forParameters;
  let needText: string;
  if (partitions > MAX_DEALT_PARTITIONS) {
    needText = `at least ${weightRegistersAtLeast(matrices, ctas, rpw)} registers per thread for weights alone`;
  } else {
    const d = deal(matrices, ctas, rpw);
    const chunks = matrices.map((m) => ceilDiv(m.cols, 32));
    const allGrad = matrices.map(() => gradients === "registers");
    const need = registersOf(d, chunks, allGrad);
    needText =
      gradients === "registers"
        ? `${need.weightRegs + need.gradientRegs} registers per thread (${need.weightRegs} for weights + ${need.gradientRegs} for gradients)`
        : `${need.weightRegs} registers per thread for weights alone`;
  }
  // Which of the largest matrices would have to stay in global memory for the rest to fit?
  const bySize = matrices.map((_, i) => i).sort((a, b) => sizeOf(matrices[b]!) - sizeOf(matrices[a]!) || a - b);
  const lines: string[] = [];
  let kept = matrices.slice();
  let fitsAfter = -1;
  for (const [k, i] of bySize.entries()) {
    const m = matrices[i]!;
    const perThread = ceilDiv(m.rows * ceilDiv(m.cols, 32) * 32, ctas * THREADS_PER_CTA);
    lines.push(`${m.name} [${m.rows}x${m.cols}] ~${perThread} registers/thread`);
    kept = kept.filter((x) => x !== m);
    if (fitsAfter < 0 && kept.length > 0 && !farBeyond(kept)) {
      const dk = deal(kept, ctas, rpw);
      if (placeGradients(kept, dk, budget.forParameters, gradients) !== undefined) fitsAfter = k;
    }
  }
  const advice =
    fitsAfter >= 0
      ? `keeping the first ${fitsAfter + 1} of these off chip would let the rest fit`
      : "no subset of them fits while keeping any matrix on chip";
  return (
    `VPPS: the model does not fit in the registers of ${device.name} with ${ctasPerSm} CTA(s)/SM and ${rpw} row(s) ` +
    `per warp: it needs ${needText}, but the budget is ${budget.forParameters} ` +
    `(${budget.limitPerThread} per thread minus ${budget.interpreterReserve} reserved for the interpreter` +
    `${headroom > 0 ? ` and ${headroom} kept free after a spill` : ""}). ` +
    `Matrices that could stay off chip, largest first: ${lines.join(", ")} (${advice})`
  );
}

/** Every plan worth compiling for a model: each ctasPerSm in which it fits, each valid rpw there. */
export function enumeratePlans(
  matrices: readonly MatrixSpec[],
  device: DeviceModel,
  gradients: GradientStrategy | "auto" = "auto",
  transposed = false,
): VppsPlan[] {
  const plans: VppsPlan[] = [];
  for (const ctasPerSm of [1, 2] as const) {
    for (const rowsPerWarp of validRowsPerWarp(matrices, device, ctasPerSm, gradients)) {
      plans.push(planVpps(matrices, device, { ctasPerSm, rowsPerWarp, gradients, transposed }));
    }
  }
  return plans;
}
