/**
 * What the main thread needs of a scheduled batch once the script exists: the narrow view of a BatchSchedule that
 * the runtime (submit, host update, readGradients) and the engine read. An in-thread `BatchSchedule` satisfies it
 * as it is; a schedule worker sends `detachSchedule`'s copy (typed arrays only, so that it is cheap to transfer and
 * independent of the scheduler's reused layout arrays).
 */
import type { BatchSchedule } from "./scheduler.js";

/** The parts of a BatchLayout the host reads after scheduling. */
export interface ScheduledLayout {
  /** Where graph.inputData goes (graph.inputSize floats). */
  readonly inputStart: number;
  /** [gradStart, poolFloats) must be zero at launch. */
  readonly gradStart: number;
  readonly poolFloats: number;
  /** Per parameter index: the gradient slot of a vector parameter used in this batch, or -1. */
  readonly paramGrad: Int32Array;
  /** Lookup-table rows with a gradient: table (parameter index), row, gradient slot. */
  readonly lookupRows: {
    readonly table: ArrayLike<number>;
    readonly row: ArrayLike<number>;
    readonly offset: ArrayLike<number>;
  };
  /** GEMM-strategy matrices: where the ȳ rows and x rows of each product are collected, and how many. */
  readonly collectY: Int32Array;
  readonly collectX: Int32Array;
  readonly collectCount: Int32Array;
}

/** A batch ready to be submitted: its script and what the runtime needs to launch it and read it back. */
export interface ScheduledBatch {
  readonly layout: ScheduledLayout;
  /** Prefix sums, all processors' scripts and the shared operand table (script/format.ts). */
  readonly script: Uint32Array;
  /** Barrier counters the script uses (zeroed before the launch). */
  readonly barriers: number;
  /** "kernel": the script ends with the update; "host": gradients are exported and the host updates. */
  readonly update: "kernel" | "host";
  readonly lossOffset: number;
  readonly liveNodes: number;
  /** The gradient buffer must be zero at launch (tile.wbar instructions add into it). */
  readonly zeroGradients: boolean;
}

/**
 * A copy of the narrow part of `s` that owns all its memory (the script is taken as it is: a BatchSchedule's script
 * is its own). The layout's arrays are copied because the scheduler reuses them two batches later.
 */
export function detachSchedule(s: BatchSchedule): ScheduledBatch {
  const L = s.layout;
  return {
    layout: {
      inputStart: L.inputStart,
      gradStart: L.gradStart,
      poolFloats: L.poolFloats,
      paramGrad: L.paramGrad.slice(),
      lookupRows: {
        table: Int32Array.from(L.lookupRows.table),
        row: Int32Array.from(L.lookupRows.row),
        offset: Int32Array.from(L.lookupRows.offset),
      },
      collectY: L.collectY.slice(),
      collectX: L.collectX.slice(),
      collectCount: L.collectCount.slice(),
    },
    script: s.script,
    barriers: s.barriers,
    update: s.update,
    lossOffset: s.lossOffset,
    liveNodes: s.liveNodes,
    zeroGradients: s.zeroGradients,
  };
}

/** The buffers of a detached batch, for a `postMessage` transfer list. */
export function scheduledBuffers(b: ScheduledBatch): ArrayBuffer[] {
  const L = b.layout;
  const all = [b.script, L.paramGrad, L.collectY, L.collectX, L.collectCount];
  for (const a of [L.lookupRows.table, L.lookupRows.row, L.lookupRows.offset]) if (a instanceof Int32Array) all.push(a);
  const out = new Set<ArrayBuffer>();
  for (const a of all) if (a.buffer instanceof ArrayBuffer) out.add(a.buffer);
  return [...out];
}
