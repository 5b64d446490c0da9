/**
 * Batching benchmark: Tree-LSTM training (forward + backward + SGD update, the loss read back every batch) in
 * sentences/s on SST training trees, hidden 256, embedding 256, for batch sizes 1, 2, 4, …, 128, with the eager engine
 * (one launch per node) and the autobatch engine with both strategies (DyNet's depth- and agenda-based batching, with
 * the engine's GEMM kernels), and the agenda engine with cuBLAS products, in one run, the engines' repeats alternating. Before timing, each engine's loss on the first batch of 8 is
 * compared with the CPU engine's. For the autobatch engine it also reports where the time of a batch goes: host time
 * building the graph, planning, encoding the tables and commands, issuing them (koffi calls), the wait for the device
 * at the loss read, and the device's span (CUDA events around the batch's work).
 * Writes a table to stdout and bench/results/batching-<device>.json.
 *
 *   node --import tsx bench/batching.ts [--data <SST train.txt>] [--quick]
 *
 * Without --data it reads ../shared/data/sst/train.txt when present, else the synthetic trees. --quick runs batch
 * sizes 1, 8 and 64 with fewer repeats and writes no file.
 */
import { CudaEvent, type CudaStream } from "../src/cuda/index.js";
import type { TreeNode } from "../src/data/tree.js";
import { Vocabulary } from "../src/data/vocab.js";
import { AutobatchGpuEngine, type CudaAutobatchDevice } from "../src/engines/autobatch/gpu-engine.js";
import { CpuEngine } from "../src/engines/cpu.js";
import { EagerEngine } from "../src/engines/eager/engine.js";
import type { Engine } from "../src/engines/engine.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { TreeLstmModel } from "../src/models/treelstm.js";
import { makeTrainer } from "../src/train/trainers.js";
import { batchAt, deviceSlug, loadBenchTrees, machine, median, writeResult } from "./common.js";

const argv = process.argv.slice(2);
const quick = argv.includes("--quick");
const dataAt = argv.indexOf("--data");
const dataFile = dataAt >= 0 ? argv[dataAt + 1] : undefined;
if (dataAt >= 0 && !dataFile) throw new Error("--data needs a file: the SST train.txt (one PTB tree per line)");

const HIDDEN = 256;
const EMBED = 256;
const BATCHES = quick ? [1, 8, 64] : [1, 2, 4, 8, 16, 32, 64, 128];
const MAX_TREES = 4096;
/**
 * "autobatch-depth" and "autobatch-agenda" multiply with the engine's own GEMM kernels (gemm: "kernels");
 * "autobatch-agenda-cublas" is the agenda engine with cuBLAS (gemm: "cublas", the engine's default since this
 * benchmark measured it faster at hidden 256).
 */
const ENGINES = ["eager", "autobatch-depth", "autobatch-agenda", "autobatch-agenda-cublas"] as const;
type EngineKind = (typeof ENGINES)[number];

const { trees, source } = loadBenchTrees(dataFile, MAX_TREES);
const vocab = Vocabulary.fromTrees(trees);
const makeModel = () => new TreeLstmModel({ vocabSize: vocab.size, embed: EMBED, hidden: HIDDEN, seed: 1 });

const batchOf = (size: number, k: number): TreeNode[] => batchAt(trees, size, k);

function open(kind: EngineKind, model: TreeLstmModel): { engine: Engine; stream: CudaStream; name: string } {
  if (kind === "eager") {
    const e = new EagerEngine(model.params);
    return { engine: e, stream: e.ctx.stream, name: e.ctx.deviceName };
  }
  const e = new AutobatchGpuEngine(model.params, {
    strategy: kind === "autobatch-depth" ? "depth" : "agenda",
    gemm: kind === "autobatch-agenda-cublas" ? "cublas" : "kernels",
  });
  const ctx = (e.device as CudaAutobatchDevice).ctx;
  return { engine: e, stream: ctx.stream, name: ctx.deviceName };
}

function launchCounts(e: Engine): { kernels: number; cublas: number; copies: number } {
  if (e instanceof EagerEngine || e instanceof AutobatchGpuEngine) return e.launchCounts();
  throw new Error(`no launch counts for engine ${e.name}`);
}

// the reference loss of the first batch of 8, before any update
const reference = makeModel();
const cpuLoss = new CpuEngine(reference.params).forwardScalar(
  reference.buildBatchLoss(new ComputationGraph(), batchOf(8, 0), vocab),
);

