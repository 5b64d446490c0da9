/**
 * `vpps bench cpu graph-build`: ns per graph node of `TreeLstmModel.buildBatchLoss` (the user's main-thread work per
 * batch, which VPPS cannot hide at large batches), for the fused and plain-ops cells at batch 1, 8, 32 and 128 on SST
 * trees (hidden 256, embed 256; the hidden size changes no node count, only the shapes). CPU only. With `--model
 * <name>`, another registered model's `buildBatchLoss` at its default sizes, on its data (SST train beside the
 * repository or --data, else its synthetic task), written to graph-build-<name>.json.
 *
 * Every (cell, batch) is warmed up first (V8 reaches its optimising tier for all of them before any timing), then the
 * repetitions go round-robin over all of them, so that a slow phase of a shared machine hits every row alike; each
 * row reports the median repetition. Writes graph-build.json into the CPU's results folder (`--machine` names the
 * folder instead) unless --quick.
 */
import { Vocabulary } from "../../data/vocab.js";
import { ComputationGraph } from "../../graph/graph.js";
import { findModel } from "../../models/registry.js";
import { type CellFormulation, TreeLstmModel } from "../../models/treelstm/model.js";
import { machine, median, resultHeader } from "../common.js";
import { cpuDevice, resultsDir } from "../device.js";
import { sstTrainFile } from "../models/sst.js";
import { writeJson } from "../output.js";
import { batchAt, loadBenchTrees } from "../trees.js";

export interface GraphBuildOptions {
  /** A registered model; the Tree-LSTM (both cells) when absent. */
  model?: string;
  dataFile?: string;
  quick: boolean;
  /** The results folder's name (bench/results/<machine>/); the CPU's slug when absent. */
  machine?: string;
  out?: string;
  command: string;
}

const HIDDEN = 256;
const EMBED = 256;
const CELLS: CellFormulation[] = ["fused", "ops"];
const BATCHES = [1, 8, 32, 128];

interface Config {
  /** The cell (Tree-LSTM) or the model's name. */
  cell: string;
  batch: number;
  /** The examples batches are cut from (batchAt), and the build of one batch into a renewed graph. */
  items: readonly unknown[];
  build: (graph: ComputationGraph, batch: unknown[]) => void;
  graph: ComputationGraph;
  /** Batches per repetition (about REP_NODES nodes) and the next batch's index. */
  count: number;
  next: number;
  samples: number[];
  cpuSamples: number[];
  nodes: number;
  batches: number;
}

/** What is timed: the Tree-LSTM's (cell, batch) pairs, or a model's batches; with what the result file says. */
interface Subject {
  configs: Config[];
  source: string;
  examples: number;
  vocabulary: number;
  title: string;
  model: Record<string, unknown>;
  method: string;
  file: string;
}

function treeLstmSubject(o: GraphBuildOptions, repNodes: number): Subject {
  const { trees, source } = loadBenchTrees(o.dataFile, 8192);
  const vocab = Vocabulary.fromTrees(trees);
  const configs: Config[] = [];
  for (const cell of CELLS) {
    // one model per cell, shared by its batch sizes, as in training
    const model = new TreeLstmModel({ vocabSize: vocab.size, embed: EMBED, hidden: HIDDEN, cell, seed: 1 });
    const build = (graph: ComputationGraph, batch: unknown[]) =>
      model.buildBatchLoss(graph, batch as typeof trees, vocab);
    for (const batch of BATCHES) configs.push(config(cell, batch, trees, build, repNodes));
  }
  return {
    configs,
    source,
    examples: trees.length,
    vocabulary: vocab.size,
    title: `Graph build (TreeLstmModel.buildBatchLoss), hidden ${HIDDEN}, embed ${EMBED}`,
    model: { name: "treelstm", hidden: HIDDEN, embed: EMBED, cells: CELLS },
    method: "TreeLstmModel.buildBatchLoss",
    file: "graph-build",
  };
}

