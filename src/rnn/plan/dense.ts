/**
 * How a dense persistent recurrent layer is laid out on a GPU: which CTA owns which units, how each CTA's block of
 * the recurrent matrix is spread over its threads' registers, and whether it fits at all — derived from the device
 * model (SM count, register file), never from per-GPU tables.
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
import { type DeviceModel, schedulerRegisterLimit } from "../../cuda/hw/device-model.js";
import { gatesOf, type RnnCell, type RnnPrecision } from "../spec.js";

/** The recurrent cells (PyTorch/cuDNN forms): the spec's RnnCell, under the planner's name. */
export type RnnCellName = RnnCell;

/** How the weights are stored in registers; the arithmetic is fp32 either way (the API's `precision`, spec.ts). */
export type WeightPrecision = RnnPrecision;

export type RnnKernelKind = "forward" | "backward";

/** Batch columns a CTA processes at once (its accumulators are rows × BATCH_TILE); larger batches loop over tiles. */
export const BATCH_TILE = 4;

/** Registers a thread needs besides its weights and accumulators (addresses, loop state, the cell math). */
export const REGISTER_OVERHEAD = 40;

/**
 * The backward cell holds more (the saved gates, c, the outer gradients, fetched before the poll): with 512 threads
 * (a 128-register limit) ptxas spills a layout the base overhead admits (LSTM 256/512 with 16–32 units per CTA).
 */
export const BACKWARD_EXTRA_OVERHEAD = 8;
const TIGHT_LIMIT_MARGIN = 8;

/**
 * Registers per thread kept free under a per-thread limit below 255, where ptxas spilled layouts the estimate put at or
 * near it: at 512 threads (128 registers) exactly at it, and NVRTC 13 the pipelined forward of one 8 under it (LSTM
 * 1024, est. 120); at 288–384 threads (168) nvcc 13.0 layouts exactly at it (LSTM 640 backward 20 bytes, GRU 896
 * forward, fp16 LSTM 1536 forward 40 bytes, in a sweep of every planned layout). Twice the margin at 128. The layouts
 * it moves measured faster where measured on an H100: LSTM 1024's forward on 256 threads (batch 1 and 4: 7–10%), GRU
 * 1152's backward on 256 (forward+backward at batch 4: 17%).
 */
export function registerMargin(limit: number): number {
  return limit === 128 ? 2 * TIGHT_LIMIT_MARGIN : limit <= 168 ? TIGHT_LIMIT_MARGIN : 0;
}

/** fp16 storage needs a few more: the unpacked pair of each row while its batch columns use it. */
const FP16_OVERHEAD = 16;

