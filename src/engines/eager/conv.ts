// The eager engine's convolution, Caffe's way (base_conv_layer.cpp, conv_layer.cu). Forward, per sample n: im2col of
// x[n] into a column buffer [C·K·K, Ho·Wo], y[n] = W·col (one GEMM) and y[n] += b·1ᵀ (a rank-1 GEMM with a row of
// ones, Caffe's bias multiplier). Backward: db += dy[n]·1 for every n, then per sample im2col again,
// dW += dy[n]·colᵀ, col = Wᵀ·dy[n], and col2im adds col into dx[n].
//
// Lanes. A sample's kernels run on one lane: a stream, a cuBLAS handle bound to it (its own cuBLAS workspace), and
// the lane's own column buffers (one buffer shared by samples in flight on different streams would be a race). By
// default there is one lane, the engine's stream; with GLP4NN's stream pool (StreamPool) sample n goes to
// lane n mod L, the lanes forked from the engine's stream and joined back to it after the layer. The weight and bias
// gradients are accumulated in place, sample after sample in the order n = 0, 1, … (GEMM and GEMV with β = 1, as
// Caffe does; never atomics), each chain on a stream of its own: the bias's GEMVs on the side lane, the weight's
// GEMMs on the chain lane, where each follows the previous one in stream order. A sample's weight GEMM waits for the
// event its lane records after writing the sample's columns (im2col), and the lane's next im2col into that buffer
// waits for the event the chain records after reading it; the input gradient goes through a second buffer per lane,
// so a lane never waits for the chain otherwise. Every sum is then computed in the same order on any number of
// lanes, so the results are one lane's bit for bit. The pool's work is issued from this thread (THIS_THREAD: each
// sample's lane part, then its chain part) or from several (conv-threads.ts).
//
// Weight sums by products (WeightSums "products", the default for pools). The chain of GEMMs above is serial: on the
// large layers (CaffeNet: 256 GEMMs of 10–60 µs) it is the backward's critical path, and its GEMMs slow down further
// when they share the SMs with the lanes'. Instead, each lane computes its sample's product dy[n]·colᵀ into a slot of
// its own (the slot zeroed, then the very GEMM of the chain, β = 1: the same kernel, so the same fp32 product acc),
// and the chain lane adds the slots into dW in sample order, one elementwise kernel per sample (dW += P, i.e.
// fl(dW + acc) — what the chain's GEMM epilogue computes with α = β = 1). The GEMMs then run on every lane at once;
// what stays serial is an addition per sample. The same sums in the same order: the results are one lane's bit for bit
// (the benchmark and test/gpu/conv.test.ts compare them). Each lane has PRODUCT_SLOTS slots used in turn: sample n
// on lane k = n mod L writes slot r = ⌊n / L⌋ mod R, rewritten R·L samples later, after the chain's addition of it
// (a pair of events per slot), so a lane runs up to R samples ahead of the chain instead of one.
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
  type Lane,
  type StreamPool,
} from "../../cuda/index.js";
import type { ComputationGraph } from "../../graph/graph.js";
import { type ImageGeometry, imageGeometry } from "../../ops/image.js";
import { UserError } from "../../util/errors.js";

