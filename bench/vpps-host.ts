/**
 * VPPS host path: the time to schedule and encode one batch (layout, levels, processor assignment, signal/wait
 * placement, script encoding: `VppsScheduler.schedule`) per graph node, for Tree-LSTM batches of 1-128 SST trees on
 * the H100 plan. Graph construction is not included (bench/cpu.ts measures it). Target: < 1 µs per node at batch
 * 128. `npx tsx bench/vpps-host.ts` (add `--quick` for a short run).
 */
import { Vocabulary } from "../src/data/vocab.js";
import { H100_SXM } from "../src/engines/vpps/device-model.js";
import { createModelLayout } from "../src/engines/vpps/layout.js";
import { planVpps } from "../src/engines/vpps/plan.js";
import { VppsScheduler } from "../src/engines/vpps/schedule.js";
import { ComputationGraph, type Expression } from "../src/graph/graph.js";
import { TreeLstmModel } from "../src/models/treelstm.js";
import { benchTrees, machine, median, writeResult } from "./common.js";

const quick = process.argv.includes("--quick");
const HIDDEN = 256;
const EMBED = 256;
const { trees, source } = benchTrees(2048);
const vocab = Vocabulary.fromTrees(trees);
const model = new TreeLstmModel({ vocabSize: vocab.size, embed: EMBED, hidden: HIDDEN });
const matrices = model.params.all
  .filter((p) => p.kind === "dense" && p.isMatrix)
  .map((p) => ({ name: p.name, rows: p.rows, cols: p.cols }));
const plan = planVpps(matrices, H100_SXM);
const scheduler = new VppsScheduler(createModelLayout(model.params.all, plan));

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
}

const rows: Row[] = [];
for (const batch of [1, 2, 4, 8, 16, 32, 64, 128]) {
  const count = Math.max(4, Math.round((quick ? 256 : 2048) / batch));
  const graphs: { cg: ComputationGraph; loss: Expression }[] = [];
  for (let k = 0; k < Math.min(count, 16); k++) {
    const cg = new ComputationGraph();
    const start = (k * batch) % Math.max(1, trees.length - batch);
    graphs.push({ cg, loss: model.buildBatchLoss(cg, trees.slice(start, start + batch), vocab) });
  }
  for (const { cg, loss } of graphs) scheduler.schedule(cg, loss); // warm-up
  const samples: number[] = [];
  const cpuSamples: number[] = [];
  let nodes = 0;
  let words = 0;
  let barriers = 0;
  for (let rep = 0; rep < (quick ? 3 : 7); rep++) {
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
  }
  const reps = quick ? 3 : 7;
  const nsPerNode = median(samples);
  const buildSamples: number[] = [];
  for (let rep = 0; rep < reps; rep++) {
    const cg = new ComputationGraph();
    let ns = 0;
    let total = 0;
    for (let k = 0; k < count; k++) {
      const start = ((k % graphs.length) * batch) % Math.max(1, trees.length - batch);
      const t0 = process.hrtime.bigint();
      cg.renew();
      model.buildBatchLoss(cg, trees.slice(start, start + batch), vocab);
      ns += Number(process.hrtime.bigint() - t0);
      total += cg.size;
    }
    buildSamples.push(ns / total);
  }
  rows.push({
    batch,
    nodesPerBatch: Math.round(nodes),
    scriptWordsPerBatch: Math.round(words / (reps * count)),
    barriersPerBatch: Math.round(barriers / (reps * count)),
    nsPerNode,
    cpuNsPerNode: median(cpuSamples),
    msPerBatch: (nsPerNode * nodes) / 1e6,
    buildNsPerNode: median(buildSamples),
  });
}

const m = machine();
console.log(
  `VPPS schedule + encode, Tree-LSTM H=${HIDDEN} E=${EMBED}, ${plan.device.name} plan (${plan.ctas} CTAs, rpw ${plan.rowsPerWarp})`,
);
console.log(`data: ${source}; ${m.cpu}, ${m.cores} cores, node ${m.node}\n`);
console.log("batch  nodes/batch  script words  barriers  ns/node (wall)  ns/node (cpu)  ms/batch  graph build ns/node");
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
    ].join(" "),
  );
}
if (!quick) {
  const path = writeResult("vpps-host", {
    benchmark: "vpps-host",
    command: "npm run bench:vpps-host",
    date: new Date().toISOString(),
    machine: m,
    data: source,
    model: { name: "treelstm", hidden: HIDDEN, embed: EMBED },
    plan: { device: plan.device.name, ctas: plan.ctas, rowsPerWarp: plan.rowsPerWarp, ctasPerSm: plan.ctasPerSm },
    method:
      "VppsScheduler.schedule (layout + levels + assignment + barriers + encoding) on prebuilt graphs; median over repetitions of total time / total graph nodes, wall and process CPU time; graph construction excluded from ns/node and timed separately (buildNsPerNode) as a yardstick of the machine's speed",
    target: "< 1000 ns/node at batch 128",
    rows,
  });
  console.log(`\nwrote ${path}`);
}
