// GLP4NN's resource tracker: what each kernel takes of the GPU and how long it runs, recorded on its first launches
// (the paper profiles the first iterations, then schedules from the analysis). Per kernel and launch shape: the
// compiled kernel's registers, shared memory and thread limit (cuFuncGetAttribute), its occupancy alone
// (cuOccupancyMaxActiveBlocksPerMultiprocessor), grid and block, the duration of each timed launch (a pair of events
// around it on its stream) and the host time of each launch call — the launch cost T_launch that bounds how many
// kernels one host thread keeps in flight.
//
// The paper's tracker reads every kernel through CUPTI, cuBLAS's too. Without CUPTI a cuBLAS routine is opaque: its
// duration is timed here (`timeCall`), its grid and registers are not known (docs/GLP4NN.md, what is left).
//
// Events time a launch from the moment the stream reaches it: when the GPU waits for the host, the wait for the launch
// is counted too. Profile with the stream ahead of the host (queue a long kernel first, as test/gpu/streams.test.ts
// does), or the durations of kernels shorter than a launch are overstated.
//
// Events, kernels and the clock are interfaces, so that the bookkeeping is tested with a fake device
// (test/streams-tracker.test.ts); on a GPU they are CudaEvent, CudaKernel and performance.now.

import type { KernelProfile } from "./kernels.js";

/** What the tracker needs of a compiled kernel (CudaKernel has it). */
export interface TrackedKernel {
  readonly name: string;
  attributes(): { numRegs: number; sharedBytes: number; maxThreadsPerBlock: number; localBytes: number };
  maxActiveBlocksPerSm(blockSize: number, dynamicSharedBytes?: number): number;
}

/** What it needs of an event (CudaEvent has it); S is the stream type. */
export interface TimingEvent<S> {
  record(stream?: S): unknown;
  synchronize(): void;
  /** Milliseconds from `start` to this event (both recorded, this one complete). */
  elapsedMsSince(start: TimingEvent<S>): number;
  destroy(): void;
}

/** A launch's shape. */
export interface LaunchShape {
  readonly grid: number | readonly [number, number?, number?];
  readonly block: number | readonly [number, number?, number?];
  /** Dynamic shared memory, bytes. */
  readonly sharedBytes?: number;
}

export interface TrackerOptions<S> {
  /** A new event (e.g. `() => CudaEvent.create()`). */
  readonly event: () => TimingEvent<S>;
  /** Launches timed per kernel and shape: the first ones after the warm-up. Default 5. */
  readonly samples?: number;
  /**
   * First launches per kernel and shape (or opaque call) run untimed. Default 1: a first launch pays one-time costs
   * the kernel's later launches do not — lazy module loading (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2)
   * and cuBLAS's own initialisation, timed at 111,708 µs for a first GEMM on an H100 against 43–83 µs after.
   */
  readonly warmup?: number;
  /** Host clock in µs. Default `performance.now() · 1000`. */
  readonly clockUs?: () => number;
}

/** Everything recorded of one kernel and launch shape (or one opaque call). */
export interface TrackedRecord {
  readonly name: string;
  /** Absent for an opaque call (cuBLAS). */
  readonly shape?: {
    readonly blocks: number;
    readonly threadsPerBlock: number;
    readonly grid: readonly number[];
    readonly block: readonly number[];
    readonly dynamicSharedBytes: number;
    readonly registersPerThread: number;
    readonly staticSharedBytes: number;
    readonly maxThreadsPerBlock: number;
    /** Local memory per thread: spills or stack arrays. */
    readonly localBytes: number;
    /** Blocks of this kernel alone resident per SM (the driver's occupancy calculator). */
    readonly blocksPerSm: number;
  };
  /** Launches seen, timed or not (the untimed warm-up launches included). */
  launches: number;
  /** Durations of the timed launches, µs (filled by `collect`). */
  readonly durationsUs: number[];
  /** Host time of each timed launch call, µs. */
  readonly launchHostUs: number[];
}

interface Pending<S> {
  readonly record: TrackedRecord;
  readonly start: TimingEvent<S>;
  readonly end: TimingEvent<S>;
}

const dims = (d: number | readonly [number, number?, number?]): number[] =>
  typeof d === "number" ? [d, 1, 1] : [d[0], d[1] ?? 1, d[2] ?? 1];

/** CUDA events resolve about 0.5 µs: a shorter median is reported as this (the analyser takes durations > 0). */
export const EVENT_RESOLUTION_US = 0.5;

/** The median of a non-empty list. */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** Records kernels' resources and timings on their first launches; see the top of this file. */
export class ResourceTracker<S> {
  private readonly samples: number;
  private readonly warmup: number;
  private readonly clockUs: () => number;
  private readonly byKey = new Map<string, TrackedRecord>();
  private readonly attributes = new Map<string, ReturnType<TrackedKernel["attributes"]>>();
  private pending: Pending<S>[] = [];
  private readonly pendingCount = new Map<TrackedRecord, number>();
  private readonly free: TimingEvent<S>[] = [];

  constructor(private readonly options: TrackerOptions<S>) {
    this.samples = options.samples ?? 5;
    if (!Number.isInteger(this.samples) || this.samples < 1) {
      throw new RangeError(`ResourceTracker: samples must be an integer ≥ 1; got ${this.samples}`);
    }
    this.warmup = options.warmup ?? 1;
    if (!Number.isInteger(this.warmup) || this.warmup < 0) {
      throw new RangeError(`ResourceTracker: warmup must be an integer ≥ 0; got ${this.warmup}`);
    }
    this.clockUs = options.clockUs ?? (() => performance.now() * 1000);
  }

