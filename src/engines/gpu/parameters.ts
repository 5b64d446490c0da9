// The model's parameters on the device, and the trainers' update rule there. Values and gradients live in the
// context's pool (allocated before its mark(), so they survive every per-batch reset) at fixed float offsets, which is
// what lets an engine point a parameter node straight at its weights and a script encode them as 32-bit offsets.
// The update is the CPU trainer's rule (src/optim/trainers.ts) in kernels (optimizer-kernels.ts): the global gradient
// norm into a device scalar, then SGD or Adam over dense parameters and over the touched rows of lookup tables, all
// queued on the stream without a host synchronisation. A non-finite norm (a NaN or ∞ gradient) makes the update
// kernels leave everything as it is; the norm is copied back asynchronously and checked by the host at the next
// update or sync (by then the stream has passed it), which throws NonFiniteUpdateError naming the parameter.
//
// Data-parallel training (src/engines/data-parallel.ts): the gradients are one contiguous region of the pool (each
// parameter's at a 256-byte aligned offset in it), so that a GradientReducer sums them over the ranks in a few
// bucketed calls. With a reducer set, update() first makes every rank's touched lookup rows the union of all ranks'
// (allGatherHost), then sums the whole gradient region (lookup tables whole: rows no rank touched are zero and stay
// zero), then runs the unchanged norm and update kernels, so every rank applies the same update to the same weights.
// Rank 0's norm is handed to every rank (the others zero theirs, then one all-reduce of one float), so the updates
// stay bitwise equal whatever each rank's norm is.
//
// The norm is the same float on every run: each block of the sum-of-squares launches writes its partial sum into its
// own slot (`normPartialSlots` of them, one per block of every launch), and one block adds the slots in order. Float
// atomics would add the partials in the order the blocks happen to finish, and the clipped update (threshold / norm)
// would then differ in its last bits from run to run — seen as training that is not bit-identical between two runs
// (the GLP4NN tests that the stream pool changes no result).

import {
  CudaEvent,
  type CudaKernel,
  type DevicePtr,
  floatBits,
  GPU_BLOCK,
  type GpuContext,
  gridFor,
  type KernelArg,
  karg,
  PinnedBuffer,
  type StagingBuffer,
} from "../../cuda/index.js";
import type { AnyParameter, ParameterCollection } from "../../model/parameters.js";
import { AdamTrainer, NonFiniteUpdateError, type Trainer } from "../../optim/trainers.js";
import type { GradientReducer } from "../data-parallel.js";
import {
  OPTIMIZER_KERNEL_NAMES,
  OPTIMIZER_PROGRAM,
  type OptimizerKernelName,
  optimizerKernelSource,
} from "./optimizer-kernels.js";

/** `at` rounded up to the alignment of a parameter's gradient in the gradient region. */
function alignGrad(at: number): number {
  return Math.ceil(at / GRAD_ALIGN_FLOATS) * GRAD_ALIGN_FLOATS;
}

/**
 * Slots for the blocks' partial sums of one update's gradient norm: the blocks of every sum-of-squares launch, a
 * lookup table's as if every row were touched (the most its touched rows can take).
 */
export function normPartialSlots(params: readonly { readonly value: { readonly length: number } }[]): number {
  let slots = 0;
  for (const p of params) slots += gridFor(p.value.length);
  return Math.max(1, slots);
}

/**
 * Floats per all-reduce call when a GradientReducer sums the gradient region (32 MiB): large enough that a call's
 * fixed cost is small against its transfer, small enough that a long region is several calls the reducer can
 * pipeline.
 */
export const DP_BUCKET_FLOATS = 8 << 20;

/** Each parameter's gradient starts at a multiple of this many floats in the gradient region (256 bytes). */
const GRAD_ALIGN_FLOATS = 64;

interface TouchedRows {
  /** 1 for rows touched since the last update. */
  flags: Uint8Array;
  rows: Int32Array;
  count: number;
}

