/**
 * The pair format of a sparse persistent kernel: the arrays it loads into registers once, in the order each thread
 * loads them, built from W_hh and its mask for a plan (sparse.ts), and the inverse (for tests).
 *
 * The kernel's matrix is W_hh [G·H, H] forward, W_hhᵀ [H, G·H] backward: the backward's pairs come from the same mask,
 * transposed (row j of W_hhᵀ holds the kept (i, W[i][j]) of column j, i = g·H + unit). Thread i of CTA c holds, for
 * each of its rowsPerThread local rows r (row group ⌊i / t⌋, rows ⌊i / t⌋·rowsPerThread + r), piece i mod t of that
 * row's pairs in slots r·pairsPerPiece … (r+1)·pairsPerPiece − 1: in the naive order, the row's pairs in ascending
 * index, piece j = pairs j·pairsPerPiece …, then padding. A local row past the CTA's rows, a unit past H, and a
 * thread past rowGroups·t hold padding only.
 *
 * Padding is a pair of value 0; its index is 0 in the naive order, and any index (chosen for its bank) in the
 * bank-aware order. Either way it adds 0·h[index] = ±0 to the sum, which changes nothing unless h[index] is ±∞ or NaN.
 *
 * Arrays, slot s of thread i of CTA c (coalesced: consecutive threads load consecutive words):
 * - values: Float32Array, at (c·S + s)·NT + i (S = pairsPerThread, NT = threads);
 * - indices, 16-bit: Uint16Array, two per 32-bit word, word (c·⌈S/2⌉ + ⌊s/2⌋)·NT + i, low half the even slot
 *   (element 2·word + s mod 2, little-endian); 32-bit: Uint32Array at (c·S + s)·NT + i;
 * - padding: Uint8Array at (c·S + s)·NT + i, 1 for a padding pair (for tests and unpacking; the kernel does not load it).
 */
import { RandomStream } from "../../util/random.js";
import { gatesOf } from "../spec.js";
import type { SparseRnnKernelPlan, WideLoad } from "./sparse.js";

/** A sparse matrix by rows (CSR): row r's kept entries are index/value[start[r] … start[r+1]), index ascending. */
export interface SparseRows {
  readonly rows: number;
  readonly cols: number;
  readonly start: Uint32Array;
  readonly index: Uint32Array;
  readonly value: Float32Array;
}

/** The pairs of one kernel (a plan's kind) in the order its threads load them. */
export interface SparsePairLayout {
  readonly plan: SparseRnnKernelPlan;
  /** "bank-aware": each thread's pairs reordered for loads of `wideLoad` columns (sparse-banks.ts). */
  readonly order: "naive" | "bank-aware";
  readonly wideLoad: WideLoad | null;
  readonly values: Float32Array;
  readonly indices: Uint16Array | Uint32Array;
  readonly padding: Uint8Array;
  /**
   * Which local row each row slot holds, per CTA: row group g's piece r (slot g·rowsPerThread + r) holds local row
   * rowOrder[c·PR + slot] (PR = rowGroups·rowsPerThread). Absent: the identity (the naive layout). The balanced
   * bank-aware order permutes rows within a CTA (sparse-banks.ts); the kernels write a row's sum to its local row.
   */
  readonly rowOrder?: Int32Array;
}

/** The local row that row slot `slot` (row group · rowsPerThread + piece) of CTA `cta` holds. */
export function localRowOf(layout: SparsePairLayout, cta: number, slot: number): number {
  const { plan } = layout;
  return layout.rowOrder ? layout.rowOrder[cta * plan.rowGroups * plan.rowsPerThread + slot]! : slot;
}

/** The layout's row order as the kernels load it: [ctas][rowGroups·rowsPerThread], the identity where absent. */
export function rowOrderOf(layout: SparsePairLayout): Int32Array {
  const { plan } = layout;
  const pr = plan.rowGroups * plan.rowsPerThread;
  if (layout.rowOrder) return layout.rowOrder;
  return Int32Array.from({ length: plan.ctas * pr }, (_, e) => e % pr);
}

