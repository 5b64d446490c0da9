// The eager engine's convolution, Caffe's way (base_conv_layer.cpp, conv_layer.cu). Forward, per sample n: im2col of
// x[n] into a column buffer [C·K·K, Ho·Wo], y[n] = W·col (one GEMM) and y[n] += b·1ᵀ (a rank-1 GEMM with a row of
// ones, Caffe's bias multiplier). Backward: db += dy[n]·1 for every n, then per sample im2col again,
// dW += dy[n]·colᵀ, col = Wᵀ·dy[n], and col2im adds col into dx[n].
//
// Lanes. A sample's kernels run on one lane: a stream, a cuBLAS handle bound to it (its own cuBLAS workspace), and
// the lane's own column buffer (one buffer shared by samples in flight on different streams would be a race). By
// default there is one lane, the engine's stream; with GLP4NN's stream pool (src/streams/pool.ts) sample n goes to
// lane n mod L, the lanes forked from the engine's stream and joined back to it after the layer. The weight and bias
// gradients are accumulated in place, sample after sample in the order n = 0, 1, … (GEMM and GEMV with β = 1, as
// Caffe does; never atomics): the bias on a side lane of its own, the weight GEMM of sample n waiting for the event marked
// right after sample n − 1's. Every sum is then computed in the same order on any number of lanes, so the results
// are one lane's bit for bit.
//
// One stream is Caffe's own schedule: the same kernels in the same order (forward_gpu_gemm and forward_gpu_bias per
// sample; backward_gpu_bias per sample, then weight_gpu_gemm and backward_gpu_gemm per sample), a 1×1 convolution
// with stride 1 and no padding reading its input as the column buffer (Caffe's is_1x1_). Two differences, neither a
// slowdown: col2im adds into dx (the graph's gradients accumulate; Caffe's col2im assigns), and a 1×1 layer's input
// gradient still goes through the column buffer and col2im (Caffe's GEMM writes it directly).

import {
  type Cublas,
  type CublasHandle,
  type CudaDriver,
  type CudaKernel,
  type CudaStream,
  type DevicePtr,
  floatBits,
  type KernelArg,
  karg,
} from "../../cuda/index.js";
import type { ComputationGraph } from "../../graph/graph.js";
import { type ImageGeometry, imageGeometry } from "../../ops/image.js";
import type { StreamPool } from "../../streams/pool.js";

/** What the runner launches with: the two convolution kernels and a counted grid-stride launch (EagerNodeKernels). */
export interface ConvHost {
  readonly k: { readonly vp_im2col: CudaKernel; readonly vp_col2im_add: CudaKernel };
  readonly counts: { kernels: number; cublas: number };
  launch(kernel: CudaKernel, n: number, args: KernelArg[], stream: CudaStream): void;
}

/**
 * GLP4NN's resource tracker's view of the runner (src/streams/tracker.ts): each kernel launch and each cuBLAS call goes
 * through it, named (`im2col`, `gemm y=W·col`, …), so that it can be timed and its footprint read.
 */
export interface ConvTrace {
  kernel(name: ConvKernelName, kernel: CudaKernel, elements: number, stream: CudaStream, launch: () => void): void;
  blas(name: ConvCallName, stream: CudaStream, call: () => void): void;
}

/** The runner's kernels and cuBLAS calls, by the names a trace sees. */
export const CONV_KERNELS = ["im2col", "col2im"] as const;
export const CONV_CALLS = [
  "gemm y=W·col",
  "gemm y+=b·1ᵀ",
  "gemv db+=dy·1",
  "gemm dW+=dy·colᵀ",
  "gemm col=Wᵀ·dy",
] as const;
export type ConvKernelName = (typeof CONV_KERNELS)[number];
export type ConvCallName = (typeof CONV_CALLS)[number];

/** The device addresses of one convolution: input, filters, bias, output, and their gradients. */
export interface ConvPointers {
  readonly x: DevicePtr;
  readonly W: DevicePtr;
  readonly b: DevicePtr;
  readonly y: DevicePtr;
  readonly dx: DevicePtr;
  readonly dW: DevicePtr;
  readonly db: DevicePtr;
  readonly dy: DevicePtr;
}

