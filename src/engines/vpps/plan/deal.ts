/**
 * The geometry of a plan: the round-robin deal of partitions over the CTAs' register slots (plan matrices, then
 * transposed copies), the registers a deal takes, where gradients go so that it fits, and the VppsPlan built from
 * a deal. plan.ts chooses among deals; this file only computes them.
 */
import type { DeviceModel } from "../../../cuda/hw/device-model.js";
import {
  type GradientStrategy,
  type HeldMatrix,
  type MatrixPlan,
  type MatrixSpec,
  MIN_BUSY_CTA_FRACTION,
  type PartitionAssignment,
  type RegisterBudget,
  type SlotLayout,
  THREADS_PER_CTA,
  TRANSPOSED_RESERVE,
  type TransposedPlan,
  type VppsPlan,
  WARPS_PER_CTA,
} from "./types.js";

export const ceilDiv = (a: number, b: number): number => Math.ceil(a / b);

/** The round-robin deal of one (ctasPerSm, rpw) before gradients are placed: pure geometry. */
export interface Deal {
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
  /** Per plan matrix: true when it stays off chip (no partitions: partitionCount 0, in no slot). */
  readonly offChip: readonly boolean[];
}

/**
 * Deals the plan matrices, then transposed copies of the matrices `transposed` (after all of them, so that a copy
 * never moves a plan matrix to other CTAs: plans with and without copies hold W on the same processors). A matrix
 * with `offChip[i]` true gets no partition.
 */
export function deal(
  matrices: readonly MatrixSpec[],
  ctas: number,
  rpw: number,
  transposed: readonly number[] = [],
  offChip: readonly boolean[] = matrices.map(() => false),
): Deal {
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
  for (const i of order) if (!offChip[i]) place(i, matrices[i]!.rows);
  for (const k of tOrder) place(matrices.length + k, matrices[transposed[k]!]!.cols);
  const slotCount = ceilDiv(next, ctas);
  const slotMatrices: number[][] = Array.from({ length: slotCount }, () => []);
  for (const i of dealt) {
    const first = Math.floor(firstPartition[i]! / ctas);
    const last = Math.floor((firstPartition[i]! + partitionCount[i]! - 1) / ctas);
    for (let s = first; s <= last; s++) slotMatrices[s]!.push(i);
  }
  return { ctas, rpw, order, firstPartition, partitionCount, totalPartitions: next, slotMatrices, transposed, offChip };
}

/**
 * A lower bound on the weight registers per thread of `deal(matrices, ctas, rpw)`, from arithmetic alone: each slot
 * costs its widest partition's `rpw * chunks`, at least the mean over the `ctas` partitions it holds. A model far too
 * large is refused from it without dealing (a deal's arrays grow with the rows: `vpps plan --hidden 100000000`).
 */
export function weightRegistersAtLeast(
  matrices: readonly MatrixSpec[],
  ctas: number,
  rpw: number,
  offChip?: readonly boolean[],
): number {
  let sum = 0;
  for (const [i, m] of matrices.entries()) {
    if (offChip?.[i] !== true) sum += ceilDiv(m.rows, WARPS_PER_CTA * rpw) * rpw * ceilDiv(m.cols, 32);
  }
  return Math.ceil(sum / ctas);
}

/** Registers per lane per row of every matrix number of a deal (plan matrices, then transposed copies). */
export function chunksOf(matrices: readonly MatrixSpec[], d: Deal): number[] {
  return [...matrices.map((m) => ceilDiv(m.cols, 32)), ...d.transposed.map((i) => ceilDiv(matrices[i]!.rows, 32))];
}

/** Registers per thread of a deal, given which matrices keep their gradient in registers (copies never do). */
export function registersOf(d: Deal, chunks: readonly number[], registerGrad: readonly boolean[]) {
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
export function addTransposed(
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
      d.offChip,
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
export function placeGradients(
  matrices: readonly MatrixSpec[],
  d: Deal,
  forParameters: number,
  mode: GradientStrategy | "auto",
): { registerGrad: boolean[]; weightRegs: number; gradientRegs: number } | undefined {
  const chunks = matrices.map((m) => ceilDiv(m.cols, 32));
  // an off-chip matrix's gradient is in device memory (tile.wbar), never in registers or by GEMM
  const registerGrad = matrices.map((_, i) => mode !== "gemm" && !d.offChip[i]);
  let regs = registersOf(d, chunks, registerGrad);
  if (regs.weightRegs > forParameters) return undefined;
  if (mode === "auto") {
    const bySize = matrices.map((_, i) => i).sort((a, b) => sizeOf(matrices[b]!) - sizeOf(matrices[a]!) || a - b);
    for (const i of bySize) {
      if (regs.weightRegs + regs.gradientRegs <= forParameters) break;
      if (d.offChip[i]) continue;
      registerGrad[i] = false;
      regs = registersOf(d, chunks, registerGrad);
    }
  }
  if (regs.weightRegs + regs.gradientRegs > forParameters) return undefined;
  return { registerGrad, ...regs };
}

export const sizeOf = (m: MatrixSpec): number => m.rows * m.cols;

/** Does this rpw keep enough CTAs busy to be worth compiling? rpw = 1 always is (it is the finest deal). */
export function keepsCtasBusy(d: Deal): boolean {
  return d.rpw === 1 || d.totalPartitions >= d.ctas * MIN_BUSY_CTA_FRACTION;
}

export function buildPlan(
  matrices: readonly MatrixSpec[],
  device: DeviceModel,
  ctasPerSm: 1 | 2,
  budget: RegisterBudget,
  d: Deal,
  placed: { registerGrad: boolean[]; weightRegs: number; gradientRegs: number },
  valid: readonly number[],
  reasons: readonly string[],
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
    gradients: d.offChip[i] ? "device" : placed.registerGrad[i] ? "registers" : "gemm",
    placement: d.offChip[i] ? "off-chip" : "registers",
    placementReason: reasons[i]!,
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
    offChip: matrices.flatMap((_, i) => (d.offChip[i] ? [i] : [])),
    masterFloats,
  };
}
