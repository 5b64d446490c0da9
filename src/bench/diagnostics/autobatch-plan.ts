/**
 * `vpps bench autobatch plan`: the host-side cost of autobatching. Planning time per node for both strategies, and
 * the number of batches (kernel launches per forward pass) they find, on Tree-LSTM batches of 1–128 random trees of
 * about 19 words (the VPPS benchmark's shape: a softmax loss at every tree node, all summed). CPU only.
 * Writes autobatch-plan.json into the CPU's results folder (not with --quick).
 */
import { cpus } from "node:os";
import { BATCH_STRATEGIES, BatchPlanner, type BatchStrategy } from "../../engines/autobatch/plan.js";
import { ComputationGraph } from "../../graph/graph.js";
import { batchSignature } from "../../ops/registry.js";
import { cpuDevice, resultsDir } from "../device.js";
import { writeJson } from "../output.js";
import { buildTreeLstmBatch, type RandomTree, randomTrees, treeLstmModel } from "../random-trees.js";

export interface AutobatchPlanOptions {
  quick: boolean;
  out?: string;
  command: string;
}

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

/** Median and minimum ns per call of `f`, over repetitions filling about `targetMs`. */
function timeNs(f: () => void, targetMs: number): { median: number; min: number } {
  for (let k = 0; k < 3; k++) f(); // warm up (JIT)
  const samples: number[] = [];
  const end = performance.now() + targetMs;
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
function yardstick(targetMs: number): number {
  const a = new Int32Array(1 << 20).map((_, i) => (i * 7) & 1023);
  let sink = 0;
  const t = timeNs(() => {
    sink += sumAll(a);
  }, targetMs);
  return sink < 0 ? 0 : t.min / a.length;
}

function countWords(trees: readonly RandomTree[]): number {
  let n = 0;
  const stack = [...trees];
  while (stack.length > 0) {
    const t = stack.pop()!;
    if (t.left === null || t.right === null) n++;
    else stack.push(t.left, t.right);
  }
  return n;
}

export function runAutobatchPlan(o: AutobatchPlanOptions): number {
  const SIZES = o.quick ? [1, 8, 64] : [1, 2, 4, 8, 16, 32, 64, 128];
  /** Wall time spent per measurement; the median of the repetitions is reported. */
  const TARGET_MS = o.quick ? 60 : 300;
  const sumLoopNs = yardstick(TARGET_MS);
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
    }, TARGET_MS);
    const stringNs = timeNs(() => {
      const ids = new Map<string, number>();
      for (let i = 0; i < cg.size; i++) {
        const s = batchSignature(cg, i);
        if (!ids.has(s)) ids.set(s, ids.size);
      }
    }, TARGET_MS);
    const result = {} as Record<BatchStrategy, StrategyResult>;
    let signatures = 0;
    for (const strategy of BATCH_STRATEGIES) {
      const plan = planner.plan(cg, loss.id, strategy);
      signatures = plan.stats.signatures;
      const ns = timeNs(() => planner.plan(cg, loss.id, strategy), TARGET_MS);
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
  const head: [string, number][] = [
    ["trees", 5],
    ["words", 6],
    ["nodes", 7],
    ["build ns/n", 10],
    ["sig-str ns/n", 12],
    ["depth ns/n", 10],
    ["(min)", 6],
    ["agenda ns/n", 11],
    ["(min)", 6],
    ["depth batches", 13],
    ["agenda batches", 14],
    ["depth GEMMs", 11],
    ["agenda GEMMs", 12],
    ["mean batch (ag)", 15],
  ];
  console.log(head.map(([h, w]) => pad(h, w)).join("  "));
  for (const r of rows) {
    const cells = [
      r.trees,
      r.words,
      r.nodes,
      f1(r.buildNsPerNode),
      f1(r.stringSignatureNsPerNode),
      f1(r.depth.planNsPerNode),
      f1(r.depth.planNsPerNodeMin),
      f1(r.agenda.planNsPerNode),
      f1(r.agenda.planNsPerNodeMin),
      r.depth.batches,
      r.agenda.batches,
      r.depth.matrixBatches,
      r.agenda.matrixBatches,
      f1(r.agenda.meanBatchSize),
    ];
    console.log(cells.map((c, i) => pad(c, head[i]![1])).join("  "));
  }
  console.log(`yardstick: a plain Int32Array sum loop ran at ${sumLoopNs.toFixed(2)} ns/element during this run`);
  if (!o.quick || o.out !== undefined) {
    const path = writeJson(resultsDir(cpuDevice().slug, o.out), "autobatch-plan", {
      benchmark: "autobatch-plan",
      command: o.command,
      description: "planning ns per node and batches per forward pass; Tree-LSTM batches of random trees (10-28 words)",
      date: new Date().toISOString(),
      node: process.version,
      cpu: cpus()[0]?.model ?? "unknown",
      quick: o.quick,
      /** ns per element of a plain Int32Array sum on this machine during the run (about 0.3–0.5 on an idle desktop) */
      sumLoopNsPerElement: sumLoopNs,
      rows,
    });
    console.log(`wrote ${path}`);
  }
  return 0;
}
