// A pooled convolution's work issued from several host threads (the main side; the threads' is
// thread-worker.ts). With direct launches one host thread bounds a Caffe-style layer: a sample costs 5 cuBLAS
// calls and up to 3 kernel launches, ~57 µs of host time even from C on an H100's host, more than the GPU time per
// sample of most Table 5 layers, so no pool can overlap anything. cuBLAS calls
// from several threads, each on its own streams and handles, scale almost linearly (464 against 71 calls per ms with 8
// threads; docs/journal/glp4nn.md). This goes beyond GLP4NN, whose model has one host thread.
//
// Threads: P sample threads (thread t issues the samples of the lanes k ≡ t mod P, in sample order), one for the
// weight gradient's chain lane and one for the bias gradient's side lane (lanes.ts). Each makes the device's primary
// context current, wraps the pool's streams and creates its own cuBLAS handles, and runs ConvRunner's parts on the
// runner's buffers. The main thread forks the lanes, posts the job in shared memory, waits (dispatch.ts) until every
// thread has issued its share, and joins the lanes: so `forwardAt`/`backwardAt` stay synchronous and queue exactly
// the work one thread would, with the same events between the same lanes. The GPU orders the work by those events;
// the host must only issue each wait after the record it waits for, which two shared counters ensure: the chain thread
// issues sample n's part once n's lane part has been issued (ring slot n mod L holds n + 1), and a lane issues sample
// n's im2col into a buffer once the chain has issued sample n − L's part (counter CHAIN > n − L). The results are one
// thread's bit for bit: the same calls on the same streams, ordered by the same events.
//
// A thread that fails reports on its port and bumps the error counter; every wait is bounded and gives up when
// another thread has failed, so the main thread throws the first error instead of hanging.

import { availableParallelism } from "node:os";
import { MessageChannel, type MessagePort, receiveMessageOnPort, Worker } from "node:worker_threads";
import type { CudaStreamPool, GpuContext } from "../cuda/index.js";
import { type CudaEvent, getDriver } from "../cuda/index.js";
import type { ImageGeometry } from "../ops/image.js";
import { UserError } from "../util/errors.js";
import { MODULE_BOOTSTRAP, siblingModule } from "../util/worker-module.js";
import { awaitThreads, type ConvThreadRole, CTRL, controlBytes, postJob, stopThreads } from "./dispatch.js";
import type { ConvHost } from "./kernels.js";
import { convDepth, convEventSets, convExtraLanes, PRODUCT_SLOTS } from "./lanes.js";
import { type ConvIssuer, type ConvPointers, type ConvRunner, THIS_THREAD } from "./runner.js";

/** The job's words (Float64Array): kind, geometry, pointers, ones, lanes L, weight sums (0 chain, 1 products), then
 * the column buffers (max lanes M), the second buffers (M) and the product slots (PRODUCT_SLOTS·L of PRODUCT_SLOTS·M,
 * lane k's slot r at r·L + k). */
export const JOB = {
  KIND: 0,
  GEOMETRY: 1, // n, c, h, w, f, ho, wo, kernel, stride, padding
  POINTERS: 11, // x, W, b, y, dx, dW, db, dy
  ONES: 19,
  LANES: 20,
  SUMS: 21,
  COLS: 22,
} as const;

/** Float64 words of a job for up to `maxLanes` lanes. */
export function jobWords(maxLanes: number): number {
  return JOB.COLS + (2 + PRODUCT_SLOTS) * maxLanes;
}
const GEOMETRY_KEYS = ["n", "c", "h", "w", "f", "ho", "wo", "kernel", "stride", "padding"] as const;
const POINTER_KEYS = ["x", "W", "b", "y", "dx", "dW", "db", "dy"] as const;

export function writeGeometry(job: Float64Array, G: ImageGeometry): void {
  GEOMETRY_KEYS.forEach((k, i) => {
    job[JOB.GEOMETRY + i] = G[k];
  });
}

export function readGeometry(job: Float64Array): ImageGeometry {
  const g: Record<string, number> = {};
  GEOMETRY_KEYS.forEach((k, i) => {
    g[k] = job[JOB.GEOMETRY + i]!;
  });
  return g as unknown as ImageGeometry;
}

export function readPointers(job: Float64Array): ConvPointers {
  const p: Record<string, number> = {};
  POINTER_KEYS.forEach((k, i) => {
    p[k] = job[JOB.POINTERS + i]!;
  });
  return p as unknown as ConvPointers;
}

