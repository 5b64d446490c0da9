/**
 * Weight distribution for VPPS: which persistent CTA holds which rows of which weight matrix in its registers —
 * the register budget, which matrices stay off chip and why, the rpw values worth compiling, and the plan of one
 * (ctasPerSm, rpw). The vocabulary and the plan's types are types.ts; the deal itself is deal.ts.
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
} from "./types.js";

export type {
  GradientStrategy,
  HeldMatrix,
  MatrixGradients,
  MatrixPlan,
  MatrixSpec,
  PartitionAssignment,
  Placement,
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
 * A plan that cannot be made, in one line (`vpps plan` and `vpps train --engine vpps` print it as their refusal): an
 * offChip name that is not a matrix of the model, a master copy too large to address, an explicit rpw or ctasPerSm
 * at which the on-chip matrices do not fit.
 */
export class VppsPlanError extends UserError {}

/**
 * The registers per thread of a 256-thread CTA at `ctasPerSm`, less the interpreter's reserve and `headroom` (registers
 * kept free after a spill: codegen/spill-retry.ts). `widestChunks`: the
 * registers per lane per row of the widest matrix kept in registers. The reserve was measured with rows of at most
 * 32 chunks (1024 columns); a matrix routine holds per-row vectors of its matrix's width, so each chunk beyond 32
 * adds one register to the reserve (measured: a Tree-LSTM of hidden 1536, rows of 48 chunks, spilled 4 bytes with
 * the plain reserve).
 */
export function registerBudget(device: DeviceModel, ctasPerSm: 1 | 2, widestChunks = 0, headroom = 0): RegisterBudget {
  const limitPerThread = registersPerThread(device, THREADS_PER_CTA, ctasPerSm);
  const interpreterReserve = INTERPRETER_RESERVED_REGS + Math.max(0, widestChunks - WIDE_ROW_CHUNKS);
  return {
    limitPerThread,
    interpreterReserve,
    headroom,
    forParameters: Math.max(0, limitPerThread - interpreterReserve - headroom),
  };
}

/** Chunks per row up to which the interpreter's reserve was measured (registerBudget). */
export const WIDE_ROW_CHUNKS = 32;