/** A ParameterCollection's values and gradients in device memory, with the trainers' update rule as kernels. */
export class DeviceParameters {
  /** Float offsets in the pool, by parameter index. */
  readonly valueOffset: Float64Array;
  readonly gradOffset: Float64Array;
  /** Kernels and cuBLAS calls queued by update() and zeroGradients() so far. */
  launches = 0;
  private readonly kernels: Readonly<Record<OptimizerKernelName, CudaKernel>>;
  private readonly touched: (TouchedRows | null)[];
  /** Where the touched rows of all lookup tables are uploaded, packed one table after another (ints). */
  private readonly touchedOffset: number;
  /** One float: the squared global gradient norm of the update being applied. */
  private readonly normSqOffset: number;
  /** The blocks' partial sums of the norm (normPartialSlots floats), added in order into the norm. */
  private readonly partialsOffset: number;
  private readonly staging: StagingBuffer;
  /** Adam's first and second moments: one device allocation made at the first Adam update. */
  private moments: { base: DevicePtr; owner: Trainer; m: Float64Array; v: Float64Array } | null = null;
  /** Where each update's squared norm is copied back to, and when the copy is done. */
  private readonly normBack: PinnedBuffer;
  private readonly normCopied: CudaEvent;
  /** The `trainer.updates` before the update whose norm is being copied back and not yet checked, or -1. */
  private unchecked = -1;
  private disposed = false;
  /** Every parameter's gradient, contiguous: pool offset and length in floats (alignment gaps included). */
  readonly gradRegion: { readonly offset: number; readonly floats: number };
  /** Sums the gradients over data-parallel ranks before each update; null: one process. */
  private reducer: GradientReducer | null = null;

  constructor(
    readonly ctx: GpuContext,
    readonly params: ParameterCollection,
  ) {
    this.kernels = ctx.kernels(OPTIMIZER_PROGRAM, optimizerKernelSource(), OPTIMIZER_KERNEL_NAMES).kernels;
    const n = params.all.length;
    this.valueOffset = new Float64Array(n);
    this.gradOffset = new Float64Array(n);
    const pool = ctx.pool;
    const stream = ctx.stream.handle;
    let lookupRows = 0;
    this.touched = params.all.map((p) => {
      if (p.kind !== "lookup") return null;
      lookupRows += p.rows;
      return { flags: new Uint8Array(p.rows), rows: new Int32Array(p.rows), count: 0 };
    });
    for (const p of params.all) {
      const v = pool.alloc(p.value.length, `value of parameter '${p.name}'`);
      pool.upload(v, p.value, stream);
      this.valueOffset[p.index] = v;
    }
    let gradFloats = 0;
    for (const p of params.all) gradFloats = alignGrad(gradFloats) + p.value.length;
    const grads = pool.alloc(Math.max(1, gradFloats), "parameter gradients");
    let at = 0;
    for (const p of params.all) {
      at = alignGrad(at);
      this.gradOffset[p.index] = grads + at;
      at += p.value.length;
    }
    pool.fill(grads, Math.max(1, gradFloats), 0, stream);
    this.gradRegion = { offset: grads, floats: gradFloats };
    this.touchedOffset = pool.alloc(Math.max(1, lookupRows), "touched lookup rows");
    this.normSqOffset = pool.alloc(1, "gradient norm");
    this.partialsOffset = pool.alloc(normPartialSlots(params.all), "partial sums of the gradient norm");
    pool.mark();
    this.staging = ctx.staging(Math.max(4096, 4 * lookupRows));
    this.normBack = PinnedBuffer.alloc(64);
    this.normCopied = CudaEvent.create({ timing: false });
    // the uploads above read pageable host memory; finish them before the caller changes it
    ctx.synchronize();
  }

  /**
   * From the next update on, sums the gradients over `reducer`'s ranks (and takes the union of the ranks' touched
   * lookup rows) before applying it; null: this process alone. Every rank must call update() the same number of
   * times, each after the same number of backward passes' worth of work: the reducer's calls are collective.
   */
  setGradientReducer(reducer: GradientReducer | null): void {
    this.reducer = reducer;
  }

