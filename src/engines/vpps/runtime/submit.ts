/**
 * VPPS on one GPU: one batch's upload → launch → read-back, several in flight through BatchPipeline, over the
 * device regions of regions.ts (and the host update of host-update.ts where a plan forms gradients by GEMM).
 *
 * Only what must run between two kernels is on the context's (kernel) stream: the inputs' copy, the memset of the
 * pool's gradient region, the launch (and the host update). The script's copy runs on an upload stream into the
 * slot's script region, after the slot's previous batch is done with it (event `finished`), and the kernel waits for
 * it (event `copied`), so it overlaps the kernel before. The kernel zeroes the barrier counters the previous launch
 * used (the other region) in its prologue. The CTA that finishes last stores the loss into the slot's status block,
 * and the status words and the loss are read back on a read-back stream after `finished` (the slot's block is not
 * written again before the slot is reused); the error words stay zero without an error, and the block is zeroed
 * again after one is reported. Each copy or memset taken off the kernel stream this way is GPU time between two
 * kernels saved, which is what small batches are made of (docs/journal/vpps.md).
 */
import {
  CudaEvent,
  CudaStream,
  formatBytes,
  type GpuContext,
  karg,
  PinnedBuffer,
  type PoolStats,
} from "../../../cuda/index.js";
import { UserError } from "../../../util/errors.js";
import type { GradientReducer } from "../../data-parallel.js";
import { STATUS_LOSS, STATUS_WORDS } from "../codegen/interpreter.js";
import { adamArgs, type KernelVariant } from "../codegen/variant.js";
import type { HostTrace } from "../instrument/host-trace.js";
import type { ModelLayout } from "../plan/layout.js";
import type { AdamStep } from "../plan/moments.js";
import type { ScheduledBatch } from "../schedule/batch.js";
import type { DpExchange } from "./dp-exchange.js";
import { DataParallelUpdate, type DpBatch } from "./dp-update.js";
import { ADAM_ENTRY, HostUpdate, SGD_ENTRY } from "./host-update.js";
import { BatchPipeline, PIPELINE_SLOTS, type SlotDevice } from "./pipeline.js";
import { DeviceRegions, MAX_BARRIERS, STATUS_BLOCK_WORDS } from "./regions.js";

export type { KernelVariant } from "../codegen/variant.js";
export { MAX_BARRIERS } from "./regions.js";

/** Words of a status block read back after each batch: the error words and the loss (codegen/interpreter.ts). */
const READ_WORDS = STATUS_LOSS + 1;

interface Slot {
  pinned: PinnedBuffer;
  /** The batch's status words and loss (read-back stream). */
  readonly out: PinnedBuffer;
  /** The script's copy into the slot's region has completed (upload stream). */
  readonly copied: CudaEvent;
  /** The batch's device work (kernel, host update) has completed (kernel stream): its regions may be reused. */
  readonly finished: CudaEvent;
  /** The batch and its read-back have completed (read-back stream). */
  readonly done: CudaEvent;
  readonly start: CudaEvent;
  readonly stop: CudaEvent;
  /** Data-parallel mode: after the batch's all-reduces and update (the kernel's own time ends at `stop`). */
  readonly dpStop: CudaEvent;
  timed: boolean;
  /** `dpStop` was recorded for the batch. */
  dpTimed: boolean;
  variant: KernelVariant | undefined;
}

/**
 * Where the kernel's time went, per completed timed batch: its kernel ms (CUDA events around the launch and its
 * host-update work) and, when the batch before was timed too, the ms the kernel stream spent between that batch's
 * end and this one's start (copies and memsets between kernels, and any wait for the host); in data-parallel mode,
 * `afterMs`: the batch's all-reduces and update after its kernel (the batch ends after them).
 */
export type KernelTimeSink = (
  variant: KernelVariant,
  batch: number,
  ms: number,
  gapMs: number | undefined,
  afterMs?: number,
) => void;

export interface RuntimeOptions {
  readonly masterFloats: number;
  readonly modelFloats: number;
  /** Words reserved for one batch's script (and update list), in each slot's region. */
  readonly scriptWords: number;
  /** Batches in flight on the GPU (pipeline.ts); default PIPELINE_SLOTS. */
  readonly slots?: number;
  /** Floats reserved for the script's pool (model region included); default: what the context's pool has left. */
  readonly poolFloats?: number;
  /** CTAs to reserve a kernel trace for (codegen/template.ts TRACE_SLOTS u64 each); 0 or absent: none. */
  readonly traceCtas?: number;
}

