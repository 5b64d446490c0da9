/**
 * VPPS data-parallel (gradient-export) mode on the device: after a batch's kernel has exported its gradients (the
 * script ends after backward), its gradients are copied to the layout every rank shares (dp-lists.ts), summed over
 * the ranks by the GradientReducer in buckets, and the update kernels of host-update.ts step the weights from the
 * sums; everything queued on the kernel stream behind the launch, so `submit` stays asynchronous. The only host
 * exchange, the union of the ranks' touched lookup rows, must be complete before the launch (the lists depend on
 * it); it is started without waiting as soon as the batch is scheduled (`exchange`: the launcher holds the batch
 * until the other ranks' rows are in, while the host goes on with later batches), so that it neither blocks the
 * main thread nor ties the ranks' hosts to each other batch by batch.
 *
 * The clipping norm is summed with float atomics, in an order that differs from rank to rank: rank 0's is handed to
 * every rank (the others zero theirs, then one all-reduce of one float), so the ranks' weights stay bitwise equal.
 */
import { floatBits, type GpuContext } from "../../../cuda/index.js";
import type { GradientReducer } from "../../data-parallel.js";
import type { KernelVariant } from "../codegen/variant.js";
import type { HostTrace } from "../instrument/host-trace.js";
import type { ModelLayout } from "../plan/layout.js";
import type { AdamStep } from "../plan/moments.js";
import type { ScheduledBatch } from "../schedule/batch.js";
import { type DpExchange, startRowsExchange } from "./dp-exchange.js";
import {
  copyList,
  copyListWords,
  DP_ADAM_ENTRY,
  DP_COPY_ENTRY,
  DP_SGD_ENTRY,
  type DpBases,
  type DpLayout,
  dpLayout,
  touchedPairs,
  unionSlots,
  updateList,
  updateListWords,
} from "./dp-lists.js";
import type { HostUpdate } from "./host-update.js";
import type { DeviceRegions } from "./regions.js";

/**
 * Floats per all-reduce call (32 MiB), as DeviceParameters' DP_BUCKET_FLOATS: large enough that a call's fixed cost
 * is small against its transfer, small enough that a long region is several calls the reducer can pipeline.
 */
export const VPPS_DP_BUCKET_FLOATS = 8 << 20;

/** One batch's part of the exchange, known before its launch. */
export interface DpBatch {
  readonly union: Int32Array;
  readonly slots: Int32Array;
  /** Floats of `rest` the batch uses. */
  readonly used: number;
  /** Words its two lists may take behind the script. */
  readonly words: number;
  copyEntries: number;
  updateEntries: number;
  /** Word offsets of the lists from the script region's start. */
  copyAt: number;
  updateAt: number;
}

/** Adds the time since `t` to `phase`; returns now. */
function lap(trace: HostTrace, phase: "update" | "allreduce", t: number): number {
  const now = performance.now();
  trace.add(phase, now - t);
  return now;
}

export class DataParallelUpdate {
  readonly layout: DpLayout;
  /** The host timeline (runtime option), or undefined. */
  trace: HostTrace | undefined;

  /** Reserves the `rest` region at the end of the pool (no batch may be in flight). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly regions: DeviceRegions,
    private readonly hostUpdate: HostUpdate,
    readonly reducer: GradientReducer,
    readonly model: ModelLayout,
  ) {
    this.layout = dpLayout(model);
    regions.reserveRest(Math.max(64, this.layout.restCapacity), model.modelFloats);
    // the NCCL communicator's id exchange is a host collective: now, not inside the first launch, where it would
    // fall among gathers started earlier on one rank than on another
    reducer.initDevice?.();
  }

  get bases(): DpBases {
    const R = this.regions;
    return { master: R.master, grads: R.grads, pool: R.pool, rest: R.rest };
  }

  /**
   * Starts the exchange of the batch's touched rows with the other ranks (a collective: every rank starts the same
   * batches' exchanges in the same order), without waiting. `keep`: this rank asks to keep the union (dp-exchange.ts).
   */
  exchange(s: ScheduledBatch, keep = false): DpExchange {
    return startRowsExchange(this.reducer, this.model, touchedPairs(s.layout), keep);
  }