/** Where slot `slot` of thread `thread` of CTA `cta` is in `values` and `padding` (and `indices`, 32-bit). */
export function slotOffset(plan: SparseRnnKernelPlan, cta: number, slot: number, thread: number): number {
  return (cta * plan.pairsPerThread + slot) * plan.threads + thread;
}

/** Where that slot's index is in `indices` (16-bit: an element of the Uint16Array). */
export function indexOffset(plan: SparseRnnKernelPlan, cta: number, slot: number, thread: number): number {
  if (plan.indexBits === 32) return slotOffset(plan, cta, slot, thread);
  const words = Math.ceil(plan.pairsPerThread / 2);
  return 2 * ((cta * words + (slot >> 1)) * plan.threads + thread) + (slot & 1);
}

/** Empty arrays of a plan's layout (every slot padding, index 0). */
export function emptyPairArrays(plan: SparseRnnKernelPlan): {
  values: Float32Array;
  indices: Uint16Array | Uint32Array;
  padding: Uint8Array;
} {
  const slots = plan.ctas * plan.pairsPerThread * plan.threads;
  const indices =
    plan.indexBits === 16
      ? new Uint16Array(2 * plan.ctas * Math.ceil(plan.pairsPerThread / 2) * plan.threads)
      : new Uint32Array(slots);
  return { values: new Float32Array(slots), indices, padding: new Uint8Array(slots).fill(1) };
}

/** The CSR of a dense row-major matrix [rows, cols] and its mask (nonzero: kept). */
export function sparseRowsOf(weights: Float32Array, mask: Uint8Array, rows: number, cols: number): SparseRows {
  if (weights.length !== rows * cols || mask.length !== rows * cols) {
    throw new RangeError(
      `sparseRowsOf: weights and mask must have ${rows}·${cols} = ${rows * cols} elements; got ${weights.length} and ${mask.length}`,
    );
  }
  let nnz = 0;
  for (let i = 0; i < mask.length; i++) if (mask[i] !== 0) nnz++;
  const start = new Uint32Array(rows + 1);
  const index = new Uint32Array(nnz);
  const value = new Float32Array(nnz);
  let n = 0;
  for (let r = 0; r < rows; r++) {
    start[r] = n;
    for (let c = 0, o = r * cols; c < cols; c++, o++) {
      if (mask[o] !== 0) {
        index[n] = c;
        value[n++] = weights[o]!;
      }
    }
  }
  start[rows] = n;
  return { rows, cols, start, index, value };
}

/** The transpose, index ascending in every row (a counting sort by column). */
export function transposeSparseRows(m: SparseRows): SparseRows {
  const nnz = m.start[m.rows]!;
  const start = new Uint32Array(m.cols + 1);
  for (let e = 0; e < nnz; e++) start[m.index[e]! + 1]!++;
  for (let c = 0; c < m.cols; c++) start[c + 1]! += start[c]!;
  const fill = start.slice(0, m.cols);
  const index = new Uint32Array(nnz);
  const value = new Float32Array(nnz);
  for (let r = 0; r < m.rows; r++) {
    for (let e = m.start[r]!; e < m.start[r + 1]!; e++) {
      const at = fill[m.index[e]!]!++;
      index[at] = r;
      value[at] = m.value[e]!;
    }
  }
  return { rows: m.cols, cols: m.rows, start, index, value };
}

/**
 * A random row-balanced sparse matrix: `perRow` distinct columns per row, uniformly (partial Fisher–Yates per row),
 * values uniform in [−1, 1); a pure function of the seed. For measuring layouts without a pruned layer.
 */
export function randomRowBalancedRows(rows: number, cols: number, perRow: number, seed: number): SparseRows {
  if (!Number.isInteger(perRow) || perRow < 0 || perRow > cols) {
    throw new RangeError(`randomRowBalancedRows: perRow must be an integer in 0…${cols}; got ${perRow}`);
  }
  const rng = new RandomStream(seed);
  const perm = new Uint32Array(cols);
  for (let c = 0; c < cols; c++) perm[c] = c;
  const start = new Uint32Array(rows + 1);
  const index = new Uint32Array(rows * perRow);
  const value = new Float32Array(rows * perRow);
  for (let r = 0; r < rows; r++) {
    start[r] = r * perRow;
    for (let j = 0; j < perRow; j++) {
      const k = j + rng.int(cols - j);
      const t = perm[j]!;
      perm[j] = perm[k]!;
      perm[k] = t;
    }
    const row = perm.slice(0, perRow).sort();
    index.set(row, r * perRow);
    for (let j = 0; j < perRow; j++) value[r * perRow + j] = 2 * rng.uniform() - 1;
  }
  start[rows] = rows * perRow;
  return { rows, cols, start, index, value };
}

