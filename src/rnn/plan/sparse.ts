/**
 * How a sparse persistent recurrent layer is laid out (the sparse persistent RNN paper, DESIGN §7): W_hh pruned to
 * ⟨index, value⟩ pairs held in registers, derived from the device model as the dense layout is (dense.ts), with the
 * same CTAs (one per SM), the same units per CTA (all G gate rows of a unit in one CTA, so the cell update is local)
 * and the same register budget (the per-thread limit of one CTA per SM, the dense overheads and margins).
 *
 * What differs is what a thread holds. A row of the CTA's matrix keeps `pairsPerRow` pairs (row-balanced pruning:
 * k = round(d·H) in every row; rows with fewer are padded with value-0 pairs). Its pairs are split over a row group
 * of `threadsPerRowGroup` threads, each holding a piece of ⌈k / t⌉ pairs (the last piece padded), and a thread holds
 * the pieces of `rowsPerThread` rows, one after another: slot s of every thread belongs to piece ⌊s / piece⌋, so a
 * fully unrolled kernel names one accumulator per slot for all threads. A row's sum is reduced over its row group
 * (warp shuffles where the group divides a warp, shared memory otherwise). Each pair costs one fp32 value register
 * and half (16-bit index, two per register, where the index range is at most 65,536) or one (32-bit) index register.
 *
 * The product is bound by shared memory, not FMAs: every pair loads h[index] for its batch columns, and a warp's 32
 * indices fall on arbitrary banks. h is stored interleaved [K][w] (w = the batch tile, 1, 2 or 4 columns), so one
 * ld.shared.v{w} loads a pair's columns at once; the bank-aware order of each thread's pairs (sparse-banks.ts)
 * spreads a warp's lanes over the banks.
 *
 * Both kernels of a layer:
 * - forward: the CTA's rows of W_hh (K = H columns, the indices of h(t−1));
 * - backward: rows of W_hhᵀ for the CTA's units, i.e. the columns of W_hh (K = G·H, the indices of the gate
 *   gradients). It is built from the forward mask by transposing it (sparse-pairs.ts): the pairs of unit j are the
 *   kept (i, W[i][j]) of column j. Row-balanced pruning balances rows, not columns, so its pairs per row are the
 *   largest column count of the mask (exact when a mask is given, else a high-probability bound for a random
 *   row-balanced mask: columnPairsEstimate), and the padding is larger than the forward's.
 */
import { type DeviceModel, schedulerRegisterLimit } from "../../cuda/hw/device-model.js";
import { gatesOf } from "../spec.js";
import {
  BACKWARD_EXTRA_OVERHEAD,
  REGISTER_OVERHEAD,
  type RnnCellName,
  type RnnKernelKind,
  registerMargin,
} from "./dense.js";

/** Bits of a pair's index: 16 packs two indices in a register (index range ≤ 65,536), 32 one. */
export type SparseIndexBits = 16 | 32;

/** Batch columns of a tile, and so the width of each pair's shared-memory load of h (ld.shared.v1/v2/v4). */
export type WideLoad = 1 | 2 | 4;

export const WIDE_LOADS: readonly WideLoad[] = [1, 2, 4];

/** The largest index range 16-bit indices reach. */
export const INDEX16_LIMIT = 65_536;

/**
 * Registers a sparse thread needs besides the dense overhead: the wide load's h values in flight and each pair's
 * index unpacked into a shared-memory address. A model, as the dense overhead is: ptxas decides, and a kernel's
 * first compile should calibrate it (as the dense margins were).
 */
export const SPARSE_EXTRA_OVERHEAD = 8;

/** Cycles of a barrier and its shared-memory round trip (the cross-thread step of a shared-memory reduction). */
const BARRIER_CYCLES = 40;

/** How a row's partial sums are combined over its row group. */
export type SparseReduction = "none" | "shuffle" | "shuffle-shared" | "shared";

/** What stops a layer fitting. */
export type SparseBound = "registers" | "shared-memory" | "index-bits" | "threads";