export interface RnnKernelPlan {
  readonly cell: RnnCellName;
  readonly hidden: number;
  readonly kind: RnnKernelKind;
  readonly precision: WeightPrecision;
  /**
   * CTAs of one replica, one per SM at most; CTA c of a replica owns units [c·unitsPerCta, (c+1)·unitsPerCta) ∩
   * [0, hidden). A launch runs 1…`replicas` replicas side by side (grid = ctas × replicas), each on its own share of
   * the batch's sequences with its own copy of the weights.
   */
  readonly ctas: number;
  /** The most replicas a launch can run at once: one CTA per SM, ⌊SMs / ctas⌋. */
  readonly replicas: number;
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
 * The cheapest register layout of one kernel of a layer, or why none fits. `replicas` spreads the layer over
 * ⌊SMs / replicas⌋ CTAs instead of all SMs (more units and weights per CTA), so that that many copies of it can run
 * at once on different sequences of a batch (see `rnnLayouts`). The search covers rows per thread
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
  replicas = 1,
  /** More units per CTA than the replicas imply (fewer CTAs), e.g. for a grid that divides into clusters of 4. */
  unitsPerCtaAtLeast = 0,
  /**
   * Registers per thread kept free beyond the estimate: the JIT re-plans with some where ptxas spilled the planned
   * layout (the estimate is a model; `PersistentRnnLayer.create`).
   */
  headroom = 0,
): RnnPlanResult {
  if (!Number.isInteger(hidden) || hidden < 1) {
    throw new RangeError(`planRnnKernel: hidden must be a positive integer; got ${hidden}`);
  }
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > device.smCount) {
    throw new RangeError(`planRnnKernel: replicas must be an integer in 1…${device.smCount}; got ${replicas}`);
  }
  if (hidden % 4 !== 0) {
    const below = hidden - (hidden % 4);
    return {
      fits: false,
      reason:
        `hidden ${hidden} is not a multiple of 4 (the kernels load h as 16-byte vectors)` +
        (below > 0 ? `; the nearest that are: ${below} and ${below + 4}` : "; the smallest that is: 4"),
    };
  }
  const G = gatesOf(cell);
  const unitsPerCta = Math.max(unitsPerCtaAtLeast, Math.ceil(hidden / Math.floor(device.smCount / replicas)));
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
      if (unitsPerCta * BATCH_TILE > threads) continue; // the cell needs a thread per (unit, batch column) of a tile
      const chunks = Math.ceil(cols / (4 * cg));
      if ((chunks - 1) * 4 * cg >= cols) continue; // a whole chunk of padding
      const weightRegisters = Math.ceil((rw * chunks * 4) / perReg);
      const acc = rw * BATCH_TILE;
      const estimate =
        weightRegisters +
        acc +
        REGISTER_OVERHEAD +
        (kind === "backward" ? BACKWARD_EXTRA_OVERHEAD : 0) +
        (precision === "fp16" ? FP16_OVERHEAD : 0);
      const limit = schedulerRegisterLimit(device, threads);
      const margin = registerMargin(limit);
      tightest = Math.min(tightest, estimate + margin + headroom - limit);
      if (estimate + margin + headroom > limit) continue;
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
          replicas: Math.floor(device.smCount / ctas),
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
  if (!Number.isFinite(tightest)) {
    // no block size was even tried: the cell needs a thread per (unit, batch column) of a tile
    return {
      fits: false,
      reason:
        `a ${cell} layer of hidden ${hidden} has ${unitsPerCta} units per CTA (${ctas} CTAs on ${device.smCount} SMs), ` +
        `and the cell needs a thread for each unit and each of the ${BATCH_TILE} sequences of a batch tile: ` +
        `${unitsPerCta * BATCH_TILE} threads, more than a CTA's 1024`,
    };
  }
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

/** Both kernels of a layer (the same units per CTA), or the first reason one does not fit. */
export function planRnnLayer(
  cell: RnnCellName,
  hidden: number,
  device: DeviceModel,
  precision: WeightPrecision = "fp32",
  replicas = 1,
  unitsPerCtaAtLeast = 0,
  headroom = 0,
): { readonly fits: true; readonly forward: RnnKernelPlan; readonly backward: RnnKernelPlan } | RnnPlanMiss {
  const f = planRnnKernel(cell, hidden, "forward", device, precision, replicas, unitsPerCtaAtLeast, headroom);
  if (!f.fits) return f;
  const b = planRnnKernel(cell, hidden, "backward", device, precision, replicas, unitsPerCtaAtLeast, headroom);
  if (!b.fits) return b;
  return { fits: true, forward: f.plan, backward: b.plan };
}

type RnnPlanMiss = { readonly fits: false; readonly reason: string };

/** One way to lay a layer out: both kernels with the same units per CTA (and so the same replicas). */
export interface RnnLayout {
  readonly forward: RnnKernelPlan;
  readonly backward: RnnKernelPlan;
}

/**
 * Every layout of a fitting layer, from the widest spread (all SMs, the fastest per step on one batch tile) to the
 * most replicas whose weights still fit the registers, one per distinct units-per-CTA. A small layer fills a few SMs'
 * registers: its replicas run the batch's sequences side by side, so a step of a large batch polls fewer rows and
 * loops over fewer tiles in each CTA (the same FMAs per SM). Empty if the layer does not fit at all.
 */
export function rnnLayouts(
  cell: RnnCellName,
  hidden: number,
  device: DeviceModel,
  precision: WeightPrecision = "fp32",
  /** Registers per thread kept free beyond the estimate (see planRnnKernel). */
  headroom = 0,
): RnnLayout[] {
  const out: RnnLayout[] = [];
  let lastUnits = 0;
  for (let r = 1; r <= device.smCount; r++) {
    const units = Math.ceil(hidden / Math.floor(device.smCount / r));
    if (units === lastUnits) continue;
    lastUnits = units;
    const p = planRnnLayer(cell, hidden, device, precision, r, 0, headroom);
    if (!p.fits) break; // more units per CTA never fit better
    out.push({ forward: p.forward, backward: p.backward });
    if (p.forward.ctas === 1) break;
  }
  return out;
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