/**
 * The most kept entries in one row of the kernel's matrix: forward the mask's rows, backward its columns — the
 * `pairsPerRow` to plan with for this mask.
 */
export function sparsePairsPerRow(m: SparseRows, kind: "forward" | "backward"): number {
  const t = kind === "forward" ? m : transposeSparseRows(m);
  let most = 0;
  for (let r = 0; r < t.rows; r++) most = Math.max(most, t.start[r + 1]! - t.start[r]!);
  return most;
}

/**
 * The kernel's matrix row a thread's local row stands for, or −1 (padding): forward local row g·UC + u is row
 * g·H + unit of W_hh (unit = c·UC + u), backward local row u is row `unit` of W_hhᵀ.
 */
export function matrixRowOf(plan: SparseRnnKernelPlan, cta: number, localRow: number): number {
  if (localRow >= plan.rows) return -1;
  const uc = plan.unitsPerCta;
  if (plan.kind === "forward") {
    const unit = cta * uc + (localRow % uc);
    return unit < plan.hidden ? Math.floor(localRow / uc) * plan.hidden + unit : -1;
  }
  const unit = cta * uc + localRow;
  return unit < plan.hidden ? unit : -1;
}

function checkShape(where: string, m: SparseRows, plan: SparseRnnKernelPlan): void {
  const G = gatesOf(plan.cell);
  const [rows, cols] = plan.kind === "forward" ? [G * plan.hidden, plan.hidden] : [plan.hidden, G * plan.hidden];
  if (m.rows !== rows || m.cols !== cols) {
    throw new RangeError(
      `${where}: the ${plan.kind} kernel's matrix of a ${plan.cell} layer of hidden ${plan.hidden} is [${rows}, ${cols}]` +
        `${plan.kind === "backward" ? " (W_hhᵀ)" : " (W_hh)"}; got [${m.rows}, ${m.cols}]`,
    );
  }
}

/**
 * The pairs of a kernel's matrix (W_hh forward, W_hhᵀ backward, as CSR) in the naive order. Refuses a row with more
 * kept entries than the plan holds, naming the row and the pairsPerRow to plan with.
 */
export function packSparsePairs(m: SparseRows, plan: SparseRnnKernelPlan): SparsePairLayout {
  checkShape("packSparsePairs", m, plan);
  const most = sparsePairsPerRow(m, "forward");
  if (most > plan.pairsPerRow) {
    let row = 0;
    while (m.start[row + 1]! - m.start[row]! !== most) row++;
    throw new RangeError(
      `packSparsePairs: row ${row} of the ${plan.kind} kernel's matrix keeps ${most} entries; the plan holds ` +
        `${plan.pairsPerRow} per row (plan with pairsPerRow = sparsePairsPerRow(mask, '${plan.kind}') = ${most})`,
    );
  }
  const { values, indices, padding } = emptyPairArrays(plan);
  const t = plan.threadsPerRowGroup;
  const piece = plan.pairsPerPiece;
  const active = plan.rowGroups * t;
  for (let c = 0; c < plan.ctas; c++) {
    for (let i = 0; i < active; i++) {
      const rg = Math.floor(i / t);
      const j = i % t;
      for (let r = 0; r < plan.rowsPerThread; r++) {
        const row = matrixRowOf(plan, c, rg * plan.rowsPerThread + r);
        if (row < 0) continue;
        const a = m.start[row]! + j * piece;
        const b = Math.min(m.start[row + 1]!, a + piece);
        for (let e = a; e < b; e++) {
          const slot = r * piece + (e - a);
          const o = slotOffset(plan, c, slot, i);
          values[o] = m.value[e]!;
          padding[o] = 0;
          indices[indexOffset(plan, c, slot, i)] = m.index[e]!;
        }
      }
    }
  }
  return { plan, order: "naive", wideLoad: null, values, indices, padding };
}