interface Profile {
  /** Host ms per batch: building the graph, planning, encoding, issuing (autobatch only for the middle three). */
  build: number;
  plan: number;
  encode: number;
  issue: number;
  /** Host ms per batch waiting for the device when the loss is read. */
  syncWait: number;
  /** Device ms per batch from the first to the last of its work (CUDA events). */
  gpuSpan: number;
}

interface Row {
  engine: EngineKind;
  batch: number;
  sentencesPerSecond: number;
  msPerBatch: number;
  repeats: number[];
  nodesPerBatch: number;
  /** Batches of one forward pass (autobatch): launches of the plan, before products' GEMMs. */
  planBatches: number | null;
  kernelsPerBatch: number;
  cublasCallsPerBatch: number;
  copiesPerBatch: number;
  launchesPerBatch: number;
  profile: Profile;
  issueCost: IssueCost | null;
}

const rows: Row[] = [];
const firstLoss: Record<string, number> = { cpu: cpuLoss };

/** Host µs per issued command, by kind (autobatch): measured in a separate untimed pass, wrapping the device. */
interface IssueCost {
  kernelUs: number;
  gemmUs: number;
  fillUs: number;
  uploadUs: number;
}

interface Running {
  kind: EngineKind;
  model: TreeLstmModel;
  engine: Engine;
  stream: CudaStream;
  cg: ComputationGraph;
  trainer: ReturnType<typeof makeTrainer>;
  start: CudaEvent;
  end: CudaEvent;
}

// all engines at once, so that each batch size's repeats can alternate between them: slow phases of a shared
// machine then hit every engine alike
const running: Running[] = [];
/** Engines whose first-batch loss disagreed with the CPU engine's (not timed). */
const failed: EngineKind[] = [];
let device = "unknown";
try {
  for (const kind of ENGINES) {
    const model = makeModel();
    const { engine, stream, name } = open(kind, model);
    device = name;
    running.push({
      kind,
      model,
      engine,
      stream,
      cg: new ComputationGraph(),
      trainer: makeTrainer("sgd", { learningRate: 0.05 }),
      start: CudaEvent.create(),
      end: CudaEvent.create(),
    });
    const check = engine.forwardScalar(model.buildBatchLoss(new ComputationGraph(), batchOf(8, 0), vocab));
    const relErr = Math.abs(check - cpuLoss) / Math.max(1, Math.abs(cpuLoss));
    firstLoss[kind] = check;
    console.log(
      `${kind}: first batch of 8: loss ${check.toFixed(6)} (cpu ${cpuLoss.toFixed(6)}), rel. error ${relErr.toExponential(2)}`,
    );
    if (!(relErr <= 1e-4)) {
      console.error(`${kind}: the loss differs from the CPU engine's; not timing it`);
      failed.push(kind);
      const r = running.pop()!;
      r.start.destroy();
      r.end.destroy();
      r.engine.dispose();
    }
  }

  for (const batch of BATCHES) {
    const perRepeat = Math.max(1, Math.round((quick ? 16 : 64) / batch));
    const repeats = batch >= 128 ? (quick ? 2 : 3) : quick ? 3 : 5;
    const state = running.map((r) => {
      const prof: Profile = { build: 0, plan: 0, encode: 0, issue: 0, syncWait: 0, gpuSpan: 0 };
      let nodes = 0;
      let batchIndex = 1; // every engine sees the same batches
      const { engine, model, cg, trainer, stream, start, end } = r;
      const step = () => {
        const t0 = performance.now();
        cg.renew();
        const loss = model.buildBatchLoss(cg, batchOf(batch, batchIndex++), vocab);
        const t1 = performance.now();
        prof.build += t1 - t0;
        nodes += cg.size;
        start.record(stream);
        engine.backward(loss);
        engine.update(trainer);
        end.record(stream);
        const t2 = performance.now();
        const value = engine.value(loss)[0]!;
        prof.syncWait += performance.now() - t2;
        prof.gpuSpan += end.elapsedMsSince(start);
        if (!Number.isFinite(value)) throw new Error(`${r.kind}: loss became ${value} at batch size ${batch}`);
      };
      // warm-up: layouts, pinned buffers, cuBLAS heuristics
      for (let w = 0; w < Math.min(3, perRepeat) + 1; w++) step();
      for (const k of Object.keys(prof) as (keyof Profile)[]) prof[k] = 0;
      nodes = 0;
      const host0 = engine instanceof AutobatchGpuEngine ? { ...engine.hostTime } : null;
      return { r, prof, step, host0, before: launchCounts(engine), times: [] as number[], nodes: () => nodes };
    });
    for (let rep = 0; rep < repeats; rep++) {
      for (const st of state) {
        const t0 = performance.now();
        for (let s = 0; s < perRepeat; s++) st.step();
        st.times.push((performance.now() - t0) / perRepeat);
      }
    }
    for (const st of state) {
      const { engine, kind } = st.r;
      const after = launchCounts(engine);
      const steps = repeats * perRepeat;
      const prof = st.prof;
      if (engine instanceof AutobatchGpuEngine && st.host0) {
        prof.plan = engine.hostTime.plan - st.host0.plan;
        prof.encode = engine.hostTime.encode - st.host0.encode;
        prof.issue = engine.hostTime.issue - st.host0.issue;
      }
      for (const k of Object.keys(prof) as (keyof Profile)[]) prof[k] /= steps;
      const per = (k: keyof typeof after) => (after[k] - st.before[k]) / steps;
      const ms = median(st.times);
      const row: Row = {
        engine: kind,
        batch,
        sentencesPerSecond: (1000 * batch) / ms,
        msPerBatch: ms,
        repeats: st.times,
        nodesPerBatch: st.nodes() / steps,
        planBatches: engine instanceof AutobatchGpuEngine ? (engine.lastForwardPlan?.batchCount ?? null) : null,
        kernelsPerBatch: per("kernels"),
        cublasCallsPerBatch: per("cublas"),
        copiesPerBatch: per("copies"),
        launchesPerBatch: per("kernels") + per("cublas") + per("copies"),
        profile: { ...prof },
        issueCost: null,
      };
      // extra untimed steps with the device wrapped (after the averages above are taken)
      if (engine instanceof AutobatchGpuEngine) row.issueCost = measureIssue(engine, st.step, perRepeat);
      const issueCost = row.issueCost;
      const shown = row.profile;
      rows.push(row);
      console.log(
        `${kind.padEnd(23)} batch ${String(batch).padStart(3)}: ${row.sentencesPerSecond.toFixed(1).padStart(8)} sent/s, ` +
          `${ms.toFixed(2)} ms/batch, ${Math.round(row.nodesPerBatch)} nodes, ${Math.round(row.launchesPerBatch)} launches ` +
          `(${Math.round(row.kernelsPerBatch)} kernels, ${Math.round(row.cublasCallsPerBatch)} cuBLAS) ` +
          `| build ${shown.build.toFixed(2)} plan ${shown.plan.toFixed(2)} encode ${shown.encode.toFixed(2)} ` +
          `issue ${shown.issue.toFixed(2)} wait ${shown.syncWait.toFixed(2)} gpu ${shown.gpuSpan.toFixed(2)} ms` +
          (issueCost
            ? ` | µs per kernel ${issueCost.kernelUs.toFixed(1)}, GEMM ${issueCost.gemmUs.toFixed(1)}, ` +
              `memset ${issueCost.fillUs.toFixed(1)}, upload ${issueCost.uploadUs.toFixed(1)}`
            : ""),
      );
    }
  }
} finally {
  for (const r of running) {
    r.start.destroy();
    r.end.destroy();
    r.engine.dispose();
  }
}

