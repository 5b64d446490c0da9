/**
 * `vpps bench vpps host`: the time to schedule and encode one batch (layout, levels, processor assignment,
 * signal/wait placement, script encoding: `VppsScheduler.schedule`) per graph node, for Tree-LSTM batches of 1-128
 * SST trees on the H100 plan, on the CPU. Graph construction is not included in ns/node; it is timed alternately
 * with scheduling, on the same batches, as a yardstick (schedule/build: the ratio of the two, which a slow or noisy
 * machine affects much less than either). Each size is warmed up first so that V8 times its optimised code.
 * Target: < 1 µs per node at batch 128. Writes vpps-host.json into the CPU's results folder (not with --quick).
 */
import { H100_SXM } from "../../cuda/hw/device-model.js";
import type { TreeNode } from "../../data/tree.js";
import { Vocabulary } from "../../data/vocab.js";
import { createModelLayout, planVpps, VppsScheduler } from "../../engines/vpps/index.js";
import { ComputationGraph, type Expression } from "../../graph/graph.js";
import { onChipMatrices } from "../../model/parameters.js";
import { TreeLstmModel } from "../../models/treelstm/model.js";
import { machine, median } from "../common.js";
import { cpuDevice, resultsDir } from "../device.js";
import { writeJson } from "../output.js";
import { batchAt, loadBenchTrees } from "../trees.js";

export interface VppsHostOptions {
  dataFile?: string;
  quick: boolean;
  out?: string;
  command: string;
}

interface Row {
  batch: number;
  nodesPerBatch: number;
  scriptWordsPerBatch: number;
  barriersPerBatch: number;
  /** Median over repetitions of (total schedule time / total graph nodes). */
  nsPerNode: number;
  cpuNsPerNode: number;
  msPerBatch: number;
  /** Graph construction of the same batches in the same process, as a yardstick of the machine's speed. */
  buildNsPerNode: number;
  /**
   * Median over repetitions of (schedule ns/node / build ns/node), each repetition timing both back to back: a
   * machine-independent yardstick (noise that slows the whole machine for a while cancels).
   */
  scheduleToBuild: number;
}

const HIDDEN = 256;
const EMBED = 256;

