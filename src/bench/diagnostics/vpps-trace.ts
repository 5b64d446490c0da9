/**
 * `vpps bench vpps trace`: the critical path of VPPS launches. Tree-LSTM (hidden 256, embedding 256, fused cell) on
 * SST trees, batches of 1, 8, 32 and 128, with kernels rendered with `trace: true` (instrument/trace.ts): per batch,
 * which instructions and barrier hops the launch's time went to, followed back from the CTA that finished last.
 * Three traced batches per size after three untraced ones; the trace kernels are slower than the normal ones by a
 * timer read and a store per instruction. Writes vpps-trace.json (not with --quick).
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Vocabulary } from "../../data/vocab.js";
import { formatKernelTrace, type TraceAnalysis, Vpps } from "../../engines/vpps/index.js";
import { ComputationGraph } from "../../graph/graph.js";
import { TreeLstmModel } from "../../models/treelstm/model.js";
import { resultHeader } from "../common.js";
import { deviceSlug, requireGpu, resultsDir } from "../device.js";
import { writeJson } from "../output.js";
import { batchAt, loadBenchTrees } from "../trees.js";

export interface VppsTraceOptions {
  dataFile?: string;
  quick: boolean;
  /** One plan variant (with `rowsPerWarp`, default 1); cta1 rpw2 and cta2 rpw1 when absent. */
  ctasPerSm?: 1 | 2;
  rowsPerWarp?: number;
  batches?: number[];
  /** Plans with transposed copies (Vpps option `transposed`). */
  transposed: boolean;
  out?: string;
  command: string;
}

interface Row {
  ctasPerSm: number;
  rowsPerWarp: number;
  batch: number;
  traces: TraceAnalysis[];
}

export async function runVppsTrace(o: VppsTraceOptions): Promise<number> {
  requireGpu("vpps bench vpps trace");
  const cacheDir = mkdtempSync(join(tmpdir(), "vpps-trace-kernels-"));
  const { trees, source } = loadBenchTrees(o.dataFile, 4096);
  const vocab = Vocabulary.fromTrees(trees);
  const BATCHES = o.batches ?? (o.quick ? [1, 128] : [1, 8, 32, 128]);
  const transposed = o.transposed;
  const VARIANTS: { ctasPerSm: 1 | 2; rowsPerWarp: number }[] =
    o.ctasPerSm !== undefined
      ? [{ ctasPerSm: o.ctasPerSm, rowsPerWarp: o.rowsPerWarp ?? 1 }]
      : [
          { ctasPerSm: 1, rowsPerWarp: 2 },
          { ctasPerSm: 2, rowsPerWarp: 1 },
        ];

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
        console.log(
          `\n== cta${v.ctasPerSm} rpw${v.rowsPerWarp}, batch ${batch} (3 traced batches; the last one's path)`,
        );
        console.log(`spans: ${traces.map((t) => `${(t.spanNs / 1000).toFixed(1)} us`).join(", ")}`);
        console.log(formatKernelTrace(traces[traces.length - 1]!));
      }
    } finally {
      vpps.dispose();
    }
  }

  if (!o.quick || o.out !== undefined) {
    const path = writeJson(resultsDir(deviceSlug(device), o.out), "vpps-trace", {
      ...resultHeader({ benchmark: "vpps-trace", command: o.command, device, data: source }),
      model: { name: "treelstm", hidden: 256, embed: 256, cell: "fused" },
      method:
        "kernels rendered with trace: true; thread 0 of every CTA records %globaltimer after each instruction's " +
        "closing __syncthreads and signals return the barrier's old count; the critical path is followed back from " +
        "the CTA that ended last through the signal that completed each wait it stood in (instrument/trace.ts).",
      rows,
    });
    console.log(`wrote ${path}`);
  }
  return 0;
}