  /** The union of the ranks' touched rows (waits for the exchange to complete) and the lists' sizes. */
  prepare(s: ScheduledBatch, adam: boolean, exchange: DpExchange): DpBatch {
    const union = exchange.union();
    const { slot, used } = unionSlots(this.model, this.layout, union);
    const words = copyListWords(this.model, s.layout) + updateListWords(this.model, union, adam);
    return { union, slots: slot, used, words, copyEntries: 0, updateEntries: 0, copyAt: 0, updateAt: 0 };
  }

  /** Writes the batch's lists into `into` from word `at`; returns the words written. */
  write(s: ScheduledBatch, b: DpBatch, into: Uint32Array, at: number, adam: boolean): number {
    const bases = this.bases;
    b.copyAt = at;
    b.copyEntries = copyList(this.model, this.layout, s.layout, b.union, b.slots, bases, into, at);
    b.updateAt = at + DP_COPY_ENTRY * b.copyEntries;
    b.updateEntries = updateList(this.model, this.layout, b.union, b.slots, bases, into, b.updateAt, adam);
    return b.updateAt + (adam ? DP_ADAM_ENTRY : DP_SGD_ENTRY) * b.updateEntries - at;
  }

  /**
   * Behind the batch's kernel (lists at word offsets from `script`, the slot's script region): the GEMM-formed
   * gradients, the copy into `rest`, the sums over the ranks, the norm (rank 0's) and the update.
   */
  launch(
    v: KernelVariant,
    s: ScheduledBatch,
    b: DpBatch,
    script: number,
    lr: number,
    clip: number,
    adam: AdamStep | undefined,
  ): void {
    const ctx = this.ctx;
    const R = this.regions;
    const st = ctx.stream.handle;
    // a GEMM-strategy matrix without products this batch: its gradient region still holds an earlier batch's
    for (const m of v.plan.matrices) {
      if (m.gradients === "gemm" && s.layout.collectCount[m.index] === 0) {
        ctx.pool.fill(R.grads + m.masterOffset, m.rows * m.cols, 0, st);
      }
    }
    const trace = this.trace;
    let t = trace ? performance.now() : 0;
    this.hostUpdate.gemm(v, s);
    ctx.pool.fill(R.rest, b.used, 0, st);
    this.hostUpdate.copy(script + b.copyAt, b.copyEntries);
    if (trace) t = lap(trace, "update", t);
    this.allReduce(R.grads, v.plan.masterFloats);
    this.allReduce(R.rest, b.used);
    if (trace) t = lap(trace, "allreduce", t);
    const reducer = this.reducer;
    let normMs = 0;
    this.hostUpdate.step(script + b.updateAt, b.updateEntries, lr, clip, adam, (norm) => {
      if (reducer.worldSize === 1) return;
      const t0 = trace ? performance.now() : 0;
      if (reducer.rank !== 0) ctx.device.driver.memsetD32Async(norm, floatBits(0), 1, st);
      reducer.allReduceDevice(norm, 1, st);
      if (trace) normMs = performance.now() - t0;
    });
    if (trace) {
      trace.add("allreduce", normMs);
      trace.add("update", performance.now() - t - normMs);
    }
  }

  private allReduce(offset: number, floats: number): void {
    const st = this.ctx.stream.handle;
    for (let o = 0; o < floats; o += VPPS_DP_BUCKET_FLOATS) {
      this.reducer.allReduceDevice(this.regions.ptr(offset + o), Math.min(VPPS_DP_BUCKET_FLOATS, floats - o), st);
    }
  }

  /** Gives the `rest` region back to the pool (no batch may be in flight). */
  dispose(): void {
    this.regions.reserveRest(0, this.model.modelFloats);
  }
}