export function runVppsHost(o: VppsHostOptions): number {
  const { trees, source } = loadBenchTrees(o.dataFile, 2048);
  const vocab = Vocabulary.fromTrees(trees);
  const model = new TreeLstmModel({ vocabSize: vocab.size, embed: EMBED, hidden: HIDDEN });
  const matrices = onChipMatrices(model.params);
  const plan = planVpps(matrices, H100_SXM);
  const scheduler = new VppsScheduler(createModelLayout(model.params.all, plan));
  /** Nodes scheduled per size before timing (V8 reaches its optimising tier and stays there), and per repetition. */
  const WARM_NODES = o.quick ? 150_000 : 400_000;
  const REP_NODES = o.quick ? 60_000 : 250_000;
  const REPS = o.quick ? 5 : 9;

  const rows: Row[] = [];
  for (const batch of [1, 2, 4, 8, 16, 32, 64, 128]) {
    const graphs: { cg: ComputationGraph; loss: Expression; trees: TreeNode[] }[] = [];
    for (let k = 0; k < 16; k++) {
      const cg = new ComputationGraph();
      const batchTrees = batchAt(trees, batch, k);
      graphs.push({ cg, loss: model.buildBatchLoss(cg, batchTrees, vocab), trees: batchTrees });
    }
    const graphNodes = graphs.reduce((n, g) => n + g.cg.size, 0) / graphs.length;
    const count = Math.max(graphs.length, Math.round(REP_NODES / graphNodes)); // batches per repetition
    // warm-up: schedule (and build) until V8 has optimised both paths for graphs of this size
    const buildGraph = new ComputationGraph();
    for (let k = 0, warm = 0; warm < WARM_NODES || k < 2 * graphs.length; k++) {
      const { cg, loss, trees: batchTrees } = graphs[k % graphs.length]!;
      scheduler.schedule(cg, loss);
      buildGraph.renew();
      model.buildBatchLoss(buildGraph, batchTrees, vocab);
      warm += cg.size;
    }
    const samples: number[] = [];
    const cpuSamples: number[] = [];
    const buildSamples: number[] = [];
    const ratios: number[] = [];
    let nodes = 0;
    let words = 0;
    let barriers = 0;
    // repetitions alternate a timed schedule round and a timed build round over the same batches
    for (let rep = 0; rep < REPS; rep++) {
      let total = 0;
      let ns = 0;
      const c0 = process.cpuUsage();
      for (let k = 0; k < count; k++) {
        const { cg, loss } = graphs[k % graphs.length]!;
        const t0 = process.hrtime.bigint();
        const s = scheduler.schedule(cg, loss);
        ns += Number(process.hrtime.bigint() - t0);
        total += cg.size;
        words += s.script.length;
        barriers += s.barriers;
      }
      const c = process.cpuUsage(c0);
      samples.push(ns / total);
      cpuSamples.push(((c.user + c.system) * 1000) / total);
      nodes = total / count;
      let buildNs = 0;
      let built = 0;
      for (let k = 0; k < count; k++) {
        const batchTrees = graphs[k % graphs.length]!.trees;
        const t0 = process.hrtime.bigint();
        buildGraph.renew();
        model.buildBatchLoss(buildGraph, batchTrees, vocab);
        buildNs += Number(process.hrtime.bigint() - t0);
        built += buildGraph.size;
      }
      buildSamples.push(buildNs / built);
      ratios.push(ns / total / (buildNs / built));
    }
    const nsPerNode = median(samples);
    rows.push({
      batch,
      nodesPerBatch: Math.round(nodes),
      scriptWordsPerBatch: Math.round(words / (REPS * count)),
      barriersPerBatch: Math.round(barriers / (REPS * count)),
      nsPerNode,
      cpuNsPerNode: median(cpuSamples),
      msPerBatch: (nsPerNode * nodes) / 1e6,
      buildNsPerNode: median(buildSamples),
      scheduleToBuild: median(ratios),
    });
  }

  const m = machine();
  console.log(
    `VPPS schedule + encode, Tree-LSTM H=${HIDDEN} E=${EMBED}, ${plan.device.name} plan (${plan.ctas} CTAs, rpw ${plan.rowsPerWarp})`,
  );
  console.log(`data: ${source}; ${m.cpu}, ${m.cores} cores, node ${m.node}\n`);
  console.log(
    "batch  nodes/batch  script words  barriers  ns/node (wall)  ns/node (cpu)  ms/batch  graph build ns/node  schedule/build",
  );
  for (const r of rows) {
    console.log(
      [
        String(r.batch).padStart(5),
        String(r.nodesPerBatch).padStart(12),
        String(r.scriptWordsPerBatch).padStart(13),
        String(r.barriersPerBatch).padStart(9),
        r.nsPerNode.toFixed(1).padStart(15),
        r.cpuNsPerNode.toFixed(1).padStart(14),
        r.msPerBatch.toFixed(3).padStart(9),
        r.buildNsPerNode.toFixed(1).padStart(20),
        r.scheduleToBuild.toFixed(2).padStart(15),
      ].join(" "),
    );
  }
  if (!o.quick || o.out !== undefined) {
    const path = writeJson(resultsDir(cpuDevice().slug, o.out), "vpps-host", {
      benchmark: "vpps-host",
      command: o.command,
      date: new Date().toISOString(),
      machine: m,
      data: source,
      model: { name: "treelstm", hidden: HIDDEN, embed: EMBED },
      plan: { device: plan.device.name, ctas: plan.ctas, rowsPerWarp: plan.rowsPerWarp, ctasPerSm: plan.ctasPerSm },
      method:
        "VppsScheduler.schedule (layout + levels + assignment + barriers + encoding) on 16 prebuilt graphs per batch size, after a warm-up of 400k scheduled nodes per size; median over 9 repetitions of total time / total graph nodes (about 250k nodes each), wall and process CPU time; each repetition is followed by a timed rebuild of the same batches (graph construction, excluded from ns/node): buildNsPerNode is its median and scheduleToBuild the median of the per-repetition ratios, a yardstick that cancels slow phases of the machine",
      target: "< 1000 ns/node at batch 128",
      rows,
    });
    console.log(`\nwrote ${path}`);
  }
  return 0;
}
