/**
 * `vpps bench glp4nn`: GLP4NN's benchmark (docs/GLP4NN.md). The 16 convolution layers of the paper's Table 5, forward
 * and backward, with direct launches and as one CUDA graph per iteration: one stream (Caffe's schedule), GLP4NN's
 * choice, every fixed pool size (conv-suite.ts); then eager Tree-LSTM training with and without the pool
 * (treelstm.ts). Writes glp4nn.json, glp4nn.md, explain.txt and one SVG per network into the results folder.
 */

import { type LaunchMode, weightSumsFromEnv } from "../../conv/index.js";
import { GpuContext } from "../../cuda/runtime/context.js";
import { hardwareQueues, loadSolver } from "../../glp4nn/index.js";
import { renderLogLogPlot, type Series } from "../../report/svg-plot.js";
import { resultHeader } from "../common.js";
import { deviceSlug, requireGpu, resultsDir } from "../device.js";
import { BenchUsageError } from "../errors.js";
import { markdownTable, Transcript, writeJson, writeOutput } from "../output.js";
import { type CnnPoolRow, runCnnPool } from "./cnn.js";
import { type ConvLayerResult, tryConvLayer } from "./conv-suite.js";
import { selectLayers, TABLE5 } from "./layers.js";
import { runTreeLstmPool, type TreeLstmPoolRow } from "./treelstm.js";

export interface Glp4nnOptions {
  layers?: string[];
  pools?: number[];
  modes?: LaunchMode[];
  repeats?: number;
  /** Tree-LSTM batch sizes; [] skips the Tree-LSTM part. */
  treeBatches?: number[];
  /** LeNet batch sizes for the whole training iteration; [] skips the CNN part. */
  cnnBatches?: number[];
  treeSentences?: number;
  dataFile?: string;
  explain: boolean;
  quick: boolean;
  out?: string;
  command: string;
}

const ALL_POOLS = Array.from({ length: 31 }, (_, i) => i + 2);
const QUICK_POOLS = [2, 4, 8, 16, 32];

function fmt(ms: number): string {
  return ms >= 10 ? ms.toFixed(2) : ms.toFixed(3);
}

/** The markdown tables and the "done when" counts of the conv layers. */
export function convTables(results: readonly ConvLayerResult[], modes: readonly LaunchMode[]): string[] {
  const out: string[] = [];
  for (const mode of modes) {
    const rows: string[][] = [];
    let withinBest = 0;
    let firstPassWithinBest = 0;
    let modelWithinBest = 0;
    let notSlower = 0;
    let fast = 0;
    let identical = 0;
    for (const r of results) {
      const m = r.modes.find((x) => x.mode === mode);
      if (m === undefined) {
        const why = r.failed.find((f) => f.mode === mode || f.mode === "layer")?.error ?? "not run";
        rows.push([r.layer.name, `failed: ${why}`, "", "", "", "", "", "", "", "", "", "", "", ""]);
        continue;
      }
      const glp = m.glp.timing.ms;
      const speedup = m.oneStream.ms / glp;
      // against the best fixed pool timed again apart from its selection where GLP4NN chose another (conv-suite.ts)
      const vsBest = m.heldOut === undefined ? glp / m.best.ms - 1 : m.heldOut.glpMs / m.heldOut.bestMs - 1;
      if (vsBest <= 0.05) withinBest++;
      if (glp <= 1.05 * m.best.ms) firstPassWithinBest++;
      if (m.model.timing.ms <= 1.05 * m.best.ms) modelWithinBest++;
      if (glp <= 1.03 * m.oneStream.ms) notSlower++;
      if (speedup >= (mode === "direct" ? 1.3 : 2)) fast++;
      const same = Object.values(m.pools).every((t) => t.identical) && m.glp.timing.identical;
      if (same) identical++;
      rows.push([
        r.layer.name,
        `${r.layer.n}×${r.layer.c}×${r.layer.hw}² → ${r.layer.f}×${r.output.side}², ${r.layer.k}/${r.layer.s}/${r.layer.p}`,
        fmt(m.oneStream.ms),
        `${m.glp.forward}/${m.glp.backward}`,
        fmt(glp),
        `${speedup.toFixed(2)}×`,
        String(m.best.pool),
        fmt(m.best.ms),
        `${(m.oneStream.ms / m.best.ms).toFixed(2)}×`,
        `${((100 * (glp - m.best.ms)) / m.best.ms).toFixed(1)}%`,
        m.heldOut === undefined
          ? "(is the best)"
          : `${fmt(m.heldOut.glpMs)} / ${fmt(m.heldOut.bestMs)}: ${(100 * vsBest).toFixed(1)}%`,
        `${m.model.forward}/${m.model.backward}`,
        `${((100 * (m.model.timing.ms - m.best.ms)) / m.best.ms).toFixed(1)}%`,
        same ? "yes" : "**no**",
      ]);
    }
    const n = results.length;
    out.push(
      `### ${mode === "direct" ? "Direct launches" : "One CUDA graph per iteration"}`,
      "",
      ...markdownTable(
        [
          "layer",
          "N×C×H² → F×Ho², K/S/P",
          "1 stream ms",
          "GLP4NN fwd/bwd",
          "GLP4NN ms",
          "speedup",
          "best pool",
          "best ms",
          "best speedup",
          "GLP4NN vs best",
          "timed again: GLP4NN / best ms",
          "analyser alone fwd/bwd",
          "analyser alone vs best",
          "bitwise = 1 stream",
        ],
        rows,
        [0, 1],
      ),
      "",
      `- GLP4NN within 5% of the best fixed pool: ${withinBest} of ${n} (where GLP4NN chose another configuration, ` +
        `the two timed again, apart from the selection of the best; in the first pass: ${firstPassWithinBest} of ${n}); never more than 3% slower than one stream: ` +
        `${notSlower} of ${n}; ≥ ${mode === "direct" ? "1.3" : "2"}× over one stream: ${fast} of ${n}; ` +
        `gradients bit for bit one stream's in every configuration: ${identical} of ${n}; the analyser's pools ` +
        `alone (before the timed confirmation) within 5% of the best fixed pool: ${modelWithinBest} of ${n}`,
      "",
    );
  }
  return out;
}