  get gradientReducer(): GradientReducer | null {
    return this.reducer;
  }

  valuePtr(index: number): DevicePtr {
    return this.ctx.pool.ptr(this.valueOffset[index]!);
  }

  gradPtr(index: number): DevicePtr {
    return this.ctx.pool.ptr(this.gradOffset[index]!);
  }

  /** Records that row `row` of lookup table `index` has a gradient (it will be updated, sparsely). */
  touch(index: number, row: number): void {
    const t = this.touched[index];
    if (!t) throw new Error(`touch: parameter #${index} is not a lookup table`);
    if (t.flags[row] === 0) {
      t.flags[row] = 1;
      t.rows[t.count++] = row;
    }
  }

  /** The rows of lookup table `index` touched since the last update, in order of first touch. */
  touchedRows(index: number): number[] {
    const t = this.touched[index];
    return t ? Array.from(t.rows.subarray(0, t.count)) : [];
  }

  /** A host copy of a parameter's device values (waits for queued work). */
  readValue(index: number): Float32Array {
    const p = this.param(index);
    return this.ctx.download(this.valuePtr(index), new Float32Array(p.value.length));
  }

  /** A host copy of a parameter's device gradient (waits for queued work). */
  readGradient(index: number): Float32Array {
    const p = this.param(index);
    return this.ctx.download(this.gradPtr(index), new Float32Array(p.value.length));
  }

  /** Copies every parameter's device values into the ParameterCollection (after checking the last update). */
  syncToHost(): void {
    this.checkLastUpdate();
    for (const p of this.params.all) this.ctx.download(this.valuePtr(p.index), p.value);
  }

  /**
   * Copies Adam's moments of `trainer` into it, when they are on the device (it is the trainer of the updates so
   * far); waits for the queued work.
   */
  syncTrainerToHost(trainer: Trainer): void {
    this.checkLastUpdate();
    if (!(trainer instanceof AdamTrainer) || this.moments?.owner !== trainer) return;
    for (const p of this.params.all) {
      const n = p.value.length;
      const m = this.ctx.download(this.moments.m[p.index]!, new Float32Array(n));
      const v = this.ctx.download(this.moments.v[p.index]!, new Float32Array(n));
      trainer.setMoments(p, m, v);
    }
  }

  /**
   * Throws NonFiniteUpdateError when the last update's gradient norm was not finite (its kernels then changed
   * nothing), naming the first parameter whose gradient holds NaN or ±∞. The norm's copy was queued behind the
   * update, so this waits only when nothing has synchronised with the stream since.
   */
  checkLastUpdate(): void {
    if (this.unchecked < 0) return;
    const updatesBefore = this.unchecked;
    this.unchecked = -1;
    this.normCopied.synchronize();
    const normSq = this.normBack.f32[0]!;
    if (Number.isFinite(normSq)) return;
    // the refused update left the gradients in place (a later backward may have added to them: still not finite)
    let largest = { name: this.params.all[0]?.name ?? "?", element: 0, value: 0 };
    for (const p of this.params.all) {
      const g = this.readGradient(p.index);
      for (let k = 0; k < g.length; k++) {
        const x = g[k]!;
        if (x - x !== 0) throw new NonFiniteUpdateError(p.name, k, x, updatesBefore);
        if (Math.abs(x) > Math.abs(largest.value)) largest = { name: p.name, element: k, value: x };
      }
    }
    // every element finite: their squares overflowed the fp32 sum
    throw new NonFiniteUpdateError(largest.name, largest.element, largest.value, updatesBefore);
  }

  /** Copies every parameter's host values to the device (after another engine trained them); waits for the copies. */
  reloadFromHost(): void {
    const stream = this.ctx.stream.handle;
    for (const p of this.params.all) this.ctx.pool.upload(this.valueOffset[p.index]!, p.value, stream);
    this.ctx.synchronize();
  }

