/**
 * VPPS on one GPU: the device regions the kernel addresses, one batch's upload → launch → read-back, several in
 * flight through BatchPipeline, and the host's end of a batch when some matrices form their gradient by GEMM (one
 * cuBLAS GEMM per such matrix, then the clipped SGD step of every parameter by two list kernels).
 *
 * All regions live in the GpuContext's pool, so one base address and 32-bit float offsets reach all of them:
 *   master  row-major copies of the register-held matrices (`MatrixPlan.masterOffset`), read at launch start and
 *           written back by `update.regs`
 *   grads   the same layout: exported register gradients, or GEMM-formed ones
 *   status  one block of STATUS_BLOCK_WORDS per pipeline slot (the kernel's STATUS_WORDS)
 *   barriers  two regions of MAX_BARRIERS counters, used by launches in turn
 *   norm    the host update's gradient norm
 *   script  one region per pipeline slot: the batch script, then (host update) the list of update entries
 *   pool    the script's pool: model region (vectors, lookup tables) at 0, then the batch (layout.ts)
 *
 * Only what must run between two kernels is on the context's (kernel) stream: the inputs' copy, the memset of the
 * pool's gradient region, the launch (and the host update). The script's copy runs on an upload stream into the
 * slot's script region, after the slot's previous batch is done with it (event `finished`), and the kernel waits for
 * it (event `copied`), so it overlaps the kernel before. The kernel zeroes the barrier counters the previous launch
 * used (the other region) in its prologue. The CTA that finishes last stores the loss into the slot's status block,
 * and the status words and the loss are read back on a read-back stream after `finished` (the slot's block is not
 * written again before the slot is reused); the error words stay zero without an error, and the block is zeroed
 * again after one is reported. Per batch on an H100 the GPU time between kernels fell from 21 µs (batch 1) and
 * 61 µs (batch 128), when all of this was serial, to 7 and 23 µs (session 6, `npm run bench:vpps-gap`); the loss's
 * copy, the last one on the kernel stream, cost 7-8 µs of it (session 7: an earlier measurement, 5 to 30 µs of
 * kernel time for the epilogue, did not hold up: with it the kernel was faster, with two other changes).
 */
import {
  CudaEvent,
  type CudaKernel,
  CudaStream,
  type DevicePtr,
  karg,
  PinnedBuffer,
  type PoolStats,
} from "../../../cuda/index.js";
import type { GraphParameter } from "../../../graph/graph.js";
import type { GpuContext } from "../../gpu/context.js";
import { STATUS_LOSS, STATUS_WORDS } from "../codegen/interpreter.js";
import { PROFILE_WORDS, TRACE_SLOTS } from "../codegen/template.js";
import type { ModelLayout } from "../plan/layout.js";
import type { VppsPlan } from "../plan/plan.js";
import type { ScheduledBatch } from "../schedule/batch.js";
import { type AdamStep, adamKernelArgs, momentLayout } from "./moments.js";
import { BatchPipeline, PIPELINE_SLOTS, type SlotDevice } from "./pipeline.js";

/** One compiled kernel variant (a plan: ctasPerSm, rpw, gradient placement) with its own scheduler. */
export interface KernelVariant {
  readonly plan: VppsPlan;
  readonly model: ModelLayout;
  readonly kernel: CudaKernel;
  readonly name: string;
  /** Rendered with `profile: true`: the launch passes the profile counters (kernel-template.ts PROFILE_WORDS). */
  readonly profiled?: boolean;
  /** Rendered with `trace: true`: the launch passes the trace buffer (kernel-template.ts TRACE_SLOTS per CTA). */
  readonly traced?: boolean;
}