/** A thread's start data (structured-cloned). */
export interface ConvThreadData {
  readonly entry: string;
  readonly tsx: string | undefined;
  readonly fatal: { port: MessagePort; counter: SharedArrayBuffer; index: number };
  readonly port: MessagePort;
  readonly device: number;
  readonly role: ConvThreadRole;
  /** The most sample lanes M of a job; `streams` holds the pool's lanes 0 … M − 1, then the side and chain lanes. */
  readonly maxLanes: number;
  readonly streams: readonly bigint[];
  /** The pools' ordering events by slot, then lane (lanes.ts's convEventSets). */
  readonly columns: readonly (readonly bigint[])[];
  readonly weights: readonly (readonly bigint[])[];
  readonly kernels: {
    readonly im2col: bigint;
    readonly col2im: bigint;
    readonly bias: bigint;
    readonly addClear: bigint;
  };
  readonly ctrl: SharedArrayBuffer;
  readonly job: SharedArrayBuffer;
  /** ms a thread waits for another before it gives up. */
  readonly timeoutMs: number;
}

/** The most sample threads VPPS_CONV_THREADS takes (beyond 8 the driver's launch path stops scaling). */
export const MAX_CONV_THREADS = 8;
/**
 * The default's cap: with 8 sample threads, besides the chain's, the side's and the main thread, the small Table 5
 * layers ran slower than with 4 on the H100's 16-core host.
 */
export const DEFAULT_CONV_THREADS = 4;
const TIMEOUT_MS = 60_000;

/**
 * Sample threads for a pool of `count` lanes: `VPPS_CONV_THREADS` when set (0 or 1: issue from the calling thread),
 * else min(count, 8, cores − 3) — the chain and side threads and the main thread take the rest.
 */
export function convThreadsFor(count: number, env: Readonly<Record<string, string | undefined>> = process.env): number {
  const raw = env["VPPS_CONV_THREADS"];
  if (raw !== undefined && raw.trim() !== "") {
    const n = Number(raw);
    if (!Number.isInteger(n) || n < 0 || n > MAX_CONV_THREADS) {
      throw new UserError(
        `VPPS_CONV_THREADS is '${raw}'; expected an integer 0 … ${MAX_CONV_THREADS} (0 or 1: issue a convolution's ` +
          "pooled work from the calling thread)",
      );
    }
    return Math.min(n, count);
  }
  return Math.max(1, Math.min(count, DEFAULT_CONV_THREADS, availableParallelism() - 3));
}

/**
 * An issuer that starts the context's dispatch threads the first time a convolution runs on the pool (an engine whose
 * graphs have no convolution never starts them).
 */
export function lazyConvThreads(ctx: GpuContext, threads: number, kernels: ConvHost["k"]): ConvIssuer {
  let issuer: ConvThreads | undefined;
  const get = () => {
    issuer ??= convThreads(ctx, threads, kernels);
    return issuer;
  };
  return {
    forward: (runner, l, G, p) => get().forward(runner, l, G, p),
    backward: (runner, l, G, p) => get().backward(runner, l, G, p),
  };
}

/**
 * The issuer for pools of up to MAX_POOL_LANES lanes of a context's stream pool with `threads` sample threads,
 * started once per context and thread count (so that every pool size shares threads already warm).
 */
export function convThreads(ctx: GpuContext, threads: number, kernels: ConvHost["k"]): ConvThreads {
  const pool = ctx.streamPool(MAX_POOL_LANES);
  return ctx.attached(`conv-threads:${threads}`, () =>
    ConvThreads.start({ device: ctx.device.props.index, pool, maxLanes: MAX_POOL_LANES, threads, kernels }),
  );
}

/**
 * Whether the runner's lanes (forked from the origin) are being captured into a CUDA graph. A capture is issued from
 * the calling thread: a graph's launch cost is one call whatever the thread count, and cuBLAS calls from several
 * threads into one capture were seen to corrupt a replay (an illegal address in a split-K GEMM, on an H100, now and
 * then).
 */
function capturing(runner: ConvRunner): boolean {
  return getDriver().streamIsCapturing(runner.lanes.lane(0).stream.handle);
}

/** The most lanes of a pooled convolution dispatch threads take (the benchmark's largest pool). */
export const MAX_POOL_LANES = 32;

/** See the top of this file. */
export class ConvThreads implements ConvIssuer {
  private readonly ctrl: Int32Array;
  private readonly job: Float64Array;
  private disposed = false;

  private constructor(
    private readonly workers: readonly Worker[],
    private readonly ports: readonly MessagePort[],
    ctrl: SharedArrayBuffer,
    job: SharedArrayBuffer,
    readonly maxLanes: number,
    readonly threads: number,
  ) {
    this.ctrl = new Int32Array(ctrl);
    this.job = new Float64Array(job);
  }