/** Where a plan's pairs per row come from. */
export type PairsPerRowSource = "row-balanced" | "column-estimate" | "given";

export interface SparsePlanOptions {
  /** Kept fraction of W_hh, 0 < d ≤ 1. */
  readonly density: number;
  /** Batch columns per tile = the wide load; larger batches loop over tiles. Default 4. */
  readonly batchTile?: WideLoad;
  /** Default: 16 where the index range (H forward, G·H backward) is at most 65,536, else 32. */
  readonly indexBits?: SparseIndexBits;
  /**
   * Pairs per row of the kernel's matrix, from a mask (`sparsePairsPerRow`). Default: forward round(d·H) (row-balanced
   * pruning), backward `columnPairsEstimate`.
   */
  readonly pairsPerRow?: number;
  /**
   * Copies of the layer a launch runs side by side, each on its own tiles of a step (default 1): the layer is spread
   * over ⌊SMs / replicas⌋ CTAs, so each holds about `replicas` times the pairs of a one-replica layout.
   */
  readonly replicas?: number;
  /** Only layouts with this many threads per row group (comparisons of the planner's choice); default: any. */
  readonly threadsPerRowGroup?: number;
  /**
   * CTAs resident on one SM (default 1): 2 spreads a replica over twice the CTAs, each with half an SM's registers and
   * shared memory, so that two CTAs of different replicas share an SM and one computes while the other waits for its
   * vector.
   */
  readonly ctasPerSm?: CtasPerSm;
  /**
   * Slots of padding added to every piece once the layout is chosen ("auto", the default: `autoSlack`; 0: none), as
   * many as the registers allow. The balanced bank-aware order (sparse-banks.ts) moves pairs into them: with a few
   * free slots per phase no bank group needs more slots than there are, and a load phase is conflict-free. The
   * orders that keep each thread's pairs gain nothing from them (the naive order should plan with 0).
   */
  readonly slack?: number | "auto";
}

/**
 * The slack "auto" asks for: ~5% of a piece for 2- and 4-column loads, ~12% for 1 column (B = 32 bank groups share a
 * warp's slots: more groups, a fuller fullest one). From the wavefront model (sampleBankConflicts) of the balanced
 * order with its row order on the launches of RNN 1152–2304, LSTM and GRU 1152 at 10%, batch 4 and 16: the best slack
 * was 4–5% of a piece at 2 and 4 columns and 10–20% at 1, and within 1% of the best wavefronts one slot either side.
 */
export function autoSlack(pairsPerPiece: number, batchTile: WideLoad): number {
  return Math.round(pairsPerPiece * (batchTile === 1 ? 0.12 : 0.05));
}

/**
 * Registers per thread slack never takes beyond the planner's margin: the margin was measured on the layouts the
 * planner picks, whose estimate is rarely at the limit; slack fills a layout up to it, and under nvcc 13 layouts at
 * the margin with slack spilled (the largest layers' backward kernels, RNN 5760 at 10%) where 16 more kept them clean.
 */
const SLACK_HEADROOM = 16;

/**
 * `plan` with up to `slack` slots added to every piece, as many as its registers allow (margin and headroom kept);
 * `slack` was checked by checkOptions.
 */
function withSlack(plan: SparseRnnKernelPlan, slack: number | "auto", overhead: number): SparseRnnKernelPlan {
  const want = slack === "auto" ? autoSlack(plan.pairsPerPiece, plan.batchTile) : slack;
  for (let e = want; e > 0; e--) {
    const piece = plan.pairsPerPiece + e;
    const n = plan.rowsPerThread * piece;
    const pairRegisters = pairRegistersFor(n, plan.indexBits);
    const estimate = pairRegisters + plan.accumulatorRegisters + overhead;
    if (estimate + registerMargin(plan.registerLimit) + SLACK_HEADROOM > plan.registerLimit) continue;
    return {
      ...plan,
      pairsPerPiece: piece,
      slackPairs: e,
      pairsPerThread: n,
      pairRegisters,
      registersEstimate: estimate,
    };
  }
  return plan;
}