/** Chunks per row of the widest matrix kept in registers (0 when none is). */
function widestOnChip(matrices: readonly MatrixSpec[], offChip: readonly boolean[]): number {
  let widest = 0;
  for (const [i, m] of matrices.entries()) if (!offChip[i]) widest = Math.max(widest, ceilDiv(m.cols, 32));
  return widest;
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
 * `offChip`: the matrices kept off chip (chooseOffChip), which take no registers; `headroom`: registers kept free.
 */
export function validRowsPerWarp(
  matrices: readonly MatrixSpec[],
  device: DeviceModel,
  ctasPerSm: 1 | 2,
  gradients: GradientStrategy | "auto" = "auto",
  offChip: readonly boolean[] = matrices.map(() => false),
  headroom = 0,
): number[] {
  validateMatrices(matrices);
  const budget = registerBudget(device, ctasPerSm, widestOnChip(matrices, offChip), headroom);
  const ctas = device.smCount * ctasPerSm;
  if (weightRegistersAtLeast(matrices, ctas, 1, offChip) > budget.forParameters) return [];
  const finest = placeGradients(matrices, deal(matrices, ctas, 1, [], offChip), budget.forParameters, gradients);
  if (finest === undefined) return [];
  const valid: number[] = [1];
  for (let rpw = 2; rpw <= MAX_ROWS_PER_WARP; rpw++) {
    if (weightRegistersAtLeast(matrices, ctas, rpw, offChip) > budget.forParameters) continue;
    const d = deal(matrices, ctas, rpw, [], offChip);
    if (!keepsCtasBusy(d)) continue;
    const placed = placeGradients(matrices, d, budget.forParameters, gradients);
    if (placed !== undefined && finest.registerGrad.every((r, i) => !r || placed.registerGrad[i])) valid.push(rpw);
  }
  return valid;
}

/** Which matrices stay off chip, and why each matrix lives where it does (chooseOffChip). */
export interface OffChipChoice {
  readonly offChip: readonly boolean[];
  readonly reasons: readonly string[];
}

/**
 * The matrices forced off chip by `offChip` (names or "all"): a name that is not a plan matrix is refused in one
 * line naming it and the valid names.
 */
export function forcedOffChip(matrices: readonly MatrixSpec[], offChip: readonly string[] | "all" = []): boolean[] {
  if (offChip === "all") return matrices.map(() => true);
  const names = matrices.map((m) => m.name);
  for (const name of offChip) {
    if (!names.includes(name)) {
      throw new VppsPlanError(
        `VPPS: offChip names '${name}', which is not a weight matrix of this model; the matrices are ` +
          `${names.join(", ")} (or "all")`,
      );
    }
  }
  return matrices.map((m) => offChip.includes(m.name));
}

/** Registers per thread a matrix takes at (ctas, rpw): its weights, and its gradient when `withGradient`. */
function registersPerThreadOf(m: MatrixSpec, ctas: number, rpw: number, withGradient: boolean): number {
  const weights = weightRegistersAtLeast([m], ctas, rpw);
  return withGradient ? 2 * weights : weights;
}

/**
 * The matrices kept off chip at (`ctasPerSm`, `rpw`): those the options force, plus the fewest others without which
 * the rest does not fit in registers under the present rules (the gradient option; "auto" moves gradients to the
 * GEMM strategy before a matrix goes off chip). Greedy, costliest in registers first, until the rest fits; then each
 * chosen matrix, costliest first, comes back on chip if the rest still fits with it. Every matrix gets the reason
 * for its placement (`vpps plan` prints them).
 */
export function chooseOffChip(
  matrices: readonly MatrixSpec[],
  device: DeviceModel,
  options: {
    gradients?: GradientStrategy | "auto";
    offChip?: readonly string[] | "all";
    ctasPerSm?: 1 | 2;
    rowsPerWarp?: number;
    headroom?: number;
  } = {},
): OffChipChoice {
  validateMatrices(matrices);
  const gradients = options.gradients ?? "auto";
  const ctasPerSm = options.ctasPerSm ?? 1;
  const rpw = options.rowsPerWarp ?? 1;
  const headroom = options.headroom ?? 0;
  const ctas = device.smCount * ctasPerSm;
  const forced = forcedOffChip(matrices, options.offChip);
  const fits = (off: readonly boolean[]) => {
    const budget = registerBudget(device, ctasPerSm, widestOnChip(matrices, off), headroom);
    return (
      weightRegistersAtLeast(matrices, ctas, rpw, off) <= budget.forParameters &&
      placeGradients(matrices, deal(matrices, ctas, rpw, [], off), budget.forParameters, gradients) !== undefined
    );
  };
  const off = forced.slice();
  const cost = (i: number) => registersPerThreadOf(matrices[i]!, ctas, rpw, gradients === "registers");
  const byCost = matrices.map((_, i) => i).sort((a, b) => cost(b) - cost(a) || a - b);
  const chosen: number[] = [];
  for (const i of byCost) {
    if (fits(off)) break;
    if (off[i]) continue;
    off[i] = true;
    chosen.push(i);
  }
  // a matrix taken early may not be needed once later ones are off chip
  for (const i of chosen) {
    off[i] = false;
    if (!fits(off)) off[i] = true;
  }
  const where = `${device.name} at ${ctasPerSm} CTA(s)/SM and ${rpw} row(s) per warp`;
  const reasons = matrices.map((_, i) => {
    if (forced[i]) return options.offChip === "all" ? "off chip: forced (offChip all)" : "off chip: forced (offChip)";
    if (!off[i]) return "registers: fits";
    const back = off.map((o, k) => o && k !== i);
    const budget = registerBudget(device, ctasPerSm, widestOnChip(matrices, back), headroom);
    const need =
      weightRegistersAtLeast(matrices, ctas, rpw, back) +
      (gradients === "registers" ? weightRegistersAtLeast(matrices, ctas, rpw, back) : 0);
    const what = gradients === "registers" ? "weights and gradients" : "weights";
    return (
      `off chip: needed for the rest to fit (with it in registers the ${what} take at least ${need} ` +
      `registers/thread; the budget is ${budget.forParameters} on ${where})`
    );
  });
  return { offChip: off, reasons };
}

/** The most floats of master copy the tile instructions can address (32-bit offsets). */
const MAX_MASTER_FLOATS = 2 ** 32;

/**
 * Plans the distribution of `matrices` over the registers of `device`. Matrices that do not fit stay off chip
 * (chooseOffChip): no model is refused for its registers. A model is refused, in one line, only when its master
 * copy is too large for the tile instructions' 32-bit offsets, or when an explicit rowsPerWarp is invalid.
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
  checkMasterSize(matrices);
  const choice = chooseOffChip(matrices, device, {
    gradients,
    headroom,
    ...(options.offChip !== undefined ? { offChip: options.offChip } : {}),
    ...(options.ctasPerSm !== undefined ? { ctasPerSm: options.ctasPerSm } : {}),
    ...(options.rowsPerWarp !== undefined ? { rowsPerWarp: options.rowsPerWarp } : {}),
  });
  return planWith(matrices, device, options, choice);
}

/** Refuses a model whose master copy the tile instructions cannot address (one line: the size and the limit). */
function checkMasterSize(matrices: readonly MatrixSpec[]): void {
  const floats = matrices.reduce((n, m) => n + ceilDiv(m.rows * m.cols, 32) * 32, 0);
  if (floats >= MAX_MASTER_FLOATS) {
    throw new VppsPlanError(
      `VPPS: the model's weight matrices hold ${floats} floats, more than the ${MAX_MASTER_FLOATS} (2^32) that ` +
        "the kernel's 32-bit offsets address; choose smaller hidden or embedding sizes",
    );
  }
}

/** The plan of one (ctasPerSm, rpw) with the off-chip matrices of `choice`. */
function planWith(
  matrices: readonly MatrixSpec[],
  device: DeviceModel,
  options: PlanOptions,
  choice: OffChipChoice,
): VppsPlan {
  const gradients = options.gradients ?? "auto";
  const headroom = options.headroom ?? 0;
  const off = choice.offChip;
  const ctasPerSm = options.ctasPerSm ?? chooseCtasPerSm(matrices, device, gradients, off, headroom);
  const budget = registerBudget(device, ctasPerSm, widestOnChip(matrices, off), headroom);
  const ctas = device.smCount * ctasPerSm;
  const valid = validRowsPerWarp(matrices, device, ctasPerSm, gradients, off, headroom);
  const rpw = options.rowsPerWarp ?? valid[0] ?? 1;
  const fitsAtAll = weightRegistersAtLeast(matrices, ctas, rpw, off) <= budget.forParameters;
  const d = deal(matrices, ctas, rpw, [], off);
  const placed = fitsAtAll ? placeGradients(matrices, d, budget.forParameters, gradients) : undefined;
  if (placed === undefined) {
    throw new VppsPlanError(
      `VPPS: the matrices kept in registers do not fit ${device.name} at ${ctasPerSm} CTA(s)/SM and ${rpw} row(s) ` +
        `per warp with gradients ${gradients}; leave rowsPerWarp and ctasPerSm to the planner, or keep more ` +
        `matrices off chip (offChip)`,
    );
  }
  if (options.transposed !== true)
    return buildPlan(matrices, device, ctasPerSm, budget, d, placed, valid, choice.reasons);
  const withCopies = addTransposed(matrices, d, placed, budget.limitPerThread - headroom);
  return buildPlan(
    matrices,
    device,
    ctasPerSm,
    budget,
    withCopies.deal,
    { ...placed, ...withCopies },
    valid,
    choice.reasons,
  );
}

/** Two CTAs per SM expose more parallelism but halve the registers; take it only when everything still fits. */
function chooseCtasPerSm(
  matrices: readonly MatrixSpec[],
  device: DeviceModel,
  gradients: GradientStrategy | "auto",
  offChip: readonly boolean[],
  headroom = 0,
): 1 | 2 {
  const budget = registerBudget(device, 2, widestOnChip(matrices, offChip), headroom);
  const ctas = device.smCount * 2;
  if (weightRegistersAtLeast(matrices, ctas, 1, offChip) > budget.forParameters) return 1;
  const placed = placeGradients(matrices, deal(matrices, ctas, 1, [], offChip), budget.forParameters, gradients);
  const allInRegisters =
    placed !== undefined && (gradients === "gemm" || placed.registerGrad.every((r, i) => r || offChip[i]));
  return allInRegisters ? 2 : 1;
}

/**
 * Every plan worth compiling for a model: each ctasPerSm in which it fits, each valid rpw there, all with the
 * off-chip matrices chosen at one CTA per SM and one row per warp (the most registers), so that every variant
 * keeps the same matrices off chip.
 */
export function enumeratePlans(
  matrices: readonly MatrixSpec[],
  device: DeviceModel,
  gradients: GradientStrategy | "auto" = "auto",
  transposed = false,
  offChip?: readonly string[] | "all",
): VppsPlan[] {
  validateMatrices(matrices);
  checkMasterSize(matrices);
  const choice = chooseOffChip(matrices, device, { gradients, ...(offChip !== undefined ? { offChip } : {}) });
  const plans: VppsPlan[] = [];
  for (const ctasPerSm of [1, 2] as const) {
    for (const rowsPerWarp of validRowsPerWarp(matrices, device, ctasPerSm, gradients, choice.offChip)) {
      plans.push(planWith(matrices, device, { ctasPerSm, rowsPerWarp, gradients, transposed }, choice));
    }
  }
  return plans;
}