/** What the runner launches with: the two convolution kernels and a counted grid-stride launch (EagerNodeKernels). */
export interface ConvHost {
  readonly k: {
    readonly vp_im2col: CudaKernel;
    readonly vp_col2im_add: CudaKernel;
    readonly vp_conv_bias_add: CudaKernel;
    readonly vp_add_clear: CudaKernel;
  };
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
export const CONV_KERNELS = ["im2col", "col2im", "add dW+=P", "bias y+=b"] as const;
export const CONV_CALLS = [
  "gemm y=W·col",
  "gemm y+=b·1ᵀ",
  "gemv db+=dy·1",
  "gemm dW+=dy·colᵀ",
  "gemm P+=dy·colᵀ",
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

/**
 * How a pool accumulates the weight gradient in sample order (one lane always runs Caffe's chain): "chain", the
 * weight GEMMs one after another on the chain lane; "products", each sample's product on its lane into a slot, the
 * slots added into dW on the chain lane (see the top of this file). Bit for bit the same results.
 */
export type WeightSums = "chain" | "products";
export const WEIGHT_SUMS: readonly WeightSums[] = ["chain", "products"];

/**
 * The weight sums of pools: `VPPS_CONV_WEIGHT_SUMS` (chain or products) when set, else products (measured faster on
 * the large Table 5 layers: docs/GLP4NN.md).
 */
export function weightSumsFromEnv(env: Readonly<Record<string, string | undefined>> = process.env): WeightSums {
  const raw = env["VPPS_CONV_WEIGHT_SUMS"]?.trim();
  if (raw === undefined || raw === "") return "products";
  if (!(WEIGHT_SUMS as readonly string[]).includes(raw)) {
    throw new UserError(
      `VPPS_CONV_WEIGHT_SUMS is '${raw}'; expected ${WEIGHT_SUMS.join(" or ")} (how a stream pool sums a ` +
        "convolution's weight gradient; both give one stream's results bit for bit)",
    );
  }
  return raw as WeightSums;
}

/** Where one sample's im2col and GEMMs are queued. */
export interface ConvLane {
  readonly index: number;
  readonly stream: CudaStream;
  readonly blas: CublasHandle;
}

/**
 * The lanes of a layer and their ordering. One lane runs Caffe's own sequence on one stream. A pool adds two streams:
 * the side lane (the bias gradient's chain of GEMVs, in sample order) and the chain lane (the weight gradient's chain
 * of GEMMs, in sample order); the samples' own work (im2col, the input-gradient GEMM, col2im) runs on the lanes,
 * ordered against the chain by a pair of events per lane (below). The chain's GEMMs then follow one another on one
 * stream, and a lane goes on to its next sample without waiting for the chain, except where it would overwrite a
 * column buffer the chain has yet to read.
 */
export interface ConvLanes {
  readonly count: number;
  /** The stream the lanes are forked from and joined to (the lane itself on one lane). */
  readonly origin: CudaStream;
  lane(k: number): ConvLane;
  /** The bias gradient's chain: the lane itself on one lane, a stream of its own with a pool. */
  side(): ConvLane;
  /** The weight gradient's chain: the lane itself on one lane, a stream of its own with a pool. */
  chain(): ConvLane;
  /** The lanes' later work (the side and chain lanes' too) waits for the engine's stream. */
  fork(): void;
  /** The engine's stream waits for every lane. */
  join(): void;
  /**
   * Pools only: `lane` has written sample n's column buffer, or its product slot `slot` (recorded on the lane; one
   * event per lane and slot, slot 0 for a column buffer).
   */
  columnsReady(lane: ConvLane, slot: number): void;
  /** Pools only: the chain's later work waits for `lane`'s last columnsReady of `slot`. */
  chainAwaitColumns(lane: ConvLane, slot: number): void;
  /** Pools only: the chain has read `lane`'s column buffer or slot (recorded on the chain after the GEMM or the sum). */
  weightsDone(lane: ConvLane, slot: number): void;
  /** Pools only: `lane`'s later work waits for the chain's last weightsDone for it and `slot`. */
  awaitWeights(lane: ConvLane, slot: number): void;
}

/** One lane, the engine's own stream: no events at all. */
export function oneLane(stream: CudaStream, blas: CublasHandle): ConvLanes {
  const lane: ConvLane = { index: 0, stream, blas };
  const nothing = () => {};
  return {
    count: 1,
    origin: stream,
    lane: () => lane,
    side: () => lane,
    chain: () => lane,
    fork: nothing,
    join: nothing,
    columnsReady: nothing,
    chainAwaitColumns: nothing,
    weightsDone: nothing,
    awaitWeights: nothing,
  };
}

/**
 * A pool's side lane (the bias chain) and chain lane (the weight chain), extra lanes of the pool shared by every
 * layer on it. (The chain lane at the device's highest stream priority measured the same with CUDA graphs, within
 * ±1%: bench/results/h100/issue19/session14/chain-priority/.)
 */
export function convExtraLanes<S, E, H>(pool: StreamPool<S, E, H>): { side: Lane<S, H>; chain: Lane<S, H> } {
  return { side: pool.extraLane("conv.side"), chain: pool.extraLane("conv.chain") };
}

/** The first `count` lanes of a stream pool, forked from and joined to `origin`, with its side and chain lanes. */
export function poolLanes<E>(
  pool: StreamPool<CudaStream, E, CublasHandle>,
  origin: CudaStream,
  count: number,
): ConvLanes {
  if (!Number.isInteger(count) || count < 2 || count > pool.size) {
    throw new RangeError(`poolLanes: count must be an integer in 2 … ${pool.size} (the pool's size); got ${count}`);
  }
  const { side, chain } = convExtraLanes(pool);
  const extras = [side, chain];
  const columns = convEventSets(pool, "conv.columns");
  const weights = convEventSets(pool, "conv.weights");
  return {
    count,
    origin,
    lane: (k) => pool.lane(k, count),
    side: () => side,
    chain: () => chain,
    fork: () => pool.fork(origin, count, extras),
    join: () => pool.join(origin, count, extras),
    columnsReady: (lane, r) => pool.recordOn(columns[r]![lane.index]!, pool.lanes[lane.index]!),
    chainAwaitColumns: (lane, r) => pool.waitOn(chain, columns[r]![lane.index]!),
    weightsDone: (lane, r) => pool.recordOn(weights[r]![lane.index]!, chain),
    awaitWeights: (lane, r) => pool.waitOn(pool.lanes[lane.index]!, weights[r]![lane.index]!),
  };
}

/** Product slots per lane (see the top of this file): a lane runs up to this many samples ahead of the chain. */
export const PRODUCT_SLOTS = 2;

/** The event sets of a pool's ordering `name`, one per slot (slot 0 also the column buffers'), one event per lane. */
export function convEventSets<S, E, H>(pool: StreamPool<S, E, H>, name: string): (readonly E[])[] {
  return Array.from({ length: PRODUCT_SLOTS }, (_, r) => pool.eventSet(r === 0 ? name : `${name}.${r}`));
}

/** How many samples of a lane are in flight between the lane and the chain: the lane's slots, or 1 (its columns). */
export function convDepth(weightSums: WeightSums): number {
  return weightSums === "products" ? PRODUCT_SLOTS : 1;
}

/**
 * Issues a pooled layer's work from the calling thread or from several (conv-threads.ts). `forward` and `backward`
 * are called after the runner has prepared its buffers and forked the lanes; the lanes are joined after they return.
 */
export interface ConvIssuer {
  forward(runner: ConvRunner, l: ConvHost, G: ImageGeometry, p: ForwardPointers): void;
  backward(runner: ConvRunner, l: ConvHost, G: ImageGeometry, p: ConvPointers): void;
}

type ForwardPointers = Pick<ConvPointers, "x" | "W" | "b" | "y">;

/** Every sample's work issued from this thread, in sample order (each sample's lane part, then its chain part). */
export const THIS_THREAD: ConvIssuer = {
  forward(runner, l, G, p) {
    for (let n = 0; n < G.n; n++) runner.forwardSample(l, G, p, n);
  },
  backward(runner, l, G, p) {
    runner.backwardBias(l, G, p);
    for (let n = 0; n < G.n; n++) {
      runner.backwardLanePart(l, G, p, n);
      runner.backwardChainPart(l, G, p, n);
    }
  },
};

/** The largest buffer the kernels index with `int`. */
const MAX_ELEMENTS = 2 ** 31 - 1;

/** A device buffer of floats that only grows. */
interface Scratch {
  ptr: DevicePtr;
  floats: number;
}

/** Runs conv2d nodes on lanes, with each lane's column buffer and one shared row of ones. */
export class ConvRunner {
  /** Each lane's column buffer (im2col's output; on one lane also the input gradient's columns). */
  private readonly cols: Scratch[];
  /**
   * With a pool summing by a chain of GEMMs, each lane's second buffer: the input gradient's columns, so that the chain
   * can still read cols. Summing by products, the lane's own weight product has read cols before the input gradient
   * (stream order on the lane), so the input gradient reuses cols and there is no second buffer.
   */
  private readonly colsB: Scratch[];
  /** With a pool summing by products, each lane's PRODUCT_SLOTS slots (lane k's slot r at r·L + k): products dy[n]·colᵀ. */
  private readonly slots: Scratch[];
  private readonly ones: Scratch = { ptr: 0, floats: 0 };
  /** Set: every launch and call goes through it (profiling); unset: launched directly. */
  trace: ConvTrace | undefined;
  /** Who issues a pool's work: this thread (default) or dispatch threads (conv-threads.ts). */
  issuer: ConvIssuer = THIS_THREAD;

  constructor(
    private readonly driver: CudaDriver,
    private readonly cublas: Cublas,
    readonly lanes: ConvLanes,
    opts: {
      /** How a pool sums the weight gradient (ignored on one lane); default weightSumsFromEnv(). */
      weightSums?: WeightSums;
      /** Buffers owned elsewhere (a dispatch thread's runner uses its parent's): no allocation here. */
      shared?: ConvBuffers;
    } = {},
  ) {
    const shared = opts.shared;
    this.weightSums = lanes.count > 1 ? (opts.weightSums ?? weightSumsFromEnv()) : "chain";
    const scratch = (ptr: DevicePtr): Scratch => ({ ptr, floats: shared ? Number.POSITIVE_INFINITY : 0 });
    const pooled = lanes.count > 1 ? lanes.count : 0;
    this.cols = Array.from({ length: lanes.count }, (_, k) => scratch(shared?.cols[k] ?? 0));
    this.colsB = Array.from({ length: this.weightSums === "chain" ? pooled : 0 }, (_, k) =>
      scratch(shared?.colsB[k] ?? 0),
    );
    this.slots = Array.from({ length: this.weightSums === "products" ? PRODUCT_SLOTS * pooled : 0 }, (_, k) =>
      scratch(shared?.slots[k] ?? 0),
    );
    if (shared) this.ones = scratch(shared.ones);
    this.external = shared !== undefined;
  }

  /** How this runner's pool sums the weight gradient ("chain" on one lane). */
  readonly weightSums: WeightSums;

  private readonly external: boolean;

  /** The device buffers, for dispatch threads' runners (valid until the next `prepare` that grows them). */
  buffers(): ConvBuffers {
    const ptrs = (b: Scratch[]) => b.map((s) => s.ptr);
    return { cols: ptrs(this.cols), colsB: ptrs(this.colsB), slots: ptrs(this.slots), ones: this.ones.ptr };
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
  forwardAt(l: ConvHost, G: ImageGeometry, p: ForwardPointers): void {
    if (this.lanes.count === 1) {
      for (let n = 0; n < G.n; n++) this.forwardSample(l, G, p, n);
      return;
    }
    this.lanes.fork();
    this.issuer.forward(this, l, G, p);
    this.lanes.join();
    // a pool adds the bias to every sample at once (the same bits as Caffe's rank-1 GEMM per sample): one launch
    // instead of N cuBLAS calls on the lanes' host threads
    const origin: ConvLane = { index: -1, stream: this.lanes.origin, blas: 0n };
    const total = G.n * G.f * G.ho * G.wo;
    const args = [karg.ptr(p.y), karg.ptr(p.b), karg.i32(G.f), karg.i32(G.ho * G.wo), karg.i32(total)];
    this.kernel(l, origin, "bias y+=b", l.k.vp_conv_bias_add, total, args);
  }

  /** Sample n's forward on its lane: [im2col], y[n] = W·col, then on one lane y[n] += b·1ᵀ (a pool: forwardAt). */
  forwardSample(l: ConvHost, G: ImageGeometry, p: ForwardPointers, n: number): void {
    const plane = G.ho * G.wo;
    const lane = this.lanes.lane(n);
    const direct = isOneByOne(G);
    const xn = p.x + 4 * n * G.c * G.h * G.w;
    const col = direct ? xn : this.cols[lane.index]!.ptr;
    const yn = p.y + 4 * n * G.f * plane;
    if (!direct) this.im2col(l, lane, G, col, xn);
    const rows = G.c * G.kernel * G.kernel;
    this.gemm(l, lane, "gemm y=W·col", { m: G.f, n: plane, k: rows, A: p.W, B: col, beta: 0, C: yn });
    if (this.lanes.count > 1) return;
    this.gemm(l, lane, "gemm y+=b·1ᵀ", { m: G.f, n: plane, k: 1, A: p.b, B: this.ones.ptr, beta: 1, C: yn });
  }

  /** The backward of a convolution of geometry G (prepared) at the given addresses: db, dW, dx accumulated. */
  backwardAt(l: ConvHost, G: ImageGeometry, p: ConvPointers): void {
    if (this.lanes.count === 1) {
      this.caffeBackward(l, G, p);
      return;
    }
    this.lanes.fork();
    // a backward that does not finish may leave product slots unadded (not zero): zeroed again before the next
    this.slotsDirty = this.slots.length > 0;
    this.issuer.backward(this, l, G, p);
    this.lanes.join();
    this.slotsDirty = false;
  }

  /** Set while a pool's backward is being issued; still set after one that threw (its slots are then zeroed again). */
  private slotsDirty = false;

  /** One lane, Caffe's sequence: the bias over every sample, then per sample [im2col], dW, the columns, col2im. */
  private caffeBackward(l: ConvHost, G: ImageGeometry, p: ConvPointers): void {
    const lane = this.lanes.lane(0);
    const col = this.cols[0]!.ptr;
    this.backwardBias(l, G, p);
    for (let n = 0; n < G.n; n++) {
      const xn = p.x + 4 * n * G.c * G.h * G.w;
      const direct = isOneByOne(G);
      if (!direct) this.im2col(l, lane, G, col, xn);
      this.weightGemm(l, lane, G, p, n, direct ? xn : col);
      this.inputGradient(l, lane, G, p, n, col);
    }
  }

  /** db += dy[n]·1 for n = 0 … N − 1, in order, on the side lane. */
  backwardBias(l: ConvHost, G: ImageGeometry, p: ConvPointers): void {
    const plane = G.ho * G.wo;
    const side = this.lanes.side();
    for (let n = 0; n < G.n; n++) {
      const dyn = p.dy + 4 * n * G.f * plane;
      this.blas(l, side, "gemv db+=dy·1", () =>
        this.cublas.sgemvRowMajor(side.blas, { rows: G.f, cols: plane, A: dyn, x: this.ones.ptr, beta: 1, y: p.db }),
      );
    }
  }

  /**
   * A pool, sample n on its lane. Chain sums: im2col into the lane's column buffer once the chain has read the
   * buffer's previous sample (n − L), then the input gradient through the lane's second buffer. Product sums: im2col,
   * then the sample's weight product into the lane's slot once the chain has added the slot's previous sample, then
   * the input gradient. Its chain part must be issued after it.
   */
  backwardLanePart(l: ConvHost, G: ImageGeometry, p: ConvPointers, n: number): void {
    const lanes = this.lanes;
    const lane = lanes.lane(n);
    const xn = p.x + 4 * n * G.c * G.h * G.w;
    if (this.weightSums === "products") {
      const direct = isOneByOne(G);
      const col = direct ? xn : this.cols[lane.index]!.ptr;
      if (!direct) this.im2col(l, lane, G, col, xn);
      const r = this.slotOf(n);
      const slot = this.slots[r * lanes.count + lane.index]!.ptr;
      // the slot is zero: allocated zeroed, and the chain's addition of its last product cleared it
      if (n >= PRODUCT_SLOTS * lanes.count) lanes.awaitWeights(lane, r);
      this.weightGemm(l, lane, G, p, n, col, slot);
      lanes.columnsReady(lane, r);
      // after the product on this lane (stream order): the column buffer is free for the input gradient
      this.inputGradient(l, lane, G, p, n, this.cols[lane.index]!.ptr);
      return;
    }
    if (!isOneByOne(G)) {
      if (n >= lanes.count) lanes.awaitWeights(lane, 0);
      this.im2col(l, lane, G, this.cols[lane.index]!.ptr, xn);
      lanes.columnsReady(lane, 0);
    }
    this.inputGradient(l, lane, G, p, n, this.colsB[lane.index]!.ptr);
  }

  /**
   * A pool, sample n on the chain lane, after sample n − 1's (stream order). Chain sums: dW += dy[n]·colᵀ after n's
   * columns. Product sums: dW += the lane's slot after n's product.
   */
  backwardChainPart(l: ConvHost, G: ImageGeometry, p: ConvPointers, n: number): void {
    const lanes = this.lanes;
    const lane = lanes.lane(n);
    const chain = lanes.chain();
    if (this.weightSums === "products") {
      const floats = G.f * G.c * G.kernel * G.kernel;
      const r = this.slotOf(n);
      lanes.chainAwaitColumns(lane, r);
      const slot = karg.ptr(this.slots[r * lanes.count + lane.index]!.ptr);
      this.kernel(l, chain, "add dW+=P", l.k.vp_add_clear, floats, [karg.ptr(p.dW), slot, karg.i32(floats)]);
      lanes.weightsDone(lane, r);
      return;
    }
    if (isOneByOne(G)) {
      this.weightGemm(l, chain, G, p, n, p.x + 4 * n * G.c * G.h * G.w);
      return;
    }
    lanes.chainAwaitColumns(lane, 0);
    this.weightGemm(l, chain, G, p, n, this.cols[lane.index]!.ptr);
    lanes.weightsDone(lane, 0);
  }

  /** The slot of sample n on its lane: ⌊n / L⌋ mod PRODUCT_SLOTS. */
  private slotOf(n: number): number {
    return Math.floor(n / this.lanes.count) % PRODUCT_SLOTS;
  }

  /**
   * dW += dy[n]·colᵀ (β = 1, in place, as Caffe) on `lane` (bench/glp4nn/chain-bound.ts times a chain of them); or,
   * with `slot`, the same GEMM into a zeroed product slot (the chain's kernel, so its bits).
   */
  weightGemm(
    l: ConvHost,
    lane: ConvLane,
    G: ImageGeometry,
    p: ConvPointers,
    n: number,
    col: DevicePtr,
    slot?: DevicePtr,
  ): void {
    const rows = G.c * G.kernel * G.kernel;
    const plane = G.ho * G.wo;
    const dyn = p.dy + 4 * n * G.f * plane;
    this.gemm(l, lane, slot === undefined ? "gemm dW+=dy·colᵀ" : "gemm P+=dy·colᵀ", {
      m: G.f,
      n: rows,
      k: plane,
      A: dyn,
      B: col,
      transB: true,
      beta: 1,
      C: slot ?? p.dW,
    });
  }

  /** col = Wᵀ·dy[n], then col2im adds col into dx[n], on `lane`. */
  private inputGradient(l: ConvHost, lane: ConvLane, G: ImageGeometry, p: ConvPointers, n: number, col: DevicePtr) {
    const rows = G.c * G.kernel * G.kernel;
    const plane = G.ho * G.wo;
    const dyn = p.dy + 4 * n * G.f * plane;
    this.gemm(l, lane, "gemm col=Wᵀ·dy", { transA: true, m: rows, n: plane, k: G.f, A: p.W, B: dyn, beta: 0, C: col });
    const dxn = karg.ptr(p.dx + 4 * n * G.c * G.h * G.w);
    this.kernel(l, lane, "col2im", l.k.vp_col2im_add, G.c * G.h * G.w, [dxn, karg.ptr(col), ...dims(G)]);
  }

  /** Frees the buffers (after the lanes' work is done). */
  dispose(): void {
    this.synchronize();
    if (this.external) return;
    for (const s of [...this.cols, ...this.colsB, ...this.slots, this.ones]) {
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
    const buffers = [...this.cols, ...this.colsB];
    const growCols = buffers.some((s) => s.floats < colFloats);
    const slotFloats = G.f * G.c * G.kernel * G.kernel;
    const growSlots = this.slots.some((s) => s.floats < slotFloats);
    const growOnes = this.ones.floats < G.ho * G.wo;
    if (!growCols && !growSlots && !growOnes && !this.slotsDirty) return G;
    // a buffer in use by queued work must not be freed under it: growing waits for the lanes (once per larger layer)
    this.synchronize();
    if (growCols) for (const s of buffers) this.grow(s, colFloats);
    if (growSlots) {
      try {
        for (const s of this.slots) this.grow(s, slotFloats);
      } catch (e) {
        const mb = (4 * slotFloats * this.slots.length) / 2 ** 20;
        throw new Error(
          `eager engine: ${what()} on ${this.lanes.count} streams needs ${this.slots.length} weight-product slots of ` +
            `${G.f}·${G.c}·${G.kernel}·${G.kernel} floats (${mb.toFixed(0)} MiB) and the allocation failed ` +
            `(${e instanceof Error ? e.message.split("\n")[0] : String(e)}); use fewer streams, or ` +
            "VPPS_CONV_WEIGHT_SUMS=chain (a chain of GEMMs, no slots)",
        );
      }
    }
    if (growSlots || this.slotsDirty) {
      // the product slots start at zero (each product is added into a zeroed slot, which its addition clears)
      const stream = this.lanes.lane(0).stream;
      for (const s of this.slots) this.driver.memsetD32Async(s.ptr, 0, s.floats, stream.handle);
      stream.synchronize();
      this.slotsDirty = false;
    }
    if (growOnes) {
      this.grow(this.ones, G.ho * G.wo);
      const stream = this.lanes.lane(0).stream;
      this.driver.memsetD32Async(this.ones.ptr, floatBits(1), this.ones.floats, stream.handle);
      // every lane reads the ones; they are written before any lane queues work that reads them
      stream.synchronize();
    }
    return G;
  }

  /** Waits for every lane's work (the side and chain lanes' too). */
  private synchronize(): void {
    for (let k = 0; k < this.lanes.count; k++) this.lanes.lane(k).stream.synchronize();
    if (this.lanes.count > 1) {
      this.lanes.side().stream.synchronize();
      this.lanes.chain().stream.synchronize();
    }
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

/** A runner's device buffers by lane (a dispatch thread's runner works on its parent's). */
export interface ConvBuffers {
  readonly cols: readonly DevicePtr[];
  readonly colsB: readonly DevicePtr[];
  readonly slots: readonly DevicePtr[];
  readonly ones: DevicePtr;
}

/** The kernels' geometry arguments: C, H, W, K, S, P, Ho, Wo. */
function dims(G: ImageGeometry) {
  return [G.c, G.h, G.w, G.kernel, G.stride, G.padding, G.ho, G.wo].map((v) => karg.i32(v));
}
