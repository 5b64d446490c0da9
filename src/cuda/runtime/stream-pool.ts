// GLP4NN's stream pool and the dispatch it supports: streams created once (each with a cuBLAS handle bound to it, so
// that each has its own cuBLAS workspace), independent work dealt to them round-robin, dependencies by events, and
// the origin stream — the engine's own, GLP4NN's "default stream" — joining them at the end:
//
//   fork(origin)            every lane's later work waits for what origin has queued so far
//   lane(k)                 the lane of the k-th independent item: k mod size
//   extraLane(name)         a named lane beside the round-robin ones (a convolution's chains of in-place sums)
//   eventSet(name)          an event per lane for orders of the pool's user, recorded and waited on with
//   recordOn / waitOn       (a convolution's "columns written" and "columns read": src/conv/lanes.ts)
//   join(origin)            origin's later work waits for everything queued on the lanes
//
// The streams, events and handles come from a backend (CUDA's, or a fake in tests that checks the order the events
// impose).

import { type Cublas, type CublasHandle, getCublas } from "../ffi/cublas.js";
import { CudaEvent, CudaStream } from "./stream.js";

/** What the pool creates and orders with. */
export interface PoolBackend<S, E, H> {
  stream(): S;
  event(): E;
  /** A cuBLAS handle whose calls go to `stream`. */
  blas(stream: S): H;
  record(event: E, stream: S): void;
  wait(stream: S, event: E): void;
  destroyEvent(event: E): void;
  /** Waits for the stream's work, then destroys the handle and the stream. */
  destroyLane(stream: S, blas: H): void;
}

/** One stream of the pool and the cuBLAS handle bound to it. */
export interface Lane<S, H> {
  readonly index: number;
  readonly stream: S;
  readonly blas: H;
}

/** The lanes of a pool; see the top of this file. */
export class StreamPool<S, E, H> {
  private readonly all: Lane<S, H>[] = [];
  private readonly done: E[] = [];
  private readonly start: E;
  private readonly sets = new Map<string, E[]>();
  private readonly extras = new Map<string, { lane: Lane<S, H>; done: E }>();
  /** Each extra lane's done event, by lane (join's lookup). */
  private readonly extraDone = new Map<Lane<S, H>, E>();
  private disposed = false;

  constructor(
    private readonly backend: PoolBackend<S, E, H>,
    size: number,
  ) {
    this.start = backend.event();
    this.grow(size);
  }

  /** A pool of CUDA streams (non-blocking), each with its own cuBLAS handle. */
  static cuda(size: number, cublas: Cublas = getCublas()): StreamPool<CudaStream, CudaEvent, CublasHandle> {
    return new StreamPool(cudaBackend(cublas), size);
  }

  get size(): number {
    return this.all.length;
  }

  get lanes(): readonly Lane<S, H>[] {
    return this.all;
  }

  /** Adds lanes up to `size` (a pool is created once and only grows). */
  grow(size: number): void {
    if (!Number.isInteger(size) || size < 1)
      throw new RangeError(`StreamPool: size must be an integer ≥ 1; got ${size}`);
    while (this.all.length < size) {
      const stream = this.backend.stream();
      this.all.push({ index: this.all.length, stream, blas: this.backend.blas(stream) });
      this.done.push(this.backend.event());
    }
  }

  /** The lane of the k-th independent item among the first `count` lanes (round-robin). */
  lane(k: number, count = this.all.length): Lane<S, H> {
    return this.all[k % count]!;
  }

  /**
   * A named lane outside the round-robin ones (created on first use, with its own cuBLAS handle; index −1, −2, …): for
   * work that runs beside the lanes', e.g. a chain of accumulations in a fixed order.
   */
  extraLane(name: string): Lane<S, H> {
    let x = this.extras.get(name);
    if (x === undefined) {
      const stream = this.backend.stream();
      x = {
        lane: { index: -1 - this.extras.size, stream, blas: this.backend.blas(stream) },
        done: this.backend.event(),
      };
      this.extras.set(name, x);
      this.extraDone.set(x.lane, x.done);
    }
    return x.lane;
  }

  /** The first `count` lanes' (and `extras`') later work waits for what `origin` has queued so far. */
  fork(origin: S, count = this.all.length, extras: readonly Lane<S, H>[] = []): void {
    this.backend.record(this.start, origin);
    for (let i = 0; i < count; i++) this.backend.wait(this.all[i]!.stream, this.start);
    for (const x of extras) this.backend.wait(x.stream, this.start);
  }

  /**
   * The events of a named set, one per lane (created on first use, destroyed with the pool): for orders a user of the
   * pool keeps, e.g. a convolution's "columns ready on lane k" and "weight gradient done".
   */
  eventSet(name: string): readonly E[] {
    let set = this.sets.get(name);
    if (set === undefined) {
      set = [];
      this.sets.set(name, set);
    }
    while (set.length < this.all.length) set.push(this.backend.event());
    return set;
  }

  /** Records `event` on `lane`'s stream. */
  recordOn(event: E, lane: Lane<S, H>): void {
    this.backend.record(event, lane.stream);
  }

  /** `lane`'s later work waits for `event`'s last record. */
  waitOn(lane: Lane<S, H>, event: E): void {
    this.backend.wait(lane.stream, event);
  }

  /** `origin`'s later work waits for everything queued on the first `count` lanes. */
  join(origin: S, count = this.all.length, extras: readonly Lane<S, H>[] = []): void {
    for (let i = 0; i < count; i++) {
      this.backend.record(this.done[i]!, this.all[i]!.stream);
      this.backend.wait(origin, this.done[i]!);
    }
    for (const x of extras) {
      const done = this.extraDone.get(x);
      if (done === undefined) throw new RangeError("StreamPool.join: an extra lane of another pool");
      this.backend.record(done, x.stream);
      this.backend.wait(origin, done);
    }
  }

  /** Destroys the streams, events and handles (after the lanes' work is done). */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const l of [...this.all, ...[...this.extras.values()].map((x) => x.lane)]) {
      this.backend.destroyLane(l.stream, l.blas);
    }
    for (const x of this.extras.values()) this.backend.destroyEvent(x.done);
    for (const e of [this.start, ...this.done, ...[...this.sets.values()].flat()]) {
      this.backend.destroyEvent(e);
    }
  }
}

/** CUDA's streams and events, and cuBLAS handles bound to the streams. */
function cudaBackend(cublas: Cublas): PoolBackend<CudaStream, CudaEvent, CublasHandle> {
  return {
    stream: () => CudaStream.create({ nonBlocking: true }),
    event: () => CudaEvent.create({ timing: false }),
    blas(stream) {
      const h = cublas.create();
      cublas.setStream(h, stream.handle);
      return h;
    },
    record: (event, stream) => event.record(stream),
    wait: (stream, event) => stream.wait(event),
    destroyEvent: (event) => event.destroy(),
    destroyLane(stream, blas) {
      stream.synchronize();
      cublas.destroy(blas);
      stream.destroy();
    },
  };
}
