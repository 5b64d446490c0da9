/**
 * The device memory the VPPS kernel addresses. Every region but Adam's moments lives in the GpuContext's pool, so
 * one base address and 32-bit float offsets reach all of them:
 *   master  row-major copies of the register-held matrices (`MatrixPlan.masterOffset`), read at launch start and
 *           written back by `update.regs`
 *   grads   the same layout: exported register gradients, or GEMM-formed ones
 *   status  one block of STATUS_BLOCK_WORDS per pipeline slot (the kernel's status words and loss)
 *   profile the counters of profiled kernels (codegen/template.ts PROFILE_WORDS, u64)
 *   trace   the timeline of a traced launch (TRACE_SLOTS u64 per CTA), when reserved
 *   norm    the host update's gradient norm
 *   barriers  two regions of MAX_BARRIERS counters, used by launches in turn
 *   script  one region per pipeline slot: the batch script, then (host update) the list of update entries
 *   pool    the script's pool: model region (vectors, lookup tables) at 0, then the batch (plan/layout.ts)
 *   rest    data-parallel mode only (dp-lists.ts): the other gradients the ranks sum, taken from the pool's end
 * Adam's moments are a device allocation of their own (moments.ts layout), made only when Adam starts.
 */
import { type DevicePtr, formatBytes, type GpuContext } from "../../../cuda/index.js";
import type { GraphParameter } from "../../../graph/graph.js";
import { UserError } from "../../../util/errors.js";
import { PROFILE_WORDS, TRACE_SLOTS } from "../codegen/template.js";
import type { ModelLayout } from "../plan/layout.js";
import { momentLayout } from "../plan/moments.js";
import type { ScheduledBatch } from "../schedule/batch.js";

/** Barrier counters one batch may use (steps × (1 + matrices): an elementwise barrier and one per matrix per step). */
export const MAX_BARRIERS = 1 << 20;
/** Words per slot of the status region: the kernel's status words, padded to a 128-byte line of its own. */
export const STATUS_BLOCK_WORDS = 32;

export interface RegionSizes {
  readonly masterFloats: number;
  readonly modelFloats: number;
  /** Pipeline slots: one status block and one script region each. */
  readonly slots: number;
  /** Words reserved for one batch's script (and update list), in each slot's region. */
  readonly scriptWords: number;
  /** Floats reserved for the script's pool (model region included); default: what the context's pool has left. */
  readonly poolFloats?: number;
  /** CTAs to reserve a kernel trace for (TRACE_SLOTS u64 each); 0 or absent: none. */
  readonly traceCtas?: number;
}

export class DeviceRegions {
  readonly master: number;
  readonly grads: number;
  private readonly status: number;
  /** u64 counters of profiled kernels (PROFILE_WORDS), summed over batches until reset. */
  readonly profile: number;
  /** The timeline of the last traced launch (instrument/trace.ts), TRACE_SLOTS u64 per CTA; -1 when not reserved. */
  readonly trace: number;
  readonly traceCtas: number;
  readonly norm: number;
  private readonly barriers: number;
  private readonly script: number;
  readonly scriptWords: number;
  readonly pool: number;
  /** Floats of the script's pool a batch may use (less the `rest` region while one is reserved). */
  poolFloats: number;
  /** The data-parallel `rest` region (float offset; dp-lists.ts), at the end of the pool; -1 when not reserved. */
  rest = -1;
  private readonly fullPoolFloats: number;
  /** Adam's moments (moments.ts layout), a device allocation of `momentFloats` made by resetMoments; 0 before. */
  moments: DevicePtr = 0;
  private momentFloats = 0;

