/**
 * Draws sentences/s against batch size for every engine from the committed GPU results:
 * `npm run bench:plot` reads bench/results/batching-<device>.json and vpps-<device>.json and writes
 * bench/results/throughput-<device>.svg (and prints a side-by-side table).
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { renderLogLogPlot, type Series } from "../src/report/svg-plot.js";
import { ROOT } from "./common.js";

const device = process.argv[2] ?? "h100";
const dir = join(ROOT, "bench", "results");
interface Row {
  engine?: string;
  cell?: string;
  batch: number;
  sentencesPerSecond: number;
}
const read = (name: string): { device: string; rows: Row[] } | null => {
  const p = join(dir, name);
  return existsSync(p) ? (JSON.parse(readFileSync(p, "utf8")) as { device: string; rows: Row[] }) : null;
};
const batching = read(`batching-${device}.json`);
const vpps = read(`vpps-${device}.json`);
if (!batching && !vpps)
  throw new Error(`no results for '${device}' in ${dir} (batching-${device}.json, vpps-${device}.json)`);

const series = new Map<string, { x: number; y: number }[]>();
const add = (name: string, r: Row) => {
  const s = series.get(name) ?? [];
  s.push({ x: r.batch, y: r.sentencesPerSecond });
  series.set(name, s);
};
for (const r of batching?.rows ?? []) add(r.engine === "autobatch-agenda-cublas" ? "autobatch agenda" : r.engine!, r);
series.delete("autobatch-agenda"); // the tiled-GEMM variant; the cuBLAS one is the engine's default
for (const r of vpps?.rows ?? []) add(`vpps (${r.cell} cell)`, r);
const list: Series[] = [...series.entries()].map(([name, points]) => ({ name, points }));
const name = batching?.device ?? vpps?.device ?? device;
const svg = renderLogLogPlot(list, {
  title: `Tree-LSTM training on SST, hidden 256 — ${name}`,
  xLabel: "batch size (trees)",
  yLabel: "sentences / s",
});
const out = join(dir, `throughput-${device}.svg`);
writeFileSync(out, svg);
const batches = [...new Set(list.flatMap((s) => s.points.map((p) => p.x)))].sort((a, b) => a - b);
console.log(["batch", ...list.map((s) => s.name)].join("\t"));
for (const b of batches) {
  console.log([b, ...list.map((s) => s.points.find((p) => p.x === b)?.y.toFixed(0) ?? "-")].join("\t"));
}
console.log(`wrote ${out}`);