/**
 * Whether the kernels of `plan` write each row's sum through a row order (sparse-pairs.ts, rowOrder): the balanced
 * bank-aware order permutes a CTA's rows only for these. It costs the reduction a shared-memory load and a register or
 * two, so the layouts within 8 registers of their limit (the largest layers' backward kernels) keep their rows in
 * place: under nvcc 13 RNN 5760's backward at 10% spilled 4 bytes with it.
 */
export function permutesRows(plan: SparseRnnKernelPlan): boolean {
  return plan.registerLimit - plan.registersEstimate >= 8;
}

/** CTAs of a sparse kernel resident on one SM. */
export type CtasPerSm = 1 | 2;

export interface SparseRnnKernelPlan {
  readonly cell: RnnCellName;
  readonly hidden: number;
  readonly kind: RnnKernelKind;
  readonly density: number;
  readonly indexBits: SparseIndexBits;
  /** Batch columns per tile, and the width of each pair's load of h (h stored [K][batchTile] in shared memory). */
  readonly batchTile: WideLoad;
  /** CTAs of one replica, one per SM at most; CTA c owns units [c·unitsPerCta, (c+1)·unitsPerCta) ∩ [0, hidden). */
  readonly ctas: number;
  /** The most copies of the layer a launch could run at once: ⌊SMs · ctasPerSm / ctas⌋. */
  readonly replicas: number;
  /** CTAs resident on one SM (the kernel's __launch_bounds__ minimum). */
  readonly ctasPerSm: CtasPerSm;
  readonly unitsPerCta: number;
  /** Rows of the CTA's matrix: unitsPerCta·G (forward, gate-major: local row g·unitsPerCta + u) or unitsPerCta. */
  readonly rows: number;
  /** Columns, the range of a pair's index: H (forward) or G·H (backward). */
  readonly cols: number;
  /** Pairs every row holds (kept weights, padded). */
  readonly pairsPerRow: number;
  readonly pairsPerRowFrom: PairsPerRowSource;
  readonly rowsPerThread: number;
  readonly rowGroups: number;
  /** Threads sharing a row's pairs (any width; a row group's threads are consecutive). */
  readonly threadsPerRowGroup: number;
  /**
   * Slots of one row a thread holds: ⌈pairsPerRow / threadsPerRowGroup⌉ (the row's last piece padded) + slackPairs.
   */
  readonly pairsPerPiece: number;
  /** Slots of padding added to every piece for the balanced bank-aware order (SparsePlanOptions.slack). */
  readonly slackPairs: number;
  /** rowsPerThread · pairsPerPiece: the load slots of the product, the same in every thread. */
  readonly pairsPerThread: number;
  /** Threads per CTA (whole warps); threads past rowGroups·threadsPerRowGroup hold padding only. */
  readonly threads: number;
  readonly reduction: SparseReduction;
  /** 1.5 (16-bit indices) or 2 (32-bit). */
  readonly registersPerPair: number;
  /** Value and index registers of a thread's pairs. */
  readonly pairRegisters: number;
  /** rowsPerThread · batchTile. */
  readonly accumulatorRegisters: number;
  /** The estimate of registers per thread, and the most one thread may use with this block size. */
  readonly registersEstimate: number;
  readonly registerLimit: number;
  /**
   * Shared memory of one tile in bytes: h [K][batchTile], the reduction's buffers and the per-(unit, sequence) state
   * of the tile's columns. Lamport double-buffering of h (the paper's pipeline over steps) adds 4·K·batchTile.
   */
  readonly sharedBytes: number;
  /** The model's cycles per step per batch tile (comparable to the dense plan's costCycles; not a time). */
  readonly costCycles: number;
}

export type SparseRnnPlanResult =
  | { readonly fits: true; readonly plan: SparseRnnKernelPlan }
  | {
      readonly fits: false;
      readonly reason: string;
      readonly bound: SparseBound;
      /** The kernel that does not fit. */
      readonly kind: RnnKernelKind;
    };

