/**
 * `vpps bench plot [device]`: draws sentences/s against batch size for every engine from committed GPU results:
 * bench/results/<device>/<model>.json (the throughput suite: every engine measured in one run; its main size's rows)
 * when present, else batching.json and vpps.json (two earlier runs, Tree-LSTM only), and writes
 * bench/results/<device>/<model>.svg (and prints a side-by-side table).
 */
import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { renderLogLogPlot, type Series } from "../../report/svg-plot.js";
import { fsErrorReason } from "../../util/files.js";
import { resultsDir } from "../device.js";
import { BenchError } from "../errors.js";
import type { BenchModel } from "../model.js";
import { writeOutput } from "../output.js";
import { throughputSeries } from "../throughput/report.js";

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
  models?: { hidden: number }[];
  rows: Row[];
}

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

/**
 * A results file, checked: a readable regular file of JSON, an object with `rows`, each row with a positive batch
 * and a finite sentences/s. Anything else is a BenchError naming the file and the first bad field.
 */
export function readResult(path: string): Result {
  let raw: unknown;
  try {
    if (!statSync(path).isFile()) throw new BenchError(`results file ${path} is not a regular file; move it away`);
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    if (e instanceof BenchError) throw e;
    const why =
      e instanceof SyntaxError
        ? `is not valid JSON (${e.message.slice(0, 80)})`
        : `cannot be read (${fsErrorReason(e)})`;
    throw new BenchError(`results file ${path} ${why}; rerun the benchmark that writes it, or restore it from git`);
  }
  const bad = (what: string): never => {
    throw new BenchError(`results file ${path}: ${what}; rerun the benchmark that writes it, or restore it from git`);
  };
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) return bad("expected a JSON object");
  const r = raw as Partial<Result>;
  if (!Array.isArray(r.rows)) return bad("expected a list 'rows'");
  r.rows.forEach((row: unknown, i) => {
    const o = row as Partial<Row> | null;
    if (typeof o !== "object" || o === null) bad(`rows[${i}] is not an object`);
    else if (!(typeof o.batch === "number" && o.batch > 0)) bad(`rows[${i}].batch must be a positive number`);
    else if (!(typeof o.sentencesPerSecond === "number" && Number.isFinite(o.sentencesPerSecond))) {
      bad(`rows[${i}].sentencesPerSecond must be a number`);
    }
  });
  if (r.device !== undefined && typeof r.device !== "string") bad("'device' must be a string");
  return raw as Result;
}

export function runPlot(model: BenchModel<unknown>, o: { device: string; dir?: string }): number {
  const dir = o.dir ?? resultsDir(o.device);
  const read = (name: string): Result | null => {
    const p = join(dir, name);
    return existsSync(p) ? readResult(p) : null;
  };
  const main = read(`${model.name}.json`);
  const hidden = main?.models?.[0]?.hidden ?? model.sizes[0]!.hidden;
  let list: Series[];
  let name: string;
  let from: string;
  let data: string | undefined;
  if (main) {
    list = throughputSeries(
      model,
      main.rows.map((r) => ({ ...r, engine: r.engine ?? "", hidden: r.hidden ?? hidden })),
      hidden,
    );
    name = main.device;
    data = main.data;
    from = `${model.name}.json`;
  } else {
    const batching = read("batching.json");
    const vpps = read("vpps.json");
    if (!batching && !vpps) {
      throw new BenchError(`no results in ${dir} (${model.name}.json, or batching.json and vpps.json)`);
    }
    list = seriesFromSeparateRuns(batching, vpps);
    name = batching?.device ?? vpps?.device ?? o.device;
    from = [batching && "batching.json", vpps && "vpps.json"].filter(Boolean).join(" and ");
  }
  if (list.length === 0) throw new BenchError(`no hidden-${hidden} rows to plot in ${join(dir, from)}`);
  const svg = renderLogLogPlot(list, {
    title: model.plotTitle(name, data, hidden),
    xLabel: `batch size (${model.batchUnit})`,
    yLabel: `${model.unit} / s`,
  });
  const out = writeOutput(dir, `${model.name}.svg`, svg);
  const batches = [...new Set(list.flatMap((s) => s.points.map((p) => p.x)))].sort((a, b) => a - b);
  console.log(`from ${join(dir, from)}`);
  console.log(["batch", ...list.map((s) => s.name)].join("\t"));
  for (const b of batches) {
    console.log([b, ...list.map((s) => s.points.find((p) => p.x === b)?.y.toFixed(0) ?? "-")].join("\t"));
  }
  console.log(`wrote ${out}`);
  return 0;
}