  /** Zeroes every gradient (one memset: they are one region) and forgets the touched rows. */
  zeroGradients(): void {
    const r = this.gradRegion;
    if (r.floats > 0) {
      this.ctx.device.driver.memsetD32Async(this.ctx.pool.ptr(r.offset), 0, r.floats, this.ctx.stream.handle);
      this.launches++;
    }
    this.clearTouched();
  }

  /**
   * Applies `trainer`'s rule on the device and zeroes the gradients: the same arithmetic as `trainer.update` on the
   * host (clip scale from the global norm over dense gradients and touched lookup rows, then SGD or Adam with bias
   * corrections from the incremented `trainer.updates`). Queued on the stream; nothing waits.
   */
  update(trainer: Trainer): void {
    this.checkLastUpdate();
    const k = this.kernels;
    const stream = this.ctx.stream;
    const normSq = this.ctx.pool.ptr(this.normSqOffset);
    const reducer = this.reducer;
    if (reducer) this.uniteTouchedRows(reducer);
    const rowsPtr = this.uploadTouched();
    if (reducer) this.allReduceGradients(reducer);
    // each launch's blocks fill their slots from `slot` on; then one block adds slots [0, slot) in order
    const partials = this.ctx.pool.ptr(this.partialsOffset);
    let slot = 0;
    for (const p of this.params.all) {
      const t = this.touched[p.index];
      if (t) {
        if (t.count > 0) {
          this.launch(k.opt_sum_squares_rows, t.count * p.cols, [
            karg.ptr(partials + 4 * slot),
            karg.ptr(this.gradPtr(p.index)),
            karg.ptr(rowsPtr[p.index]!),
            karg.i32(t.count),
            karg.i32(p.cols),
          ]);
          slot += gridFor(t.count * p.cols);
        }
      } else {
        this.launch(k.opt_sum_squares, p.value.length, [
          karg.ptr(partials + 4 * slot),
          karg.ptr(this.gradPtr(p.index)),
          karg.i32(p.value.length),
        ]);
        slot += gridFor(p.value.length);
      }
    }
    k.opt_sum_partials.launch({ grid: 1, block: GPU_BLOCK, stream }, [
      karg.ptr(normSq),
      karg.ptr(partials),
      karg.i32(slot),
    ]);
    this.launches++;
    if (reducer && reducer.worldSize > 1) {
      // rank 0's norm on every rank: the atomics summed the same gradients in a different order on each
      if (reducer.rank !== 0) {
        this.ctx.device.driver.memsetD32Async(normSq, floatBits(0), 1, stream.handle);
        this.launches++;
      }
      reducer.allReduceDevice(normSq, 1, stream.handle);
      this.launches++;
    }
    this.unchecked = trainer.updates;
    trainer.updates++;
    if (trainer.kind === "adam") this.adam(trainer as AdamTrainer, normSq, rowsPtr);
    else this.sgd(trainer, normSq, rowsPtr);
    this.ctx.device.driver.memcpyDtoHAsync(this.normBack.u8.subarray(0, 4), normSq, 4, stream.handle);
    this.normCopied.record(stream);
    this.clearTouched();
  }

  private sgd(trainer: Trainer, normSq: DevicePtr, rowsPtr: Float64Array): void {
    const k = this.kernels;
    const threshold = trainer.clipThreshold;
    const lr = trainer.learningRate;
    for (const p of this.params.all) {
      const t = this.touched[p.index];
      const w = karg.ptr(this.valuePtr(p.index));
      const g = karg.ptr(this.gradPtr(p.index));
      if (t) {
        if (t.count === 0) continue;
        this.launch(k.opt_sgd_rows, t.count * p.cols, [
          w,
          g,
          karg.ptr(rowsPtr[p.index]!),
          karg.i32(t.count),
          karg.i32(p.cols),
          karg.ptr(normSq),
          karg.f32(threshold),
          karg.f32(lr),
        ]);
      } else {
        const n = p.value.length;
        this.launch(k.opt_sgd, n, [w, g, karg.ptr(normSq), karg.f32(threshold), karg.f32(lr), karg.i32(n)]);
      }
    }
  }