export type SparseMiss = Extract<SparseRnnPlanResult, { fits: false }>;

/** Kept pairs per row of a row-balanced forward mask: round(d·H), at least one. */
export function rowBalancedPairs(hidden: number, density: number): number {
  return Math.min(hidden, Math.max(1, Math.round(density * hidden)));
}

/**
 * A bound on the largest column count of a random row-balanced mask of `rows` rows × `cols` columns with `perRow`
 * kept per row: each row keeps a column with probability p = perRow / cols independently of the other rows, so a
 * column's count is Binomial(rows, p), and the bound is the smallest c with cols · P(count > c) ≤ 10⁻³ (exceeded by
 * one random mask in a thousand; a layer whose mask exceeds it plans again with `sparsePairsPerRow`).
 */
export function columnPairsEstimate(rows: number, cols: number, perRow: number): number {
  const p = perRow / cols;
  if (p >= 1) return rows;
  const logQ = Math.log1p(-p);
  const ratio = Math.log(p) - logQ;
  // log pmf(x) by the ratio pmf(x+1)/pmf(x) = (rows−x)/(x+1) · p/(1−p), up to far past the mean
  const mean = rows * p;
  const top = Math.min(rows, Math.ceil(mean + 12 * Math.sqrt(mean) + 40));
  const logPmf = new Float64Array(top + 1);
  logPmf[0] = rows * logQ;
  for (let x = 0; x < top; x++) logPmf[x + 1] = logPmf[x]! + Math.log((rows - x) / (x + 1)) + ratio;
  let tail = 0; // P(count > c), summed from the top
  for (let c = top; c >= 0; c--) {
    if (cols * tail > 1e-3) return Math.min(rows, c + 1);
    tail += Math.exp(logPmf[c]!);
  }
  return 0;
}

/**
 * The expected largest bin of `m` balls thrown into `m` bins uniformly: the wavefronts of one phase of a warp's
 * shared-memory load whose m lanes read random bank groups. P(max ≤ c) = m!/mᵐ · [xᵐ] (Σ_{j≤c} xʲ/j!)ᵐ.
 */
function expectedLargestBin(m: number): number {
  let expected = 0;
  let factor = 1; // m! / m^m
  for (let i = 1; i <= m; i++) factor *= i / m;
  for (let c = 0; c < m; c++) {
    const base = new Float64Array(m + 1);
    let f = 1;
    for (let j = 0; j <= Math.min(c, m); j++) {
      base[j] = 1 / f;
      f *= j + 1;
    }
    let power = new Float64Array(m + 1);
    power[0] = 1;
    for (let k = 0; k < m; k++) {
      const next = new Float64Array(m + 1);
      for (let a = 0; a <= m; a++) {
        if (power[a] === 0) continue;
        for (let b = 0; a + b <= m && b <= c; b++) next[a + b]! += power[a]! * base[b]!;
      }
      power = next;
    }
    expected += 1 - factor * power[m]!;
  }
  return expected;
}

const WAVEFRONTS = new Map<WideLoad, number>();

/**
 * Shared-memory wavefronts of one warp's pair load of w columns when the 32 indices fall on random banks (the naive
 * order): the warp is served in w phases of 32/w lanes (half-warps for 64-bit, quarter-warps for 128-bit loads), each
 * as many wavefronts as the most lanes of the phase reading one bank group. Conflict-free: w.
 */
export function randomOrderWavefronts(wideLoad: WideLoad): number {
  let v = WAVEFRONTS.get(wideLoad);
  if (v === undefined) {
    v = wideLoad * expectedLargestBin(32 / wideLoad);
    WAVEFRONTS.set(wideLoad, v);
  }
  return v;
}

function reductionOf(t: number): SparseReduction {
  if (t === 1) return "none";
  if (32 % t === 0) return "shuffle";
  if (t % 32 === 0) return "shuffle-shared";
  return "shared";
}

