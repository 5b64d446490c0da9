/**
 * How a persistent recurrent layer is laid out on a GPU: which CTA owns which units, how each CTA's block of the
 * recurrent matrix is spread over its threads' registers, and whether it fits at all — derived from the device model
 * (SM count, register file), never from per-GPU tables (issue 18 item 3).
 *
 * Both kernels of a layer multiply a register-resident matrix by a vector that every CTA reads from the others each
 * step:
 * - forward: the CTA's rows of U (all G gate rows of its units, so the cell update is local) times h(t−1) (K = H);
 * - backward: the CTA's columns of U, i.e. rows of Uᵀ for its units, times the gate gradients of step t+1
 *   (K = G·H), which gives dh(t) for its units.
 * A thread holds `rowsPerThread` rows × `chunksPerThread` float4 column chunks; the threads of a row group split the
 * columns (chunk k of thread `cg` covers columns 4·(cg + CG·k) … +3, so a warp's shared-memory loads are
 * consecutive). Padding rows/columns hold zeros.
 */
import { type DeviceModel, schedulerRegisterLimit } from "../cuda/hw/device-model.js";

/** The recurrent cells (PyTorch/cuDNN forms). */
export type RnnCellName = "rnn-tanh" | "rnn-relu" | "lstm" | "gru";
export const RNN_CELLS: readonly RnnCellName[] = ["rnn-tanh", "rnn-relu", "lstm", "gru"];

/** Gate rows per unit: 1 for the plain RNNs, 4 for the LSTM (i, f, g, o), 3 for the GRU (r, z, n). */
export function gatesOf(cell: RnnCellName): number {
  return cell === "lstm" ? 4 : cell === "gru" ? 3 : 1;
}

/** How the weights are stored in registers; the arithmetic is fp32 either way. */
export type WeightPrecision = "fp32" | "fp16";

export type RnnKernelKind = "forward" | "backward";

/** Batch columns a CTA processes at once (its accumulators are rows × BATCH_TILE); larger batches loop over tiles. */
export const BATCH_TILE = 4;

/** Registers a thread needs besides its weights and accumulators (addresses, loop state, the cell math). */
const REGISTER_OVERHEAD = 40;

/** fp16 storage needs a few more: the unpacked pair of each row while its batch columns use it. */
const FP16_OVERHEAD = 16;

export interface RnnKernelPlan {
  readonly cell: RnnCellName;
  readonly hidden: number;
  readonly kind: RnnKernelKind;
  readonly precision: WeightPrecision;
  /** CTAs of the grid, one per SM at most; CTA c owns units [c·unitsPerCta, (c+1)·unitsPerCta) ∩ [0, hidden). */
  readonly ctas: number;
  readonly unitsPerCta: number;
  /** Rows of the CTA's matrix block: unitsPerCta·G (forward) or unitsPerCta (backward). */
  readonly rows: number;
  /** Columns: H (forward) or G·H (backward). */
  readonly cols: number;
  readonly rowsPerThread: number;
  readonly rowGroups: number;
  /** Threads per row group (a multiple of 32). */
  readonly threadsPerRowGroup: number;
  readonly chunksPerThread: number;
  readonly threads: number;
  /** 32-bit registers per thread holding weights (fp16: two weights per register). */
  readonly weightRegisters: number;
  /** The estimate of registers per thread, and the most one thread may use with this block size. */
  readonly registersEstimate: number;
  readonly registerLimit: number;
  /** The model's cycles per step per batch tile (for choosing among layouts; not a prediction of time). */
  readonly costCycles: number;
}

export type RnnPlanResult =
  | { readonly fits: true; readonly plan: RnnKernelPlan }
  | { readonly fits: false; readonly reason: string };

/** Columns a thread's chunk index can reach: the padded K. */
export function paddedCols(plan: RnnKernelPlan): number {
  return plan.chunksPerThread * 4 * plan.threadsPerRowGroup;
}

/**
 * The cheapest register layout of one kernel of a layer, or why none fits. The search covers rows per thread
 * 1…rows and row-group widths of whole warps up to 1024 threads per CTA, keeps those whose weights, accumulators and
 * overhead fit the per-thread register limit of one CTA per SM, and picks the lowest cost: FMA issue and
 * shared-memory bandwidth per step (whichever bounds) plus the warp reduction.
 */
