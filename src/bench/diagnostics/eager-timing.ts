/**
 * `vpps bench eager timing`: Tree-LSTM training on the eager engine (forward + backward + SGD update, the loss read
 * back every batch as the training loop does) in sentences/s on SST training trees, hidden 256, embedding 256, batch
 * 1, 8 and 128. Before timing, the first batch's loss is compared with the CPU engine's. Writes eager.json (not with
 * --quick).
 */
import { CpuEngine } from "../../engines/cpu.js";
import { EagerEngine } from "../../engines/eager/engine.js";
import { ComputationGraph } from "../../graph/graph.js";
import { makeTrainer } from "../../optim/trainers.js";
import { median, resultHeader } from "../common.js";
import { deviceSlug, requireGpu, resultsDir } from "../device.js";
import { BenchError } from "../errors.js";
import { checkFirstLoss } from "../first-loss.js";
import { benchModel } from "../models/index.js";
import { writeJson } from "../output.js";

export interface EagerTimingOptions {
  dataFile?: string;
  quick: boolean;
  out?: string;
  command: string;
}

interface Row {
  batch: number;
  sentencesPerSecond: number;
  msPerBatch: number;
  /** ms per batch of each repeat. */
  repeats: number[];
  /** Host time building the graph, ms per batch (inside msPerBatch). */
  buildMsPerBatch: number;
  nodesPerBatch: number;
  kernelsPerBatch: number;
  cublasCallsPerBatch: number;
  copiesPerBatch: number;
  launchesPerBatch: number;
}

const SIZE = { hidden: 256, embed: 256 };
const BATCHES = [1, 8, 128];

export function runEagerTiming(o: EagerTimingOptions): number {
  requireGpu("vpps bench eager timing");
  const task = benchModel("treelstm").load(o.dataFile, 4096);
  const batchOf = task.batch;
  const net = task.net(SIZE, "fused");
  const engine = new EagerEngine(net.params);
  try {
    const device = engine.ctx.deviceName;

    // correctness first: the first batch of 8 on both engines (before any update)
    const reference = task.net(SIZE, "fused");
    const cpuLoss = new CpuEngine(reference.params).forwardScalar(
      reference.batchLoss(new ComputationGraph(), batchOf(8, 0)),
    );
    const eagerLoss = engine.forwardScalar(net.batchLoss(new ComputationGraph(), batchOf(8, 0)));
    const { check, refusal } = checkFirstLoss("eager", { batch: 8, cpu: cpuLoss, loss: eagerLoss, tolerance: 1e-4 });
    console.log(
      `first batch of 8: loss cpu ${cpuLoss.toFixed(6)}, eager ${eagerLoss.toFixed(6)}, relative error ${check.relativeError.toExponential(2)}`,
    );
    if (refusal !== null) throw new BenchError(refusal);

    const rows: Row[] = [];
    const cg = new ComputationGraph();
    const trainer = makeTrainer("sgd", { learningRate: 0.05 });
    let batchIndex = 1;
    for (const batch of BATCHES) {
      let buildMs = 0;
      let nodes = 0;
      const step = () => {
        const t0 = performance.now();
        cg.renew();
        const loss = net.batchLoss(cg, batchOf(batch, batchIndex++));
        buildMs += performance.now() - t0;
        nodes += cg.size;
        const value = engine.forwardScalar(loss);
        engine.backward(loss);
        engine.update(trainer);
        if (!Number.isFinite(value)) throw new Error(`loss became ${value} at batch size ${batch}`);
      };
      const perRepeat = Math.max(1, Math.round((o.quick ? 16 : 64) / batch));
      const repeats = batch >= 128 ? (o.quick ? 2 : 3) : o.quick ? 3 : 5;
      for (let w = 0; w < Math.min(3, perRepeat); w++) step(); // warm-up: module load, first layouts, pinned buffers
      engine.ctx.synchronize();
      buildMs = 0;
      nodes = 0;
      const before = engine.launchCounts();
      const times: number[] = [];
      for (let r = 0; r < repeats; r++) {
        const t0 = performance.now();
        for (let s = 0; s < perRepeat; s++) step();
        engine.ctx.synchronize();
        times.push((performance.now() - t0) / perRepeat);
      }
      const after = engine.launchCounts();
      const steps = repeats * perRepeat;
      const per = (k: keyof typeof after) => (after[k] - before[k]) / steps;
      const ms = median(times);
      const row: Row = {
        batch,
        sentencesPerSecond: (1000 * batch) / ms,
        msPerBatch: ms,
        repeats: times,
        buildMsPerBatch: buildMs / steps,
        nodesPerBatch: nodes / steps,
        kernelsPerBatch: per("kernels"),
        cublasCallsPerBatch: per("cublas"),
        copiesPerBatch: per("copies"),
        launchesPerBatch: per("kernels") + per("cublas") + per("copies"),
      };
      rows.push(row);
      console.log(
        `batch ${String(batch).padStart(3)}: ${row.sentencesPerSecond.toFixed(1).padStart(8)} sentences/s, ` +
          `${ms.toFixed(2)} ms/batch (build ${row.buildMsPerBatch.toFixed(2)} ms), ${Math.round(row.nodesPerBatch)} nodes, ` +
          `${Math.round(row.launchesPerBatch)} launches/batch (${Math.round(row.kernelsPerBatch)} kernels, ` +
          `${Math.round(row.cublasCallsPerBatch)} cuBLAS, ${Math.round(row.copiesPerBatch)} copies/memsets)`,
      );
    }

    if (!o.quick || o.out !== undefined) {
      const path = writeJson(resultsDir(deviceSlug(device), o.out), "eager", {
        ...resultHeader({
          benchmark: "eager",
          command: o.command,
          device,
          data: task.source,
          trees: task.items,
          vocabulary: task.vocabulary,
        }),
        model: { name: "treelstm", cell: "fused", hidden: SIZE.hidden, embed: SIZE.embed, optimizer: "sgd" },
        method:
          "per batch: build the graph, forwardScalar (reads the loss back), backward, update; warm-up, then the " +
          "median over repeats of (steps, then a stream synchronize) / steps. Launches = our kernels + cuBLAS calls + " +
          "async copies/memsets, per batch.",
        firstBatchLoss: { batch: 8, cpu: cpuLoss, eager: eagerLoss, relativeError: check.relativeError },
        rows,
      });
      console.log(`wrote ${path}`);
    }
  } finally {
    engine.dispose();
  }
  return 0;
}