/** Caffe's is_1x1_: the input is its own column buffer (no im2col). */
export function isOneByOne(G: ImageGeometry): boolean {
  return G.kernel === 1 && G.stride === 1 && G.padding === 0;
}

/** Where one sample's im2col and GEMMs are queued. */
export interface ConvLane {
  readonly index: number;
  readonly stream: CudaStream;
  readonly blas: CublasHandle;
}

/** The lanes of a layer and their ordering (see the top of this file; StreamPool's operations). */
export interface ConvLanes {
  readonly count: number;
  lane(k: number): ConvLane;
  /**
   * Where the bias gradient's chain (one GEMV per sample, in sample order) is queued: on one lane the lane itself
   * (Caffe's order); with a pool a stream of its own, so that the chain runs beside the samples' work and the weight
   * gradient's chain instead of ahead of them on the first lane.
   */
  side(): ConvLane;
  /** The lanes' later work (the side lane's too) waits for the engine's stream. */
  fork(): void;
  /** The engine's stream waits for the lanes and the side lane. */
  join(): void;
  mark(lane: ConvLane): void;
  waitFor(lane: ConvLane, from: ConvLane): void;
}

/** One lane, the engine's own stream: no events at all. */
export function oneLane(stream: CudaStream, blas: CublasHandle): ConvLanes {
  const lane: ConvLane = { index: 0, stream, blas };
  const nothing = () => {};
  return {
    count: 1,
    lane: () => lane,
    side: () => lane,
    fork: nothing,
    join: nothing,
    mark: nothing,
    waitFor: nothing,
  };
}

/**
 * The first `count` lanes of a stream pool, forked from and joined to `origin`; the pool's lane `count` (grown where
 * the pool is smaller) is the side lane.
 */
export function poolLanes<E>(
  pool: StreamPool<CudaStream, E, CublasHandle>,
  origin: CudaStream,
  count: number,
): ConvLanes {
  if (!Number.isInteger(count) || count < 1 || count > pool.size) {
    throw new RangeError(`poolLanes: count must be an integer in 1 … ${pool.size} (the pool's size); got ${count}`);
  }
  pool.grow(count + 1);
  const side = pool.lanes[count]!;
  return {
    count,
    lane: (k) => pool.lane(k, count),
    side: () => side,
    fork: () => pool.fork(origin, count + 1),
    join: () => pool.join(origin, count + 1),
    mark: (lane) => pool.mark(pool.lanes[lane.index]!),
    waitFor: (lane, from) => pool.waitFor(pool.lanes[lane.index]!, pool.lanes[from.index]!),
  };
}

/** The largest buffer the kernels index with `int`. */
const MAX_ELEMENTS = 2 ** 31 - 1;

/** A device buffer of floats that only grows. */
interface Scratch {
  ptr: DevicePtr;
  floats: number;
}

/** Runs conv2d nodes on lanes, with each lane's column buffer and one shared row of ones. */
export class ConvRunner {
  private readonly cols: Scratch[];
  private readonly ones: Scratch = { ptr: 0, floats: 0 };
  /** Set: every launch and call goes through it (profiling); unset: launched directly. */
  trace: ConvTrace | undefined;

  constructor(
    private readonly driver: CudaDriver,
    private readonly cublas: Cublas,
    readonly lanes: ConvLanes,
  ) {
    this.cols = Array.from({ length: lanes.count }, () => ({ ptr: 0, floats: 0 }));
  }

  /** Node i's forward: y[n] = W·im2col(x[n]) + b·1ᵀ for n = 0 … N − 1. */
  forward(l: ConvHost & { valPtr: Float64Array }, g: ComputationGraph, i: number): void {
    const G = this.prepare(imageGeometry(g, i), () => g.describe(i));
    const v = l.valPtr;
    this.forwardAt(l, G, { x: v[g.arg(i, 0)]!, W: v[g.arg(i, 1)]!, b: v[g.arg(i, 2)]!, y: v[i]! });
  }

