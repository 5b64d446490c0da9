/**
 * Graph construction: ns per graph node of `TreeLstmModel.buildBatchLoss` (the user's main-thread work per batch,
 * which VPPS cannot hide at large batches: issue 6), for the fused and plain-ops cells at batch 1, 8, 32 and 128 on
 * SST trees (hidden 256, embed 256; the hidden size changes no node count, only the shapes). CPU only.
 *
 *   node --import tsx bench/graph-build.ts [--quick] [--data <SST train.txt>] [--machine <name>]
 *
 * Every (cell, batch) is warmed up first (V8 reaches its optimising tier for all of them before any timing), then the
 * repetitions go round-robin over all of them, so that a slow phase of a shared machine hits every row alike; each
 * row reports the median repetition. Writes bench/results/graph-build-<machine>.json (machine: `--machine`, else a
 * slug of the CPU model and core count) unless `--quick`.
 */
import { cpus } from "node:os";
import { Vocabulary } from "../src/data/vocab.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { type CellFormulation, TreeLstmModel } from "../src/models/treelstm/model.js";
import { batchAt, loadBenchTrees, machine, median, resultHeader, writeResult } from "./common.js";

const argv = process.argv.slice(2);
const option = (name: string): string | undefined => {
  const i = argv.indexOf(name);
  if (i < 0) return undefined;
  const v = argv[i + 1];
  if (v === undefined || v.startsWith("--")) throw new Error(`${name} needs a value`);
  return v;
};
const quick = argv.includes("--quick");
const HIDDEN = 256;
const EMBED = 256;
const CELLS: CellFormulation[] = ["fused", "ops"];
const BATCHES = [1, 8, 32, 128];
/** Nodes built per (cell, batch) before timing, nodes per timed repetition, repetitions. */
const WARM_NODES = quick ? 100_000 : 300_000;
const REP_NODES = quick ? 50_000 : 200_000;
const REPS = quick ? 5 : 9;

/** `Intel(R) Xeon(R) Processor @ 2.50GHz` with 2 cores → `intel-xeon-2c` (for the result file's name). */
function cpuSlug(): string {
  const model = (cpus()[0]?.model ?? "cpu")
    .replace(/\((R|TM)\)/gi, "")
    .replace(/@.*$/, "")
    .replace(/\b(CPU|Processor|\d+-Core)\b/gi, "")
    .trim();
  const slug = model
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-|-$/g, "");
  return `${slug || "cpu"}-${cpus().length}c`;
}

const { trees, source } = loadBenchTrees(option("--data"), 8192);
const vocab = Vocabulary.fromTrees(trees);

interface Config {
  cell: CellFormulation;
  batch: number;
  model: TreeLstmModel;
  graph: ComputationGraph;
  /** Batches per repetition (about REP_NODES nodes) and the next batch's index. */
  count: number;
  next: number;
  samples: number[];
  cpuSamples: number[];
  nodes: number;
  batches: number;
}

/** Builds `count` consecutive batches of `c`; returns [wall ns, process CPU ns, nodes]. */
function round(c: Config, count: number): [number, number, number] {
  let ns = 0;
  let nodes = 0;
  const cpu0 = process.cpuUsage();
  for (let k = 0; k < count; k++) {
    const batch = batchAt(trees, c.batch, c.next++);
    const t0 = process.hrtime.bigint();
    c.graph.renew();
    c.model.buildBatchLoss(c.graph, batch, vocab);
    ns += Number(process.hrtime.bigint() - t0);
    nodes += c.graph.size;
  }
  const cpu = process.cpuUsage(cpu0);
  return [ns, (cpu.user + cpu.system) * 1000, nodes];
}

const configs: Config[] = [];
for (const cell of CELLS) {
  // one model per cell, shared by its batch sizes, as in training
  const model = new TreeLstmModel({ vocabSize: vocab.size, embed: EMBED, hidden: HIDDEN, cell, seed: 1 });
  for (const batch of BATCHES) {
    const graph = new ComputationGraph();
    model.buildBatchLoss(graph, batchAt(trees, batch, 0), vocab);
    const count = Math.max(3, Math.round(REP_NODES / graph.size));
    configs.push({ cell, batch, model, graph, count, next: 0, samples: [], cpuSamples: [], nodes: 0, batches: 0 });
  }
}
for (const c of configs) {
  for (let warm = 0; warm < WARM_NODES; ) warm += round(c, 1)[2];
}
for (let rep = 0; rep < REPS; rep++) {
  for (const c of configs) {
    const [ns, cpuNs, nodes] = round(c, c.count);
    c.samples.push(ns / nodes);
    c.cpuSamples.push(cpuNs / nodes);
    c.nodes += nodes;
    c.batches += c.count;
  }
}

const m = machine();
console.log(`Graph build (TreeLstmModel.buildBatchLoss), hidden ${HIDDEN}, embed ${EMBED}`);
console.log(`data: ${source}, ${trees.length} trees; ${m.cpu}, ${m.cores} cores, node ${m.node}\n`);
console.log("cell   batch  nodes/batch  ns/node (wall)  ns/node (cpu)  ms/batch  min ns/node");
const rows = configs.map((c) => {
  const nodesPerBatch = c.nodes / c.batches;
  const nsPerNode = median(c.samples);
  return {
    cell: c.cell,
    batch: c.batch,
    nodesPerBatch: Math.round(nodesPerBatch),
    nsPerNode: Number(nsPerNode.toFixed(1)),
    cpuNsPerNode: Number(median(c.cpuSamples).toFixed(1)),
    minNsPerNode: Number(Math.min(...c.samples).toFixed(1)),
    msPerBatch: Number(((nsPerNode * nodesPerBatch) / 1e6).toFixed(3)),
    samples: c.samples.map((x) => Number(x.toFixed(1))),
  };
});
for (const r of rows) {
  console.log(
    [
      r.cell.padEnd(5),
      String(r.batch).padStart(6),
      String(r.nodesPerBatch).padStart(12),
      r.nsPerNode.toFixed(1).padStart(15),
      r.cpuNsPerNode.toFixed(1).padStart(14),
      r.msPerBatch.toFixed(3).padStart(9),
      r.minNsPerNode.toFixed(1).padStart(12),
    ].join(" "),
  );
}
if (!quick) {
  const name = `graph-build-${option("--machine") ?? cpuSlug()}`;
  const path = writeResult(name, {
    ...resultHeader({
      benchmark: "graph-build",
      command: "npm run bench:graph-build",
      data: source,
      trees: trees.length,
      vocabulary: vocab.size,
    }),
    model: { name: "treelstm", hidden: HIDDEN, embed: EMBED, cells: CELLS },
    method: `TreeLstmModel.buildBatchLoss into a renewed ComputationGraph (batchAt: consecutive trees), timed per batch with process.hrtime; every (cell, batch) warmed up with ${WARM_NODES} nodes, then ${REPS} repetitions of about ${REP_NODES} nodes each, round-robin over all rows; nsPerNode is the median repetition's (total time / total nodes), cpuNsPerNode the same with process CPU time, minNsPerNode the fastest repetition`,
    rows,
  });
  console.log(`\nwrote ${path}`);
}
