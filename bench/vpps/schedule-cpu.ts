/**
 * CPU-only micro-benchmark of VPPS per-batch scheduling (issue 20: the schedule workers, not the GPU, bound
 * data-parallel training). Builds the Tree-LSTM graph of each SST batch as training does (the default model: fused
 * cell, hidden and embedding 256; the default plan for an H100) and times `VppsScheduler.schedule` alone — what a
 * schedule worker does per job after rebuilding the graph. No GPU is needed.
 *
 *   node --import tsx bench/vpps/schedule-cpu.ts
 *
 * Environment: SST (directory with train.txt, default ../shared/data/sst), BATCHES (timed batches per size, default
 * 40), WARMUP (default 10), SIZES (default "32,128"), UPDATE=host (the data-parallel script: gradients exported, no
 * in-kernel update), OPTIMIZER (sgd or adam, default sgd), CELL (fused or ops), HIDDEN and EMBED.
 * Prints one line per batch size: median, mean, minimum and quartiles of wall ms per batch, the median process
 * CPU time per batch (user + system of all threads: less sensitive to other processes on a shared machine),
 * nodes per batch and µs per node.
 */
import { join } from "node:path";
import { H100_SXM } from "../../src/cuda/hw/device-model.js";
import { readTrees } from "../../src/data/sst.js";
import type { TreeNode } from "../../src/data/tree.js";
import { Vocabulary } from "../../src/data/vocab.js";
import { createModelLayout } from "../../src/engines/vpps/plan/layout.js";
import { planVpps } from "../../src/engines/vpps/plan/plan.js";
import { type ScheduleOptions, VppsScheduler } from "../../src/engines/vpps/schedule/scheduler.js";
import { ComputationGraph } from "../../src/graph/graph.js";
import { type CellFormulation, TreeLstmModel } from "../../src/models/treelstm/model.js";

const env = process.env;
const dir = env["SST"] ?? join(import.meta.dirname, "../../../shared/data/sst");
const timed = Number(env["BATCHES"] ?? 40);
const warmup = Number(env["WARMUP"] ?? 10);
const sizes = (env["SIZES"] ?? "32,128").split(",").map(Number);
const cell = (env["CELL"] ?? "fused") as CellFormulation;
const hidden = Number(env["HIDDEN"] ?? 256);
const embed = Number(env["EMBED"] ?? 256);
const options: ScheduleOptions = {
  optimizer: env["OPTIMIZER"] === "adam" ? "adam" : "sgd",
  ...(env["UPDATE"] === "host" ? { update: "host" as const } : {}),
};

const trees: TreeNode[] = readTrees(join(dir, "train.txt"));
const vocab = Vocabulary.fromTrees(trees);
const model = new TreeLstmModel({ vocabSize: vocab.size, embed, hidden, seed: 1, cell });
const matrices = model.params.all
  .filter((p) => p.kind === "dense" && p.isMatrix)
  .map((p) => ({ name: p.name, rows: p.rows, cols: p.cols }));
const plan = planVpps(matrices, H100_SXM);
const layout = createModelLayout(model.params.all, plan);

const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;

for (const batch of sizes) {
  const scheduler = new VppsScheduler(layout, options);
  const ms: number[] = [];
  const cpu: number[] = [];
  let nodes = 0;
  let words = 0;
  // consecutive batches of the training file in order (the same batches for every run of the benchmark)
  for (let b = 0; b < warmup + timed; b++) {
    const start = (b * batch) % (trees.length - batch);
    const cg = new ComputationGraph();
    const loss = model.buildBatchLoss(cg, trees.slice(start, start + batch), vocab);
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    const s = scheduler.schedule(cg, loss);
    const t1 = performance.now();
    const c = process.cpuUsage(c0);
    if (b >= warmup) {
      ms.push(t1 - t0);
      cpu.push((c.user + c.system) / 1000);
      nodes += s.liveNodes;
      words += s.script.length;
    }
  }
  const sorted = ms.slice().sort((a, b) => a - b);
  const median = quantile(sorted, 0.5);
  const mean = ms.reduce((a, b) => a + b, 0) / ms.length;
  const cpuMedian = quantile(
    cpu.slice().sort((a, b) => a - b),
    0.5,
  );
  console.log(
    `schedule-cpu batch ${batch}: median ${median.toFixed(2)} ms/batch (mean ${mean.toFixed(2)}, ` +
      `min ${sorted[0]!.toFixed(2)}, q1 ${quantile(sorted, 0.25).toFixed(2)}, q3 ${quantile(sorted, 0.75).toFixed(2)}; process CPU median ${cpuMedian.toFixed(2)} ms) over ${timed} batches ` +
      `after ${warmup} warm-up; ${Math.round(nodes / timed)} live nodes, ${Math.round(words / timed)} script words; ` +
      `${((1000 * median) / (nodes / timed)).toFixed(2)} µs/node [${cell} H${hidden} E${embed} ` +
      `cta${plan.ctasPerSm} rpw${plan.rowsPerWarp} ${options.optimizer} update ${scheduler.update}]`,
  );
}