  /** Node i's backward: db, dW (in sample order) and dx, all accumulated (+=). */
  backward(l: ConvHost & { valPtr: Float64Array; gradPtr: Float64Array }, g: ComputationGraph, i: number): void {
    const G = this.prepare(imageGeometry(g, i), () => g.describe(i));
    const [v, d] = [l.valPtr, l.gradPtr];
    const [x, W, b] = [g.arg(i, 0), g.arg(i, 1), g.arg(i, 2)];
    this.backwardAt(l, G, { x: v[x]!, W: v[W]!, b: v[b]!, y: v[i]!, dx: d[x]!, dW: d[W]!, db: d[b]!, dy: d[i]! });
  }

  /**
   * The forward of a convolution of geometry G at the given addresses. `G` must have been passed to `prepare` (the
   * buffers sized for it) — `forward` does both.
   */
  forwardAt(l: ConvHost, G: ImageGeometry, p: Pick<ConvPointers, "x" | "W" | "b" | "y">): void {
    const rows = G.c * G.kernel * G.kernel;
    const plane = G.ho * G.wo;
    const lanes = this.lanes;
    const direct = isOneByOne(G);
    lanes.fork();
    for (let n = 0; n < G.n; n++) {
      const lane = lanes.lane(n);
      const xn = p.x + 4 * n * G.c * G.h * G.w;
      const col = direct ? xn : this.cols[lane.index]!.ptr;
      const yn = p.y + 4 * n * G.f * plane;
      if (!direct) this.im2col(l, lane, G, col, xn);
      this.gemm(l, lane, "gemm y=W·col", { m: G.f, n: plane, k: rows, A: p.W, B: col, beta: 0, C: yn });
      this.gemm(l, lane, "gemm y+=b·1ᵀ", { m: G.f, n: plane, k: 1, A: p.b, B: this.ones.ptr, beta: 1, C: yn });
    }
    lanes.join();
  }

  /** The backward of a convolution of geometry G (prepared) at the given addresses: db, dW, dx accumulated. */
  backwardAt(l: ConvHost, G: ImageGeometry, p: ConvPointers): void {
    const rows = G.c * G.kernel * G.kernel;
    const plane = G.ho * G.wo;
    const ones = this.ones.ptr;
    const lanes = this.lanes;
    const direct = isOneByOne(G);
    lanes.fork();
    // Caffe's order: the bias over every sample first (in order, on the side lane), then weights and input per sample
    const side = lanes.side();
    for (let n = 0; n < G.n; n++) {
      const dyn = p.dy + 4 * n * G.f * plane;
      this.blas(l, side, "gemv db+=dy·1", () =>
        this.cublas.sgemvRowMajor(side.blas, { rows: G.f, cols: plane, A: dyn, x: ones, beta: 1, y: p.db }),
      );
    }
    let previous = lanes.lane(0);
    for (let n = 0; n < G.n; n++) {
      const lane = lanes.lane(n);
      const col = this.cols[lane.index]!.ptr;
      const dyn = p.dy + 4 * n * G.f * plane;
      const xn = p.x + 4 * n * G.c * G.h * G.w;
      if (!direct) this.im2col(l, lane, G, col, xn);
      // dW += dy[n]·colᵀ strictly after sample n − 1's (the fixed order), and after nothing else of it
      if (n > 0) lanes.waitFor(lane, previous);
      const B = direct ? xn : col;
      this.gemm(l, lane, "gemm dW+=dy·colᵀ", { m: G.f, n: rows, k: plane, A: dyn, B, transB: true, beta: 1, C: p.dW });
      lanes.mark(lane);
      previous = lane;
      this.gemm(l, lane, "gemm col=Wᵀ·dy", {
        transA: true,
        m: rows,
        n: plane,
        k: G.f,
        A: p.W,
        B: dyn,
        beta: 0,
        C: col,
      });
      const dxn = karg.ptr(p.dx + 4 * n * G.c * G.h * G.w);
      this.kernel(l, lane, "col2im", l.k.vp_col2im_add, G.c * G.h * G.w, [dxn, karg.ptr(col), ...dims(G)]);
    }
    lanes.join();
  }

