/**
 * Magnitude pruning of a recurrent weight matrix W_hh [rows = G·H, cols = H] (the sparse persistent RNN paper,
 * appendix B "Pruning Strategies"): a mask (Uint8Array [rows·cols], row-major, 1 = kept) of the largest |w|, ONE
 * implementation shared by the graph op (src/ops/recurrent-op.ts), the persistent layer (src/rnn/) and the GPU
 * engines, so that every one of them keeps exactly the same weights.
 *
 * - row-balanced: every row keeps the same count k = max(1, round(d·cols)) of its largest |w| (the sparse kernel's
 *   load balance: equal work per row, no padding);
 * - plain: the k·rows largest |w| of the whole matrix (the paper's "naive" pruning; rows keep different counts).
 *
 * Ties of |w| go to the lower index (the lower column in a row; row-major order for plain), so a mask is a function
 * of the values alone. A NaN weight counts as the largest (it is kept, so that it shows instead of being hidden).
 */
import type { Buf } from "./common.js";

export const PRUNING_MODES = ["row-balanced", "plain"] as const;
export type PruningMode = (typeof PRUNING_MODES)[number];

/** Which weights of W_hh take part (1) and which are pruned (0), row-major [rows·cols]. */
export type WeightMask = Uint8Array;

/** Weights kept per row (row-balanced) at density d ∈ (0, 1] over rows of `cols`: max(1, round(d·cols)). */
export function keptPerRow(density: number, cols: number): number {
  return Math.min(cols, Math.max(1, Math.round(density * cols)));
}

/** |w| as the order of pruning sees it: NaN is the largest. */
const magnitude = (w: number): number => (Number.isNaN(w) ? Number.POSITIVE_INFINITY : Math.abs(w));

/**
 * The value at index `kth` of `a` sorted ascending (quickselect with a three-way partition, so that runs of equal
 * values — the zeros of a pruned matrix — cost one pass; median-of-three pivots). Reorders `a`. No NaN in `a`.
 */
function selectAscending(a: Float64Array, kth: number): number {
  let lo = 0;
  let hi = a.length - 1;
  while (lo < hi) {
    const x = a[lo]!;
    const y = a[(lo + hi) >>> 1]!;
    const z = a[hi]!;
    const pivot = Math.max(Math.min(x, y), Math.min(Math.max(x, y), z)); // the median of the three
    // [lo, lt) < pivot, [lt, i) = pivot, (gt, hi] > pivot
    let lt = lo;
    let i = lo;
    let gt = hi;
    while (i <= gt) {
      const v = a[i]!;
      if (v < pivot) {
        a[i++] = a[lt]!;
        a[lt++] = v;
      } else if (v > pivot) {
        a[i] = a[gt]!;
        a[gt--] = v;
      } else i++;
    }
    if (kth < lt) hi = lt - 1;
    else if (kth > gt) lo = gt + 1;
    else return pivot;
  }
  return a[kth]!;
}

/**
 * Marks in `mask` (over the index range [from, from + n) of `w`) the `keep` entries of largest |w|, ties to the
 * lower index; `scratch` holds ≥ 2n values.
 */
function keepLargest(
  w: ArrayLike<number>,
  from: number,
  n: number,
  keep: number,
  mask: Uint8Array,
  scratch: Float64Array,
) {
  if (keep >= n) {
    mask.fill(1, from, from + n);
    return;
  }
  const mags = scratch.subarray(0, n);
  for (let j = 0; j < n; j++) mags[j] = magnitude(w[from + j]!);
  const work = scratch.subarray(n, 2 * n);
  work.set(mags);
  const threshold = selectAscending(work, n - keep); // the keep-th largest
  let above = 0;
  for (let j = 0; j < n; j++) if (mags[j]! > threshold) above++;
  let equal = keep - above; // entries at the threshold still to keep, lowest index first
  for (let j = 0; j < n; j++) {
    const m = mags[j]!;
    if (m > threshold || (m === threshold && equal-- > 0)) mask[from + j] = 1;
  }
}

/**
 * The mask of W_hh [rows, cols] keeping `kept` weights per row (row-balanced) or `kept`·rows in all (plain); see the
 * top of this file for the order. `kept` is clamped to 1 … cols.
 */