export class VppsRuntime {
  readonly regions: DeviceRegions;
  private readonly hostUpdate: HostUpdate;
  /** The script of the last traced launch, which the trace is read against. */
  private lastTraced: { script: Uint32Array; ctas: number } | undefined;
  /** The barrier region (0 or 1) of the next launch, and how many counters the last launch used in the other. */
  private barrierRegion = 0;
  private staleBarriers = 0;
  /** Script copies into the slots' regions; the read-backs of the slots' status blocks. */
  private readonly upload: CudaStream;
  private readonly readback: CudaStream;
  private readonly slots: Slot[];
  readonly pipeline: BatchPipeline;
  private lastVariant = "vpps";
  /** The most pool floats any submitted batch used (the region is reserved whole; this is what batches touch). */
  private peakPoolFloats = 0;
  /** Called with each timed batch's kernel milliseconds. */
  onKernelTime: KernelTimeSink | undefined;
  /** An event on the kernel stream that timed batches' events are measured from (see `retired`). */
  private readonly anchor: CudaEvent;
  private lastStop: number | undefined;
  private lastStopBatch = -1;
  /** Data-parallel mode: the gradients are summed over the reducer's ranks, then the update runs (dp-update.ts). */
  private dp: DataParallelUpdate | undefined;
  private hostTrace: HostTrace | undefined;

  constructor(
    readonly ctx: GpuContext,
    opts: RuntimeOptions,
  ) {
    const slotCount = opts.slots ?? PIPELINE_SLOTS;
    this.regions = new DeviceRegions(ctx, {
      masterFloats: opts.masterFloats,
      modelFloats: opts.modelFloats,
      slots: slotCount,
      scriptWords: opts.scriptWords,
      ...(opts.poolFloats !== undefined ? { poolFloats: opts.poolFloats } : {}),
      ...(opts.traceCtas !== undefined ? { traceCtas: opts.traceCtas } : {}),
    });
    this.hostUpdate = new HostUpdate(ctx, this.regions);
    this.upload = CudaStream.create({ nonBlocking: true });
    this.readback = CudaStream.create({ nonBlocking: true });
    this.slots = Array.from({ length: slotCount }, () => ({
      pinned: PinnedBuffer.alloc(1 << 20),
      out: PinnedBuffer.alloc(4 * READ_WORDS),
      copied: CudaEvent.create({ timing: false }),
      finished: CudaEvent.create({ timing: false }),
      done: CudaEvent.create({ timing: false }),
      start: CudaEvent.create(),
      stop: CudaEvent.create(),
      dpStop: CudaEvent.create(),
      timed: false,
      dpTimed: false,
      variant: undefined,
    }));
    const slots = this.slots;
    const regions = this.regions;
    const device: SlotDevice = {
      wait: (s) => slots[s]!.done.synchronize(),
      done: (s) => slots[s]!.done.query(),
      loss: (s) => slots[s]!.out.f32[STATUS_LOSS]!,
      status: (s) => {
        const words = slots[s]!.out.i32.subarray(0, STATUS_WORDS);
        // the kernel leaves the words zero only without an error: clear them (and the count of finished CTAs,
        // which processors that stopped early never bumped) before the slot's next launch
        if (words[0] !== 0) ctx.pool.fill(regions.statusBlock(s), STATUS_BLOCK_WORDS, 0, ctx.stream.handle);
        return words;
      },
      retired: (s, batch) => {
        const slot = slots[s]!;
        if (slot.timed && slot.variant && this.onKernelTime) {
          // the GPU's idle time before this kernel: from the previous timed batch's end (kept as a time since
          // the anchor, since that batch's slot may be reused by now), when it was the batch just before
          const start = slot.start.elapsedMsSince(this.anchor);
          const idle =
            this.lastStop !== undefined && this.lastStopBatch === batch - 1 ? start - this.lastStop : undefined;
          const end = slot.dpTimed ? slot.dpStop : slot.stop;
          this.lastStop = end.elapsedMsSince(this.anchor);
          this.lastStopBatch = batch;
          const after = slot.dpTimed ? slot.dpStop.elapsedMsSince(slot.stop) : undefined;
          this.onKernelTime(slot.variant, batch, slot.stop.elapsedMsSince(slot.start), idle, after);
        }
      },
    };
    this.pipeline = new BatchPipeline(device, () => this.lastVariant, slotCount);
    this.anchor = CudaEvent.create().record(ctx.stream);
  }