  /** Frees the buffers (after the lanes' work is done). */
  dispose(): void {
    this.synchronize();
    for (const s of [...this.cols, this.ones]) {
      if (s.ptr !== 0) this.driver.memFree(s.ptr);
      s.ptr = 0;
      s.floats = 0;
    }
  }

  /** Makes every lane's column buffer and the row of ones large enough for G (`what` names the layer in errors). */
  prepare(G: ImageGeometry, what: () => string): ImageGeometry {
    const colFloats = G.c * G.kernel * G.kernel * G.ho * G.wo;
    if (colFloats > MAX_ELEMENTS) {
      throw new Error(
        `eager engine: ${what()} needs a column buffer of ${G.c}·${G.kernel}·${G.kernel} × ${G.ho}·${G.wo} = ` +
          `${colFloats} floats; the kernels index at most ${MAX_ELEMENTS} (use fewer channels or a smaller image)`,
      );
    }
    const growCols = this.cols.some((s) => s.floats < colFloats);
    const growOnes = this.ones.floats < G.ho * G.wo;
    if (!growCols && !growOnes) return G;
    // a buffer in use by queued work must not be freed under it: growing waits for the lanes (once per larger layer)
    this.synchronize();
    if (growCols) for (const s of this.cols) this.grow(s, colFloats);
    if (growOnes) {
      this.grow(this.ones, G.ho * G.wo);
      const stream = this.lanes.lane(0).stream;
      this.driver.memsetD32Async(this.ones.ptr, floatBits(1), this.ones.floats, stream.handle);
      // every lane reads the ones; they are written before any lane queues work that reads them
      stream.synchronize();
    }
    return G;
  }

  /** Waits for every lane's work. */
  private synchronize(): void {
    for (let k = 0; k < this.lanes.count; k++) this.lanes.lane(k).stream.synchronize();
  }

  private grow(s: Scratch, floats: number): void {
    if (s.ptr !== 0) this.driver.memFree(s.ptr);
    s.ptr = 0;
    s.floats = 0;
    s.ptr = this.driver.memAlloc(4 * floats);
    s.floats = floats;
  }

  private im2col(l: ConvHost, lane: ConvLane, G: ImageGeometry, col: DevicePtr, xn: DevicePtr): void {
    this.kernel(l, lane, "im2col", l.k.vp_im2col, G.c * G.ho * G.wo, [karg.ptr(col), karg.ptr(xn), ...dims(G)]);
  }

  private kernel(
    l: ConvHost,
    lane: ConvLane,
    name: ConvKernelName,
    kernel: CudaKernel,
    n: number,
    args: KernelArg[],
  ): void {
    const launch = () => l.launch(kernel, n, args, lane.stream);
    if (this.trace === undefined) launch();
    else this.trace.kernel(name, kernel, n, lane.stream, launch);
  }

  private blas(l: ConvHost, lane: ConvLane, name: ConvCallName, call: () => void): void {
    if (this.trace === undefined) call();
    else this.trace.blas(name, lane.stream, call);
    l.counts.cublas++;
  }

  private gemm(
    l: ConvHost,
    lane: ConvLane,
    name: ConvCallName,
    a: {
      m: number;
      n: number;
      k: number;
      A: DevicePtr;
      B: DevicePtr;
      C: DevicePtr;
      beta: number;
      transA?: boolean;
      transB?: boolean;
    },
  ): void {
    this.blas(l, lane, name, () => this.cublas.sgemmRowMajor(lane.blas, a));
  }
}

/** The kernels' geometry arguments: C, H, W, K, S, P, Ho, Wo. */
function dims(G: ImageGeometry) {
  return [G.c, G.h, G.w, G.kernel, G.stride, G.padding, G.ho, G.wo].map((v) => karg.i32(v));
}