/** Whether two sparse matrices keep the same entries (shape, row starts and indices; values aside). */
export function samePattern(a: SparseRows, b: SparseRows): boolean {
  if (a.rows !== b.rows || a.cols !== b.cols || a.index.length !== b.index.length) return false;
  for (let r = 0; r <= a.rows; r++) if (a.start[r] !== b.start[r]) return false;
  for (let e = 0; e < a.index.length; e++) if (a.index[e] !== b.index[e]) return false;
  return true;
}

/** Entries a slot map can number exactly (their numbers travel as fp32 values through the packing). */
export const PAIR_SLOTS_LIMIT = 1 << 24;

/**
 * `order(packSparsePairs(m, plan))`, and where each kept entry of `m` lands in its `values`: slots[e] for entry e
 * (CSR order). An order that permutes pairs by their indices alone (the naive order, `bankAwareOrder`) gives the same
 * map for every matrix of m's pattern, so while a mask stays the pairs' values can be refreshed in place
 * (`refillPairValues`) instead of packed and ordered again. Found by packing the entries' numbers as values.
 */
export function packPairsWithSlots(
  m: SparseRows,
  plan: SparseRnnKernelPlan,
  order: (layout: SparsePairLayout) => SparsePairLayout = (l) => l,
): { layout: SparsePairLayout; slots: Int32Array } {
  const n = m.index.length;
  if (n >= PAIR_SLOTS_LIMIT) {
    throw new RangeError(
      `packPairsWithSlots: ${n} entries; numbering them as fp32 values reaches ${PAIR_SLOTS_LIMIT - 1}`,
    );
  }
  const numbers = new Float32Array(n);
  for (let e = 0; e < n; e++) numbers[e] = e + 1;
  const numbered = order(packSparsePairs({ ...m, value: numbers }, plan));
  const slots = new Int32Array(n).fill(-1);
  numbered.values.forEach((v, o) => {
    if (numbered.padding[o] === 0) slots[v - 1] = o;
  });
  const lost = slots.indexOf(-1);
  if (lost >= 0) throw new Error(`packPairsWithSlots: entry ${lost} has no slot in the ordered layout`);
  const values = new Float32Array(numbered.values.length);
  refillPairValues(values, slots, m);
  return { layout: { ...numbered, values }, slots };
}

/** Writes the values of `m` (of the pattern `slots` was made for) into a layout's `values` at their slots. */
export function refillPairValues(values: Float32Array, slots: Int32Array, m: SparseRows): void {
  if (m.value.length !== slots.length) {
    throw new RangeError(`refillPairValues: ${m.value.length} values for a slot map of ${slots.length} entries`);
  }
  for (let e = 0; e < slots.length; e++) values[slots[e]!] = m.value[e]!;
}

/**
 * `packSparsePairs` from W_hh [G·H, H] (row-major, PyTorch's weight_hh) and its mask (nonzero: kept), for either
 * kernel of the plan: the backward's pairs are the mask's columns.
 */
export function packSparseRows(weights: Float32Array, mask: Uint8Array, plan: SparseRnnKernelPlan): SparsePairLayout {
  const G = gatesOf(plan.cell);
  const fwd = sparseRowsOf(weights, mask, G * plan.hidden, plan.hidden);
  return packSparsePairs(plan.kind === "forward" ? fwd : transposeSparseRows(fwd), plan);
}

/** One slot of a layout. */
export function pairAt(
  layout: SparsePairLayout,
  cta: number,
  thread: number,
  slot: number,
): { index: number; value: number; padding: boolean } {
  const o = slotOffset(layout.plan, cta, slot, thread);
  return {
    index: layout.indices[indexOffset(layout.plan, cta, slot, thread)]!,
    value: layout.values[o]!,
    padding: layout.padding[o] === 1,
  };
}

