// The eager engine's convolution, Caffe's way (base_conv_layer.cpp, conv_layer.cu). Forward, per sample n: im2col of
// x[n] into a column buffer [C·K·K, Ho·Wo], y[n] = W·col (one GEMM) and y[n] += b·1ᵀ (a rank-1 GEMM with a row of
// ones, Caffe's bias multiplier). Backward: db += dy[n]·1 for every n, then per sample im2col again,
// dW += dy[n]·colᵀ, col = Wᵀ·dy[n], and col2im adds col into dx[n].
//
// Lanes. A sample's kernels run on one lane: a stream, a cuBLAS handle bound to it, and the lane's own column buffer
// (one buffer shared by samples in flight on different streams would be a race). The eager engine has one lane
// today, its context's stream; GLP4NN's stream pool (src/streams/, docs/GLP4NN.md) is to give it several, sample n
// on lane n mod L. The weight and bias gradients are accumulated in place, sample after sample in the order
// n = 0, 1, … (GEMM and GEMV with β = 1, as Caffe does; never atomics): several lanes must keep that chain in order
// with an event per sample, and then give one lane's results bit for bit.

import {
  type Cublas,
  type CublasHandle,
  type CudaDriver,
  type CudaStream,
  type DevicePtr,
  floatBits,
  karg,
} from "../../cuda/index.js";
import type { ComputationGraph } from "../../graph/graph.js";
import { type ImageGeometry, imageGeometry } from "../../ops/image.js";
import type { EagerNodeKernels } from "./node-kernels.js";

/** Where one sample's im2col and GEMMs are queued. */
export interface ConvLane {
  readonly stream: CudaStream;
  readonly cublasHandle: CublasHandle;
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

  constructor(
    private readonly driver: CudaDriver,
    private readonly cublas: Cublas,
    readonly lanes: readonly ConvLane[],
  ) {
    if (lanes.length !== 1) {
      throw new Error(`ConvRunner: ${lanes.length} lanes given; one is supported until the stream pool joins them`);
    }
    this.cols = lanes.map(() => ({ ptr: 0, floats: 0 }));
  }

  /** Node i's forward: y[n] = W·im2col(x[n]) + b·1ᵀ for n = 0 … N − 1. */
  forward(l: EagerNodeKernels, g: ComputationGraph, i: number): void {
    const G = this.prepare(g, i);
    const rows = G.c * G.kernel * G.kernel;
    const plane = G.ho * G.wo;
    const x = l.valPtr[g.arg(i, 0)]!;
    const W = l.valPtr[g.arg(i, 1)]!;
    const b = l.valPtr[g.arg(i, 2)]!;
    const y = l.valPtr[i]!;
    for (let n = 0; n < G.n; n++) {
      const k = n % this.lanes.length;
      const lane = this.lanes[k]!;
      const col = this.cols[k]!.ptr;
      const yn = y + 4 * n * G.f * plane;
      this.im2col(l, lane, G, col, x + 4 * n * G.c * G.h * G.w);
      this.gemm(l, lane, { m: G.f, n: plane, k: rows, A: W, B: col, beta: 0, C: yn });
      this.gemm(l, lane, { m: G.f, n: plane, k: 1, A: b, B: this.ones.ptr, beta: 1, C: yn });
    }
  }

