/**
 * Eager engine benchmark: Tree-LSTM training (forward + backward + SGD update, the loss read back every batch as the
 * training loop does) in sentences/s on SST training trees, hidden 256, embedding 256, batch 1, 8 and 128. Before
 * timing, the first batch's loss is compared with the CPU engine's. Writes bench/results/eager-<device>.json.
 *
 *   node --import tsx bench/eager.ts [--data <SST train.txt>] [--quick]
 *
 * Without --data it reads ../shared/data/sst/train.txt when present, else the synthetic trees.
 */
import type { TreeNode } from "../src/data/tree.js";
import { Vocabulary } from "../src/data/vocab.js";
import { CpuEngine } from "../src/engines/cpu.js";
import { EagerEngine } from "../src/engines/eager/engine.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { TreeLstmModel } from "../src/models/treelstm/model.js";
import { makeTrainer } from "../src/train/trainers.js";
import { batchAt, deviceSlug, loadBenchTrees, median, resultHeader, writeResult } from "./common.js";
import { requireGpu } from "./engine-timing.js";

requireGpu("bench/eager.ts");

const argv = process.argv.slice(2);
const quick = argv.includes("--quick");
const dataAt = argv.indexOf("--data");
const dataFile = dataAt >= 0 ? argv[dataAt + 1] : undefined;
if (dataAt >= 0 && !dataFile) throw new Error("--data needs a file: the SST train.txt (one PTB tree per line)");

const HIDDEN = 256;
const EMBED = 256;
const BATCHES = [1, 8, 128];
const MAX_TREES = 4096;

const { trees, source } = loadBenchTrees(dataFile, MAX_TREES);
const vocab = Vocabulary.fromTrees(trees);
const makeModel = () => new TreeLstmModel({ vocabSize: vocab.size, embed: EMBED, hidden: HIDDEN, seed: 1 });

const batchOf = (size: number, k: number): TreeNode[] => batchAt(trees, size, k);

const model = makeModel();
const engine = new EagerEngine(model.params);
const device = engine.ctx.deviceName;

// correctness first: the first batch of 8 on both engines (before any update)
const cgCheck = new ComputationGraph();
const reference = makeModel();
const cpuLoss = new CpuEngine(reference.params).forwardScalar(reference.buildBatchLoss(cgCheck, batchOf(8, 0), vocab));
const cgEager = new ComputationGraph();
const eagerLoss = engine.forwardScalar(model.buildBatchLoss(cgEager, batchOf(8, 0), vocab));
const relErr = Math.abs(eagerLoss - cpuLoss) / Math.max(1, Math.abs(cpuLoss));
console.log(
  `first batch of 8: loss cpu ${cpuLoss.toFixed(6)}, eager ${eagerLoss.toFixed(6)}, relative error ${relErr.toExponential(2)}`,
);
if (!(relErr <= 1e-4)) {
  console.error("the eager engine's loss differs from the CPU engine's; not timing");
  process.exit(1);
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
    const loss = model.buildBatchLoss(cg, batchOf(batch, batchIndex++), vocab);
    buildMs += performance.now() - t0;
    nodes += cg.size;
    const value = engine.forwardScalar(loss);
    engine.backward(loss);
    engine.update(trainer);
    if (!Number.isFinite(value)) throw new Error(`loss became ${value} at batch size ${batch}`);
  };
  const perRepeat = Math.max(1, Math.round((quick ? 16 : 64) / batch));
  const repeats = batch >= 128 ? (quick ? 2 : 3) : quick ? 3 : 5;
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
engine.dispose();

if (!quick) {
  const path = writeResult(`eager-${deviceSlug(device)}`, {
    ...resultHeader({
      benchmark: "eager",
      command: `node --import tsx bench/eager.ts${dataFile ? ` --data ${dataFile}` : ""}`,
      device,
      data: source,
      trees: trees.length,
      vocabulary: vocab.size,
    }),
    model: { name: "treelstm", cell: "fused", hidden: HIDDEN, embed: EMBED, optimizer: "sgd" },
    method:
      "per batch: build the graph, forwardScalar (reads the loss back), backward, update; warm-up, then the median " +
      "over repeats of (steps, then a stream synchronize) / steps. Launches = our kernels + cuBLAS calls + async " +
      "copies/memsets, per batch.",
    firstBatchLoss: { batch: 8, cpu: cpuLoss, eager: eagerLoss, relativeError: relErr },
    rows,
  });
  console.log(`wrote ${path}`);
}