  /** Allocates every region in the context's pool (in this order), zeroing the status blocks and the counters. */
  constructor(
    private readonly ctx: GpuContext,
    sizes: RegionSizes,
  ) {
    const p = ctx.pool;
    this.master = p.alloc(sizes.masterFloats, "VPPS master weights");
    this.grads = p.alloc(sizes.masterFloats, "VPPS matrix gradients");
    this.status = p.alloc(sizes.slots * STATUS_BLOCK_WORDS, "VPPS status words");
    // on the kernel stream, so that the first launch follows (it does not wait for the legacy default stream)
    p.fill(this.status, sizes.slots * STATUS_BLOCK_WORDS, 0, ctx.stream.handle);
    this.profile = p.alloc(2 * PROFILE_WORDS, "VPPS kernel profile counters");
    p.fill(this.profile, 2 * PROFILE_WORDS, 0);
    this.traceCtas = sizes.traceCtas ?? 0;
    this.trace = this.traceCtas > 0 ? p.alloc(2 * TRACE_SLOTS * this.traceCtas, "VPPS kernel trace") : -1;
    this.norm = p.alloc(32, "VPPS gradient norm");
    this.barriers = p.alloc(2 * MAX_BARRIERS, "VPPS barrier counters");
    p.fill(this.barriers, 2 * MAX_BARRIERS, 0, ctx.stream.handle);
    this.scriptWords = sizes.scriptWords;
    this.script = p.alloc(sizes.slots * sizes.scriptWords, "VPPS batch scripts");
    const left = p.arena.capacityFloats - Math.ceil(p.arena.usedFloats / 64) * 64;
    this.poolFloats = sizes.poolFloats ?? left;
    if (this.poolFloats < sizes.modelFloats) {
      throw new UserError(
        `VPPS: the model region needs ${formatBytes(4 * sizes.modelFloats)} of the device pool, and only ` +
          `${formatBytes(4 * this.poolFloats)} are left after the scripts' regions: use a GPU with more free memory ` +
          "(other processes on it take some), or a smaller model",
      );
    }
    this.pool = p.alloc(this.poolFloats, "VPPS script pool");
    this.fullPoolFloats = this.poolFloats;
    p.mark();
  }

  /**
   * Reserves `floats` floats at the end of the script's pool as the data-parallel `rest` region (the batches get
   * the pool before it), or gives it back (`floats` 0). Call it only with no batch in flight.
   */
  reserveRest(floats: number, modelFloats: number): void {
    if (floats === 0) {
      this.rest = -1;
      this.poolFloats = this.fullPoolFloats;
      return;
    }
    const left = Math.floor((this.fullPoolFloats - floats) / 64) * 64;
    if (left < modelFloats) {
      throw new Error(
        `VPPS data-parallel mode: the gradients the ranks sum need ${floats} floats of device pool beside the ` +
          `model region's ${modelFloats}; the pool has ${this.fullPoolFloats} (raise poolBytes)`,
      );
    }
    this.poolFloats = left;
    this.rest = this.pool + left;
  }

  /** The device address of a float offset in the context's pool. */
  ptr(offset: number): number {
    return this.ctx.pool.ptr(offset);
  }

  /** Slot `slot`'s status block (float offset). */
  statusBlock(slot: number): number {
    return this.status + slot * STATUS_BLOCK_WORDS;
  }

  /** Barrier region `k` (0 or 1; float offset). */
  barrierRegion(k: number): number {
    return this.barriers + k * MAX_BARRIERS;
  }

  /** Slot `slot`'s script region (float offset). */
  scriptRegion(slot: number): number {
    return this.script + slot * this.scriptWords;
  }

  /** Where parameter p's values live: the master copy for a register-held matrix, else the model region. */
  private parameterAt(model: ModelLayout, p: GraphParameter): number {
    const m = model.matrixOf[p.index]!;
    return m >= 0 ? this.master + model.plan.matrices[m]!.masterOffset : this.pool + model.paramOffset[p.index]!;
  }

  /** Copies the parameters' host values to the device (matrices to the master copy, the rest to the model region). */
  uploadWeights(model: ModelLayout, values: readonly Float32Array[]): void {
    this.ctx.synchronize();
    for (const p of model.params) this.ctx.pool.upload(this.parameterAt(model, p), values[p.index]!);
  }

  /** Reads the device's weights into the parameters' host values (the caller has waited for the batches). */
  downloadWeights(model: ModelLayout, values: readonly Float32Array[]): void {
    this.ctx.synchronize();
    for (const p of model.params) this.ctx.pool.download(this.parameterAt(model, p), values[p.index]!);
  }