export function pruneKeeping<T extends Buf>(
  w: T,
  rows: number,
  cols: number,
  kept: number,
  mode: PruningMode,
): WeightMask {
  const k = Math.min(cols, Math.max(1, kept));
  const mask = new Uint8Array(rows * cols);
  if (mode === "plain") {
    keepLargest(w, 0, rows * cols, k * rows, mask, new Float64Array(2 * rows * cols));
    return mask;
  }
  const scratch = new Float64Array(2 * cols);
  for (let r = 0; r < rows; r++) keepLargest(w, r * cols, cols, k, mask, scratch);
  return mask;
}

/** The mask of W_hh [rows, cols] at density d ∈ (0, 1] (k = keptPerRow(d, cols)); density 1 keeps everything. */
export function pruneByMagnitude<T extends Buf>(
  w: T,
  rows: number,
  cols: number,
  density: number,
  mode: PruningMode,
): WeightMask {
  return pruneKeeping(w, rows, cols, keptPerRow(density, cols), mode);
}

/** What a mask keeps: in all, the fraction of the matrix, and per row. */
export interface MaskCounts {
  readonly kept: number;
  /** kept / (rows·cols). */
  readonly density: number;
  /** Kept weights of each row. */
  readonly rowCounts: Int32Array;
}

export function maskCounts(mask: WeightMask, rows: number, cols: number): MaskCounts {
  const rowCounts = new Int32Array(rows);
  let kept = 0;
  for (let r = 0; r < rows; r++) {
    let c = 0;
    for (let j = r * cols; j < (r + 1) * cols; j++) c += mask[j]!;
    rowCounts[r] = c;
    kept += c;
  }
  return { kept, density: kept / (rows * cols), rowCounts };
}

/**
 * Why `mask` cannot prune W_hh [rows, cols] under `mode`, or null when it can: not a Uint8Array of rows·cols values,
 * a value other than 0 and 1, nothing kept, or (row-balanced) a row keeping a different count than row 0. The
 * answer is the end of a sentence naming the argument ("argument 'mask' " + why).
 */
export function maskProblem(mask: unknown, rows: number, cols: number, mode: PruningMode): string | null {
  const n = rows * cols;
  if (!(mask instanceof Uint8Array)) {
    const got = mask === null || typeof mask !== "object" ? String(mask) : (mask.constructor?.name ?? "an object");
    return `must be a Uint8Array of [G·H, H] = [${rows}, ${cols}] = ${n} values (1 = kept); got ${got}`;
  }
  if (mask.length !== n) return `has ${mask.length} values; W_hh is [G·H, H] = [${rows}, ${cols}] = ${n}`;
  for (let i = 0; i < n; i++) {
    const v = mask[i]!;
    if (v > 1) {
      return `holds ${v} at row ${Math.floor(i / cols)}, column ${i % cols}; a mask holds 0 (pruned) or 1 (kept)`;
    }
  }
  const { kept, rowCounts } = maskCounts(mask, rows, cols);
  if (kept === 0) return "keeps no weight; keep at least one (a density of 0 is no layer)";
  if (mode === "row-balanced") {
    const k = rowCounts[0]!;
    for (let r = 0; r < rows; r++) {
      const c = rowCounts[r]!;
      if (c !== k) {
        return (
          `is not row-balanced: row ${r} keeps ${c} weight(s), row 0 keeps ${k}; every row must keep the same ` +
          "count ≥ 1 (or give pruning 'plain')"
        );
      }
    }
  }
  return null;
}

/** w ⊙ mask, a new array of w's type (the pruned weights as stored zeros). */
export function applyMask<T extends Buf>(w: T, mask: WeightMask): T {
  const out = new (w.constructor as new (n: number) => T)(w.length);
  for (let i = 0; i < w.length; i++) out[i] = mask[i] ? w[i]! : 0;
  return out;
}

/** into += add ⊙ mask: a gradient that exists only at the kept weights. */
export function addMasked<T extends Buf>(into: T, add: ArrayLike<number>, mask: WeightMask): void {
  for (let i = 0; i < into.length; i++) if (mask[i]) into[i] = into[i]! + add[i]!;
}