  private adam(trainer: AdamTrainer, normSq: DevicePtr, rowsPtr: Float64Array): void {
    const k = this.kernels;
    const mo = this.momentsFor(trainer);
    // the CPU trainer's bias corrections from the already incremented step count; 1 − β and the reciprocals in
    // double precision (adam_element's arguments)
    const c1 = 1 - trainer.beta1 ** trainer.updates;
    const c2 = 1 - trainer.beta2 ** trainer.updates;
    const hyper = [
      karg.ptr(normSq),
      karg.f32(trainer.clipThreshold),
      karg.f32(trainer.learningRate),
      karg.f32(trainer.beta1),
      karg.f32(1 - trainer.beta1),
      karg.f32(trainer.beta2),
      karg.f32(1 - trainer.beta2),
      karg.f32(trainer.epsilon),
      karg.f32(1 / c1),
      karg.f32(1 / c2),
    ];
    for (const p of this.params.all) {
      const t = this.touched[p.index];
      const state = [
        karg.ptr(this.valuePtr(p.index)),
        karg.ptr(this.gradPtr(p.index)),
        karg.ptr(mo.m[p.index]!),
        karg.ptr(mo.v[p.index]!),
      ];
      if (t) {
        if (t.count === 0) continue;
        this.launch(k.opt_adam_rows, t.count * p.cols, [
          ...state,
          karg.ptr(rowsPtr[p.index]!),
          karg.i32(t.count),
          karg.i32(p.cols),
          ...hyper,
        ]);
      } else {
        const n = p.value.length;
        this.launch(k.opt_adam, n, [...state, ...hyper, karg.i32(n)]);
      }
    }
  }

  /**
   * The moments of `trainer` on the device: allocated on first use, and set from the trainer's own (host) moments
   * whenever a different trainer arrives: zero for a new trainer, a checkpoint's for a restored one.
   */
  private momentsFor(trainer: Trainer): { m: Float64Array; v: Float64Array } {
    const driver = this.ctx.device.driver;
    let total = 0;
    for (const p of this.params.all) total += 2 * p.value.length;
    if (!this.moments) {
      // outside the pool: the pool's persistent region was closed by mark() when the engine laid out its batches
      const base = driver.memAlloc(4 * total);
      const m = new Float64Array(this.params.all.length);
      const v = new Float64Array(this.params.all.length);
      let at = base;
      for (const p of this.params.all) {
        m[p.index] = at;
        at += 4 * p.value.length;
        v[p.index] = at;
        at += 4 * p.value.length;
      }
      this.moments = { base, owner: trainer, m, v };
      this.startMoments(trainer, total);
    } else if (this.moments.owner !== trainer) {
      this.moments.owner = trainer;
      this.startMoments(trainer, total);
    }
    return this.moments;
  }

  /** Zeroes the moments, then uploads those `trainer` holds (waits for the uploads: they read pageable memory). */
  private startMoments(trainer: Trainer, total: number): void {
    const mo = this.moments!;
    const driver = this.ctx.device.driver;
    const stream = this.ctx.stream.handle;
    driver.memsetD32Async(mo.base, 0, total, stream);
    this.launches++;
    if (!(trainer instanceof AdamTrainer) || !trainer.hasMoments) return;
    for (const p of this.params.all) {
      const host = trainer.moments(p);
      if (!host) continue;
      driver.memcpyHtoDAsync(mo.m[p.index]!, host.m, host.m.byteLength, stream);
      driver.memcpyHtoDAsync(mo.v[p.index]!, host.v, host.v.byteLength, stream);
      this.launches += 2;
    }
    this.ctx.synchronize();
  }