/** The kernel's matrix (CSR, index ascending) a layout holds, padding left out: the inverse of packSparsePairs. */
export function unpackSparsePairs(layout: SparsePairLayout): SparseRows {
  const { plan } = layout;
  const G = gatesOf(plan.cell);
  const [rows, cols] = plan.kind === "forward" ? [G * plan.hidden, plan.hidden] : [plan.hidden, G * plan.hidden];
  const entries: [number, number][][] = Array.from({ length: rows }, () => []);
  const t = plan.threadsPerRowGroup;
  for (let c = 0; c < plan.ctas; c++) {
    for (let i = 0; i < plan.threads; i++) {
      for (let s = 0; s < plan.pairsPerThread; s++) {
        const p = pairAt(layout, c, i, s);
        if (p.padding) continue;
        if (i >= plan.rowGroups * t) {
          throw new Error(`unpackSparsePairs: CTA ${c}, thread ${i}, slot ${s} holds a pair outside the matrix`);
        }
        const slot = Math.floor(i / t) * plan.rowsPerThread + Math.floor(s / plan.pairsPerPiece);
        const row = matrixRowOf(plan, c, localRowOf(layout, c, slot));
        if (row < 0) {
          throw new Error(`unpackSparsePairs: CTA ${c}, thread ${i}, slot ${s} holds a pair outside the matrix`);
        }
        entries[row]!.push([p.index, p.value]);
      }
    }
  }
  const start = new Uint32Array(rows + 1);
  let n = 0;
  for (let r = 0; r < rows; r++) n += entries[r]!.length;
  const index = new Uint32Array(n);
  const value = new Float32Array(n);
  n = 0;
  for (let r = 0; r < rows; r++) {
    start[r] = n;
    for (const [i, v] of entries[r]!.sort((a, b) => a[0] - b[0])) {
      index[n] = i;
      value[n++] = v;
    }
  }
  start[rows] = n;
  return { rows, cols, start, index, value };
}

/** W_hh [G·H, H] and its mask from a layout of either kernel (kept entries only; the rest 0): the inverse of packSparseRows. */
export function unpackSparseRows(layout: SparsePairLayout): { weights: Float32Array; mask: Uint8Array } {
  const m = unpackSparsePairs(layout);
  const fwd = layout.plan.kind === "forward" ? m : transposeSparseRows(m);
  const weights = new Float32Array(fwd.rows * fwd.cols);
  const mask = new Uint8Array(fwd.rows * fwd.cols);
  for (let r = 0; r < fwd.rows; r++) {
    for (let e = fwd.start[r]!; e < fwd.start[r + 1]!; e++) {
      const o = r * fwd.cols + fwd.index[e]!;
      if (mask[o] === 1) throw new Error(`unpackSparseRows: entry (${r}, ${fwd.index[e]}) is held twice`);
      mask[o] = 1;
      weights[o] = fwd.value[e]!;
    }
  }
  return { weights, mask };
}

/**
 * The kernel's product y = M·x of a layout for one batch column, summed in the kernel's order: each thread over its
 * slots in order (float64 here; the kernel's fp32 FMAs round each step), then the t partial sums of a row in thread
 * order. `x` has the matrix's columns; y has its rows.
 */
export function layoutProduct(layout: SparsePairLayout, x: Float64Array | Float32Array): Float64Array {
  const { plan } = layout;
  if (x.length !== plan.cols) throw new RangeError(`layoutProduct: x must have ${plan.cols} entries; got ${x.length}`);
  const G = gatesOf(plan.cell);
  const y = new Float64Array(plan.kind === "forward" ? G * plan.hidden : plan.hidden);
  const t = plan.threadsPerRowGroup;
  for (let c = 0; c < plan.ctas; c++) {
    for (let i = 0; i < plan.rowGroups * t; i++) {
      for (let r = 0; r < plan.rowsPerThread; r++) {
        const row = matrixRowOf(plan, c, localRowOf(layout, c, Math.floor(i / t) * plan.rowsPerThread + r));
        if (row < 0) continue;
        let acc = 0;
        for (let q = 0; q < plan.pairsPerPiece; q++) {
          const p = pairAt(layout, c, i, r * plan.pairsPerPiece + q);
          acc += p.value * x[p.index]!;
        }
        y[row]! += acc;
      }
    }
  }
  return y;
}