/** Floats of shared memory the reduction needs (two buffers, as the dense loops alternate them). */
function reductionFloats(reduction: SparseReduction, threads: number, paddedRows: number, rw: number, bt: number) {
  const perBuffer =
    reduction === "shared"
      ? threads * rw * bt
      : reduction === "shuffle-shared"
        ? (threads / 32) * rw * bt
        : paddedRows * bt;
  return 2 * perBuffer;
}

/** The model's reduction cycles per tile of one layout. */
function reductionCycles(
  reduction: SparseReduction,
  t: number,
  perSubPartition: number,
  threads: number,
  paddedRows: number,
  rw: number,
  bt: number,
): number {
  const acc = rw * bt;
  const gather = Math.ceil((paddedRows * bt) / threads);
  switch (reduction) {
    case "none":
      return 0;
    case "shuffle":
      return perSubPartition * acc * 2 * Math.log2(t);
    case "shuffle-shared":
      return perSubPartition * acc * 2 * 5 + BARRIER_CYCLES + gather * (t / 32);
    case "shared":
      return perSubPartition * acc + BARRIER_CYCLES + gather * t;
  }
}

function checkOptions(where: string, hidden: number, o: SparsePlanOptions): void {
  if (!Number.isInteger(hidden) || hidden < 1) {
    throw new RangeError(`${where}: hidden must be a positive integer; got ${hidden}`);
  }
  if (!(Number.isFinite(o.density) && o.density > 0 && o.density <= 1)) {
    throw new RangeError(`${where}: density must be a number in (0, 1]; got ${o.density}`);
  }
  if (o.batchTile !== undefined && !WIDE_LOADS.includes(o.batchTile)) {
    throw new RangeError(`${where}: batchTile must be 1, 2 or 4; got ${o.batchTile}`);
  }
  if (o.indexBits !== undefined && o.indexBits !== 16 && o.indexBits !== 32) {
    throw new RangeError(`${where}: indexBits must be 16 or 32; got ${o.indexBits}`);
  }
  if (o.replicas !== undefined && !(Number.isInteger(o.replicas) && o.replicas >= 1)) {
    throw new RangeError(`${where}: replicas must be a positive integer; got ${o.replicas}`);
  }
  if (o.ctasPerSm !== undefined && o.ctasPerSm !== 1 && o.ctasPerSm !== 2) {
    throw new RangeError(`${where}: ctasPerSm must be 1 or 2; got ${o.ctasPerSm}`);
  }
  if (o.slack !== undefined && o.slack !== "auto" && !(Number.isInteger(o.slack) && o.slack >= 0)) {
    throw new RangeError(`${where}: slack must be 'auto' or an integer ≥ 0; got ${String(o.slack)}`);
  }
}

/** Value and index registers of `n` pair slots: one value each, 16-bit indices two to a register. */
const pairRegistersFor = (n: number, indexBits: SparseIndexBits) => n + (indexBits === 16 ? Math.ceil(n / 2) : n);

/**
 * The cheapest register layout of one kernel of a sparse layer, or why none fits (and what bounds it). The search
 * covers rows per thread and row-group widths whose threads (whole warps, at most 1024, one per (unit, batch column)
 * of a tile for the cell) hold their pairs, accumulators and overhead under the per-thread register limit of one CTA
 * per SM (dense.ts's limit and margins), with h of one tile, the reduction and the cell state in shared memory, and
 * picks the lowest cost: issue (per pair: batchTile FMAs, one load, the index arithmetic) or shared-memory wavefronts
 * (random banks: the naive order; the bank-aware order does better), whichever bounds, plus the reduction and the
 * load of h.
 */
