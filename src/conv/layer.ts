// One convolution layer on the device, outside any graph: its input, filters, bias and output gradient filled with
// seeded values, and a training iteration of it — the weight, bias and input gradients zeroed, the forward and the
// backward — run by ConvRunners of any number of lanes. What the GLP4NN benchmark (src/bench/glp4nn/) times per Table 5
// layer, with direct launches or with the whole iteration captured as one CUDA graph, and what the analysis of
// glp.ts profiles.

import { EAGER_KERNEL_NAMES, EAGER_PROGRAM, eagerKernelSource } from "../codegen/eager-kernels.js";
import type { DevicePtr } from "../cuda/index.js";
import { type CudaStreamPool, GpuContext, type GpuContextOptions } from "../cuda/index.js";
import { convOutputSide, type ImageGeometry } from "../ops/image.js";
import { type ConvHost, directHost } from "./kernels.js";
import { oneLane, poolLanes, type WeightSums } from "./lanes.js";
import { type ConvPointers, ConvRunner } from "./runner.js";
import { convThreads, convThreadsFor } from "./threads.js";

/** A layer as the paper's Table 5 gives it: batch, input channels, side, filters, filter side, stride, padding. */
export interface ConvLayerShape {
  readonly name: string;
  readonly n: number;
  readonly c: number;
  readonly hw: number;
  /** The input's width where it is not square (default: hw). */
  readonly w?: number;
  readonly f: number;
  readonly k: number;
  readonly s: number;
  readonly p: number;
}

/** The most lanes a layer's runners take (the benchmark's largest fixed pool). */
export const MAX_LAYER_LANES = 32;

/** The layer's geometry (Caffe's output rounding). */
export function layerGeometry(L: ConvLayerShape): ImageGeometry {
  const w = L.w ?? L.hw;
  const [ho, wo] = [convOutputSide(L.hw, L.k, L.s, L.p), convOutputSide(w, L.k, L.s, L.p)];
  return { n: L.n, c: L.c, h: L.hw, w, f: L.f, ho, wo, kernel: L.k, stride: L.s, padding: L.p };
}

/** Fills `floats` floats at `ptr` with values in [−scale, scale) from a seeded generator, in host chunks. */
function fillSeeded(ctx: GpuContext, ptr: DevicePtr, floats: number, seed: number, scale: number): void {
  const chunk = new Float32Array(Math.min(floats, 1 << 22));
  let state = (seed * 2654435761) >>> 0 || 1;
  for (let at = 0; at < floats; at += chunk.length) {
    const n = Math.min(chunk.length, floats - at);
    for (let i = 0; i < n; i++) {
      // xorshift32: fast enough for the 10^8 values of CaffeNet conv1's arrays
      state ^= state << 13;
      state ^= state >>> 17;
      state ^= state << 5;
      chunk[i] = ((state >>> 0) / 4294967296 - 0.5) * 2 * scale;
    }
    ctx.device.driver.memcpyHtoD(ptr + 4 * at, chunk, 4 * n);
  }
}

/** A conv layer's buffers on the device and its iteration; see the top of this file. */
export class ConvLayer {
  readonly G: ImageGeometry;
  readonly ptr: ConvPointers;
  readonly host: ConvHost;
  readonly counts = { kernels: 0, cublas: 0 };
  private readonly allocations: DevicePtr[] = [];
  private pool_: CudaStreamPool | undefined;

  private constructor(
    readonly ctx: GpuContext,
    readonly shape: ConvLayerShape,
    private readonly ownsContext: boolean,
  ) {
    this.G = layerGeometry(shape);
    // the eager program, compiled once per context: the engine's own module where the layer shares its context
    const k = ctx.kernels(EAGER_PROGRAM, eagerKernelSource(), EAGER_KERNEL_NAMES).kernels;
    this.host = directHost(k, this.counts);
    const G = this.G;
    const sizes = {
      x: G.n * G.c * G.h * G.w,
      W: G.f * G.c * G.kernel * G.kernel,
      b: G.f,
      y: G.n * G.f * G.ho * G.wo,
    };
    const alloc = (floats: number) => {
      const p = ctx.device.driver.memAlloc(4 * floats);
      this.allocations.push(p);
      return p;
    };
    this.ptr = {
      x: alloc(sizes.x),
      W: alloc(sizes.W),
      b: alloc(sizes.b),
      y: alloc(sizes.y),
      dx: alloc(sizes.x),
      dW: alloc(sizes.W),
      db: alloc(sizes.b),
      dy: alloc(sizes.y),
    };
    const fanIn = G.c * G.kernel * G.kernel;
    fillSeeded(ctx, this.ptr.x, sizes.x, 1, 1);
    fillSeeded(ctx, this.ptr.W, sizes.W, 2, 1 / Math.sqrt(fanIn));
    fillSeeded(ctx, this.ptr.b, sizes.b, 3, 0.1);
    fillSeeded(ctx, this.ptr.dy, sizes.y, 4, 1);
  }