/** Host µs per command kind over `steps` more steps, by wrapping the device's run and upload (then restoring them). */
function measureIssue(engine: AutobatchGpuEngine, step: () => void, steps: number): IssueCost {
  const dev = engine.device as CudaAutobatchDevice;
  const run = dev.run;
  const upload = dev.upload;
  const t = { kernel: 0, gemm: 0, fill: 0, upload: 0 };
  const n = { kernel: 0, gemm: 0, fill: 0, upload: 0 };
  dev.run = (c) => {
    const t0 = performance.now();
    run.call(dev, c);
    t[c.kind] += performance.now() - t0;
    n[c.kind]++;
  };
  dev.upload = (offset, words) => {
    const t0 = performance.now();
    upload.call(dev, offset, words);
    t.upload += performance.now() - t0;
    n.upload++;
  };
  try {
    for (let s = 0; s < steps; s++) step();
  } finally {
    dev.run = run;
    dev.upload = upload;
  }
  const us = (k: keyof typeof t) => (n[k] === 0 ? 0 : (1000 * t[k]) / n[k]);
  return { kernelUs: us("kernel"), gemmUs: us("gemm"), fillUs: us("fill"), uploadUs: us("upload") };
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
    benchmark: "batching",
    command: `node --import tsx bench/batching.ts${dataFile ? ` --data ${dataFile}` : ""}`,
    date: new Date().toISOString(),
    device,
    machine: machine(),
    data: source,
    trees: trees.length,
    vocabulary: vocab.size,
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
