// GLP4NN for the eager engine's convolutions (`streams: "auto"`): the first time a convolution of a given geometry
// runs, a copy of the layer (its own buffers, seeded values: layer.ts) is profiled on one stream and analysed
// (glp.ts: the tracker on its first samples, cuBLAS's kernels read from captured graphs, the analyser's pool for
// the forward and for the backward, with the launch cost measured, then confirmed by timing the copy's iteration on
// those pools and their neighbours); the node then runs on runners of those sizes.
// The results do not depend on the lanes (lanes.ts), so they are one stream's bit for bit. Until the solver has loaded
// a convolution runs on one stream and is analysed at its next use; a failed analysis leaves it on one stream and says
// why in the explanation.

import type { GpuContext } from "../cuda/index.js";
import { explainChoice, hardwareQueues, type IntegerSolver } from "../glp4nn/index.js";
import type { ImageGeometry } from "../ops/image.js";
import { analyseConvLayer, callFootprints, confirmPools } from "./glp.js";
import type { ConvHost } from "./kernels.js";
import { poolLanes } from "./lanes.js";
import { ConvLayer, MAX_LAYER_LANES } from "./layer.js";
import { ConvRunner } from "./runner.js";
import { convThreadsFor, lazyConvThreads, MAX_POOL_LANES } from "./threads.js";

interface Entry {
  readonly forward: ConvRunner;
  readonly backward: ConvRunner;
}

/** The runners of each convolution geometry, sized by the analyser; see the top of this file. */
export class ConvAuto {
  private readonly byGeometry = new Map<string, Entry>();
  private readonly owned = new Set<ConvRunner>();

  constructor(
    private readonly ctx: GpuContext,
    /** One lane: the engine's own runner (used until the analysis and where it chooses 1). */
    private readonly one: ConvRunner,
    private readonly solver: () => IntegerSolver | undefined,
    private readonly explain: ((text: string) => void) | undefined,
    /** The engine's im2col and col2im, for dispatch threads (threads.ts). */
    private readonly kernels: ConvHost["k"],
  ) {}

  /** The runner for a convolution of geometry G (`what` names it) and a direction: one lane until analysed. */
  runner(G: ImageGeometry, what: () => string, direction: "forward" | "backward"): ConvRunner {
    const key = [G.n, G.c, G.h, G.w, G.f, G.kernel, G.stride, G.padding].join(",");
    let e = this.byGeometry.get(key);
    if (e === undefined) {
      const solver = this.solver();
      if (solver === undefined) return this.one;
      e = this.analyse(what(), G, solver);
      this.byGeometry.set(key, e);
    }
    return direction === "forward" ? e.forward : e.backward;
  }

  private analyse(what: string, G: ImageGeometry, solver: IntegerSolver): Entry {
    let sizes: [number, number] = [1, 1];
    let text: string;
    try {
      const layer = ConvLayer.open(
        { name: what, n: G.n, c: G.c, hw: G.h, w: G.w, f: G.f, k: G.kernel, s: G.stride, p: G.padding },
        this.ctx,
      );
      try {
        const r = layer.runner(1);
        try {
          layer.iteration(r); // warm: buffers, cuBLAS's kernels loaded
          const footprints = callFootprints(layer, r);
          const a = analyseConvLayer(layer, r, {
            mode: "direct",
            solver,
            connections: hardwareQueues(),
            footprints,
            hostThreads: convThreadsFor(MAX_LAYER_LANES),
          });
          // the analyser's pools confirmed by timing them and their neighbours on the layer's copy (glp.ts)
          const runners = layer.runners(r);
          let confirmed: ReturnType<typeof confirmPools>;
          try {
            confirmed = confirmPools(layer, a, { runnerOf: runners.of });
          } finally {
            runners.dispose();
          }
          sizes = [confirmed.forwardPool, confirmed.backwardPool];
          text = [
            ...[a.forward, a.backward].map((c) => (c === undefined ? "" : explainChoice(c))),
            confirmed.text,
            ...a.errors.map((e) => `no analysis, one stream: ${e}`),
            a.unknown.length > 0 ? `cuBLAS calls left out (kernels not readable): ${a.unknown.join(", ")}` : "",
            a.hostThreads > 1
              ? `direct launches from ${a.hostThreads} host threads (src/conv/threads.ts): a pool has as many lanes for each`
              : "",
            `eager engine: ${what}: forward on ${sizes[0]} stream(s), backward on ${sizes[1]}`,
          ]
            .filter((l) => l !== "")
            .join("\n\n");
        } finally {
          r.dispose();
        }
      } finally {
        layer.dispose();
      }
    } catch (e) {
      // the analysis could not run: this convolution stays on one stream, and the explanation says why
      sizes = [1, 1];
      text = `eager engine: ${what}: no analysis (${e instanceof Error ? e.message.split("\n")[0] : String(e)}); one stream`;
    }
    this.explain?.(text);
    const runners = new Map<number, ConvRunner>([[1, this.one]]);
    const make = (k: number) => {
      let r = runners.get(k);
      if (r === undefined) {
        r = new ConvRunner(
          this.ctx.device.driver,
          this.ctx.cublas,
          poolLanes(this.ctx.streamPool(k), this.ctx.stream, k),
        );
        const threads = convThreadsFor(k);
        if (threads > 1 && k <= MAX_POOL_LANES) r.issuer = lazyConvThreads(this.ctx, threads, this.kernels);
        runners.set(k, r);
        this.owned.add(r);
      }
      return r;
    };
    return { forward: make(sizes[0]), backward: make(sizes[1]) };
  }

  dispose(): void {
    for (const r of this.owned) r.dispose();
    this.owned.clear();
    this.byGeometry.clear();
  }
}
