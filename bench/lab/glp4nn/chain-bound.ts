/**
 * How far can a pool take a Caffe-style layer with CUDA graphs? Caffe's weight gradient is one chain of N in-place
 * GEMMs (dW += dy[n]·col[n]ᵀ, n = 0, 1, …), which GLP4NN keeps so that results stay one stream's bit for bit; and the
 * backward cannot start before the forward's join. So an iteration takes at least
 *   (the forward on the best pool) + (the N weight GEMMs one after another, alone on the GPU),
 * and the speed-up over one stream is at most one stream's time over that. This times, per layer, as CUDA graphs:
 * one stream's whole iteration, the forward alone on pools of 4 … 32 lanes, and the chain of N GEMMs alone.
 *
 *   node --import tsx bench/lab/glp4nn/chain-bound.ts [layer names, default the CaffeNet layers]
 */

import { TABLE5 } from "../../../src/bench/glp4nn/layers.js";
import { ConvLayer } from "../../../src/conv/layer.js";
import { GpuContext } from "../../../src/cuda/index.js";
import { graphMedianMs } from "./graph-timing.js";

const names = process.argv.slice(2);
const layers = TABLE5.filter((l) => (names.length > 0 ? names.includes(l.name) : l.net === "CaffeNet"));

const ctx = GpuContext.open({ poolBytes: 64 * 1024 ** 2 });
try {
  for (const shape of layers) {
    const layer = ConvLayer.open(shape, ctx);
    try {
      const G = layer.G;
      const one = layer.runner(1);
      layer.iteration(one); // warm: buffers, cuBLAS's kernels
      const oneMs = graphMedianMs(ctx, () => layer.iteration(one));
      let forwardMs = Number.POSITIVE_INFINITY;
      let forwardPool = 1;
      for (const k of [4, 8, 12, 16, 24, 32]) {
        const r = layer.runner(k, { threads: 1 });
        r.forwardAt(layer.host, G, layer.ptr);
        const ms = graphMedianMs(ctx, () => r.forwardAt(layer.host, G, layer.ptr));
        if (ms < forwardMs) [forwardMs, forwardPool] = [ms, k];
        r.dispose();
      }
      // the chain alone: N weight GEMMs one after another on one stream, as the chain lane runs them
      const col = one.buffers().cols[0]!;
      const lane = one.lanes.lane(0);
      const chain = () => {
        for (let n = 0; n < G.n; n++) one.weightGemm(layer.host, lane, G, layer.ptr, n, col);
      };
      chain();
      const chainMs = graphMedianMs(ctx, chain);
      const bound = forwardMs + chainMs;
      console.log(
        `${shape.name.padEnd(16)} one stream ${oneMs.toFixed(2)} ms; forward alone, best pool (${forwardPool}) ` +
          `${forwardMs.toFixed(2)} ms; the chain of ${G.n} weight GEMMs alone ${chainMs.toFixed(2)} ms ` +
          `(${((1000 * chainMs) / G.n).toFixed(1)} µs each); at least ${bound.toFixed(2)} ms an iteration: ` +
          `at most ${(oneMs / bound).toFixed(2)}× one stream`,
      );
      one.dispose();
    } finally {
      layer.dispose();
    }
  }
} finally {
  ctx.dispose();
}
