/**
 * A sparse layer's two kernels with the widest wide loads that fit, and the largest sparse layer of a cell at a density
 * and batch (what `vpps plan rnn --density` prints and docs/RNN.md tables), beside the dense one.
 */
import type { DeviceModel } from "../../cuda/hw/device-model.js";
import type { RnnCellName, RnnKernelKind } from "./dense.js";
import {
  type CtasPerSm,
  planSparseRnnKernel,
  type SparseBound,
  type SparseIndexBits,
  type SparseMiss,
  type SparseRnnKernelPlan,
  type SparseRnnPlanResult,
  type WideLoad,
} from "./sparse.js";

export interface SparseLayerOptions {
  readonly density: number;
  /** Sequences of a launch: the batch tile is the widest wide load (4, 2, 1) not above it. Default 4. */
  readonly batch?: number;
  readonly indexBits?: SparseIndexBits;
  /** From a mask (`sparsePairsPerRow`); defaults as in SparsePlanOptions. */
  readonly forwardPairsPerRow?: number;
  readonly backwardPairsPerRow?: number;
  /** Copies of the layer a launch runs side by side (SparsePlanOptions.replicas; default 1). */
  readonly replicas?: number;
  /** Only layouts of this many threads per row group (SparsePlanOptions.threadsPerRowGroup; default: any). */
  readonly threadsPerRowGroup?: number;
  /** CTAs resident on one SM (SparsePlanOptions.ctasPerSm; default 1). */
  readonly ctasPerSm?: CtasPerSm;
  /** The widest batch tile to try (default: the widest the batch fills). */
  readonly maxBatchTile?: WideLoad;
  /** Padding slots per piece for the balanced bank-aware order (SparsePlanOptions.slack; default "auto"). */
  readonly slack?: number | "auto";
}

/** The widest wide load a batch of `batch` sequences fills. */
export function batchTileFor(batch: number): WideLoad {
  if (!Number.isInteger(batch) || batch < 1)
    throw new RangeError(`batchTileFor: batch must be a positive integer; got ${batch}`);
  return batch >= 4 ? 4 : batch >= 2 ? 2 : 1;
}

export type SparseLayerResult =
  | { readonly fits: true; readonly forward: SparseRnnKernelPlan; readonly backward: SparseRnnKernelPlan }
  | SparseMiss;

/** One kernel of a layer with the widest wide load that fits (see planSparseRnnLayer). */
export function planSparseRnnWidest(
  cell: RnnCellName,
  hidden: number,
  kind: RnnKernelKind,
  device: DeviceModel,
  options: SparseLayerOptions,
): SparseRnnPlanResult {
  const widest = Math.min(batchTileFor(options.batch ?? 4), options.maxBatchTile ?? 4);
  let miss: SparseMiss | undefined;
  for (const bt of [4, 2, 1] as const) {
    if (bt > widest) continue;
    const r = planSparseRnnKernel(cell, hidden, kind, device, {
      density: options.density,
      batchTile: bt,
      indexBits: options.indexBits,
      pairsPerRow: kind === "forward" ? options.forwardPairsPerRow : options.backwardPairsPerRow,
      ...(options.replicas === undefined ? {} : { replicas: options.replicas }),
      ...(options.threadsPerRowGroup === undefined ? {} : { threadsPerRowGroup: options.threadsPerRowGroup }),
      ...(options.ctasPerSm === undefined ? {} : { ctasPerSm: options.ctasPerSm }),
      ...(options.slack === undefined ? {} : { slack: options.slack }),
    });
    if (r.fits) return r;
    miss = r;
    if (r.bound === "index-bits") break; // no tile changes it
  }
  return miss!;
}

/** The forward kernel of a layer (inference), with the widest wide load that fits. */
export function planSparseRnnForward(
  cell: RnnCellName,
  hidden: number,
  device: DeviceModel,
  options: SparseLayerOptions,
): SparseRnnPlanResult {
  return planSparseRnnWidest(cell, hidden, "forward", device, options);
}

/**
 * Both kernels of a sparse layer, or the reason one does not fit. Each kernel takes the widest wide load its batch
 * fills and, where that layout does not fit, the next narrower (the paper's ld.shared.v2 for large layers: half the
 * shared memory of h and half the accumulators, twice the tiles per step); the reason of a miss is that of the
 * narrowest.
 */
export function planSparseRnnLayer(
  cell: RnnCellName,
  hidden: number,
  device: DeviceModel,
  options: SparseLayerOptions,
): SparseLayerResult {
  const f = planSparseRnnWidest(cell, hidden, "forward", device, options);
  if (!f.fits) return f;
  const b = planSparseRnnWidest(cell, hidden, "backward", device, options);
  if (!b.fits) return b;
  return { fits: true, forward: f.plan, backward: b.plan };
}

export interface SparseLimitOptions {
  readonly indexBits?: SparseIndexBits;
  /** Multiples of this are searched (default 32). */
  readonly step?: number;
  /** The forward kernel alone (inference), not both (training, the default). */
  readonly forwardOnly?: boolean;
}

export interface SparseLimit {
  /** The largest hidden size (a multiple of `step`) whose forward and backward kernels both fit. */
  readonly hidden: number;
  /** What stops the next size up, in which kernel, and why. */
  readonly bound: SparseBound;
  readonly kind: RnnKernelKind;
  readonly reason: string;
}

/**
 * The largest sparse layer of a cell at a density and batch, and what bounds it (the reason the next size up does
 * not fit). Fit is monotone in the hidden size for practical purposes (as for dense layers); a binary search over
 * multiples of `step` finds the boundary.
 */
export function sparseLimit(
  cell: RnnCellName,
  density: number,
  device: DeviceModel,
  batch = 4,
  options: SparseLimitOptions = {},
): SparseLimit {
  const step = options.step ?? 32;
  const at = (h: number): SparseRnnPlanResult | SparseLayerResult => {
    const o = { density, batch, indexBits: options.indexBits };
    return options.forwardOnly ? planSparseRnnForward(cell, h, device, o) : planSparseRnnLayer(cell, h, device, o);
  };
  let lo = 0;
  let hi = 64;
  let miss = at(hi * step);
  while (miss.fits) {
    lo = hi;
    hi *= 2;
    miss = at(hi * step);
  }
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    const r = at(mid * step);
    if (r.fits) lo = mid;
    else {
      hi = mid;
      miss = r;
    }
  }
  if (miss.fits) throw new Error("sparseLimit: the search ended on a size that fits");
  return { hidden: lo * step, bound: miss.bound, kind: miss.kind, reason: miss.reason };
}

/** The largest sparse hidden size of a cell at a density and batch (`sparseLimit`'s hidden). */
export function largestSparseHidden(
  cell: RnnCellName,
  density: number,
  device: DeviceModel,
  batch = 4,
  options: SparseLimitOptions = {},
): number {
  return sparseLimit(cell, density, device, batch, options).hidden;
}

/**
 * How many times the parameters of the unpruned matrix a sparse layer of hidden `sparse` has over a dense one of
 * hidden `dense` (G·H² each): (sparse / dense)².
 */
export function denseEquivalentRatio(sparse: number, dense: number): number {
  return (sparse / dense) ** 2;
}
