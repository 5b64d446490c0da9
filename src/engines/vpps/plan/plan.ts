/**
 * Weight distribution for VPPS: which persistent CTA holds which rows of which weight matrix in its registers.
 *
 * Vocabulary (the paper's, §III-A1):
 * - A CTA of 256 threads (8 warps) is one virtual processor; the grid has `smCount * ctasPerSm` of them.
 * - A warp holds whole rows; a row of length L is spread over the 32 lanes, `ceil(L / 32)` registers ("chunks") per
 *   lane per row, lane l holding columns l, l + 32, l + 64, ...
 * - A partition is `rowsPerWarp` (rpw) rows per warp, i.e. `8 * rpw` consecutive rows of one matrix per CTA.
 * - Partitions of all matrices form one list that is dealt round-robin over the CTAs: partition k goes to CTA
 *   `k % ctas`, register slot `floor(k / ctas)`. Every CTA therefore holds the same number of partitions, give or
 *   take one, and every matrix is spread over as many CTAs as it has partitions.
 * - A slot is a register array that exists in every CTA (the kernel is one program); in CTAs where slot j holds a
 *   narrower matrix than the widest one dealt to slot j elsewhere, the extra registers stay unused. Sorting the
 *   matrices by row width before dealing keeps such mixed slots rare.
 */
import type { DeviceModel } from "../../../cuda/hw/device-model.js";

/** A 2-D weight matrix the kernel keeps on chip (biases, vectors and lookup tables stay in global memory). */
export interface MatrixSpec {
  readonly name: string;
  readonly rows: number;
  readonly cols: number;
}

/** Where a matrix's gradient is formed: in registers (outer products in the kernel) or by one GEMM after it. */
export type GradientStrategy = "registers" | "gemm";

export interface PlanOptions {
  /** Persistent CTAs per SM; default: 2 when the whole model (with gradients) fits that way, else 1. */
  readonly ctasPerSm?: 1 | 2;
  /** Rows per warp per partition; default: the smallest valid value (a profile of real batches may pick another). */
  readonly rowsPerWarp?: number;
  /** Gradient placement; `auto` keeps gradients in registers where they fit, largest matrices go to GEMM first. */
  readonly gradients?: GradientStrategy | "auto";
  /**
   * Keep a transposed copy of register-gradient matrices where registers allow (default false; see `transposed`
   * below): short backward lists then form x̄ = Wᵀȳ as a forward-style product on the copy's holders.
   */
  readonly transposed?: boolean;
}

/**
 * Registers per thread a plan keeps free when it adds transposed copies: the interpreter's reserve measured for the
 * unstaged routines (64) plus 32 for the staged list routines, grouped waits (kernel-partition.ts stagingHeadroom
 * wants 24) and load.t's loads in flight (measured: 24 left a Tree-LSTM H=512 plan spilling). A copy that would take
 * the kernel below that is not added: it would slow every list down.
 */
export const TRANSPOSED_RESERVE = 64 + 32;

/** Threads per persistent CTA: 8 warps, enough for one CTA to use the whole register file (paper §III-A1). */
export const THREADS_PER_CTA = 256;
export const WARPS_PER_CTA = THREADS_PER_CTA / 32;

/**
 * Registers per thread kept free of parameters for the interpreter loop, addressing, the operand-list walk of the
 * matrix instructions, the vectors a matrix routine holds while multiplying (x chunks, ȳ rows, 8 partial sums) and
 * ptxas' temporaries. Measured, not guessed: for Tree-LSTM kernels (H 256 and 512, rpw 1-4, gradients in registers
 * or by GEMM, 1-4 slots) the smallest `__maxnreg__` that compiles without spills is the parameter registers plus 49
 * to 64 (nvcc 13.0, sm_90, `-Xptxas -v`; the most with four slots of register gradients); 72 keeps a margin, and
 * test/vpps-codegen.test.ts checks zero spills on every plan the planner offers.
 */
export const INTERPRETER_RESERVED_REGS = 72;

/** Larger rpw only makes the load granularity coarser; the paper found six or fewer useful values. */
export const MAX_ROWS_PER_WARP = 8;

/**
 * An rpw is worth compiling only while at least this fraction of the CTAs holds a partition; beyond that, growing
 * rpw idles processors without saving registers.
 */
export const MIN_BUSY_CTA_FRACTION = 0.5;