  /**
   * The device pool's numbers as far as VPPS uses it: the script pool takes everything left at creation, so the
   * pool's own peak is its capacity; here used and peak end at the largest batch's pool instead (weights,
   * gradients, script, counters, then the model region and the biggest batch's values and gradients).
   */
  poolStats(): PoolStats {
    const s = this.ctx.pool.stats();
    const touched = 4 * (this.regions.pool + this.peakPoolFloats);
    return { ...s, usedBytes: touched, peakBytes: touched };
  }

  /** Copies the parameters' host values to the device (matrices to the master copy, the rest to the model region). */
  uploadWeights(model: ModelLayout, values: readonly Float32Array[]): void {
    this.regions.uploadWeights(model, values);
  }

  /** Reads the device's weights into the parameters' host values (waits for every queued batch). */
  downloadWeights(model: ModelLayout, values: readonly Float32Array[]): void {
    this.pipeline.drain();
    this.regions.downloadWeights(model, values);
  }

  /**
   * Per parameter, its gradient from the last completed batch (`schedule` must be that batch's, scheduled with
   * `exportGradients` or on a host-update plan). Lookup tables: zero outside the rows the batch touched.
   */
  readGradients(model: ModelLayout, schedule: ScheduledBatch): Float32Array[] {
    this.pipeline.drain();
    return this.regions.readGradients(model, schedule);
  }

  /**
   * From the next batch on, sums the gradients over `reducer`'s ranks before the update, which runs after the
   * kernel (the batches must be scheduled in export mode: `update: "host"`); null: this process alone. Waits for
   * every queued batch (the `rest` region is taken from the pool's end).
   */
  setGradientReducer(reducer: GradientReducer | null, model: ModelLayout): void {
    this.pipeline.drain();
    this.ctx.synchronize();
    this.dp?.dispose();
    this.dp = undefined;
    if (reducer !== null) {
      this.dp = new DataParallelUpdate(this.ctx, this.regions, this.hostUpdate, reducer, model);
      this.dp.trace = this.hostTrace;
    }
  }

  get dataParallel(): boolean {
    return this.dp !== undefined;
  }

  /** The host timeline that `submit` adds its phases to (host-trace.ts), or undefined: none. */
  get trace(): HostTrace | undefined {
    return this.hostTrace;
  }
  set trace(t: HostTrace | undefined) {
    this.hostTrace = t;
    if (this.dp) this.dp.trace = t;
  }

  /**
   * Data-parallel mode, a batch that steps (learning rate > 0): starts the exchange of its touched rows with the other
   * ranks without waiting, to be handed to `submit`. Every rank must start its batches' exchanges in the same order
   * (the batches' order). `keep`: this rank asks to keep the union (dp-exchange.ts). Undefined when the batch needs
   * none.
   */
  startExchange(s: ScheduledBatch, lr: number, keep = false): DpExchange | undefined {
    return this.dp !== undefined && lr > 0 ? this.dp.exchange(s, keep) : undefined;
  }

  /** Zeroes Adam's moments of `model` (allocated the first time), behind every earlier batch. */
  resetMoments(model: ModelLayout): void {
    this.regions.resetMoments(model);
  }

  /** Sets Adam's moments (momentLayout's layout) behind every earlier batch, after resetMoments; waits. */
  writeMoments(moments: Float32Array): void {
    this.regions.writeMoments(moments);
  }

  /** Adam's moments as momentLayout lays them out (waits for every queued batch); undefined before resetMoments. */
  readMoments(): Float32Array | undefined {
    if (this.regions.moments === 0) return undefined;
    this.pipeline.drain();
    return this.regions.readMoments();
  }