  /**
   * Makes the touched rows of every lookup table the union over the reducer's ranks: each rank sends its rows
   * (per table, in parameter order: count, then the rows) and touches the others'. The order of the rows does not
   * matter: each row's update is independent of the others, and the norm is rank 0's.
   */
  private uniteTouchedRows(reducer: GradientReducer): void {
    let words = 0;
    for (const t of this.touched) if (t) words += 1 + t.count;
    if (words === 0) return; // no lookup table: every rank knows it, no exchange
    const mine = new Int32Array(words);
    let k = 0;
    for (const t of this.touched) {
      if (!t) continue;
      mine[k++] = t.count;
      mine.set(t.rows.subarray(0, t.count), k);
      k += t.count;
    }
    const all = reducer.allGatherHost(mine);
    all.forEach((theirs, rank) => {
      if (rank === reducer.rank) return;
      let at = 0;
      for (const p of this.params.all) {
        const t = this.touched[p.index];
        if (!t) continue;
        const count = theirs[at++];
        if (count === undefined || count < 0 || at + count > theirs.length) {
          throw new Error(
            `data-parallel update: rank ${rank} sent ${theirs.length} words of touched rows, which do not match ` +
              "this model's lookup tables (every rank must train the same model)",
          );
        }
        for (let i = 0; i < count; i++) {
          const row = theirs[at + i]!;
          if (row < 0 || row >= p.rows) {
            throw new Error(`data-parallel update: rank ${rank} touched row ${row} of '${p.name}' (${p.rows} rows)`);
          }
          this.touch(p.index, row);
        }
        at += count;
      }
    });
  }

  /** Sums the gradient region over the reducer's ranks, in buckets of DP_BUCKET_FLOATS, queued on the stream. */
  private allReduceGradients(reducer: GradientReducer): void {
    const r = this.gradRegion;
    const stream = this.ctx.stream.handle;
    for (let o = 0; o < r.floats; o += DP_BUCKET_FLOATS) {
      reducer.allReduceDevice(this.ctx.pool.ptr(r.offset + o), Math.min(DP_BUCKET_FLOATS, r.floats - o), stream);
      this.launches++;
    }
  }

  /** Uploads the touched rows of every lookup table (packed); returns each table's device address (by index). */
  private uploadTouched(): Float64Array {
    const at = new Float64Array(this.params.all.length);
    let total = 0;
    for (const t of this.touched) if (t) total += t.count;
    if (total === 0) return at;
    const buf = this.staging.acquire(4 * total);
    let pos = 0;
    for (const p of this.params.all) {
      const t = this.touched[p.index];
      if (!t) continue;
      at[p.index] = this.ctx.pool.ptr(this.touchedOffset + pos);
      buf.i32.set(t.rows.subarray(0, t.count), pos);
      pos += t.count;
    }
    this.staging.upload(this.ctx.pool.ptr(this.touchedOffset), 4 * total);
    this.launches++;
    return at;
  }

  private clearTouched(): void {
    for (const t of this.touched) {
      if (!t) continue;
      for (let i = 0; i < t.count; i++) t.flags[t.rows[i]!] = 0;
      t.count = 0;
    }
  }

  private launch(kernel: CudaKernel, n: number, args: KernelArg[]): void {
    kernel.launch({ grid: gridFor(n), block: GPU_BLOCK, stream: this.ctx.stream }, args);
    this.launches++;
  }

  private param(index: number): AnyParameter {
    const p = this.params.all[index];
    if (!p) throw new RangeError(`parameter #${index} does not exist (the model has ${this.params.all.length})`);
    return p;
  }

  /** Frees the moments; values and gradients go with the context's pool. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.normCopied.synchronize();
    this.normBack.free();
    this.normCopied.destroy();
    if (this.moments) {
      this.ctx.synchronize();
      this.ctx.device.driver.memFree(this.moments.base);
      this.moments = null;
    }
  }
}