/** Barrier counters one batch may use (steps × (1 + matrices): an elementwise barrier and one per matrix per step). */
export const MAX_BARRIERS = 1 << 20;
/** Words per slot of the status region: the kernel's status words, padded to a 128-byte line of its own. */
const STATUS_BLOCK_WORDS = 32;
/** Words of a status block read back after each batch: the error words and the loss (kernel-static.ts). */
const READ_WORDS = STATUS_LOSS + 1;
/** Elements per triple of the host-update lists: large matrices are split so that one block takes one piece. */
const UPDATE_PIECE = 4096;

export const HOST_UPDATE_PROGRAM = "vpps_host_update";
export const HOST_UPDATE_KERNELS = ["vpps_norm2_list", "vpps_sgd_list", "vpps_adam_list"] as const;
/** Words of one entry of the SGD list (parameter, gradient, length) and of the Adam list (parameter, gradient, m, v, length). */
const SGD_ENTRY = 3;
const ADAM_ENTRY = 5;
/** The absent-gradient word of an Adam list entry (script.ts NONE): a parameter without gradient this batch. */
const NO_GRADIENT = 0xffffffff;
/**
 * Clipped SGD over a list of (parameter, gradient, length) triples of float offsets from one base, and Adam over a
 * list of (parameter, gradient, m, v, length) entries (m and v: offsets from the moments base; gradient NONE:
 * none this batch, it counts as zero). The norm reads either list (`words` per entry, gradient second, length last).
 */
export const HOST_UPDATE_SOURCE = `
typedef unsigned int u32;
extern "C" __global__ void vpps_norm2_list(const float* base, const u32* list, int entries, int words, float* acc) {
  float s = 0.f;
  for (int e = blockIdx.x; e < entries; e += gridDim.x) {
    const u32 go = list[words * e + 1];
    if (go == 0xffffffffu) continue;
    const float* g = base + go;
    const u32 n = list[words * e + words - 1];
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) s += g[i] * g[i];
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0 && s != 0.f) atomicAdd(acc, s);
}
// The reference trainer's rule: scale = clip / ||g|| when the global norm exceeds clip (clip 0 disables).
extern "C" __global__ void vpps_sgd_list(float* base, const u32* list, int entries, float lr, const float* acc, float clip) {
  float scale = 1.f;
  if (clip > 0.f) {
    const float norm = sqrtf(*acc);
    if (norm > clip) scale = clip / norm;
  }
  const float step = lr * scale;
  for (int e = blockIdx.x; e < entries; e += gridDim.x) {
    float* p = base + list[3 * e];
    const float* g = base + list[3 * e + 1];
    const u32 n = list[3 * e + 2];
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) p[i] -= step * g[i];
  }
}
// The kernel's adam_element (kernel-static.ts), with the same arguments, over the list.
extern "C" __global__ void vpps_adam_list(float* base, float* moments, const u32* list, int entries, float lr,
                                          const float* acc, float clip, float beta1, float one_minus_beta1,
                                          float beta2, float one_minus_beta2, float eps, float inv_c1, float inv_c2) {
  float scale = 1.f;
  if (clip > 0.f) {
    const float norm = sqrtf(*acc);
    if (norm > clip) scale = clip / norm;
  }
  for (int e = blockIdx.x; e < entries; e += gridDim.x) {
    float* p = base + list[5 * e];
    const u32 go = list[5 * e + 1];
    const float* g = go == 0xffffffffu ? nullptr : base + go;
    float* m = moments + list[5 * e + 2];
    float* v = moments + list[5 * e + 3];
    const u32 n = list[5 * e + 4];
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) {
      const float gi = g ? g[i] * scale : 0.f;
      const float mi = beta1 * m[i] + one_minus_beta1 * gi;
      const float vi = beta2 * v[i] + one_minus_beta2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      float root;
      asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(root) : "f"(vi * inv_c2));
      p[i] -= __fdividef(lr * (mi * inv_c1), root + eps);
    }
  }
}
`;