export function netPlot(net: string, results: readonly ConvLayerResult[], device: string): string {
  const series: Series[] = [];
  for (const r of results) {
    for (const m of r.modes) {
      series.push({
        name: `${r.layer.name.replace(`${net} `, "")} ${m.mode}`,
        points: Object.entries(m.pools)
          .map(([k, t]) => ({ x: Number(k), y: t.ms }))
          .sort((a, b) => a.x - b.x),
      });
    }
  }
  return renderLogLogPlot(series, {
    title: `${net} conv layers, forward + backward, ${device}`,
    xLabel: "streams (fixed pool size)",
    yLabel: "ms per iteration",
  });
}

export async function runGlp4nn(o: Glp4nnOptions): Promise<number> {
  requireGpu("vpps bench glp4nn");
  const layers = selectLayers(o.layers);
  if (layers.length === 0) throw new BenchUsageError(`--layers: none of ${o.layers?.join(", ")} is a Table 5 layer`);
  const pools = o.pools ?? (o.quick ? QUICK_POOLS : ALL_POOLS);
  const bad = pools.find((k) => k > 32);
  if (bad !== undefined) throw new BenchUsageError(`--pools: at most 32 streams; got ${bad}`);
  const modes = o.modes ?? ["direct", "graph"];
  const repeats = o.repeats ?? (o.quick ? 2 : 5);
  const treeBatches = o.treeBatches ?? (o.quick ? [1, 32] : [1, 8, 32, 128]);
  const cnnBatches = o.cnnBatches ?? [64];
  const t = new Transcript();
  const started = performance.now();
  /** A progress line with the seconds since the benchmark started (which part takes how long). */
  const log = (line: string) => t.print(`${line} [${((performance.now() - started) / 1000).toFixed(0)} s]`);
  const solver = await loadSolver();
  const ctx = GpuContext.open({ poolBytes: 64 * 1024 ** 2 });
  const device = ctx.deviceName;
  const convResults: ConvLayerResult[] = [];
  let treeRows: TreeLstmPoolRow[] = [];
  let cnnRows: CnnPoolRow[] = [];
  let failures = 0;
  try {
    t.print(
      `GLP4NN on ${device}: ${layers.length} Table 5 layers, modes ${modes.join(", ")}, pools 1 and ${pools.join(",")}, ` +
        `${repeats} timed iterations each (median), CUDA_DEVICE_MAX_CONNECTIONS ${hardwareQueues()}, ` +
        `pools' weight sums: ${weightSumsFromEnv()}`,
    );
    for (const L of layers) convResults.push(tryConvLayer(ctx, L, solver, { pools, modes, repeats, log }));
  } finally {
    ctx.dispose();
  }
  if (treeBatches.length > 0) {
    try {
      treeRows = await runTreeLstmPool({
        batches: treeBatches,
        sentences: o.treeSentences ?? (o.quick ? 32 : 256),
        dataFile: o.dataFile,
        solver,
        log,
      });
    } catch (e) {
      // the conv results are kept: the Tree-LSTM part's failure is reported, not thrown
      t.print(`Tree-LSTM part failed: ${e instanceof Error ? e.message.split("\n")[0] : String(e)}`);
      failures++;
    }
  }
  if (cnnBatches.length > 0) {
    try {
      cnnRows = runCnnPool({
        batches: cnnBatches,
        steps: o.quick ? 4 : 10,
        repeats: o.quick ? 2 : 6,
        solver,
        log,
      });
    } catch (e) {
      t.print(`CNN part failed: ${e instanceof Error ? e.message.split("\n")[0] : String(e)}`);
      failures++;
    }
  }
  const md = [
    `## GLP4NN on ${device}`,
    "",
    `\`${o.command}\` — ${new Date().toISOString()}; forward + backward of one training iteration per layer (dW, db, dx ` +
      `zeroed, forward, backward); a layer's configurations timed in interleaved rounds (each: one lead iteration, ` +
      `then 2 timed), median of at least ${repeats} iterations and of at least 150 ms of one stream's time; ` +
      `CUDA_DEVICE_MAX_CONNECTIONS ${hardwareQueues()}; the pools sum the weight gradient by ${weightSumsFromEnv()} ` +
      "(VPPS_CONV_WEIGHT_SUMS). Tree-LSTM and LeNet: both engines side by side, their " +
      "repeats alternating over the same batches; rates over all repeats; the Tree-LSTM's paired median: the median " +
      "over its batches of one stream's step time over auto's, minus 1.",
    "",
    ...convTables(convResults, modes),
  ];
  if (treeRows.length > 0) {
    md.push(
      "### Eager Tree-LSTM training, one stream vs the pool",
      "",
      ...markdownTable(
        [
          "batch",
          "1 stream sent/s",
          "--streams auto sent/s",
          "auto vs 1 (rates)",
          "auto vs 1 (paired median)",
          "streams chosen",
          "launch µs",
          "why",
        ],
        treeRows.map((r) => [
          String(r.batch),
          r.oneStream.toFixed(1),
          r.auto.toFixed(1),
          `${((100 * (r.auto - r.oneStream)) / r.oneStream).toFixed(1)}%`,
          `${(100 * r.pairedGain).toFixed(1)}%`,
          String(r.chosen),
          r.launchUs.toFixed(2),
          r.reason,
        ]),
        [7],
      ),
      "",
    );
  }
  if (cnnRows.length > 0) {
    md.push(
      "### LeNet training iteration on the eager engine (forward, backward, Adam), one stream vs the pool",
      "",
      ...markdownTable(
        ["batch", "1 stream ms", "--streams auto ms", "speed-up", "losses bit for bit"],
        cnnRows.map((r) => [
          String(r.batch),
          r.oneStreamMs.toFixed(2),
          r.autoMs.toFixed(2),
          `${r.speedup.toFixed(2)}×`,
          r.identicalLosses ? "yes" : "no",
        ]),
      ),
      "",
    );
  }
  const explain = convResults.flatMap((r) => r.modes.map((m) => m.explain)).join("\n\n");
  if (o.explain) t.print("", explain);
  t.print("", ...md);
  if (!o.quick || o.out !== undefined) {
    const dir = resultsDir(deviceSlug(device), o.out);
    const data = {
      ...resultHeader({ benchmark: "glp4nn", command: o.command, device, data: "Table 5 layers (seeded values)" }),
      connections: hardwareQueues(),
      weightSums: weightSumsFromEnv(),
      repeats,
      pools,
      layers: convResults.map((r) => ({ ...r, modes: r.modes.map(({ explain: _, ...m }) => m) })),
      treelstm: treeRows,
      cnn: cnnRows,
    };
    writeJson(dir, "glp4nn", data);
    writeOutput(dir, "glp4nn.md", `${md.join("\n")}\n`);
    writeOutput(dir, "glp4nn-explain.txt", `${explain}\n`);
    for (const net of new Set(TABLE5.map((l) => l.net))) {
      const rs = convResults.filter((r) => r.layer.net === net && r.modes.length > 0);
      if (rs.length > 0) writeOutput(dir, `glp4nn-${net.toLowerCase()}.svg`, netPlot(net, rs, device));
    }
    t.print(`results in ${dir}`);
  }
  failures += convResults.reduce((n, r) => n + r.failed.length, 0);
  if (failures > 0) t.print(`${failures} part(s) failed (above); the results written are the rest`);
  return failures > 0 ? 1 : 0;
}