/** A registered model at its default sizes on its data: SST train (or --data), else its synthetic task. */
function taskSubject(name: string, o: GraphBuildOptions, repNodes: number): Subject {
  const task = findModel(name);
  const file = o.dataFile ?? sstTrainFile();
  const items = file === undefined ? task.data.synthetic.make(1).train : task.data.fromFile(file).slice(0, 8192);
  const vocab = task.vocabulary.build(items);
  const model = task.create(task.defaults, vocab, 1);
  const build = (graph: ComputationGraph, batch: unknown[]) => model.buildBatchLoss(graph, batch);
  return {
    configs: BATCHES.map((batch) => config(name, batch, items, build, repNodes)),
    source: file === undefined ? task.data.synthetic.description : o.dataFile ? `SST train (${file})` : "SST train",
    examples: items.length,
    vocabulary: (vocab as { size?: number }).size ?? 0,
    title: `Graph build (${task.title} buildBatchLoss), ${task.describe(task.defaults)}`,
    model: { name, ...task.defaults },
    method: `the ${task.title} task model's buildBatchLoss`,
    file: `graph-build-${name}`,
  };
}

/** A configuration whose repetitions build about `repNodes` nodes each (from its first batch's size). */
function config(
  cell: string,
  batch: number,
  items: readonly unknown[],
  build: Config["build"],
  repNodes: number,
): Config {
  const graph = new ComputationGraph();
  build(graph, batchAt(items, batch, 0));
  const count = Math.max(3, Math.round(repNodes / graph.size));
  return { cell, batch, items, build, graph, count, next: 0, samples: [], cpuSamples: [], nodes: 0, batches: 0 };
}

export function runGraphBuild(o: GraphBuildOptions): number {
  /** Nodes built per (cell, batch) before timing, nodes per timed repetition, repetitions. */
  const WARM_NODES = o.quick ? 100_000 : 300_000;
  const REP_NODES = o.quick ? 50_000 : 200_000;
  const REPS = o.quick ? 5 : 9;
  const subject =
    o.model === undefined || o.model === "treelstm"
      ? treeLstmSubject(o, REP_NODES)
      : taskSubject(o.model, o, REP_NODES);
  const { configs, source } = subject;

  /** Builds `count` consecutive batches of `c`; returns [wall ns, process CPU ns, nodes]. */
  const round = (c: Config, count: number): [number, number, number] => {
    let ns = 0;
    let nodes = 0;
    const cpu0 = process.cpuUsage();
    for (let k = 0; k < count; k++) {
      const batch = batchAt(c.items, c.batch, c.next++);
      const t0 = process.hrtime.bigint();
      c.graph.renew();
      c.build(c.graph, batch);
      ns += Number(process.hrtime.bigint() - t0);
      nodes += c.graph.size;
    }
    const cpu = process.cpuUsage(cpu0);
    return [ns, (cpu.user + cpu.system) * 1000, nodes];
  };

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
  console.log(subject.title);
  console.log(`data: ${source}, ${subject.examples} examples; ${m.cpu}, ${m.cores} cores, node ${m.node}\n`);
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
        r.cell.padEnd(7),
        String(r.batch).padStart(6),
        String(r.nodesPerBatch).padStart(12),
        r.nsPerNode.toFixed(1).padStart(15),
        r.cpuNsPerNode.toFixed(1).padStart(14),
        r.msPerBatch.toFixed(3).padStart(9),
        r.minNsPerNode.toFixed(1).padStart(12),
      ].join(" "),
    );
  }
  if (!o.quick || o.out !== undefined) {
    const path = writeJson(resultsDir(o.machine ?? cpuDevice().slug, o.out), subject.file, {
      ...resultHeader({
        benchmark: subject.file,
        command: o.command,
        data: source,
        trees: subject.examples,
        vocabulary: subject.vocabulary,
      }),
      model: subject.model,
      method: `${subject.method} into a renewed ComputationGraph (batchAt: consecutive trees), timed per batch with process.hrtime; every (cell, batch) warmed up with ${WARM_NODES} nodes, then ${REPS} repetitions of about ${REP_NODES} nodes each, round-robin over all rows; nsPerNode is the median repetition's (total time / total nodes), cpuNsPerNode the same with process CPU time, minNsPerNode the fastest repetition`,
      rows,
    });
    console.log(`\nwrote ${path}`);
  }
  return 0;
}
