/**
 * The critical path of VPPS launches: Tree-LSTM (hidden 256, embedding 256, fused cell) on SST trees, batches of 1,
 * 8, 32 and 128, with kernels rendered with `trace: true` (kernel-trace.ts): per batch, which instructions and
 * barrier hops the launch's time went to, followed back from the CTA that finished last. Three traced batches per
 * size after three untraced ones; the trace kernels are slower than the normal ones by a timer read and a store per
 * instruction (bench/vpps.ts measures throughput).
 *
 *   node --import tsx bench/vpps-trace.ts [--data <SST train.txt>] [--quick] [--ctas-per-sm 1|2] [--rpw n]
 *                                         [--batches 1,8] [--transposed]
 *
 * Writes bench/results/vpps-trace-<device>.json (not with --quick).
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Vocabulary } from "../src/data/vocab.js";
import { formatKernelTrace, type TraceAnalysis } from "../src/engines/vpps/instrument/trace.js";
import { Vpps } from "../src/engines/vpps/vpps.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { TreeLstmModel } from "../src/models/treelstm/model.js";
import { batchAt, deviceSlug, loadBenchTrees, resultHeader, writeResult } from "./common.js";
import { requireGpu } from "./engine-timing.js";

requireGpu("bench/vpps-trace.ts");

const argv = process.argv.slice(2);
const arg = (name: string) => {
  const at = argv.indexOf(name);
  return at >= 0 ? argv[at + 1] : undefined;
};
const dataFile = arg("--data");
const quick = argv.includes("--quick");
const cacheDir = mkdtempSync(join(tmpdir(), "vpps-trace-kernels-"));
const { trees, source } = loadBenchTrees(dataFile, 4096);
const vocab = Vocabulary.fromTrees(trees);
const BATCHES = arg("--batches")?.split(",").map(Number) ?? (quick ? [1, 128] : [1, 8, 32, 128]);
/** --transposed: plans with transposed copies (Vpps option `transposed`). */
const transposed = argv.includes("--transposed");
const VARIANTS: { ctasPerSm: 1 | 2; rowsPerWarp: number }[] =
  arg("--ctas-per-sm") !== undefined
    ? [{ ctasPerSm: Number(arg("--ctas-per-sm")) as 1 | 2, rowsPerWarp: Number(arg("--rpw") ?? 1) }]
    : [
        { ctasPerSm: 1, rowsPerWarp: 2 },
        { ctasPerSm: 2, rowsPerWarp: 1 },
      ];

interface Row {
  ctasPerSm: number;
  rowsPerWarp: number;
  batch: number;
  traces: TraceAnalysis[];
}

const rows: Row[] = [];
let device = "unknown";
for (const v of VARIANTS) {
  const model = new TreeLstmModel({ vocabSize: vocab.size, embed: 256, hidden: 256, seed: 1 });
  const vpps = await Vpps.create(model.params, {
    variants: { ...v, transposed },
    instrument: { traceKernel: true },
    training: { learningRate: 0.05 },
    cacheDir,
  });
  device = vpps.ctx.deviceName;
  try {
    for (const batch of BATCHES) {
      let k = 0;
      const run = () => {
        const cg = new ComputationGraph();
        vpps.fb(cg, model.buildBatchLoss(cg, batchAt(trees, batch, k++), vocab));
      };
      for (let i = 0; i < 3; i++) run(); // warm-up
      const traces: TraceAnalysis[] = [];
      for (let i = 0; i < 3; i++) {
        run();
        traces.push(vpps.kernelTrace());
      }
      rows.push({ ...v, batch, traces });
      console.log(`\n== cta${v.ctasPerSm} rpw${v.rowsPerWarp}, batch ${batch} (3 traced batches; the last one's path)`);
      console.log(`spans: ${traces.map((t) => `${(t.spanNs / 1000).toFixed(1)} us`).join(", ")}`);
      console.log(formatKernelTrace(traces[traces.length - 1]!));
    }
  } finally {
    vpps.dispose();
  }
}

if (!quick) {
  writeResult(`vpps-trace-${deviceSlug(device)}`, {
    ...resultHeader({
      benchmark: "vpps-trace",
      command: `node --import tsx bench/vpps-trace.ts ${argv.join(" ")}`.trim(),
      device,
      data: source,
    }),
    model: { name: "treelstm", hidden: 256, embed: 256, cell: "fused" },
    method:
      "kernels rendered with trace: true; thread 0 of every CTA records %globaltimer after each instruction's " +
      "closing __syncthreads and signals return the barrier's old count; the critical path is followed back from " +
      "the CTA that ended last through the signal that completed each wait it stood in (kernel-trace.ts).",
    rows,
  });
}
