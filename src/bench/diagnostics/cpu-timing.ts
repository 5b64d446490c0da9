/**
 * `vpps bench cpu timing`: graph construction cost per node, and forward + backward + SGD update sentences/s of the
 * CPU reference engine, on SST batches of the Tree-LSTM. Writes cpu.json into the CPU's results folder (not with
 * --quick).
 */
import { loadavg } from "node:os";
import type { TreeNode } from "../../data/tree.js";
import { Vocabulary } from "../../data/vocab.js";
import { CpuEngine } from "../../engines/cpu.js";
import { ComputationGraph } from "../../graph/graph.js";
import { TreeLstmModel } from "../../models/treelstm/model.js";
import { makeTrainer } from "../../optim/trainers.js";
import { machine, median } from "../common.js";
import { cpuDevice, resultsDir } from "../device.js";
import { writeJson } from "../output.js";
import { batchAt, loadBenchTrees } from "../trees.js";

export interface CpuTimingOptions {
  dataFile?: string;
  quick: boolean;
  out?: string;
  command: string;
}

interface BuildRow {
  batch: number;
  cell: string;
  nodesPerBatch: number;
  /** Wall-clock time per node (median over repetitions). */
  nsPerNode: number;
  /** Process CPU time per node (median): less disturbed when other jobs share the machine. */
  cpuNsPerNode: number;
}
interface TrainRow {
  batch: number;
  hidden: number;
  cell: string;
  sentencesPerSecond: number;
  msPerBatch: number;
}

export function runCpuTiming(o: CpuTimingOptions): number {
  const { trees, source } = loadBenchTrees(o.dataFile, 2048);
  const vocab = Vocabulary.fromTrees(trees);
  const batches = (size: number, count: number): TreeNode[][] =>
    Array.from({ length: count }, (_, k) => batchAt(trees, size, k));

  const build: BuildRow[] = [];
  for (const cell of ["fused", "ops"] as const) {
    const model = new TreeLstmModel({ vocabSize: vocab.size, embed: 256, hidden: 256, cell });
    const cg = new ComputationGraph();
    for (const batch of [1, 16, 128]) {
      const bs = batches(batch, o.quick ? 8 : 40);
      for (const b of bs.slice(0, 4)) {
        cg.renew();
        model.buildBatchLoss(cg, b, vocab); // warm-up
      }
      const samples: number[] = [];
      const cpuSamples: number[] = [];
      let nodes = 0;
      for (let rep = 0; rep < (o.quick ? 3 : 9); rep++) {
        let total = 0;
        let ns = 0;
        const c0 = process.cpuUsage();
        for (const b of bs) {
          const t0 = process.hrtime.bigint();
          cg.renew();
          model.buildBatchLoss(cg, b, vocab);
          ns += Number(process.hrtime.bigint() - t0);
          total += cg.size;
        }
        const c = process.cpuUsage(c0);
        samples.push(ns / total);
        cpuSamples.push(((c.user + c.system) * 1000) / total);
        nodes = total / bs.length;
      }
      build.push({
        batch,
        cell,
        nodesPerBatch: Math.round(nodes),
        nsPerNode: median(samples),
        cpuNsPerNode: median(cpuSamples),
      });
    }
  }

  const train: TrainRow[] = [];
  for (const hidden of o.quick ? [64] : [64, 256]) {
    for (const batch of [1, 16]) {
      const model = new TreeLstmModel({ vocabSize: vocab.size, embed: hidden, hidden, cell: "fused" });
      const engine = new CpuEngine(model.params);
      const trainer = makeTrainer("sgd", { learningRate: 0.05 });
      const cg = new ComputationGraph();
      const count = Math.max(2, Math.round((hidden === 64 ? 64 : 16) / batch));
      const bs = batches(batch, count + 1);
      const step = (b: TreeNode[]) => {
        cg.renew();
        const loss = model.buildBatchLoss(cg, b, vocab);
        engine.forwardScalar(loss);
        engine.backward(loss);
        engine.update(trainer);
      };
      step(bs[0]!); // warm-up
      const times: number[] = [];
      for (const b of bs.slice(1)) {
        const t0 = performance.now();
        step(b);
        times.push(performance.now() - t0);
      }
      const ms = median(times);
      train.push({ batch, hidden, cell: "fused", msPerBatch: ms, sentencesPerSecond: (1000 * batch) / ms });
    }
  }

  const m = machine();
  console.log(`data: ${source}; ${m.cpu}, ${m.cores} cores, node ${process.version}`);
  console.log("\ngraph construction (Tree-LSTM, hidden 256)");
  console.log("cell   batch  nodes/batch  ns/node (wall)  ns/node (cpu)");
  for (const r of build) {
    console.log(
      `${r.cell.padEnd(5)} ${String(r.batch).padStart(6)} ${String(r.nodesPerBatch).padStart(12)} ${r.nsPerNode.toFixed(1).padStart(15)} ${r.cpuNsPerNode.toFixed(1).padStart(14)}`,
    );
  }
  console.log("\nCPU engine forward + backward + SGD update");
  console.log("hidden  batch  ms/batch  sentences/s");
  for (const r of train) {
    console.log(
      `${String(r.hidden).padStart(6)} ${String(r.batch).padStart(6)} ${r.msPerBatch.toFixed(1).padStart(9)} ${r.sentencesPerSecond.toFixed(1).padStart(12)}`,
    );
  }
  if (!o.quick || o.out !== undefined) {
    const path = writeJson(resultsDir(cpuDevice().slug, o.out), "cpu", {
      benchmark: "cpu",
      command: o.command,
      date: new Date().toISOString(),
      machine: m,
      data: source,
      method:
        "median over repetitions after warm-up; build time per node = graph construction only (model.buildBatchLoss), wall and process CPU time",
      load: loadavg(),
      build,
      train,
    });
    console.log(`\nwrote ${path}`);
  }
  return 0;
}