  /**
   * Queues one scheduled batch on `variant` and returns the previous batch's loss (NaN for the first). `inputs` are
   * the graph's input values (`inputData[0, inputSize)`, copied to the pinned buffer here). `timed` records CUDA
   * events around the batch's device work. `adam`: the batch's Adam step (its script was scheduled for Adam, or
   * its host update does Adam), after resetMoments; undefined for SGD. `exchange`: data-parallel mode, the batch's
   * exchange from `startExchange` (waited for here if not complete); none given, it is started here and waited for.
   */
  submit(
    variant: KernelVariant,
    s: ScheduledBatch,
    inputs: Float32Array,
    lr: number,
    clip: number,
    timed: boolean,
    adam?: AdamStep,
    exchange?: DpExchange,
  ): number {
    const trace = this.hostTrace;
    const t0 = trace ? performance.now() : 0;
    const before = trace ? trace.counted() : 0;
    const L = s.layout;
    const R = this.regions;
    if (this.dp !== undefined && s.update !== "host") {
      throw new Error("VPPS: a batch scheduled to update in the kernel was submitted in data-parallel mode");
    }
    // data-parallel mode: the exchange and update of dp-update.ts, for batches that step (learning rate 0: none)
    const dp = this.dp !== undefined && lr > 0 ? this.dp : undefined;
    const host = s.update === "host" && this.dp === undefined;
    if (adam !== undefined && R.moments === 0) throw new Error("VPPS: an Adam batch before resetMoments()");
    if (L.poolFloats > R.poolFloats) {
      throw new UserError(
        `VPPS: the batch needs ${formatBytes(4 * L.poolFloats)} of the device pool (its values and gradients), and ` +
          `the pool holds ${formatBytes(4 * R.poolFloats)}: train with a smaller --batch, or on a GPU with more free memory`,
      );
    }
    if (s.barriers > MAX_BARRIERS) {
      throw new UserError(
        `VPPS: the batch uses ${s.barriers} barriers (one per step and producer class: its depth sets them); at most ` +
          `${MAX_BARRIERS}: train with a smaller --batch or shallower examples`,
      );
    }
    if (L.poolFloats > this.peakPoolFloats) this.peakPoolFloats = L.poolFloats;
    // the ranks' touched rows, before the slot is taken: when not in yet, this waits for every rank to reach this batch
    let dpBatch: DpBatch | undefined;
    if (dp !== undefined) {
      const x = exchange ?? dp.exchange(s);
      const t = trace ? performance.now() : 0;
      dpBatch = dp.prepare(s, adam !== undefined, x);
      if (trace) trace.add("exchange", performance.now() - t);
    }
    const t1 = trace ? performance.now() : 0;
    const slot = this.pipeline.begin();
    if (trace) trace.add("slot", performance.now() - t1);
    const S = this.slots[slot]!;
    const scriptWords = s.script.length;
    const listMax = host ? this.hostUpdate.listWords(variant.model, s, adam !== undefined) : (dpBatch?.words ?? 0);
    if (scriptWords + listMax > R.scriptWords) {
      throw new UserError(
        `VPPS: the batch script has ${scriptWords + listMax} words; the device region holds ${R.scriptWords} ` +
          "(vpps.ts SCRIPT_WORDS): train with a smaller --batch",
      );
    }
    const inputSize = inputs.length;
    const bytes = 4 * (scriptWords + listMax + inputSize);
    if (bytes > S.pinned.bytes) {
      S.pinned.free();
      S.pinned = PinnedBuffer.alloc(Math.max(bytes, 2 * S.pinned.bytes));
    }
    const words = S.pinned.u32;
    words.set(s.script, 0);
    const entries = host ? this.hostUpdate.list(variant.model, s, words, scriptWords, adam !== undefined) : 0;
    const sent =
      dp !== undefined && dpBatch !== undefined
        ? scriptWords + dp.write(s, dpBatch, words, scriptWords, adam !== undefined)
        : scriptWords + (adam !== undefined ? ADAM_ENTRY : SGD_ENTRY) * entries;
    const ctx = this.ctx;
    const drv = ctx.device.driver;
    const st = ctx.stream.handle;
    const script = R.scriptRegion(slot);
    // The slot's previous batch is done (begin waited for it), so this wait is free; it states the order that the
    // region needs: its kernel and host update have read the script.
    this.upload.wait(S.finished);
    drv.memcpyHtoDAsync(R.ptr(script), S.pinned.u8.subarray(0, 4 * sent), 4 * sent, this.upload.handle);
    S.copied.record(this.upload);
    ctx.stream.wait(S.copied);
    // the inputs go to the pool's input region, which every batch shares: in stream order, after the last kernel
    if (inputSize > 0) {
      S.pinned.f32.set(inputs, sent);
      const src = S.pinned.u8.subarray(4 * sent, 4 * (sent + inputSize));
      drv.memcpyHtoDAsync(R.ptr(R.pool + L.inputStart), src, 4 * inputSize, st);
    }
    ctx.pool.fill(R.pool + L.gradStart, L.poolFloats - L.gradStart, 0, st);
    if (s.zeroGradients) ctx.pool.fill(R.grads, variant.plan.masterFloats, 0, st);
    if (timed) S.start.record(ctx.stream);
    const region = this.barrierRegion;
    variant.kernel.launch({ grid: variant.plan.ctas, block: variant.plan.threadsPerCta, stream: ctx.stream }, [
      karg.ptr(R.ptr(script)),
      karg.ptr(R.ptr(R.pool)),
      karg.ptr(R.ptr(R.master)),
      karg.ptr(R.ptr(R.grads)),
      karg.ptr(R.ptr(R.barrierRegion(region))),
      karg.ptr(R.ptr(R.statusBlock(slot))),
      karg.f32(lr),
      karg.f32(clip),
      karg.ptr(variant.profiled ? R.ptr(R.profile) : variant.traced ? this.traceBuffer(variant) : 0),
      karg.ptr(R.moments),
      ...adamArgs(adam),
      karg.ptr(R.ptr(R.barrierRegion(1 - region))),
      karg.u32(this.staleBarriers),
      karg.u32(s.lossOffset),
    ]);
    // launched: the next launch uses the other region, which this one zeroes
    this.barrierRegion = 1 - region;
    this.staleBarriers = s.barriers;
    if (host) this.hostUpdate.launch(variant, s, script + scriptWords, entries, lr, clip, adam);
    // the kernel's time ends here: in data-parallel mode the all-reduces (which wait for the slowest rank) and the
    // update are timed apart, so that profiling compares the variants' kernels only
    if (timed) S.stop.record(ctx.stream);
    S.dpTimed = false;
    if (dp !== undefined && dpBatch !== undefined) {
      dp.launch(variant, s, dpBatch, script, lr, clip, adam);
      if (timed) S.dpStop.record(ctx.stream);
      S.dpTimed = timed;
    }
    S.finished.record(ctx.stream);
    this.readback.wait(S.finished);
    // the error words and the loss (the kernel stored it there), on the read-back stream: the next launch need
    // not wait for the copy
    const statusBytes = 4 * READ_WORDS;
    drv.memcpyDtoHAsync(
      S.out.u8.subarray(0, statusBytes),
      R.ptr(R.statusBlock(slot)),
      statusBytes,
      this.readback.handle,
    );
    S.done.record(this.readback);
    S.timed = timed;
    S.variant = variant;
    this.lastVariant = variant.name;
    if (variant.traced) this.lastTraced = { script: s.script.slice(), ctas: variant.plan.ctas };
    const loss = this.pipeline.end(slot);
    if (trace) {
      // what is left of the call: copies, memsets, the launch (the waits, all-reduces and update counted apart)
      trace.add("launch", performance.now() - t0 - (trace.counted() - before));
    }
    return loss;
  }