export function planSparseRnnKernel(
  cell: RnnCellName,
  hidden: number,
  kind: RnnKernelKind,
  device: DeviceModel,
  options: SparsePlanOptions,
): SparseRnnPlanResult {
  checkOptions("planSparseRnnKernel", hidden, options);
  const { density } = options;
  const bt = options.batchTile ?? 4;
  const G = gatesOf(cell);
  const cps = options.ctasPerSm ?? 1;
  const ctaBudget = Math.max(1, Math.floor((device.smCount * cps) / (options.replicas ?? 1)));
  const unitsPerCta = Math.ceil(hidden / ctaBudget);
  const ctas = Math.ceil(hidden / unitsPerCta);
  const rows = kind === "forward" ? unitsPerCta * G : unitsPerCta;
  const cols = kind === "forward" ? hidden : G * hidden;
  const what = `a ${cell} ${kind} kernel of hidden ${hidden} at density ${Number((100 * density).toPrecision(4))}%`;
  const indexBits: SparseIndexBits = options.indexBits ?? (cols <= INDEX16_LIMIT ? 16 : 32);
  if (indexBits === 16 && cols > INDEX16_LIMIT) {
    return {
      fits: false,
      kind,
      bound: "index-bits",
      reason:
        `${what} indexes ${cols.toLocaleString("en-US")} columns (${kind === "forward" ? "H" : "G·H"}), more than ` +
        `16-bit indices reach (${INDEX16_LIMIT.toLocaleString("en-US")}); 32-bit indices take 2 registers per pair`,
    };
  }
  let pairsPerRow: number;
  let pairsPerRowFrom: PairsPerRowSource;
  if (options.pairsPerRow !== undefined) {
    if (!Number.isInteger(options.pairsPerRow) || options.pairsPerRow < 1 || options.pairsPerRow > cols) {
      throw new RangeError(
        `planSparseRnnKernel: pairsPerRow must be an integer in 1…${cols}; got ${options.pairsPerRow}`,
      );
    }
    pairsPerRow = options.pairsPerRow;
    pairsPerRowFrom = "given";
  } else if (kind === "forward") {
    pairsPerRow = rowBalancedPairs(hidden, density);
    pairsPerRowFrom = "row-balanced";
  } else {
    pairsPerRow = columnPairsEstimate(G * hidden, hidden, rowBalancedPairs(hidden, density));
    pairsPerRowFrom = "column-estimate";
  }
  const hBytes = 4 * cols * bt;
  const stateFloats = 2 * unitsPerCta * bt; // LSTM's c forward; dc and GRU's dh ⊙ z backward (one tile's columns)
  if (hBytes + 4 * stateFloats > device.sharedPerBlock) {
    return {
      fits: false,
      kind,
      bound: "shared-memory",
      reason:
        `${what} keeps ${kind === "forward" ? "h" : "the gate gradients"} of a tile in shared memory: ` +
        `${cols.toLocaleString("en-US")} floats × ${bt} batch columns = ${hBytes.toLocaleString("en-US")} bytes, more ` +
        `than a block's ${device.sharedPerBlock.toLocaleString("en-US")}` +
        (bt > 1 ? ` (a narrower wide load, batchTile ${bt / 2}, halves it)` : ""),
    };
  }
  if (unitsPerCta * bt > 1024) {
    return {
      fits: false,
      kind,
      bound: "threads",
      reason: `${what} has ${unitsPerCta} units per CTA; the cell needs a thread per (unit, batch column) of a tile, ${unitsPerCta * bt} > 1024`,
    };
  }
  const perPair = indexBits === 16 ? 1.5 : 2;
  const extra = REGISTER_OVERHEAD + SPARSE_EXTRA_OVERHEAD + (kind === "backward" ? BACKWARD_EXTRA_OVERHEAD : 0);
  const intOps = indexBits === 16 ? 2 : 1; // unpack (16-bit) and the address of each pair's load
  const wavefronts = randomOrderWavefronts(bt);
  let best: SparseRnnKernelPlan | undefined;
  let tightest = Number.POSITIVE_INFINITY;
  let sharedMiss = 0;
  for (let rw = 1; rw <= rows; rw++) {
    const acc = rw * bt;
    if (acc + extra >= device.maxRegsPerThread) break;
    const rowGroups = Math.ceil(rows / rw);
    if (rowGroups * rw - rows >= rw) continue; // a whole row group of padding
    for (let t = 1; t <= pairsPerRow && rowGroups * t <= 1024; t++) {
      if (options.threadsPerRowGroup !== undefined && t !== options.threadsPerRowGroup) continue;
      const piece = Math.ceil(pairsPerRow / t);
      if ((piece - 1) * t >= pairsPerRow) continue; // a whole slot of padding in every thread of the group
      const active = rowGroups * t;
      const threads = Math.ceil(active / 32) * 32;
      if (unitsPerCta * bt > threads) continue; // the cell needs a thread per (unit, batch column) of a tile
      if (threads * cps > device.maxThreadsPerSm) continue;
      const n = rw * piece;
      const pairRegisters = pairRegistersFor(n, indexBits);
      const estimate = pairRegisters + acc + extra;
      const limit = schedulerRegisterLimit(device, threads, cps);
      const over = estimate + registerMargin(limit) - limit;
      tightest = Math.min(tightest, over);
      if (over > 0) continue;
      const reduction = reductionOf(t);
      const paddedRows = rowGroups * rw;
      const sharedBytes =
        hBytes + 4 * (reductionFloats(reduction, threads, paddedRows, rw, bt) + stateFloats + paddedRows);
      if (
        sharedBytes > device.sharedPerBlock ||
        cps * (sharedBytes + device.reservedSharedPerBlock) > device.sharedPerSm
      ) {
        sharedMiss = sharedBytes;
        continue;
      }
      // issue cycles of one SM sub-partition (one warp instruction per cycle), shared-memory wavefronts (one per cycle
      // per SM), the reduction, and the copy of a tile's vector from L2 (as dense.ts)
      const warps = threads / 32;
      const perSubPartition = Math.ceil(warps / 4);
      const issue = perSubPartition * n * (bt + 1 + intOps);
      const lds = warps * n * wavefronts;
      const reduce = reductionCycles(reduction, t, perSubPartition, threads, paddedRows, rw, bt);
      const loads = Math.ceil((bt * cols) / (4 * threads)) * 40;
      const cost = Math.max(issue, lds) + reduce + loads;
      if (best === undefined || cost < best.costCycles) {
        best = {
          cell,
          hidden,
          kind,
          density,
          indexBits,
          batchTile: bt,
          ctas,
          replicas: Math.floor((device.smCount * cps) / ctas),
          ctasPerSm: cps,
          unitsPerCta,
          rows,
          cols,
          pairsPerRow,
          pairsPerRowFrom,
          rowsPerThread: rw,
          rowGroups,
          threadsPerRowGroup: t,
          pairsPerPiece: piece,
          slackPairs: 0,
          pairsPerThread: n,
          threads,
          reduction,
          registersPerPair: perPair,
          pairRegisters,
          accumulatorRegisters: acc,
          registersEstimate: estimate,
          registerLimit: limit,
          sharedBytes,
          costCycles: cost,
        };
      }
    }
  }
  if (best) return { fits: true, plan: withSlack(best, options.slack ?? "auto", extra) };
  if (tightest <= 0 && sharedMiss > 0) {
    return {
      fits: false,
      kind,
      bound: "shared-memory",
      reason:
        `${what}: every layout whose registers fit needs more shared memory than a block's ` +
        `${device.sharedPerBlock.toLocaleString("en-US")} bytes (h of a tile is ${hBytes.toLocaleString("en-US")})`,
    };
  }
  const pairs = rows * pairsPerRow;
  return {
    fits: false,
    kind,
    bound: "registers",
    reason:
      `${what} holds ${pairs.toLocaleString("en-US")} pairs per CTA (${rows} rows × ${pairsPerRow} pairs, ` +
      `${perPair} registers each with ${indexBits}-bit indices, over ${ctas} CTAs on ${device.smCount} SMs), more ` +
      `than one SM's ${device.regsPerSm.toLocaleString("en-US")} registers allow with room for the accumulators and ` +
      `the arithmetic (over by about ${Math.max(1, Math.ceil(tightest))} registers per thread at best)`,
  };
}
