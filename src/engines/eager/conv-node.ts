// The `conv2d` op (src/ops/image.ts) on the eager engine: a node's geometry and device addresses turned into calls on
// the conv layer (src/conv/: per-sample im2col + GEMMs, Caffe's way). The engine's runner works on `streams` lanes —
// one, the engine's own stream, or that many lanes of the context's stream pool, issued from dispatch threads where
// they pay — and under `streams: "auto"` GLP4NN chooses the lanes of each layer and direction (ConvAuto). Every choice
// gives one stream's results bit for bit.

import {
  ConvAuto,
  type ConvHost,
  ConvRunner,
  convThreadsFor,
  lazyConvThreads,
  MAX_POOL_LANES,
  oneLane,
  poolLanes,
} from "../../conv/index.js";
import type { GpuContext } from "../../cuda/runtime/context.js";
import type { IntegerSolver } from "../../glp4nn/index.js";
import type { ComputationGraph } from "../../graph/graph.js";
import { imageGeometry } from "../../ops/image.js";

/** What a node's convolution launches with and reads: the conv kernels, and every node's device addresses. */
export type ConvNodeHost = ConvHost & { readonly valPtr: Float64Array; readonly gradPtr: Float64Array };

/** The engine's convolutions; see the top of this file. */
export class EagerConvs {
  /** The engine's runner: one lane, or `streams` lanes of the context's pool. */
  readonly runner: ConvRunner;
  /** `streams: "auto"`: a runner per layer and direction, sized by GLP4NN (src/conv/auto.ts). */
  private auto: ConvAuto | undefined;

  constructor(
    private readonly ctx: GpuContext,
    /** The engine's im2col and col2im (the eager program's), for dispatch threads. */
    private readonly kernels: ConvHost["k"],
    streams: number,
  ) {
    const lanes =
      streams === 1 ? oneLane(ctx.stream, ctx.cublasHandle) : poolLanes(ctx.streamPool(streams), ctx.stream, streams);
    this.runner = new ConvRunner(ctx.device.driver, ctx.cublas, lanes);
    // a pool's work issued from several host threads (src/conv/threads.ts)
    const threads = streams === 1 || streams > MAX_POOL_LANES ? 1 : convThreadsFor(streams);
    if (threads > 1) this.runner.issuer = lazyConvThreads(ctx, threads, kernels);
  }

  /**
   * `streams: "auto"`: from now on each layer runs on the runners the analyser chooses for it, once `solver` has one
   * (until then on the engine's runner); `explain` hears each choice and why.
   */
  chooseByLayer(solver: () => IntegerSolver | undefined, explain: ((text: string) => void) | undefined): void {
    this.auto = new ConvAuto(this.ctx, this.runner, solver, explain, this.kernels);
  }

  /** Node i's forward on its runner. */
  forward(l: ConvNodeHost, g: ComputationGraph, i: number): void {
    convForward(this.runnerFor(g, i, "forward"), l, g, i);
  }

  /** Node i's backward on its runner. */
  backward(l: ConvNodeHost, g: ComputationGraph, i: number): void {
    convBackward(this.runnerFor(g, i, "backward"), l, g, i);
  }

  private runnerFor(g: ComputationGraph, i: number, direction: "forward" | "backward"): ConvRunner {
    return this.auto?.runner(imageGeometry(g, i), () => g.describe(i), direction) ?? this.runner;
  }

  /** Frees the runners' buffers (GLP4NN's runners, then the engine's). */
  dispose(): void {
    try {
      this.auto?.dispose();
    } finally {
      this.runner.dispose();
    }
  }
}

/** Node i's forward on `runner`: y[n] = W·im2col(x[n]) + b·1ᵀ for n = 0 … N − 1. */
export function convForward(runner: ConvRunner, l: ConvNodeHost, g: ComputationGraph, i: number): void {
  const G = runner.prepare(imageGeometry(g, i), () => g.describe(i));
  const v = l.valPtr;
  runner.forwardAt(l, G, { x: v[g.arg(i, 0)]!, W: v[g.arg(i, 1)]!, b: v[g.arg(i, 2)]!, y: v[i]! });
}

/** Node i's backward on `runner`: db, dW (in sample order) and dx, all accumulated (+=). */
export function convBackward(runner: ConvRunner, l: ConvNodeHost, g: ComputationGraph, i: number): void {
  const G = runner.prepare(imageGeometry(g, i), () => g.describe(i));
  const [v, d] = [l.valPtr, l.gradPtr];
  const [x, W, b] = [g.arg(i, 0), g.arg(i, 1), g.arg(i, 2)];
  runner.backwardAt(l, G, { x: v[x]!, W: v[W]!, b: v[b]!, y: v[i]!, dx: d[x]!, dW: d[W]!, db: d[b]!, dy: d[i]! });
}
