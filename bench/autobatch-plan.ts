/**
 * Host-side cost of autobatching: planning time per node for both strategies, and the number of batches (kernel
 * launches per forward pass) they find, on Tree-LSTM batches of 1–128 random trees of about 19 words (the VPPS
 * benchmark's shape: a softmax loss at every tree node, all summed).
 *
 *   node --import tsx bench/autobatch-plan.ts [--quick]
 *
 * Prints a table and writes bench/results/autobatch-plan-cpu.json.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { BATCH_STRATEGIES, BatchPlanner, type BatchStrategy } from "../src/engines/autobatch/plan.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { batchSignature } from "../src/ops/registry.js";
import { buildTreeLstmBatch, randomTrees, treeLstmModel } from "../test/random-graph.js";

const quick = process.argv.includes("--quick");
const SIZES = quick ? [1, 8, 64] : [1, 2, 4, 8, 16, 32, 64, 128];
/** Wall time spent per measurement; the median of the repetitions is reported. */
const TARGET_MS = quick ? 60 : 300;

interface StrategyResult {
  /** Median over repetitions; `planNsPerNodeMin` is the fastest repetition (less sensitive to a busy machine). */
  planNsPerNode: number;
  planNsPerNodeMin: number;
  batches: number;
  matrixBatches: number;
  meanBatchSize: number;
  maxBatchSize: number;
}

interface Row {
  trees: number;
  words: number;
  nodes: number;
  buildNsPerNode: number;
  /** `batchSignature` strings interned in a Map: what planning would cost per node with the string rule. */
  stringSignatureNsPerNode: number;
  signatures: number;
  depth: StrategyResult;
  agenda: StrategyResult;
}

/** Median and minimum ns per call of `f`, over repetitions filling about TARGET_MS. */
function timeNs(f: () => void): { median: number; min: number } {
  for (let k = 0; k < 3; k++) f(); // warm up (JIT)
  const samples: number[] = [];
  const end = performance.now() + TARGET_MS;
  while (performance.now() < end || samples.length < 5) {
    const t0 = process.hrtime.bigint();
    f();
    samples.push(Number(process.hrtime.bigint() - t0));
  }
  samples.sort((a, b) => a - b);
  return { median: samples[samples.length >> 1]!, min: samples[0]! };
}

function sumAll(a: Int32Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]!;
  return s;
}

/** ns per element of a plain summing loop over an Int32Array: a yardstick of this machine's speed right now. */
function yardstick(): number {
  const a = new Int32Array(1 << 20).map((_, i) => (i * 7) & 1023);
  let sink = 0;
  const t = timeNs(() => {
    sink += sumAll(a);
  });
  return sink < 0 ? 0 : t.min / a.length;
}

function countWords(trees: ReturnType<typeof randomTrees>): number {
  let n = 0;
  const stack = [...trees];
  while (stack.length > 0) {
    const t = stack.pop()!;
    if (t.left === null || t.right === null) n++;
    else stack.push(t.left, t.right);
  }
  return n;
}

const sumLoopNs = yardstick();
const model = treeLstmModel(1, { hidden: 256, embed: 256, vocab: 20000, classes: 5 });
const planner = new BatchPlanner();
const rows: Row[] = [];
for (const n of SIZES) {
  const trees = randomTrees(100 + n, n, { vocab: 20000 });
  const cg = new ComputationGraph();
  let loss = buildTreeLstmBatch(cg, model, trees);
  const nodes = cg.size;
  const buildNs = timeNs(() => {
    cg.renew();
    loss = buildTreeLstmBatch(cg, model, trees);
  });
  const stringNs = timeNs(() => {
    const ids = new Map<string, number>();
    for (let i = 0; i < cg.size; i++) {
      const s = batchSignature(cg, i);
      if (!ids.has(s)) ids.set(s, ids.size);
    }
  });
  const result = {} as Record<BatchStrategy, StrategyResult>;
  let signatures = 0;
  for (const strategy of BATCH_STRATEGIES) {
    const plan = planner.plan(cg, loss.id, strategy);
    signatures = plan.stats.signatures;
    const ns = timeNs(() => planner.plan(cg, loss.id, strategy));
    result[strategy] = {
      planNsPerNode: ns.median / nodes,
      planNsPerNodeMin: ns.min / nodes,
      batches: plan.stats.batches,
      matrixBatches: plan.stats.matrixBatches,
      meanBatchSize: plan.stats.meanBatchSize,
      maxBatchSize: plan.stats.maxBatchSize,
    };
  }
  rows.push({
    trees: n,
    words: countWords(trees),
    nodes,
    buildNsPerNode: buildNs.median / nodes,
    stringSignatureNsPerNode: stringNs.median / nodes,
    signatures,
    depth: result.depth,
    agenda: result.agenda,
  });
}

const pad = (s: string | number, w: number): string => String(s).padStart(w);
const f1 = (x: number): string => x.toFixed(1);
console.log(
  [
    pad("trees", 5),
    pad("words", 6),
    pad("nodes", 7),
    pad("build ns/n", 10),
    pad("sig-str ns/n", 12),
    pad("depth ns/n", 10),
    pad("(min)", 6),
    pad("agenda ns/n", 11),
    pad("(min)", 6),
    pad("depth batches", 13),
    pad("agenda batches", 14),
    pad("depth GEMMs", 11),
    pad("agenda GEMMs", 12),
    pad("mean batch (ag)", 15),
  ].join("  "),
);
for (const r of rows) {
  console.log(
    [
      pad(r.trees, 5),
      pad(r.words, 6),
      pad(r.nodes, 7),
      pad(f1(r.buildNsPerNode), 10),
      pad(f1(r.stringSignatureNsPerNode), 12),
      pad(f1(r.depth.planNsPerNode), 10),
      pad(f1(r.depth.planNsPerNodeMin), 6),
      pad(f1(r.agenda.planNsPerNode), 11),
      pad(f1(r.agenda.planNsPerNodeMin), 6),
      pad(r.depth.batches, 13),
      pad(r.agenda.batches, 14),
      pad(r.depth.matrixBatches, 11),
      pad(r.agenda.matrixBatches, 12),
      pad(f1(r.agenda.meanBatchSize), 15),
    ].join("  "),
  );
}

const out = join(dirname(fileURLToPath(import.meta.url)), "results", "autobatch-plan-cpu.json");
mkdirSync(dirname(out), { recursive: true });
writeFileSync(
  out,
  `${JSON.stringify(
    {
      benchmark: "autobatch-plan",
      description: "planning ns per node and batches per forward pass; Tree-LSTM batches of random trees (10-28 words)",
      date: new Date().toISOString(),
      node: process.version,
      cpu: cpus()[0]?.model ?? "unknown",
      quick,
      /** ns per element of a plain Int32Array sum on this machine during the run (about 0.3–0.5 on an idle desktop) */
      sumLoopNsPerElement: sumLoopNs,
      rows,
    },
    null,
    2,
  )}\n`,
);
console.log(`yardstick: a plain Int32Array sum loop ran at ${sumLoopNs.toFixed(2)} ns/element during this run`);
console.log(`wrote ${out}`);