  /**
   * Runs `launch`, which queues `kernel` with `shape` on `stream`; times it (events around it, the host clock around
   * the call) while its kernel and shape have fewer than `samples` timed launches.
   */
  launch(kernel: TrackedKernel, shape: LaunchShape, stream: S, launch: () => void): void {
    const grid = dims(shape.grid);
    const block = dims(shape.block);
    const dynamic = shape.sharedBytes ?? 0;
    const key = `${kernel.name}|${grid.join("x")}|${block.join("x")}|${dynamic}`;
    let record = this.byKey.get(key);
    if (record === undefined) {
      record = this.newRecord(kernel, grid, block, dynamic);
      this.byKey.set(key, record);
    }
    this.run(record, stream, launch);
  }

  /** Times an opaque call on `stream` (a cuBLAS routine: its kernels' resources are unknown without CUPTI). */
  timeCall(name: string, stream: S, call: () => void): void {
    const key = `call|${name}`;
    let record = this.byKey.get(key);
    if (record === undefined) {
      record = { name, launches: 0, durationsUs: [], launchHostUs: [] };
      this.byKey.set(key, record);
    }
    this.run(record, stream, call);
  }

  /** Waits for the timed launches and turns their events into durations. */
  collect(): void {
    for (const p of this.pending) {
      p.end.synchronize();
      p.record.durationsUs.push(1000 * p.end.elapsedMsSince(p.start));
      this.free.push(p.start, p.end);
    }
    this.pending = [];
    this.pendingCount.clear();
  }

  /** Everything recorded, in order of first launch. */
  records(): readonly TrackedRecord[] {
    return [...this.byKey.values()];
  }

  /** Whether every kernel and call seen so far has its samples (its warm-up launches and then `samples` timed). */
  complete(): boolean {
    for (const r of this.byKey.values()) if (r.durationsUs.length + this.pendingOf(r) < this.samples) return false;
    return true;
  }

  /**
   * The analyser's input: one profile per kernel and shape with timed launches (median duration); opaque calls have
   * no footprint and are left out (`opaque()` lists them).
   */
  profiles(instances?: number): KernelProfile[] {
    const out: KernelProfile[] = [];
    for (const r of this.byKey.values()) {
      if (r.shape === undefined || r.durationsUs.length === 0) continue;
      const s = r.shape;
      out.push({
        name: r.name,
        blocks: s.blocks,
        threadsPerBlock: s.threadsPerBlock,
        registersPerThread: s.registersPerThread,
        sharedBytesPerBlock: s.staticSharedBytes + s.dynamicSharedBytes,
        durationUs: Math.max(EVENT_RESOLUTION_US, median(r.durationsUs)),
        ...(s.blocksPerSm >= 1 ? { blocksPerSm: s.blocksPerSm } : {}),
        ...(instances !== undefined ? { instances } : {}),
      });
    }
    return out;
  }

  /** The opaque calls timed (name and median duration, µs). */
  opaque(): { name: string; durationUs: number }[] {
    return [...this.byKey.values()]
      .filter((r) => r.shape === undefined && r.durationsUs.length > 0)
      .map((r) => ({ name: r.name, durationUs: Math.max(EVENT_RESOLUTION_US, median(r.durationsUs)) }));
  }

  /** The median host time of a timed launch call, µs (T_launch); 0 before any. */
  launchUs(): number {
    const all = [...this.byKey.values()].flatMap((r) => r.launchHostUs);
    return all.length === 0 ? 0 : median(all);
  }

  /** Destroys the events (after `collect`, or with the work abandoned). */
  dispose(): void {
    for (const p of this.pending) this.free.push(p.start, p.end);
    this.pending = [];
    this.pendingCount.clear();
    for (const e of this.free.splice(0)) e.destroy();
  }

  private newRecord(kernel: TrackedKernel, grid: number[], block: number[], dynamic: number): TrackedRecord {
    let a = this.attributes.get(kernel.name);
    if (a === undefined) {
      a = kernel.attributes();
      this.attributes.set(kernel.name, a);
    }
    const threadsPerBlock = block[0]! * block[1]! * block[2]!;
    if (threadsPerBlock > a.maxThreadsPerBlock) {
      throw new RangeError(
        `ResourceTracker: kernel '${kernel.name}' launched with ${threadsPerBlock} threads per block; it allows at most ${a.maxThreadsPerBlock}`,
      );
    }
    return {
      name: kernel.name,
      shape: {
        blocks: grid[0]! * grid[1]! * grid[2]!,
        threadsPerBlock,
        grid,
        block,
        dynamicSharedBytes: dynamic,
        registersPerThread: a.numRegs,
        staticSharedBytes: a.sharedBytes,
        maxThreadsPerBlock: a.maxThreadsPerBlock,
        localBytes: a.localBytes,
        blocksPerSm: kernel.maxActiveBlocksPerSm(threadsPerBlock, dynamic),
      },
      launches: 0,
      durationsUs: [],
      launchHostUs: [],
    };
  }

  private run(record: TrackedRecord, stream: S, call: () => void): void {
    record.launches++;
    if (record.launches <= this.warmup || record.durationsUs.length + this.pendingOf(record) >= this.samples) {
      call();
      return;
    }
    const start = this.free.pop() ?? this.options.event();
    const end = this.free.pop() ?? this.options.event();
    start.record(stream);
    const t0 = this.clockUs();
    call();
    const t1 = this.clockUs();
    end.record(stream);
    record.launchHostUs.push(t1 - t0);
    this.pending.push({ record, start, end });
    this.pendingCount.set(record, this.pendingOf(record) + 1);
  }

  private pendingOf(record: TrackedRecord): number {
    return this.pendingCount.get(record) ?? 0;
  }
}
