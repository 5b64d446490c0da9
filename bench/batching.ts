/**
 * Batching benchmark: Tree-LSTM training (forward + backward + SGD update, the loss read back every batch) in
 * sentences/s on SST training trees, hidden 256, embedding 256, for batch sizes 1, 2, 4, …, 128, with the eager engine
 * (one launch per node) and the autobatch engine with both strategies (DyNet's depth- and agenda-based batching, with
 * the engine's GEMM kernels), and the agenda engine with cuBLAS products, in one run, the engines' repeats alternating. Before timing, each engine's loss on the first batch of 8 is
 * compared with the CPU engine's. For the autobatch engine it also reports where the time of a batch goes: host time
 * building the graph, planning, encoding the tables and commands, issuing them (koffi calls), the wait for the device
 * at the loss read, and the device's span (CUDA events around the batch's work).
 * Writes a table to stdout and bench/results/batching-<device>.json. The timing itself is in engine-timing.ts
 * (shared with bench/treelstm.ts, which also runs VPPS in the same process).
 *
 *   node --import tsx bench/batching.ts [--data <SST train.txt>] [--quick]
 *
 * Without --data it reads ../shared/data/sst/train.txt when present, else the synthetic trees. --quick runs batch
 * sizes 1, 8 and 64 with fewer repeats and writes no file.
 */
import type { TreeNode } from "../src/data/tree.js";
import { Vocabulary } from "../src/data/vocab.js";
import { CpuEngine } from "../src/engines/cpu.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { TreeLstmModel } from "../src/models/treelstm/model.js";
import { batchAt, deviceSlug, loadBenchTrees, resultHeader, writeResult } from "./common.js";
import {
  BASELINE_ENGINES,
  type BaselineKind,
  type BaselineRow,
  type BaselineRun,
  baselineFirstLoss,
  disposeBaseline,
  relativeError,
  requireGpu,
  startBaseline,
  timeBaselines,
} from "./engine-timing.js";

const argv = process.argv.slice(2);
const quick = argv.includes("--quick");
const dataAt = argv.indexOf("--data");
const dataFile = dataAt >= 0 ? argv[dataAt + 1] : undefined;
if (dataAt >= 0 && !dataFile) throw new Error("--data needs a file: the SST train.txt (one PTB tree per line)");
requireGpu("bench/batching.ts");

const HIDDEN = 256;
const EMBED = 256;
const BATCHES = quick ? [1, 8, 64] : [1, 2, 4, 8, 16, 32, 64, 128];
const MAX_TREES = 4096;
const ENGINES = BASELINE_ENGINES;
type EngineKind = BaselineKind;

const { trees, source } = loadBenchTrees(dataFile, MAX_TREES);
const vocab = Vocabulary.fromTrees(trees);
const makeModel = () => new TreeLstmModel({ vocabSize: vocab.size, embed: EMBED, hidden: HIDDEN, seed: 1 });

const batchOf = (size: number, k: number): TreeNode[] => batchAt(trees, size, k);

// the reference loss of the first batch of 8, before any update
const reference = makeModel();
const cpuLoss = new CpuEngine(reference.params).forwardScalar(
  reference.buildBatchLoss(new ComputationGraph(), batchOf(8, 0), vocab),
);

const rows: BaselineRow[] = [];
const firstLoss: Record<string, number> = { cpu: cpuLoss };

// all engines at once, so that each batch size's repeats can alternate between them: slow phases of a shared
// machine then hit every engine alike
const running: BaselineRun[] = [];
/** Engines whose first-batch loss disagreed with the CPU engine's (not timed). */
const failed: EngineKind[] = [];
let device = "unknown";
try {
  for (const kind of ENGINES) {
    const r = startBaseline(kind, makeModel());
    device = r.deviceName;
    running.push(r);
    const check = baselineFirstLoss(r, batchOf(8, 0), vocab);
    const relErr = relativeError(check, cpuLoss);
    firstLoss[kind] = check;
    console.log(
      `${kind}: first batch of 8: loss ${check.toFixed(6)} (cpu ${cpuLoss.toFixed(6)}), rel. error ${relErr.toExponential(2)}`,
    );
    if (!(relErr <= 1e-4)) {
      console.error(`${kind}: the loss differs from the CPU engine's; not timing it`);
      failed.push(kind);
      disposeBaseline(running.pop()!);
    }
  }

  for (const batch of BATCHES) rows.push(...timeBaselines(running, batch, { quick, batchOf, vocab }));
} finally {
  for (const r of running) disposeBaseline(r);
}

// the table: sentences/s per engine and batch size, and launches per batch
const at = (kind: EngineKind, batch: number) => rows.find((r) => r.engine === kind && r.batch === batch);
console.log(
  `\nTree-LSTM training, hidden ${HIDDEN}, embedding ${EMBED}, ${source}, on ${device} (sentences/s; launches per batch)`,
);
console.log("| batch | eager | autobatch depth | autobatch agenda | agenda, cuBLAS | agenda / eager |");
console.log("| ----: | ----: | --------------: | ---------------: | -------------: | -------------: |");
for (const b of BATCHES) {
  const cell = (k: EngineKind) => {
    const r = at(k, b);
    return r ? `${r.sentencesPerSecond.toFixed(0)} (${Math.round(r.launchesPerBatch)})` : "–";
  };
  const e = at("eager", b);
  const a = at("autobatch-agenda", b);
  const ratio = e && a ? `${(a.sentencesPerSecond / e.sentencesPerSecond).toFixed(1)}×` : "–";
  console.log(
    `| ${b} | ${cell("eager")} | ${cell("autobatch-depth")} | ${cell("autobatch-agenda")} | ` +
      `${cell("autobatch-agenda-cublas")} | ${ratio} |`,
  );
}
const e64 = at("eager", 64);
const a64 = at("autobatch-agenda", 64);
const target = e64 && a64 ? { eager: e64.sentencesPerSecond, agenda: a64.sentencesPerSecond } : null;
if (target) {
  const ratio = target.agenda / target.eager;
  console.log(
    `\nissue target: agenda at batch 64 ≥ 10× eager at batch 64: ${ratio.toFixed(1)}× — ${ratio >= 10 ? "met" : "missed"}`,
  );
}

if (!quick) {
  const path = writeResult(`batching-${deviceSlug(device)}`, {
    ...resultHeader({
      benchmark: "batching",
      command: `node --import tsx bench/batching.ts${dataFile ? ` --data ${dataFile}` : ""}`,
      device,
      data: source,
      trees: trees.length,
      vocabulary: vocab.size,
    }),
    model: { name: "treelstm", cell: "fused", hidden: HIDDEN, embed: EMBED, optimizer: "sgd" },
    method:
      "per batch: build the graph, backward (which runs forward), SGD update on the device, then read the loss " +
      "(one wait per batch); warm-up, then the median over repeats of (steps / steps' time). Launches = kernels + " +
      "cuBLAS calls + async copies/memsets per batch, the update's included. Profile: host ms per batch by stage, " +
      "the wait at the loss read, and the device's span between CUDA events recorded before backward and after update. " +
      "The engines run side by side: each batch size's repeats alternate between them. issueCost: host µs per " +
      "command kind, from extra untimed steps with the device's run/upload wrapped.",
    firstBatchLoss: { batch: 8, ...firstLoss },
    notTimed: failed,
    target: target && { ...target, ratio: target.agenda / target.eager, met: target.agenda / target.eager >= 10 },
    rows,
  });
  console.log(`wrote ${path}`);
}