interface Slot {
  pinned: PinnedBuffer;
  /** The batch's loss (word 0, kernel stream), then its status words (from word 1, read-back stream). */
  readonly out: PinnedBuffer;
  /** The script's copy into the slot's region has completed (upload stream). */
  readonly copied: CudaEvent;
  /** The batch's device work (kernel, host update) has completed (kernel stream): its regions may be reused. */
  readonly finished: CudaEvent;
  /** The batch and its read-back have completed (read-back stream). */
  readonly done: CudaEvent;
  readonly start: CudaEvent;
  readonly stop: CudaEvent;
  timed: boolean;
  variant: KernelVariant | undefined;
}

/**
 * Where the kernel's time went, per completed timed batch: its kernel ms (CUDA events around the launch and its
 * host-update work) and, when the batch before was timed too, the ms the kernel stream spent between that batch's
 * end and this one's start (copies and memsets between kernels, and any wait for the host).
 */
export type KernelTimeSink = (variant: KernelVariant, batch: number, ms: number, gapMs: number | undefined) => void;

export interface RuntimeOptions {
  readonly masterFloats: number;
  readonly modelFloats: number;
  /** Words reserved for one batch's script (and update list), in each slot's region. */
  readonly scriptWords: number;
  /** Batches in flight on the GPU (pipeline.ts); default PIPELINE_SLOTS. */
  readonly slots?: number;
  /** Floats reserved for the script's pool (model region included); default: what the context's pool has left. */
  readonly poolFloats?: number;
  /** CTAs to reserve a kernel trace for (kernel-template.ts TRACE_SLOTS u64 each); 0 or absent: none. */
  readonly traceCtas?: number;
}

export class VppsRuntime {
  readonly master: number;
  readonly grads: number;
  private readonly status: number;
  /** u64 counters of profiled kernels (kernel-template.ts PROFILE_WORDS), summed over batches until reset. */
  private readonly profile: number;
  /** The timeline of the last traced launch (kernel-trace.ts), TRACE_SLOTS u64 per CTA; -1 when not reserved. */
  private readonly trace: number;
  private readonly traceCtas: number;
  /** The script of the last traced launch, which the trace is read against. */
  private lastTraced: { script: Uint32Array; ctas: number } | undefined;
  private readonly barriers: number;
  /** The barrier region (0 or 1) of the next launch, and how many counters the last launch used in the other. */
  private barrierRegion = 0;
  private staleBarriers = 0;
  private readonly norm: number;
  private readonly script: number;
  /** Script copies into the slots' regions; the read-backs of the slots' status blocks. */
  private readonly upload: CudaStream;
  private readonly readback: CudaStream;
  readonly pool: number;
  readonly poolFloats: number;
  readonly scriptWords: number;
  private readonly slots: Slot[];
  readonly pipeline: BatchPipeline;
  private hostKernels: Readonly<Record<(typeof HOST_UPDATE_KERNELS)[number], CudaKernel>> | undefined;
  private lastVariant = "vpps";
  /** The most pool floats any submitted batch used (the region is reserved whole; this is what batches touch). */
  private peakPoolFloats = 0;
  /** Adam's moments (moments.ts layout), a device allocation of `momentFloats` made by resetMoments; 0 before. */
  private moments: DevicePtr = 0;
  private momentFloats = 0;
  /** Called with each timed batch's kernel milliseconds. */
  onKernelTime: KernelTimeSink | undefined;
  /** An event on the kernel stream that timed batches' events are measured from (see `retired`). */
  private readonly anchor: CudaEvent;
  private lastStop: number | undefined;
  private lastStopBatch = -1;

