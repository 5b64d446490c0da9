// The seam between the engines and data-parallel training (src/parallel/, issue 20). The engines layer sits below
// parallel/, so the engines see only this interface: a process group that sums arrays over all ranks. parallel/
// implements it over NCCL (device arrays) and over its TCP rendezvous connection (host arrays), and drives the
// engines through `setGradientReducer`.
//
// The training loss is a SUM over the batch's loss units, so the gradient of the global batch is the sum of the
// ranks' gradients: every rank sums, then applies the same update (clipping from the same global norm) to the same
// parameters, and the parameters stay equal on every rank without being broadcast again.

import type { DevicePtr, Handle } from "../cuda/index.js";
import type { Engine } from "./engine.js";

/** What a data-parallel process group offers an engine: sums over all ranks. */
export interface GradientReducer {
  readonly rank: number;
  readonly worldSize: number;
  /**
   * Sums `count` float32 values at device address `ptr` over all ranks, in place, queued on `stream` (a CUstream
   * handle) after the work already queued there; nothing waits. Callers bucket large buffers themselves.
   */
  allReduceDevice(ptr: DevicePtr, count: number, stream: Handle): void;
  /** Sums a host array over all ranks, in place; returns when every rank's contribution is in. */
  allReduceHost(data: Float32Array | Float64Array): void;
  /** Every rank's `data` (small host arrays, e.g. the touched rows of a lookup table), in rank order. */
  allGatherHost(data: Int32Array): Int32Array[];
}

/** An engine that can train data-parallel. */
export interface DataParallelEngine extends Engine {
  /**
   * From now on (until called with null), the gradients are summed over `reducer`'s ranks before every update, and
   * the update is applied after the sum (VPPS: its kernel exports the weight gradients instead of updating in place).
   */
  setGradientReducer(reducer: GradientReducer | null): void;
}

/** Whether `e` can train data-parallel. */
export function supportsDataParallel(e: Engine): e is DataParallelEngine {
  return typeof (e as Partial<DataParallelEngine>).setGradientReducer === "function";
}
