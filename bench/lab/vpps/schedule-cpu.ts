/**
 * CPU-only micro-benchmark of VPPS per-batch scheduling (data-parallel training: the schedule workers, not the GPU, bound
 * data-parallel training). Builds the Tree-LSTM graph of each SST batch as training does (the default model: fused
 * cell, hidden and embedding 256; the default plan for an H100) and times `VppsScheduler.schedule` alone — what a
 * schedule worker does per job after rebuilding the graph. No GPU is needed.
 *
 *   node --import tsx bench/lab/vpps/schedule-cpu.ts
 *   BASE=/work/main node --import tsx bench/lab/vpps/schedule-cpu.ts     # this checkout against another, interleaved
 *
 * Environment: SST (directory with train.txt, default ../shared/data/sst), BATCHES (timed batches per size, default
 * 40), WARMUP (default 10), SIZES (default "32,128"), UPDATE=host (the data-parallel script: gradients exported, no
 * in-kernel update), OPTIMIZER (sgd or adam, default sgd), CELL (fused or ops), HIDDEN and EMBED.
 * BASE: the root of another checkout of vpps (its node_modules present); each batch is then scheduled by its
 * scheduler and by this one in turn, the scripts must be equal word for word, and each line adds the base's median
 * and the medians of the per-batch ratios of wall time and of process CPU time. On a shared machine whose speed
 * drifts within seconds, alternating batches compares the two under the same conditions, which runs one after the
 * other do not; even so, two runs of the same pair differ by up to ±5% (use 80+ batches and two runs).
 * Prints one line per batch size (and scheduler): median, mean, minimum and quartiles of wall ms per batch, the
 * median process CPU time per batch (user + system of all threads), nodes per batch and µs per node.
 */
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { H100_SXM } from "../../../src/cuda/hw/device-model.js";
import { readTrees } from "../../../src/data/sst.js";
import type { TreeNode } from "../../../src/data/tree.js";
import { Vocabulary } from "../../../src/data/vocab.js";
import { createModelLayout } from "../../../src/engines/vpps/plan/layout.js";
import { planVpps } from "../../../src/engines/vpps/plan/plan.js";
import { type ScheduleOptions, VppsScheduler } from "../../../src/engines/vpps/schedule/scheduler.js";
import { ComputationGraph } from "../../../src/graph/graph.js";
import { type CellFormulation, TreeLstmModel } from "../../../src/models/treelstm/model.js";

const env = process.env;
const dir = env["SST"] ?? join(import.meta.dirname, "../../../../shared/data/sst");
const timed = Number(env["BATCHES"] ?? 40);
const warmup = Number(env["WARMUP"] ?? 10);
const sizes = (env["SIZES"] ?? "32,128").split(",").map(Number);
const cell = (env["CELL"] ?? "fused") as CellFormulation;
const hidden = Number(env["HIDDEN"] ?? 256);
const embed = Number(env["EMBED"] ?? 256);
const base = env["BASE"];
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

/** A scheduler of this checkout or of BASE (its own modules: layout and scheduler). */
interface Contender {
  readonly name: string;
  readonly make: () => { schedule: (g: ComputationGraph, lossId: number) => Uint32Array; liveNodes: () => number };
}

async function contender(name: string, root: string | undefined): Promise<Contender> {
  type SchedulerModule = typeof import("../../../src/engines/vpps/schedule/scheduler.js");
  type LayoutModule = typeof import("../../../src/engines/vpps/plan/layout.js");
  const url = (path: string) => pathToFileURL(join(resolve(root!), path)).href;
  const S: SchedulerModule =
    root === undefined ? { VppsScheduler } : await import(url("src/engines/vpps/schedule/scheduler.ts"));
  const M: Pick<LayoutModule, "createModelLayout"> =
    root === undefined ? { createModelLayout } : await import(url("src/engines/vpps/plan/layout.ts"));
  const layout = M.createModelLayout(model.params.all, plan);
  return {
    name,
    make: () => {
      const scheduler = new S.VppsScheduler(layout, options);
      let live = 0;
      return {
        schedule: (g, lossId) => {
          const s = scheduler.schedule(g, g.expression(lossId));
          live = s.liveNodes;
          return s.script;
        },
        liveNodes: () => live,
      };
    },
  };
}

const contenders = [await contender("this", undefined)];
if (base !== undefined) contenders.push(await contender(`base ${base}`, base));

const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
const median = (xs: number[]) =>
  quantile(
    xs.slice().sort((a, b) => a - b),
    0.5,
  );

for (const batch of sizes) {
  const runs = contenders.map((c) => ({ c, s: c.make(), ms: [] as number[], cpu: [] as number[] }));
  let nodes = 0;
  let words = 0;
  // consecutive batches of the training file in order (the same batches for every run of the benchmark)
  for (let b = 0; b < warmup + timed; b++) {
    const start = (b * batch) % (trees.length - batch);
    const cg = new ComputationGraph();
    const loss = model.buildBatchLoss(cg, trees.slice(start, start + batch), vocab);
    let first: Uint32Array | undefined;
    // alternate which goes first, so that neither always finds the other's data in the caches
    for (let k = 0; k < runs.length; k++) {
      const r = runs[(k + b) % runs.length]!;
      const c0 = process.cpuUsage();
      const t0 = performance.now();
      const script = r.s.schedule(cg, loss.id);
      const t1 = performance.now();
      const c = process.cpuUsage(c0);
      if (first === undefined) first = script;
      else if (
        Buffer.compare(
          Buffer.from(first.buffer, first.byteOffset, first.byteLength),
          Buffer.from(script.buffer, script.byteOffset, script.byteLength),
        ) !== 0
      ) {
        throw new Error(`batch ${b} of ${batch}: the scripts of '${runs[0]!.c.name}' and '${runs[1]!.c.name}' differ`);
      }
      if (b < warmup) continue;
      r.ms.push(t1 - t0);
      r.cpu.push((c.user + c.system) / 1000);
    }
    if (b >= warmup) {
      nodes += runs[0]!.s.liveNodes();
      words += first!.length;
    }
  }
  for (const r of runs) {
    const sorted = r.ms.slice().sort((a, b) => a - b);
    const med = quantile(sorted, 0.5);
    const mean = r.ms.reduce((a, b) => a + b, 0) / r.ms.length;
    const ratio =
      r === runs[0] || runs.length < 2
        ? ""
        : `; median per-batch ratio this/base ${median(runs[0]!.ms.map((x, k) => x / r.ms[k]!)).toFixed(3)}, ` +
          `CPU time ${median(runs[0]!.cpu.map((x, k) => x / r.cpu[k]!)).toFixed(3)}`;
    console.log(
      `schedule-cpu ${r.c.name} batch ${batch}: median ${med.toFixed(2)} ms/batch (mean ${mean.toFixed(2)}, ` +
        `min ${sorted[0]!.toFixed(2)}, q1 ${quantile(sorted, 0.25).toFixed(2)}, q3 ${quantile(sorted, 0.75).toFixed(2)}; ` +
        `process CPU median ${median(r.cpu).toFixed(2)} ms${ratio}) over ${timed} batches after ${warmup} warm-up; ` +
        `${Math.round(nodes / timed)} live nodes, ${Math.round(words / timed)} script words; ` +
        `${((1000 * med) / (nodes / timed)).toFixed(2)} µs/node [${cell} H${hidden} E${embed} ` +
        `cta${plan.ctasPerSm} rpw${plan.rowsPerWarp} ${options.optimizer}${options.update ? " update host" : ""}]`,
    );
  }
}