  /**
   * The profiled kernels' counters summed since the last reset (waits for every queued batch): per opcode cycles
   * and count, then load, staging and whole-CTA cycles (codegen/template.ts PROFILE_SLOTS); `reset` zeroes them.
   */
  readProfile(reset = false): BigUint64Array {
    this.pipeline.drain();
    return this.regions.readProfile(reset);
  }

  /** The trace buffer for a traced variant's launch. */
  private traceBuffer(v: KernelVariant): number {
    const R = this.regions;
    if (R.trace < 0 || v.plan.ctas > R.traceCtas) {
      throw new Error(`VPPS: kernel ${v.name} is traced, but the runtime reserved a trace for ${R.traceCtas} CTAs`);
    }
    return R.ptr(R.trace);
  }

  /**
   * The timeline of the last traced launch (waits for every queued batch): its script, CTAs and TRACE_SLOTS u64
   * words per CTA (instrument/trace.ts reads them).
   */
  readTrace(): { script: Uint32Array; ctas: number; words: BigUint64Array } {
    this.pipeline.drain();
    const last = this.lastTraced;
    if (last === undefined) throw new Error("VPPS: no traced batch has run");
    return { script: last.script, ctas: last.ctas, words: this.regions.readTrace(last.ctas) };
  }

  /** Waits for every queued batch; returns the last one's loss. */
  drain(): number {
    return this.pipeline.drain();
  }

  dispose(): void {
    try {
      this.ctx.synchronize();
      this.upload.synchronize();
      this.readback.synchronize();
    } finally {
      this.dp = undefined;
      this.regions.dispose();
      for (const s of this.slots) {
        s.pinned.free();
        s.out.free();
        s.copied.destroy();
        s.finished.destroy();
        s.done.destroy();
        s.start.destroy();
        s.stop.destroy();
        s.dpStop.destroy();
      }
      this.anchor.destroy();
      this.upload.destroy();
      this.readback.destroy();
    }
  }
}
