/**
 * Draws sentences/s against batch size for every engine from the committed GPU results:
 * `npm run bench:plot [device]` reads bench/results/treelstm-<device>.json (bench/treelstm.ts: every engine measured
 * in one run; its hidden-256 rows) when present, else batching-<device>.json and vpps-<device>.json (two earlier
 * runs), and writes bench/results/throughput-<device>.svg (and prints a side-by-side table).
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { renderLogLogPlot, type Series } from "../src/report/svg-plot.js";
import { ROOT } from "./common.js";
import { throughputSeries, throughputTitle } from "./engine-timing.js";

const device = process.argv[2] ?? "h100";
const dir = join(ROOT, "bench", "results");
interface Row {
  engine?: string;
  cell?: string;
  hidden?: number;
  batch: number;
  sentencesPerSecond: number;
}
interface Result {
  device: string;
  data?: string;
  rows: Row[];
}
const read = (name: string): Result | null => {
  const p = join(dir, name);
  return existsSync(p) ? (JSON.parse(readFileSync(p, "utf8")) as Result) : null;
};

/** The two-file layout of earlier runs: the tiled-GEMM agenda variant left out, the cuBLAS one as "autobatch agenda". */
function seriesFromSeparateRuns(batching: Result | null, vpps: Result | null): Series[] {
  const series = new Map<string, { x: number; y: number }[]>();
  const add = (name: string, r: Row) => {
    const s = series.get(name) ?? [];
    s.push({ x: r.batch, y: r.sentencesPerSecond });
    series.set(name, s);
  };
  for (const r of batching?.rows ?? []) add(r.engine === "autobatch-agenda-cublas" ? "autobatch agenda" : r.engine!, r);
  series.delete("autobatch-agenda"); // the tiled-GEMM variant; the cuBLAS one is the engine's default
  for (const r of vpps?.rows ?? []) add(`vpps (${r.cell} cell)`, r);
  return [...series.entries()].map(([name, points]) => ({ name, points }));
}

const HIDDEN = 256;
const treelstm = read(`treelstm-${device}.json`);
let list: Series[];
let name: string;
let from: string;
let data: string | undefined;
if (treelstm) {
  list = throughputSeries(
    treelstm.rows.map((r) => ({ ...r, engine: r.engine ?? "", hidden: r.hidden ?? HIDDEN })),
    HIDDEN,
  );
  name = treelstm.device;
  data = treelstm.data;
  from = `treelstm-${device}.json`;
} else {
  const batching = read(`batching-${device}.json`);
  const vpps = read(`vpps-${device}.json`);
  if (!batching && !vpps) {
    throw new Error(
      `no results for '${device}' in ${dir} (treelstm-${device}.json, or batching-${device}.json and vpps-${device}.json)`,
    );
  }
  list = seriesFromSeparateRuns(batching, vpps);
  name = batching?.device ?? vpps?.device ?? device;
  from = [batching && `batching-${device}.json`, vpps && `vpps-${device}.json`].filter(Boolean).join(" and ");
}
if (list.length === 0) throw new Error(`no hidden-${HIDDEN} rows to plot in ${from}`);
const svg = renderLogLogPlot(list, {
  title: throughputTitle(name, data, HIDDEN),
  xLabel: "batch size (trees)",
  yLabel: "sentences / s",
});
const out = join(dir, `throughput-${device}.svg`);
writeFileSync(out, svg);
const batches = [...new Set(list.flatMap((s) => s.points.map((p) => p.x)))].sort((a, b) => a - b);
console.log(`from ${from}`);
console.log(["batch", ...list.map((s) => s.name)].join("\t"));
for (const b of batches) {
  console.log([b, ...list.map((s) => s.points.find((p) => p.x === b)?.y.toFixed(0) ?? "-")].join("\t"));
}
console.log(`wrote ${out}`);