  /** The layer on `ctx` (kept open), or on a context of its own (closed by dispose). */
  static open(shape: ConvLayerShape, ctx?: GpuContext, opts: GpuContextOptions = {}): ConvLayer {
    const own = ctx === undefined;
    const c = ctx ?? GpuContext.open({ poolBytes: 16 * 1024 ** 2, ...opts });
    try {
      return new ConvLayer(c, shape, own);
    } catch (e) {
      if (own) c.dispose();
      throw e;
    }
  }

  /** The context's stream pool, with MAX_LAYER_LANES streams. */
  get pool(): CudaStreamPool {
    if (this.pool_ === undefined) this.pool_ = this.ctx.streamPool(MAX_LAYER_LANES);
    return this.pool_;
  }

  /**
   * A runner on `lanes` lanes (1: the context's stream, no events), its buffers sized for this layer; a pool's work
   * issued from `threads` sample threads (threads.ts; default convThreadsFor(lanes), 1: from this thread — what
   * a CUDA graph capture needs), its weight gradient summed by `weightSums` (default weightSumsFromEnv()).
   */
  runner(lanes: number, opts: { threads?: number; weightSums?: WeightSums } = {}): ConvRunner {
    if (!Number.isInteger(lanes) || lanes < 1 || lanes > MAX_LAYER_LANES) {
      throw new RangeError(`ConvLayer.runner: lanes must be an integer 1 … ${MAX_LAYER_LANES}; got ${lanes}`);
    }
    const ctx = this.ctx;
    const l = lanes === 1 ? oneLane(ctx.stream, ctx.cublasHandle) : poolLanes(this.pool, ctx.stream, lanes);
    const r = new ConvRunner(ctx.device.driver, ctx.cublas, l, { weightSums: opts.weightSums });
    r.prepare(this.G, () => this.shape.name);
    const threads = lanes === 1 ? 1 : (opts.threads ?? convThreadsFor(lanes));
    if (threads > 1) r.issuer = convThreads(ctx, threads, this.host.k);
    return r;
  }

  /**
   * Runners by pool size, each made on first use (`runner(k, opts)`) and kept, as the engine keeps one per size; `one`
   * serves a single lane and stays the caller's; `dispose` frees every runner made here.
   */
  runners(
    one: ConvRunner,
    opts: { threads?: number } = {},
  ): { of: (lanes: number) => ConvRunner; dispose: () => void } {
    const made = new Map<number, ConvRunner>();
    return {
      of: (lanes) => {
        if (lanes === 1) return one;
        let r = made.get(lanes);
        if (r === undefined) {
          r = this.runner(lanes, opts);
          made.set(lanes, r);
        }
        return r;
      },
      dispose: () => {
        for (const r of made.values()) r.dispose();
        made.clear();
      },
    };
  }

  /**
   * One training iteration on the context's stream: dW, db, dx zeroed (Caffe's solver clears the parameter
   * gradients; our col2im adds into dx), the forward on `forward`'s lanes and the backward on `backward`'s.
   */
  iteration(forward: ConvRunner, backward: ConvRunner = forward): void {
    const { driver } = this.ctx.device;
    const s = this.ctx.stream.handle;
    const G = this.G;
    driver.memsetD32Async(this.ptr.dW, 0, G.f * G.c * G.kernel * G.kernel, s);
    driver.memsetD32Async(this.ptr.db, 0, G.f, s);
    driver.memsetD32Async(this.ptr.dx, 0, G.n * G.c * G.h * G.w, s);
    forward.forwardAt(this.host, G, this.ptr);
    backward.backwardAt(this.host, G, this.ptr);
  }

  /** The results of the last iteration (waits for it): the output and every gradient. */
  results(which: readonly ("y" | "dx" | "dW" | "db")[] = ["y", "dx", "dW", "db"]): Record<string, Float32Array> {
    const G = this.G;
    const floats = {
      y: G.n * G.f * G.ho * G.wo,
      dx: G.n * G.c * G.h * G.w,
      dW: G.f * G.c * G.kernel * G.kernel,
      db: G.f,
    };
    const out: Record<string, Float32Array> = {};
    for (const w of which) out[w] = this.ctx.download(this.ptr[w], new Float32Array(floats[w]));
    return out;
  }

  /** Frees the buffers (and the context when it is the layer's own). */
  dispose(): void {
    this.ctx.synchronize();
    for (const p of this.allocations.splice(0)) this.ctx.device.driver.memFree(p);
    if (this.ownsContext) this.ctx.dispose();
  }
}