/** One partition: `8 * rpw` consecutive rows of one matrix, held by one CTA in one register slot. */
export interface PartitionAssignment {
  /** Index of the matrix in `VppsPlan.matrices`. */
  readonly matrix: number;
  /** Index of this partition within its matrix (partition p holds rows from `p * 8 * rpw`). */
  readonly partition: number;
  /** Position in the global round-robin list. */
  readonly globalPartition: number;
  readonly cta: number;
  readonly slot: number;
  /** Rows `[firstRow, firstRow + rowCount)` of the matrix; the last partition of a matrix may be short. */
  readonly firstRow: number;
  readonly rowCount: number;
  /** Per warp, the rows it holds (`rowCount` 0 for warps past the end of a short partition). */
  readonly warps: readonly { readonly warp: number; readonly firstRow: number; readonly rowCount: number }[];
}

/** Rows of a matrix dealt over the CTAs' register slots: a plan matrix, or a transposed copy of one. */
export interface HeldMatrix {
  /** The instruction's matrix number n (plan matrices first, then the transposed copies). */
  readonly index: number;
  readonly name: string;
  readonly rows: number;
  readonly cols: number;
  /** Registers per lane per row: `ceil(cols / 32)`. */
  readonly chunks: number;
  /** First partition in the round-robin list and how many there are. */
  readonly firstPartition: number;
  readonly partitionCount: number;
  /** Register slots that hold rows of this matrix in some CTA. */
  readonly slots: readonly number[];
  /** Offset in floats of the row-major master copy (a transposed copy: its source's, read column by column). */
  readonly masterOffset: number;
  readonly partitions: readonly PartitionAssignment[];
}

/**
 * A read-only transposed copy Wᵀ of a register-gradient plan matrix W (rows = W's columns), loaded from W's master
 * copy by the holders' `load.t` where their backward work begins, and never updated (the next launch loads the
 * updated W again). Its holders run `matvec.acc` lists (x̄ += Wᵀȳ) for short backward lists of W, whose holders
 * then only accumulate W̄, after the backward pass — off the critical path.
 */
export interface TransposedPlan extends HeldMatrix {
  /** Index of W in `VppsPlan.matrices`. */
  readonly source: number;
}

export interface MatrixPlan extends HeldMatrix {
  readonly gradients: GradientStrategy;
}

export interface SlotLayout {
  readonly index: number;
  /** Matrices dealt to this slot in some CTA, widest first (matrix numbers: transposed copies after the plan's). */
  readonly matrices: readonly number[];
  /** Chunks per row of the widest matrix in the slot: the slot's register array is `rpw x chunks`. */
  readonly chunks: number;
  readonly weightRegs: number;
  /** Chunks per row of the widest matrix in the slot whose gradient lives in registers (0 when none does). */
  readonly gradientChunks: number;
  readonly gradientRegs: number;
}

export interface RegisterBudget {
  /** What one thread may use: `min(maxRegsPerThread, regsPerSm / (256 * ctasPerSm))`. */
  readonly limitPerThread: number;
  readonly interpreterReserve: number;
  /** `limitPerThread - interpreterReserve`: what weights and gradients may fill. */
  readonly forParameters: number;
}

export interface VppsPlan {
  readonly device: DeviceModel;
  readonly ctasPerSm: 1 | 2;
  readonly rowsPerWarp: number;
  /** Number of persistent CTAs (the grid): `smCount * ctasPerSm`. */
  readonly ctas: number;
  readonly threadsPerCta: number;
  readonly budget: RegisterBudget;
  /** Registers per thread holding weights, and gradients, over all slots. */
  readonly weightRegs: number;
  readonly gradientRegs: number;
  /** rpw values worth compiling for this `ctasPerSm` and gradient option (fit, and keep enough CTAs busy). */
  readonly validRowsPerWarp: readonly number[];
  readonly matrices: readonly MatrixPlan[];
  /** Transposed copies (matrix numbers `matrices.length + k`), dealt after every plan matrix; empty when none fit. */
  readonly transposed: readonly TransposedPlan[];
  readonly slots: readonly SlotLayout[];
  /** Floats in the parameter buffer (master copies of all matrices, each aligned to 32 floats). */
  readonly masterFloats: number;
}

const ceilDiv = (a: number, b: number): number => Math.ceil(a / b);

