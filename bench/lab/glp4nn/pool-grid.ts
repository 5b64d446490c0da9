/**
 * A layer's iteration with CUDA graphs over a grid of forward × backward pool sizes (the benchmark's fixed pools are
 * the same size both ways): where the best asymmetric pair stands against the symmetric pools and one stream.
 *
 *   node --import tsx bench/lab/glp4nn/pool-grid.ts [layer names, default CaffeNet conv3 and conv5]
 */
import { TABLE5 } from "../../../src/bench/glp4nn/layers.js";
import { ConvLayer } from "../../../src/conv/layer.js";
import { GpuContext } from "../../../src/cuda/index.js";
import { graphMedianMs } from "./graph-timing.js";

const names = process.argv.slice(2);
const layers = TABLE5.filter((l) => (names.length > 0 ? names : ["CaffeNet conv3", "CaffeNet conv5"]).includes(l.name));
const SIZES = (process.env["SIZES"] ?? "1,4,8,12,16,24,32").split(",").map(Number);

const ctx = GpuContext.open({ poolBytes: 64 * 1024 ** 2 });
try {
  for (const shape of layers) {
    const layer = ConvLayer.open(shape, ctx);
    try {
      const runners = new Map(SIZES.map((k) => [k, layer.runner(k, { threads: 1 })]));
      const one = runners.get(1)!;
      layer.iteration(one);
      const oneMs = graphMedianMs(ctx, () => layer.iteration(one));
      const rows: string[] = [];
      let best = { ms: Number.POSITIVE_INFINITY, kf: 1, kb: 1 };
      for (const kf of SIZES) {
        const cells: string[] = [];
        for (const kb of SIZES) {
          const [f, b] = [runners.get(kf)!, runners.get(kb)!];
          layer.iteration(f, b);
          const ms = graphMedianMs(ctx, () => layer.iteration(f, b));
          if (ms < best.ms) best = { ms, kf, kb };
          cells.push((oneMs / ms).toFixed(2));
        }
        rows.push(`  forward ${String(kf).padStart(2)}: ${cells.join(" ")}`);
      }
      console.log(
        `${shape.name}: one stream ${oneMs.toFixed(2)} ms; speed-up, backward pools ${SIZES.join(" ")} across`,
      );
      console.log(rows.join("\n"));
      console.log(
        `  best: forward ${best.kf}, backward ${best.kb}: ${best.ms.toFixed(2)} ms (${(oneMs / best.ms).toFixed(2)}×)`,
      );
      for (const r of runners.values()) r.dispose();
    } finally {
      layer.dispose();
    }
  }
} finally {
  ctx.dispose();
}
