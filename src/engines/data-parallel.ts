// The seam between the engines and data-parallel training (src/parallel/). The engines layer sits below
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
  /**
   * `allGatherHost` started without waiting for the other ranks (optional: `startGather` falls back to the blocking
   * call). Host collectives finish in the order they were started, blocking ones included, so every rank must start
   * them in the same order.
   */
  startAllGatherHost?(data: Int32Array): PendingHostGather;
  /**
   * Makes the device communicator now (a collective; optional). An engine that starts host collectives without
   * waiting calls it first, so that the communicator's own setup cannot fall between its gathers on one rank and
   * not on another.
   */
  initDevice?(): void;
}

/** A host gather on its way (`GradientReducer.startAllGatherHost`). */
export interface PendingHostGather {
  /** Whether the result has arrived (never waits). */
  ready(): boolean;
  /** Every rank's array, in rank order; waits for the other ranks when not `ready()`. */
  wait(): Int32Array[];
}

/** Starts a gather on `reducer` without waiting where it can; a reducer that cannot gathers at once. */
export function startGather(reducer: GradientReducer, data: Int32Array): PendingHostGather {
  if (reducer.startAllGatherHost) return reducer.startAllGatherHost(data);
  const parts = reducer.allGatherHost(data);
  return { ready: () => true, wait: () => parts };
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