export function planRnnKernel(
  cell: RnnCellName,
  hidden: number,
  kind: RnnKernelKind,
  device: DeviceModel,
  precision: WeightPrecision = "fp32",
): RnnPlanResult {
  if (!Number.isInteger(hidden) || hidden < 1) {
    throw new RangeError(`planRnnKernel: hidden must be a positive integer; got ${hidden}`);
  }
  const G = gatesOf(cell);
  const unitsPerCta = Math.ceil(hidden / device.smCount);
  const ctas = Math.ceil(hidden / unitsPerCta);
  const rows = kind === "forward" ? unitsPerCta * G : unitsPerCta;
  const cols = kind === "forward" ? hidden : G * hidden;
  const perReg = precision === "fp16" ? 2 : 1;
  let best: RnnKernelPlan | undefined;
  let tightest = Number.POSITIVE_INFINITY;
  for (let rw = 1; rw <= rows; rw++) {
    const rowGroups = Math.ceil(rows / rw);
    if (rowGroups * rw - rows >= rw) continue; // a whole row group of padding
    for (let cg = 32; cg * rowGroups <= 1024; cg += 32) {
      const threads = cg * rowGroups;
      const chunks = Math.ceil(cols / (4 * cg));
      if ((chunks - 1) * 4 * cg >= cols) continue; // a whole chunk of padding
      const weightRegisters = Math.ceil((rw * chunks * 4) / perReg);
      const acc = rw * BATCH_TILE;
      const estimate = weightRegisters + acc + REGISTER_OVERHEAD + (precision === "fp16" ? FP16_OVERHEAD : 0);
      const limit = schedulerRegisterLimit(device, threads);
      tightest = Math.min(tightest, estimate - limit);
      if (estimate > limit) continue;
      // issue cycles of one SM sub-partition (4 per SM, one warp instruction per cycle each), shared-memory
      // bandwidth (128 B per cycle per SM) and the h loads from L2, partly overlapped
      const warps = threads / 32;
      const perSubPartition = Math.ceil(warps / 4);
      const fma = perSubPartition * rw * chunks * 4 * BATCH_TILE;
      const lds = Math.max((threads * chunks * BATCH_TILE * 16) / 128, perSubPartition * chunks * BATCH_TILE);
      const reduce = perSubPartition * Math.ceil(acc / 32) * 32;
      const loads = Math.ceil((BATCH_TILE * cols) / (4 * threads)) * 40;
      const cost = Math.max(fma, lds) + reduce + loads;
      if (best === undefined || cost < best.costCycles) {
        best = {
          cell,
          hidden,
          kind,
          precision,
          ctas,
          unitsPerCta,
          rows,
          cols,
          rowsPerThread: rw,
          rowGroups,
          threadsPerRowGroup: cg,
          chunksPerThread: chunks,
          threads,
          weightRegisters,
          registersEstimate: estimate,
          registerLimit: limit,
          costCycles: cost,
        };
      }
    }
  }
  if (best) return { fits: true, plan: best };
  const need = Math.ceil((rows * cols) / perReg);
  return {
    fits: false,
    reason:
      `a ${cell} layer of hidden ${hidden} needs ${need.toLocaleString("en-US")} ${precision} weight registers per CTA ` +
      `(${rows} rows × ${cols} columns over ${ctas} CTAs on ${device.smCount} SMs), more than one SM's ` +
      `${device.regsPerSm.toLocaleString("en-US")} registers allow with room for the arithmetic ` +
      `(over by about ${Math.max(1, Math.round(tightest))} registers per thread at best)`,
  };
}

/** Both kernels of a layer, or the first reason one does not fit. */
export function planRnnLayer(
  cell: RnnCellName,
  hidden: number,
  device: DeviceModel,
  precision: WeightPrecision = "fp32",
):
  | { readonly fits: true; readonly forward: RnnKernelPlan; readonly backward: RnnKernelPlan }
  | { readonly fits: false; readonly reason: string } {
  const f = planRnnKernel(cell, hidden, "forward", device, precision);
  if (!f.fits) return f;
  const b = planRnnKernel(cell, hidden, "backward", device, precision);
  if (!b.fits) return b;
  return { fits: true, forward: f.plan, backward: b.plan };
}

/**
 * The largest hidden size (a multiple of `step`) whose forward and backward kernels both fit: the number `vpps plan
 * rnn` prints and a refusal names. Fit is monotone in the hidden size for all practical purposes; a binary search
 * over multiples of `step` finds the boundary.
 */
export function largestPersistentHidden(
  cell: RnnCellName,
  device: DeviceModel,
  precision: WeightPrecision = "fp32",
  step = 32,
): number {
  const fits = (h: number) => planRnnLayer(cell, h, device, precision).fits;
  let lo = 0;
  let hi = 64;
  while (fits(hi * step)) {
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (fits(mid * step)) lo = mid;
    else hi = mid;
  }
  return lo * step;
}