  /** Node i's backward: db, dW (in sample order) and dx, all accumulated (+=). */
  backward(l: EagerNodeKernels, g: ComputationGraph, i: number): void {
    const G = this.prepare(g, i);
    const rows = G.c * G.kernel * G.kernel;
    const plane = G.ho * G.wo;
    const x = l.valPtr[g.arg(i, 0)]!;
    const W = l.valPtr[g.arg(i, 1)]!;
    const dx = l.gradPtr[g.arg(i, 0)]!;
    const dW = l.gradPtr[g.arg(i, 1)]!;
    const db = l.gradPtr[g.arg(i, 2)]!;
    const dy = l.gradPtr[i]!;
    const ones = this.ones.ptr;
    // Caffe's order: the bias over every sample first, then weights and input per sample
    for (let n = 0; n < G.n; n++) {
      const lane = this.lanes[n % this.lanes.length]!;
      const dyn = dy + 4 * n * G.f * plane;
      this.cublas.sgemvRowMajor(lane.cublasHandle, { rows: G.f, cols: plane, A: dyn, x: ones, beta: 1, y: db });
      l.counts.cublas++;
    }
    for (let n = 0; n < G.n; n++) {
      const k = n % this.lanes.length;
      const lane = this.lanes[k]!;
      const col = this.cols[k]!.ptr;
      const dyn = dy + 4 * n * G.f * plane;
      this.im2col(l, lane, G, col, x + 4 * n * G.c * G.h * G.w);
      this.gemm(l, lane, { m: G.f, n: rows, k: plane, A: dyn, B: col, transB: true, beta: 1, C: dW });
      this.gemm(l, lane, { transA: true, m: rows, n: plane, k: G.f, A: W, B: dyn, beta: 0, C: col });
      l.launch(
        l.k.vp_col2im_add,
        G.c * G.h * G.w,
        [karg.ptr(dx + 4 * n * G.c * G.h * G.w), karg.ptr(col), ...dims(G)],
        lane.stream,
      );
    }
  }

  /** Frees the buffers (after the lanes' work is done). */
  dispose(): void {
    for (const lane of this.lanes) lane.stream.synchronize();
    for (const s of [...this.cols, this.ones]) {
      if (s.ptr !== 0) this.driver.memFree(s.ptr);
      s.ptr = 0;
      s.floats = 0;
    }
  }

  /** Node i's geometry, with every lane's column buffer and the row of ones large enough for it. */
  private prepare(g: ComputationGraph, i: number): ImageGeometry {
    const G = imageGeometry(g, i);
    const colFloats = G.c * G.kernel * G.kernel * G.ho * G.wo;
    if (colFloats > MAX_ELEMENTS) {
      throw new Error(
        `eager engine: ${g.describe(i)} needs a column buffer of ${G.c}·${G.kernel}·${G.kernel} × ${G.ho}·${G.wo} = ` +
          `${colFloats} floats; the kernels index at most ${MAX_ELEMENTS} (use fewer channels or a smaller image)`,
      );
    }
    const growCols = this.cols.some((s) => s.floats < colFloats);
    const growOnes = this.ones.floats < G.ho * G.wo;
    if (!growCols && !growOnes) return G;
    // a buffer in use by queued work must not be freed under it: growing waits for the lanes (once per larger layer)
    for (const lane of this.lanes) lane.stream.synchronize();
    if (growCols) for (const s of this.cols) this.grow(s, colFloats);
    if (growOnes) {
      this.grow(this.ones, G.ho * G.wo);
      const stream = this.lanes[0]!.stream;
      this.driver.memsetD32Async(this.ones.ptr, floatBits(1), this.ones.floats, stream.handle);
      // every lane reads the ones; they are written before any lane queues work that reads them
      stream.synchronize();
    }
    return G;
  }

  private grow(s: Scratch, floats: number): void {
    if (s.ptr !== 0) this.driver.memFree(s.ptr);
    s.ptr = 0;
    s.floats = 0;
    s.ptr = this.driver.memAlloc(4 * floats);
    s.floats = floats;
  }

  private im2col(l: EagerNodeKernels, lane: ConvLane, G: ImageGeometry, col: DevicePtr, xn: DevicePtr): void {
    l.launch(l.k.vp_im2col, G.c * G.ho * G.wo, [karg.ptr(col), karg.ptr(xn), ...dims(G)], lane.stream);
  }

  private gemm(
    l: EagerNodeKernels,
    lane: ConvLane,
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
    this.cublas.sgemmRowMajor(lane.cublasHandle, a);
    l.counts.cublas++;
  }
}

/** The kernels' geometry arguments: C, H, W, K, S, P, Ho, Wo. */
function dims(G: ImageGeometry) {
  return [G.c, G.h, G.w, G.kernel, G.stride, G.padding, G.ho, G.wo].map((v) => karg.i32(v));
}