  constructor(
    readonly ctx: GpuContext,
    opts: RuntimeOptions,
  ) {
    const p = ctx.pool;
    const slotCount = opts.slots ?? PIPELINE_SLOTS;
    this.master = p.alloc(opts.masterFloats, "VPPS master weights");
    this.grads = p.alloc(opts.masterFloats, "VPPS matrix gradients");
    this.status = p.alloc(slotCount * STATUS_BLOCK_WORDS, "VPPS status words");
    // on the kernel stream, so that the first launch follows (it does not wait for the legacy default stream)
    p.fill(this.status, slotCount * STATUS_BLOCK_WORDS, 0, ctx.stream.handle);
    this.profile = p.alloc(2 * PROFILE_WORDS, "VPPS kernel profile counters");
    p.fill(this.profile, 2 * PROFILE_WORDS, 0);
    this.traceCtas = opts.traceCtas ?? 0;
    this.trace = this.traceCtas > 0 ? p.alloc(2 * TRACE_SLOTS * this.traceCtas, "VPPS kernel trace") : -1;
    this.norm = p.alloc(32, "VPPS gradient norm");
    this.barriers = p.alloc(2 * MAX_BARRIERS, "VPPS barrier counters");
    p.fill(this.barriers, 2 * MAX_BARRIERS, 0, ctx.stream.handle);
    this.scriptWords = opts.scriptWords;
    this.script = p.alloc(slotCount * opts.scriptWords, "VPPS batch scripts");
    const left = p.arena.capacityFloats - Math.ceil(p.arena.usedFloats / 64) * 64;
    this.poolFloats = opts.poolFloats ?? left;
    if (this.poolFloats < opts.modelFloats) {
      throw new Error(
        `VPPS: the model region needs ${opts.modelFloats} floats of device pool; only ${this.poolFloats} are left`,
      );
    }
    this.pool = p.alloc(this.poolFloats, "VPPS script pool");
    p.mark();
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
      timed: false,
      variant: undefined,
    }));
    const slots = this.slots;
    const device: SlotDevice = {
      wait: (s) => slots[s]!.done.synchronize(),
      done: (s) => slots[s]!.done.query(),
      loss: (s) => slots[s]!.out.f32[STATUS_LOSS]!,
      status: (s) => {
        const words = slots[s]!.out.i32.subarray(0, STATUS_WORDS);
        // the kernel leaves the words zero only without an error: clear them (and the count of finished CTAs,
        // which processors that stopped early never bumped) before the slot's next launch
        if (words[0] !== 0) ctx.pool.fill(this.statusBlock(s), STATUS_BLOCK_WORDS, 0, ctx.stream.handle);
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
          this.lastStop = slot.stop.elapsedMsSince(this.anchor);
          this.lastStopBatch = batch;
          this.onKernelTime(slot.variant, batch, slot.stop.elapsedMsSince(slot.start), idle);
        }
      },
    };
    this.pipeline = new BatchPipeline(device, () => this.lastVariant, slotCount);
    this.anchor = CudaEvent.create().record(ctx.stream);
  }

  private ptr(offset: number): number {
    return this.ctx.pool.ptr(offset);
  }

  private statusBlock(slot: number): number {
    return this.status + slot * STATUS_BLOCK_WORDS;
  }

  /**
   * The device pool's numbers as far as VPPS uses it: the script pool takes everything left at creation, so the
   * pool's own peak is its capacity; here used and peak end at the largest batch's pool instead (weights,
   * gradients, script, counters, then the model region and the biggest batch's values and gradients).
   */
  poolStats(): PoolStats {
    const s = this.ctx.pool.stats();
    const touched = 4 * (this.pool + this.peakPoolFloats);
    return { ...s, usedBytes: touched, peakBytes: touched };
  }

  /** Copies the parameters' host values to the device (matrices to the master copy, the rest to the model region). */
  uploadWeights(model: ModelLayout, values: readonly Float32Array[]): void {
    this.ctx.synchronize();
    for (const p of model.params) {
      const m = model.matrixOf[p.index]!;
      const at = m >= 0 ? this.master + model.plan.matrices[m]!.masterOffset : this.pool + model.paramOffset[p.index]!;
      this.ctx.pool.upload(at, values[p.index]!);
    }
  }

  /** Reads the device's weights into the parameters' host values (waits for every queued batch). */
  downloadWeights(model: ModelLayout, values: readonly Float32Array[]): void {
    this.pipeline.drain();
    this.ctx.synchronize();
    for (const p of model.params) {
      const m = model.matrixOf[p.index]!;
      const at = m >= 0 ? this.master + model.plan.matrices[m]!.masterOffset : this.pool + model.paramOffset[p.index]!;
      this.ctx.pool.download(at, values[p.index]!);
    }
  }

  /**
   * Per parameter, its gradient from the last completed batch (`schedule` must be that batch's, scheduled with
   * `exportGradients` or on a host-update plan). Lookup tables: zero outside the rows the batch touched.
   */
  readGradients(model: ModelLayout, schedule: ScheduledBatch): Float32Array[] {
    this.pipeline.drain();
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

  /** Adam's moments as momentLayout lays them out (waits for every queued batch); undefined before resetMoments. */
  readMoments(): Float32Array | undefined {
    if (this.moments === 0) return undefined;
    this.pipeline.drain();
    return this.ctx.download(this.moments, new Float32Array(this.momentFloats));
  }

  /**
   * The entries of a host update, as absolute pool offsets: SGD's (parameter, gradient, length) triples for the
   * parameters with a gradient, or Adam's (parameter, gradient or NONE, m, v, length) for every matrix and dense
   * parameter and the touched lookup rows (the AdamTrainer's rule: unused parameters still move by their moments).
   */
  private updateList(model: ModelLayout, s: ScheduledBatch, into: Uint32Array, at: number, adam: boolean): number {
    if (adam) return this.adamList(model, s, into, at);
    const L = s.layout;
    let k = at;
    const push = (p: number, g: number, n: number) => {
      for (let o = 0; o < n; o += UPDATE_PIECE) {
        into[k++] = p + o;
        into[k++] = g + o;
        into[k++] = Math.min(UPDATE_PIECE, n - o);
      }
    };
    for (const m of model.plan.matrices) {
      if (m.gradients === "gemm" && L.collectCount[m.index] === 0) continue; // no product: zero gradient
      push(this.master + m.masterOffset, this.grads + m.masterOffset, m.rows * m.cols);
    }
    for (const p of model.params) {
      if (L.paramGrad[p.index]! >= 0) {
        push(this.pool + model.paramOffset[p.index]!, this.pool + L.paramGrad[p.index]!, p.rows * p.cols);
      }
    }
    const rows = L.lookupRows;
    for (let r = 0; r < rows.offset.length; r++) {
      const cols = model.params[rows.table[r]!]!.cols;
      push(this.pool + model.paramOffset[rows.table[r]!]! + rows.row[r]! * cols, this.pool + rows.offset[r]!, cols);
    }
    return (k - at) / SGD_ENTRY;
  }

  private adamList(model: ModelLayout, s: ScheduledBatch, into: Uint32Array, at: number): number {
    const L = s.layout;
    const mo = momentLayout(model);
    let k = at;
    const push = (p: number, g: number, m: number, v: number, n: number) => {
      for (let o = 0; o < n; o += UPDATE_PIECE) {
        into[k++] = p + o;
        into[k++] = g === NO_GRADIENT ? g : g + o;
        into[k++] = m + o;
        into[k++] = v + o;
        into[k++] = Math.min(UPDATE_PIECE, n - o);
      }
    };
    for (const m of model.plan.matrices) {
      const at = m.masterOffset;
      // a GEMM-strategy matrix without products has a zero gradient: its region holds an earlier batch's
      const g = m.gradients === "gemm" && L.collectCount[m.index] === 0 ? NO_GRADIENT : this.grads + at;
      push(this.master + at, g, mo.masterM + at, mo.masterV + at, m.rows * m.cols);
    }
    for (const p of model.params) {
      if (model.matrixOf[p.index]! >= 0 || p.kind !== "dense") continue;
      const at = model.paramOffset[p.index]!;
      const g = L.paramGrad[p.index]! >= 0 ? this.pool + L.paramGrad[p.index]! : NO_GRADIENT;
      push(this.pool + at, g, mo.modelM + at, mo.modelV + at, p.rows * p.cols);
    }
    const rows = L.lookupRows;
    for (let r = 0; r < rows.offset.length; r++) {
      const cols = model.params[rows.table[r]!]!.cols;
      const at = model.paramOffset[rows.table[r]!]! + rows.row[r]! * cols;
      push(this.pool + at, this.pool + rows.offset[r]!, mo.modelM + at, mo.modelV + at, cols);
    }
    return (k - at) / ADAM_ENTRY;
  }

  private updateListWords(model: ModelLayout, s: ScheduledBatch, adam: boolean): number {
    let n = 0;
    const pieces = (len: number) => Math.ceil(len / UPDATE_PIECE);
    for (const m of model.plan.matrices) n += pieces(m.rows * m.cols);
    for (const p of model.params) {
      const used = adam ? model.matrixOf[p.index]! < 0 && p.kind === "dense" : s.layout.paramGrad[p.index]! >= 0;
      if (used) n += pieces(p.rows * p.cols);
    }
    const tables = s.layout.lookupRows.table;
    for (let r = 0; r < tables.length; r++) n += pieces(model.params[tables[r]!]!.cols);
    return (adam ? ADAM_ENTRY : SGD_ENTRY) * n;
  }

  /**
   * Queues one scheduled batch on `variant` and returns the previous batch's loss (NaN for the first). `inputs` are
   * the graph's input values (`inputData[0, inputSize)`, copied to the pinned buffer here). `timed` records CUDA
   * events around the batch's device work. `adam`: the batch's Adam step (its script was scheduled for Adam, or
   * its host update does Adam), after resetMoments; undefined for SGD.
   */
  submit(
    variant: KernelVariant,
    s: ScheduledBatch,
    inputs: Float32Array,
    lr: number,
    clip: number,
    timed: boolean,
    adam?: AdamStep,
  ): number {
    const L = s.layout;
    const host = s.update === "host";
    if (adam !== undefined && this.moments === 0) throw new Error("VPPS: an Adam batch before resetMoments()");
    if (L.poolFloats > this.poolFloats) {
      throw new Error(`VPPS: the batch needs ${L.poolFloats} floats of pool; the device pool has ${this.poolFloats}`);
    }
    if (s.barriers > MAX_BARRIERS) {
      throw new Error(`VPPS: the batch uses ${s.barriers} barriers; at most ${MAX_BARRIERS}`);
    }
    if (L.poolFloats > this.peakPoolFloats) this.peakPoolFloats = L.poolFloats;
    const slot = this.pipeline.begin();
    const S = this.slots[slot]!;
    const scriptWords = s.script.length;
    const listMax = host ? this.updateListWords(variant.model, s, adam !== undefined) : 0;
    if (scriptWords + listMax > this.scriptWords) {
      throw new Error(
        `VPPS: the batch script has ${scriptWords + listMax} words; the device region holds ${this.scriptWords} ` +
          "(engine.ts SCRIPT_WORDS): split the batch into smaller ones",
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
    const entries = host ? this.updateList(variant.model, s, words, scriptWords, adam !== undefined) : 0;
    const sent = scriptWords + (adam !== undefined ? ADAM_ENTRY : SGD_ENTRY) * entries;
    const ctx = this.ctx;
    const drv = ctx.device.driver;
    const st = ctx.stream.handle;
    const script = this.script + slot * this.scriptWords;
    // The slot's previous batch is done (begin waited for it), so this wait is free; it states the order that the
    // region needs: its kernel and host update have read the script.
    this.upload.wait(S.finished);
    drv.memcpyHtoDAsync(this.ptr(script), S.pinned.u8.subarray(0, 4 * sent), 4 * sent, this.upload.handle);
    S.copied.record(this.upload);
    ctx.stream.wait(S.copied);
    // the inputs go to the pool's input region, which every batch shares: in stream order, after the last kernel
    if (inputSize > 0) {
      S.pinned.f32.set(inputs, sent);
      const src = S.pinned.u8.subarray(4 * sent, 4 * (sent + inputSize));
      drv.memcpyHtoDAsync(this.ptr(this.pool + L.inputStart), src, 4 * inputSize, st);
    }
    ctx.pool.fill(this.pool + L.gradStart, L.poolFloats - L.gradStart, 0, st);
    if (s.zeroGradients) ctx.pool.fill(this.grads, variant.plan.masterFloats, 0, st);
    if (timed) S.start.record(ctx.stream);
    const region = this.barrierRegion;
    variant.kernel.launch({ grid: variant.plan.ctas, block: variant.plan.threadsPerCta, stream: ctx.stream }, [
      karg.ptr(this.ptr(script)),
      karg.ptr(this.ptr(this.pool)),
      karg.ptr(this.ptr(this.master)),
      karg.ptr(this.ptr(this.grads)),
      karg.ptr(this.ptr(this.barriers + region * MAX_BARRIERS)),
      karg.ptr(this.ptr(this.statusBlock(slot))),
      karg.f32(lr),
      karg.f32(clip),
      karg.ptr(variant.profiled ? this.ptr(this.profile) : variant.traced ? this.traceBuffer(variant) : 0),
      karg.ptr(this.moments),
      ...adamArgs(adam),
      karg.ptr(this.ptr(this.barriers + (1 - region) * MAX_BARRIERS)),
      karg.u32(this.staleBarriers),
      karg.u32(s.lossOffset),
    ]);
    // launched: the next launch uses the other region, which this one zeroes
    this.barrierRegion = 1 - region;
    this.staleBarriers = s.barriers;
    if (host) this.hostUpdate(variant, s, script + scriptWords, entries, lr, clip, adam);
    if (timed) S.stop.record(ctx.stream);
    S.finished.record(ctx.stream);
    this.readback.wait(S.finished);
    // the error words and the loss (the kernel stored it there), on the read-back stream: the next launch need
    // not wait for the copy
    const statusBytes = 4 * READ_WORDS;
    drv.memcpyDtoHAsync(
      S.out.u8.subarray(0, statusBytes),
      this.ptr(this.statusBlock(slot)),
      statusBytes,
      this.readback.handle,
    );
    S.done.record(this.readback);
    S.timed = timed;
    S.variant = variant;
    this.lastVariant = variant.name;
    if (variant.traced) this.lastTraced = { script: s.script.slice(), ctas: variant.plan.ctas };
    return this.pipeline.end(slot);
  }

  /**
   * GEMM-formed gradients (W̄ = Ȳᵀ·X over the collected rows), then the clipped SGD or Adam step of the list's
   * entries (Adam with learning rate 0: no step, as in the kernel).
   */
  private hostUpdate(
    v: KernelVariant,
    s: ScheduledBatch,
    listAt: number,
    entries: number,
    lr: number,
    clip: number,
    adam: AdamStep | undefined,
  ) {
    const ctx = this.ctx;
    const L = s.layout;
    for (const m of v.plan.matrices) {
      const count = L.collectCount[m.index]!;
      if (m.gradients !== "gemm" || count === 0) continue;
      ctx.cublas.sgemmRowMajor(ctx.cublasHandle, {
        transA: true,
        m: m.rows,
        n: m.cols,
        k: count,
        A: this.ptr(this.pool + L.collectY[m.index]!),
        B: this.ptr(this.pool + L.collectX[m.index]!),
        C: this.ptr(this.grads + m.masterOffset),
        beta: 0,
      });
    }
    this.hostKernels ??= ctx.kernels(HOST_UPDATE_PROGRAM, HOST_UPDATE_SOURCE, HOST_UPDATE_KERNELS).kernels;
    if (entries === 0 || (adam !== undefined && lr === 0)) return;
    const base = karg.ptr(ctx.pool.ptr(0));
    const list = karg.ptr(this.ptr(listAt));
    const grid = Math.min(entries, 2048);
    const st = ctx.stream;
    if (clip > 0) {
      ctx.pool.fill(this.norm, 1, 0, st.handle);
      this.hostKernels.vpps_norm2_list.launch({ grid, block: 256, stream: st }, [
        base,
        list,
        karg.i32(entries),
        karg.i32(adam !== undefined ? ADAM_ENTRY : SGD_ENTRY),
        karg.ptr(this.ptr(this.norm)),
      ]);
    }
    if (adam !== undefined) {
      this.hostKernels.vpps_adam_list.launch({ grid, block: 256, stream: st }, [
        base,
        karg.ptr(this.moments),
        list,
        karg.i32(entries),
        karg.f32(lr),
        karg.ptr(this.ptr(this.norm)),
        karg.f32(clip),
        ...adamArgs(adam),
      ]);
      return;
    }
    this.hostKernels.vpps_sgd_list.launch({ grid, block: 256, stream: st }, [
      base,
      list,
      karg.i32(entries),
      karg.f32(lr),
      karg.ptr(this.ptr(this.norm)),
      karg.f32(clip),
    ]);
  }

  /**
   * The profiled kernels' counters summed since the last reset (waits for every queued batch): per opcode cycles
   * and count, then load, staging and whole-CTA cycles (kernel-template.ts PROFILE_SLOTS); `reset` zeroes them.
   */
  readProfile(reset = false): BigUint64Array {
    this.pipeline.drain();
    const words = new Uint32Array(2 * PROFILE_WORDS);
    this.ctx.pool.download(this.profile, words);
    if (reset) this.ctx.pool.fill(this.profile, 2 * PROFILE_WORDS, 0);
    return new BigUint64Array(words.buffer);
  }

  /** The trace buffer for a traced variant's launch; remembers the script the trace will belong to. */
  private traceBuffer(v: KernelVariant): DevicePtr {
    if (this.trace < 0 || v.plan.ctas > this.traceCtas) {
      throw new Error(`VPPS: kernel ${v.name} is traced, but the runtime reserved a trace for ${this.traceCtas} CTAs`);
    }
    return this.ptr(this.trace);
  }

  /**
   * The timeline of the last traced launch (waits for every queued batch): its script, CTAs and TRACE_SLOTS u64
   * words per CTA (kernel-trace.ts reads them).
   */
  readTrace(): { script: Uint32Array; ctas: number; words: BigUint64Array } {
    this.pipeline.drain();
    const last = this.lastTraced;
    if (last === undefined) throw new Error("VPPS: no traced batch has run");
    const words = new Uint32Array(2 * TRACE_SLOTS * last.ctas);
    this.ctx.pool.download(this.trace, words);
    return { script: last.script, ctas: last.ctas, words: new BigUint64Array(words.buffer) };
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
      if (this.moments !== 0) this.ctx.device.driver.memFree(this.moments);
      this.moments = 0;
      for (const s of this.slots) {
        s.pinned.free();
        s.out.free();
        s.copied.destroy();
        s.finished.destroy();
        s.done.destroy();
        s.start.destroy();
        s.stop.destroy();
      }
      this.anchor.destroy();
      this.upload.destroy();
      this.readback.destroy();
    }
  }
}

/** The kernels' Adam arguments after the learning rate (zeros for SGD, whose scripts never read them). */
function adamArgs(adam: AdamStep | undefined) {
  return (adam === undefined ? new Array<number>(7).fill(0) : adamKernelArgs(adam)).map((x) => karg.f32(x));
}