export function registerBudget(device: DeviceModel, ctasPerSm: 1 | 2): RegisterBudget {
  const limitPerThread = Math.min(
    device.maxRegsPerThread,
    Math.floor(device.regsPerSm / (THREADS_PER_CTA * ctasPerSm)),
  );
  return {
    limitPerThread,
    interpreterReserve: INTERPRETER_RESERVED_REGS,
    forParameters: Math.max(0, limitPerThread - INTERPRETER_RESERVED_REGS),
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

/** The round-robin deal of one (ctasPerSm, rpw) before gradients are placed: pure geometry. */
interface Deal {
  readonly ctas: number;
  readonly rpw: number;
  readonly order: readonly number[];
  /** Per matrix number (plan matrices, then the transposed copies `transposed`): first partition and count. */
  readonly firstPartition: readonly number[];
  readonly partitionCount: readonly number[];
  readonly totalPartitions: number;
  readonly slotMatrices: readonly (readonly number[])[];
  /** Sources of the transposed copies, in the order of their matrix numbers. */
  readonly transposed: readonly number[];
}

/**
 * Deals the plan matrices, then transposed copies of the matrices `transposed` (after all of them, so that a copy
 * never moves a plan matrix to other CTAs: plans with and without copies hold W on the same processors).
 */
function deal(matrices: readonly MatrixSpec[], ctas: number, rpw: number, transposed: readonly number[] = []): Deal {
  const chunks = matrices.map((m) => ceilDiv(m.cols, 32));
  // Widest rows first (stable), so that slots shared by two matrices at a boundary rarely mix very different widths.
  const order = matrices.map((_, i) => i).sort((a, b) => chunks[b]! - chunks[a]! || a - b);
  const tChunks = transposed.map((i) => ceilDiv(matrices[i]!.rows, 32));
  // Copies narrowest first: the first ones fill the tail of the plan matrices' last slot, which they must not widen.
  const tOrder = transposed.map((_, k) => k).sort((a, b) => tChunks[a]! - tChunks[b]! || a - b);
  const rowsPerPartition = WARPS_PER_CTA * rpw;
  const all = matrices.length + transposed.length;
  const firstPartition = new Array<number>(all).fill(0);
  const partitionCount = new Array<number>(all).fill(0);
  let next = 0;
  const dealt: number[] = [];
  const place = (i: number, rows: number) => {
    firstPartition[i] = next;
    partitionCount[i] = ceilDiv(rows, rowsPerPartition);
    next += partitionCount[i]!;
    dealt.push(i);
  };
  for (const i of order) place(i, matrices[i]!.rows);
  for (const k of tOrder) place(matrices.length + k, matrices[transposed[k]!]!.cols);
  const slotCount = ceilDiv(next, ctas);
  const slotMatrices: number[][] = Array.from({ length: slotCount }, () => []);
  for (const i of dealt) {
    const first = Math.floor(firstPartition[i]! / ctas);
    const last = Math.floor((firstPartition[i]! + partitionCount[i]! - 1) / ctas);
    for (let s = first; s <= last; s++) slotMatrices[s]!.push(i);
  }
  return { ctas, rpw, order, firstPartition, partitionCount, totalPartitions: next, slotMatrices, transposed };
}

/** Registers per lane per row of every matrix number of a deal (plan matrices, then transposed copies). */
function chunksOf(matrices: readonly MatrixSpec[], d: Deal): number[] {
  return [...matrices.map((m) => ceilDiv(m.cols, 32)), ...d.transposed.map((i) => ceilDiv(matrices[i]!.rows, 32))];
}

/** Registers per thread of a deal, given which matrices keep their gradient in registers (copies never do). */
function registersOf(d: Deal, chunks: readonly number[], registerGrad: readonly boolean[]) {
  let weightRegs = 0;
  let gradientRegs = 0;
  for (const ms of d.slotMatrices) {
    weightRegs += d.rpw * Math.max(0, ...ms.map((i) => chunks[i]!));
    gradientRegs += d.rpw * Math.max(0, ...ms.filter((i) => registerGrad[i] === true).map((i) => chunks[i]!));
  }
  return { weightRegs, gradientRegs };
}

/**
 * Transposed copies for a deal whose gradients are placed: register-gradient matrices, largest first, each kept if
 * the plan still leaves TRANSPOSED_RESERVE registers per thread free (and at most 32 matrix numbers in all: the
 * scheduler's barrier masks). Returns the deal with the copies and its registers.
 */
function addTransposed(
  matrices: readonly MatrixSpec[],
  d: Deal,
  placed: { registerGrad: boolean[]; weightRegs: number; gradientRegs: number },
  limitPerThread: number,
): { deal: Deal; weightRegs: number; gradientRegs: number } {
  const bySize = matrices
    .map((_, i) => i)
    .filter((i) => placed.registerGrad[i])
    .sort((a, b) => sizeOf(matrices[b]!) - sizeOf(matrices[a]!) || a - b);
  let best = { deal: d, weightRegs: placed.weightRegs, gradientRegs: placed.gradientRegs };
  const chosen: number[] = [];
  for (const i of bySize) {
    if (matrices.length + chosen.length >= 32) break;
    const trial = deal(
      matrices,
      d.ctas,
      d.rpw,
      [...chosen, i].sort((a, b) => a - b),
    );
    const regs = registersOf(trial, chunksOf(matrices, trial), placed.registerGrad);
    if (limitPerThread - regs.weightRegs - regs.gradientRegs < TRANSPOSED_RESERVE) continue;
    chosen.push(i);
    best = { deal: trial, ...regs };
  }
  return best;
}

/**
 * Places gradients for one deal: `registers` demands all, `gemm` none, `auto` starts from all and moves the largest
 * matrices to the GEMM strategy until weights and gradients fit. Returns undefined when even the weights alone do not.
 */
function placeGradients(
  matrices: readonly MatrixSpec[],
  d: Deal,
  forParameters: number,
  mode: GradientStrategy | "auto",
): { registerGrad: boolean[]; weightRegs: number; gradientRegs: number } | undefined {
  const chunks = matrices.map((m) => ceilDiv(m.cols, 32));
  const registerGrad = matrices.map(() => mode !== "gemm");
  let regs = registersOf(d, chunks, registerGrad);
  if (regs.weightRegs > forParameters) return undefined;
  if (mode === "auto") {
    const bySize = matrices.map((_, i) => i).sort((a, b) => sizeOf(matrices[b]!) - sizeOf(matrices[a]!) || a - b);
    for (const i of bySize) {
      if (regs.weightRegs + regs.gradientRegs <= forParameters) break;
      registerGrad[i] = false;
      regs = registersOf(d, chunks, registerGrad);
    }
  }
  if (regs.weightRegs + regs.gradientRegs > forParameters) return undefined;
  return { registerGrad, ...regs };
}

const sizeOf = (m: MatrixSpec): number => m.rows * m.cols;

/** Does this rpw keep enough CTAs busy to be worth compiling? rpw = 1 always is (it is the finest deal). */
function keepsCtasBusy(d: Deal): boolean {
  return d.rpw === 1 || d.totalPartitions >= d.ctas * MIN_BUSY_CTA_FRACTION;
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
): number[] {
  validateMatrices(matrices);
  const budget = registerBudget(device, ctasPerSm);
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
  const ctasPerSm = options.ctasPerSm ?? chooseCtasPerSm(matrices, device, gradients);
  const budget = registerBudget(device, ctasPerSm);
  const ctas = device.smCount * ctasPerSm;
  const valid = validRowsPerWarp(matrices, device, ctasPerSm, gradients);
  const rpw = options.rowsPerWarp ?? valid[0] ?? 1;
  const d = deal(matrices, ctas, rpw);
  const placed = placeGradients(matrices, d, budget.forParameters, gradients);
  if (placed === undefined) throw new Error(refusal(matrices, device, ctasPerSm, rpw, gradients));
  if (options.transposed !== true) return buildPlan(matrices, device, ctasPerSm, budget, d, placed, valid);
  const withCopies = addTransposed(matrices, d, placed, budget.limitPerThread);
  return buildPlan(matrices, device, ctasPerSm, budget, withCopies.deal, { ...placed, ...withCopies }, valid);
}

/** Two CTAs per SM expose more parallelism but halve the registers; take it only when everything still fits. */
function chooseCtasPerSm(
  matrices: readonly MatrixSpec[],
  device: DeviceModel,
  gradients: GradientStrategy | "auto",
): 1 | 2 {
  const budget = registerBudget(device, 2);
  const placed = placeGradients(matrices, deal(matrices, device.smCount * 2, 1), budget.forParameters, gradients);
  const allInRegisters = placed !== undefined && (gradients === "gemm" || placed.registerGrad.every((r) => r));
  return allInRegisters ? 2 : 1;
}

function refusal(
  matrices: readonly MatrixSpec[],
  device: DeviceModel,
  ctasPerSm: 1 | 2,
  rpw: number,
  gradients: GradientStrategy | "auto",
): string {
  const budget = registerBudget(device, ctasPerSm);
  const ctas = device.smCount * ctasPerSm;
  const d = deal(matrices, ctas, rpw);
  const chunks = matrices.map((m) => ceilDiv(m.cols, 32));
  const allGrad = matrices.map(() => gradients === "registers");
  const need = registersOf(d, chunks, allGrad);
  const needText =
    gradients === "registers"
      ? `${need.weightRegs + need.gradientRegs} registers per thread (${need.weightRegs} for weights + ${need.gradientRegs} for gradients)`
      : `${need.weightRegs} registers per thread for weights alone`;
  // Which of the largest matrices would have to stay in global memory for the rest to fit?
  const bySize = matrices.map((_, i) => i).sort((a, b) => sizeOf(matrices[b]!) - sizeOf(matrices[a]!) || a - b);
  const lines: string[] = [];
  let kept = matrices.slice();
  let fitsAfter = -1;
  for (const [k, i] of bySize.entries()) {
    const m = matrices[i]!;
    const perThread = ceilDiv(m.rows * ceilDiv(m.cols, 32) * 32, ctas * THREADS_PER_CTA);
    lines.push(`  ${m.name} [${m.rows}x${m.cols}] ~${perThread} registers/thread`);
    kept = kept.filter((x) => x !== m);
    if (fitsAfter < 0 && kept.length > 0) {
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
    `(${budget.limitPerThread} per thread minus ${budget.interpreterReserve} reserved for the interpreter).\n` +
    `Matrices that could stay off chip, largest first:\n${lines.join("\n")}\n(${advice})`
  );
}

function buildPlan(
  matrices: readonly MatrixSpec[],
  device: DeviceModel,
  ctasPerSm: 1 | 2,
  budget: RegisterBudget,
  d: Deal,
  placed: { registerGrad: boolean[]; weightRegs: number; gradientRegs: number },
  valid: readonly number[],
): VppsPlan {
  const rowsPerPartition = WARPS_PER_CTA * d.rpw;
  let masterFloats = 0;
  const masterOffsets = matrices.map((m) => {
    const offset = masterFloats;
    masterFloats += ceilDiv(m.rows * m.cols, 32) * 32; // 128-byte aligned rows of loads
    return offset;
  });
  const partitionsOf = (i: number, rows: number): PartitionAssignment[] => {
    const first = d.firstPartition[i]!;
    const partitions: PartitionAssignment[] = [];
    for (let p = 0; p < d.partitionCount[i]!; p++) {
      const k = first + p;
      const firstRow = p * rowsPerPartition;
      const rowCount = Math.min(rowsPerPartition, rows - firstRow);
      const warps = Array.from({ length: WARPS_PER_CTA }, (_, w) => {
        const wFirst = firstRow + w * d.rpw;
        return { warp: w, firstRow: wFirst, rowCount: Math.max(0, Math.min(d.rpw, rows - wFirst)) };
      });
      partitions.push({
        matrix: i,
        partition: p,
        globalPartition: k,
        cta: k % d.ctas,
        slot: Math.floor(k / d.ctas),
        firstRow,
        rowCount,
        warps,
      });
    }
    return partitions;
  };
  const held = (i: number, name: string, rows: number, cols: number, masterOffset: number): HeldMatrix => {
    const partitions = partitionsOf(i, rows);
    return {
      index: i,
      name,
      rows,
      cols,
      chunks: ceilDiv(cols, 32),
      firstPartition: d.firstPartition[i]!,
      partitionCount: d.partitionCount[i]!,
      slots: [...new Set(partitions.map((p) => p.slot))],
      masterOffset,
      partitions,
    };
  };
  const matrixPlans: MatrixPlan[] = matrices.map((m, i) => ({
    ...held(i, m.name, m.rows, m.cols, masterOffsets[i]!),
    gradients: placed.registerGrad[i] ? "registers" : "gemm",
  }));
  const transposed: TransposedPlan[] = d.transposed.map((src, k) => {
    const m = matrices[src]!;
    return { ...held(matrices.length + k, `${m.name}.T`, m.cols, m.rows, masterOffsets[src]!), source: src };
  });
  const chunks = [...matrixPlans, ...transposed].map((m) => m.chunks);
  const slots: SlotLayout[] = d.slotMatrices.map((ms, s) => {
    const width = Math.max(...ms.map((i) => chunks[i]!));
    const gradientChunks = Math.max(0, ...ms.filter((i) => placed.registerGrad[i] === true).map((i) => chunks[i]!));
    return {
      index: s,
      matrices: ms,
      chunks: width,
      weightRegs: d.rpw * width,
      gradientChunks,
      gradientRegs: d.rpw * gradientChunks,
    };
  });
  return {
    device,
    ctasPerSm,
    rowsPerWarp: d.rpw,
    ctas: d.ctas,
    threadsPerCta: THREADS_PER_CTA,
    budget,
    weightRegs: placed.weightRegs,
    gradientRegs: placed.gradientRegs,
    validRowsPerWarp: valid,
    matrices: matrixPlans,
    transposed,
    slots,
    masterFloats,
  };
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