  /** Starts the threads and waits until each has its streams and handles. */
  static start(o: {
    device: number;
    pool: CudaStreamPool;
    maxLanes: number;
    threads: number;
    kernels: ConvHost["k"];
  }): ConvThreads {
    const { pool, maxLanes } = o;
    if (!Number.isInteger(o.threads) || o.threads < 1 || o.threads > MAX_CONV_THREADS) {
      throw new RangeError(`ConvThreads: threads must be an integer 1 … ${MAX_CONV_THREADS}; got ${o.threads}`);
    }
    pool.grow(maxLanes);
    const { side, chain } = convExtraLanes(pool);
    const ctrl = new SharedArrayBuffer(controlBytes(maxLanes, PRODUCT_SLOTS));
    const job = new SharedArrayBuffer(8 * jobWords(maxLanes));
    const streams = [...pool.lanes.slice(0, maxLanes), side, chain].map((l) => l.stream.handle);
    const handles = (sets: (readonly CudaEvent[])[]) => sets.map((set) => set.map((e) => e.handle));
    const columns = handles(convEventSets(pool, "conv.columns"));
    const weights = handles(convEventSets(pool, "conv.weights"));
    const { entry, tsx } = siblingModule(import.meta.url, "thread-worker");
    const roles: ConvThreadRole[] = [
      ...Array.from({ length: o.threads }, (_, t) => ({ kind: "samples" as const, t, P: o.threads })),
      { kind: "chain" },
      { kind: "side" },
    ];
    const workers: Worker[] = [];
    const ports: MessagePort[] = [];
    for (const role of roles) {
      const { port1, port2 } = new MessageChannel();
      const data: ConvThreadData = {
        entry,
        tsx,
        fatal: { port: port2, counter: ctrl, index: CTRL.ERROR },
        port: port2,
        device: o.device,
        role,
        maxLanes,
        streams,
        columns,
        weights,
        kernels: {
          im2col: o.kernels.vp_im2col.handle,
          col2im: o.kernels.vp_col2im_add.handle,
          bias: o.kernels.vp_conv_bias_add.handle,
          addClear: o.kernels.vp_add_clear.handle,
        },
        ctrl,
        job,
        timeoutMs: TIMEOUT_MS,
      };
      const w = new Worker(MODULE_BOOTSTRAP, { eval: true, workerData: data, transferList: [port2] });
      w.unref();
      port1.unref();
      workers.push(w);
      ports.push(port1);
    }
    const threads = new ConvThreads(workers, ports, ctrl, job, maxLanes, o.threads);
    try {
      threads.await("start");
    } catch (e) {
      threads.dispose();
      throw e;
    }
    return threads;
  }

  forward(runner: ConvRunner, l: ConvHost, G: ImageGeometry, p: Pick<ConvPointers, "x" | "W" | "b" | "y">): void {
    if (capturing(runner)) THIS_THREAD.forward(runner, l, G, p);
    else this.run(0, runner, G, { ...p, dx: 0, dW: 0, db: 0, dy: 0 });
  }

  backward(runner: ConvRunner, l: ConvHost, G: ImageGeometry, p: ConvPointers): void {
    if (capturing(runner)) THIS_THREAD.backward(runner, l, G, p);
    else this.run(1, runner, G, p);
  }

  private run(kind: 0 | 1, runner: ConvRunner, G: ImageGeometry, p: ConvPointers): void {
    if (this.disposed) throw new Error("ConvThreads: used after dispose()");
    const L = runner.lanes.count;
    if (L > this.maxLanes) {
      throw new RangeError(`ConvThreads: a runner of ${L} lanes; these threads take at most ${this.maxLanes}`);
    }
    const job = this.job;
    const b = runner.buffers();
    job[JOB.KIND] = kind;
    writeGeometry(job, G);
    POINTER_KEYS.forEach((k, i) => {
      job[JOB.POINTERS + i] = p[k];
    });
    job[JOB.ONES] = b.ones;
    job[JOB.LANES] = L;
    job[JOB.SUMS] = runner.weightSums === "products" ? 1 : 0;
    const M = this.maxLanes;
    for (let k = 0; k < L; k++) {
      job[JOB.COLS + k] = b.cols[k]!;
      job[JOB.COLS + M + k] = b.colsB[k] ?? 0;
    }
    for (let k = 0; k < b.slots.length; k++) job[JOB.COLS + 2 * M + k] = b.slots[k]!;
    postJob(this.ctrl, L, convDepth(runner.weightSums));
    this.await(kind === 0 ? "forward" : "backward");
  }

  /** Waits until every thread is done (or started), throwing the first failure. */
  private await(what: string): void {
    awaitThreads(this.ctrl, this.workers.length, what, TIMEOUT_MS, () => {
      throw this.failure(what);
    });
  }

  private failure(what: string): Error {
    const messages: string[] = [];
    for (const port of this.ports) {
      for (let m = receiveMessageOnPort(port); m !== undefined; m = receiveMessageOnPort(port)) {
        const msg = m.message as { kind: string; message: string };
        if (msg.kind === "fatal" || msg.kind === "error") messages.push(msg.message);
      }
    }
    this.dispose();
    return new Error(
      `convolution dispatch threads failed during the ${what}: ${messages[0] ?? "(no message)"}` +
        (messages.length > 1 ? ` (and ${messages.length - 1} more)` : ""),
    );
  }

  /**
   * Stops the threads and waits (at most 5 s) until each has destroyed its cuBLAS handles, so that the pool's streams,
   * which stay the pool's, can be destroyed after this returns.
   */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    stopThreads(this.ctrl, this.workers.length, 5000);
    for (const p of this.ports) p.close();
  }
}