  /**
   * Per parameter, its gradient from the last completed batch (`schedule` must be that batch's, scheduled with
   * `exportGradients` or on a host-update plan). Lookup tables: zero outside the rows the batch touched.
   */
  readGradients(model: ModelLayout, schedule: ScheduledBatch): Float32Array[] {
    const L = schedule.layout;
    return model.params.map((p: GraphParameter) => {
      const m = model.matrixOf[p.index]!;
      const out = new Float32Array(p.rows * p.cols);
      if (m >= 0) {
        const mp = model.plan.matrices[m]!;
        // a GEMM-strategy matrix without products in this batch has a zero gradient: no GEMM wrote its region,
        // which still holds an earlier batch's
        if (mp.gradients !== "gemm" || L.collectCount[m]! > 0)
          this.ctx.pool.download(this.grads + mp.masterOffset, out);
      } else if (p.kind === "dense") {
        if (L.paramGrad[p.index]! >= 0) this.ctx.pool.download(this.pool + L.paramGrad[p.index]!, out);
      } else {
        const row = new Float32Array(p.cols);
        const rows = L.lookupRows;
        for (let r = 0; r < rows.offset.length; r++) {
          if (rows.table[r] !== p.index) continue;
          this.ctx.pool.download(this.pool + rows.offset[r]!, row);
          out.set(row, rows.row[r]! * p.cols);
        }
      }
      return out;
    });
  }

  /**
   * Zeroes Adam's moments of `model`, allocating them the first time (outside the pool, whose regions were closed
   * at creation, and only for Adam: SGD needs none); queued on the stream behind every earlier batch.
   */
  resetMoments(model: ModelLayout): void {
    const floats = momentLayout(model).floats;
    const drv = this.ctx.device.driver;
    if (this.moments !== 0 && floats > this.momentFloats) {
      this.ctx.synchronize();
      drv.memFree(this.moments);
      this.moments = 0;
    }
    if (this.moments === 0) {
      this.moments = drv.memAlloc(4 * Math.max(1, floats));
      this.momentFloats = floats;
    }
    drv.memsetD32Async(this.moments, 0, floats, this.ctx.stream.handle);
  }

  /** Uploads Adam's moments laid out as momentLayout says (after resetMoments), behind every earlier batch; waits. */
  writeMoments(moments: Float32Array): void {
    if (this.moments === 0) throw new Error("VPPS: writeMoments before resetMoments()");
    if (moments.length !== this.momentFloats) {
      throw new RangeError(`VPPS: ${moments.length} moment floats given; the layout has ${this.momentFloats}`);
    }
    this.ctx.device.driver.memcpyHtoDAsync(this.moments, moments, moments.byteLength, this.ctx.stream.handle);
    this.ctx.synchronize(); // the copy reads pageable memory
  }

  /** Adam's moments as momentLayout lays them out (the caller has waited); undefined before resetMoments. */
  readMoments(): Float32Array | undefined {
    if (this.moments === 0) return undefined;
    return this.ctx.download(this.moments, new Float32Array(this.momentFloats));
  }

  /** The profiled kernels' counters (the caller has waited); `reset` zeroes them. */
  readProfile(reset: boolean): BigUint64Array {
    const words = new Uint32Array(2 * PROFILE_WORDS);
    this.ctx.pool.download(this.profile, words);
    if (reset) this.ctx.pool.fill(this.profile, 2 * PROFILE_WORDS, 0);
    return new BigUint64Array(words.buffer);
  }

  /** The trace of `ctas` CTAs (the caller has waited). */
  readTrace(ctas: number): BigUint64Array {
    const words = new Uint32Array(2 * TRACE_SLOTS * ctas);
    this.ctx.pool.download(this.trace, words);
    return new BigUint64Array(words.buffer);
  }

  /** Frees what is not in the pool (the pool goes with the context). */
  dispose(): void {
    if (this.moments !== 0) this.ctx.device.driver.memFree(this.moments);
    this.moments = 0;
  }
}
