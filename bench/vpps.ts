/**
 * VPPS benchmark: Tree-LSTM training (forward + backward + SGD update in one persistent-kernel launch per batch) in
 * sentences/s on SST training trees, hidden 256, embedding 256, batch sizes 1, 2, 4, …, 128, for the fused and the
 * ops cell. Per batch size it reports where time goes: host ms building the graph, scheduling + encoding, and
 * issuing (copies, memsets, launch, the wait for the previous batch), against the kernel's ms (CUDA events); also
 * the JIT cost (first compile, and again through the kernel cache), the profile-guided rpw choice, and the weight
 * bytes read from DRAM per 128 sentences (weights are loaded into registers once per launch). Other engines'
 * numbers are read from bench/results/batching-<device>.json when present.
 *
 *   node --import tsx bench/vpps.ts [--data <SST train.txt>] [--quick] [--cell fused|ops|both] [--cache <dir>]
 *                                   [--workers N]
 *
 * --workers: schedule worker threads (Vpps `scheduleWorkers`; 0 schedules inside fb; default: the engine's).
 *
 * Writes bench/results/vpps-<device>.json (not with --quick).
 */
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TreeNode } from "../src/data/tree.js";
import { Vocabulary } from "../src/data/vocab.js";
import { CpuEngine } from "../src/engines/cpu.js";
import { type VariantInfo, Vpps } from "../src/engines/vpps/engine.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { type CellFormulation, TreeLstmModel } from "../src/models/treelstm.js";
import { batchAt, deviceSlug, loadBenchTrees, machine, ROOT, writeResult } from "./common.js";

const argv = process.argv.slice(2);
const arg = (name: string): string | undefined => {
  const i = argv.indexOf(name);
  if (i < 0) return undefined;
  const v = argv[i + 1];
  if (!v) throw new Error(`${name} needs a value`);
  return v;
};
const quick = argv.includes("--quick");
const dataFile = arg("--data");
const cellArg = arg("--cell") ?? "both";
if (!["fused", "ops", "both"].includes(cellArg)) throw new Error(`--cell must be fused, ops or both; got ${cellArg}`);
const CELLS: CellFormulation[] = cellArg === "both" ? ["fused", "ops"] : [cellArg as CellFormulation];
const cacheDir = arg("--cache") ?? mkdtempSync(join(tmpdir(), "vpps-bench-kernels-"));
const workersArg = arg("--workers");
const workers = workersArg === undefined ? undefined : Number(workersArg);
if (workers !== undefined && !(Number.isInteger(workers) && workers >= 0)) {
  throw new Error(`--workers must be an integer >= 0; got ${workersArg}`);
}
const workerOption = workers === undefined ? {} : { scheduleWorkers: workers };

const HIDDEN = 256;
const EMBED = 256;
const BATCHES = quick ? [1, 8, 128] : [1, 2, 4, 8, 16, 32, 64, 128];
/** Sentences timed per batch size (at least 20 batches), after 5 untimed batches. */
const SENTENCES = quick ? 1024 : 4096;
const { trees, source } = loadBenchTrees(dataFile, 8192);
const vocab = Vocabulary.fromTrees(trees);

const batchOf = (size: number, k: number): TreeNode[] => batchAt(trees, size, k);

interface Row {
  cell: CellFormulation;
  batch: number;
  sentencesPerSecond: number;
  msPerBatch: number;
  nodesPerBatch: number;
  /** Host ms per batch. */
  buildMs: number;
  /** Scheduling + encoding; with schedule workers, the workers' time (summed over threads). */
  scheduleMs: number;
  /** Schedule worker threads (0: scheduled inside fb). */
  workers: number;
  /** With workers, main thread: snapshotting and posting graphs, and blocked waiting for a script. */
  snapshotMs: number;
  waitMs: number;
  /** fb's submit: pinned copy, memsets, launch, and the wait for the previous batch. */
  submitMs: number;
  /** Kernel ms per batch (CUDA events around the launch). */
  kernelMs: number;
  scheduleNsPerNode: number;
  weightBytesPer128: number;
  vsAutobatchAgenda: number | null;
}

const rows: Row[] = [];
const jit: Record<string, { first: VariantInfo[]; cached: VariantInfo[]; createMs: [number, number] }> = {};
const chosen: Record<string, VariantInfo | undefined> = {};
const firstLoss: Record<string, { cpu: number; vpps: number }> = {};

function other(): Map<string, number> {
  const out = new Map<string, number>();
  const file = join(ROOT, "bench", "results", "batching-h100.json");
  if (!existsSync(file)) return out;
  const data = JSON.parse(readFileSync(file, "utf8")) as {
    rows: { engine: string; batch: number; sentencesPerSecond: number }[];
  };
  for (const r of data.rows) out.set(`${r.engine}:${r.batch}`, r.sentencesPerSecond);
  return out;
}
const others = other();

let deviceName = "unknown";
for (const cell of CELLS) {
  const makeModel = () => new TreeLstmModel({ vocabSize: vocab.size, embed: EMBED, hidden: HIDDEN, seed: 1, cell });
  // JIT: the first create compiles every variant; a second one reads them from the cache
  const lines: string[] = [];
  const log = (l: string) => {
    lines.push(l);
    console.log(l);
  };
  let t = performance.now();
  const first = await Vpps.create(makeModel().params, { cacheDir, log, ...workerOption });
  const firstMs = performance.now() - t;
  const firstInfo = first.variantInfo.map((v) => ({ ...v }));
  first.dispose();
  const model = makeModel();
  t = performance.now();
  const vpps = await Vpps.create(model.params, {
    cacheDir,
    log,
    timing: true,
    learningRate: 0.05,
    clip: 5,
    ...workerOption,
  });
  jit[cell] = {
    first: firstInfo,
    cached: vpps.variantInfo.map((v) => ({ ...v })),
    createMs: [firstMs, performance.now() - t],
  };
  deviceName = vpps.ctx.deviceName;
  const weightFloats = vpps.plan.matrices.reduce((s, m) => s + m.rows * m.cols, 0);

  // correctness guard: the first batch of 8 against the CPU engine, before any update
  {
    const ref = makeModel();
    const cpu = new CpuEngine(ref.params).forwardScalar(
      ref.buildBatchLoss(new ComputationGraph(), batchOf(8, 0), vocab),
    );
    const cg = new ComputationGraph();
    vpps.fb(cg, model.buildBatchLoss(cg, batchOf(8, 0), vocab));
    firstLoss[cell] = { cpu, vpps: await vpps.syncLatestLoss() };
    console.log(`${cell}: first batch of 8: CPU loss ${cpu}, VPPS ${firstLoss[cell]!.vpps}`);
  }
  // profile-guided rpw: run batches of 8 until a variant is chosen
  for (let k = 1; vpps.chosenVariant === undefined; k++) {
    const cg = new ComputationGraph();
    vpps.fb(cg, model.buildBatchLoss(cg, batchOf(8, k), vocab));
  }
  await vpps.syncLatestLoss();
  chosen[cell] = vpps.chosenVariant;

  for (const batch of BATCHES) {
    const count = Math.max(20, Math.ceil(SENTENCES / batch));
    const graphs = [new ComputationGraph(), new ComputationGraph(), new ComputationGraph()];
    const run = (k: number, stats: { build: number }) => {
      const cg = graphs[k % 3]!; // a graph stays untouched while its batch may still be in flight
      cg.renew();
      const t0 = performance.now();
      const loss = model.buildBatchLoss(cg, batchOf(batch, k), vocab);
      stats.build += performance.now() - t0;
      return vpps.fb(cg, loss);
    };
    const scratch = { build: 0 };
    for (let k = 0; k < 5; k++) run(k, scratch);
    await vpps.syncLatestLoss();
    const s0 = { ...vpps.stats };
    const host = { build: 0 };
    const t0 = performance.now();
    let last = 0;
    for (let k = 0; k < count; k++) last = run(5 + k, host);
    last = await vpps.syncLatestLoss();
    const wall = performance.now() - t0;
    if (!Number.isFinite(last)) throw new Error(`${cell} batch ${batch}: the loss became ${last}`);
    const s1 = vpps.stats;
    const per = (x: number) => x / count;
    const sps = (count * batch) / (wall / 1000);
    const nodes = per(s1.nodes - s0.nodes);
    const agenda = others.get(`autobatch-agenda-cublas:${batch}`) ?? others.get(`autobatch-agenda:${batch}`);
    const row: Row = {
      cell,
      batch,
      sentencesPerSecond: sps,
      msPerBatch: wall / count,
      nodesPerBatch: nodes,
      buildMs: per(host.build),
      scheduleMs: per(s1.scheduleMs - s0.scheduleMs),
      workers: vpps.scheduleWorkers,
      snapshotMs: per(s1.snapshotMs - s0.snapshotMs),
      waitMs: per(s1.waitMs - s0.waitMs),
      submitMs: per(s1.submitMs - s0.submitMs),
      kernelMs: (s1.kernelMs - s0.kernelMs) / Math.max(1, s1.timedBatches - s0.timedBatches),
      scheduleNsPerNode: (1e6 * per(s1.scheduleMs - s0.scheduleMs)) / Math.max(1, nodes),
      weightBytesPer128: 4 * weightFloats * (128 / batch),
      vsAutobatchAgenda: agenda ? sps / agenda : null,
    };
    rows.push(row);
    console.log(
      `${cell} batch ${String(batch).padStart(3)}: ${sps.toFixed(0).padStart(7)} sentences/s, ` +
        `${row.msPerBatch.toFixed(3)} ms/batch (build ${row.buildMs.toFixed(3)}, schedule ${row.scheduleMs.toFixed(3)} = ` +
        `${row.scheduleNsPerNode.toFixed(0)} ns/node${row.workers > 0 ? ` on ${row.workers} workers, snapshot ${row.snapshotMs.toFixed(3)}, wait ${row.waitMs.toFixed(3)}` : ""}, ` +
        `submit ${row.submitMs.toFixed(3)}; kernel ${row.kernelMs.toFixed(3)}), ` +
        `${nodes.toFixed(0)} nodes${agenda ? `, ${row.vsAutobatchAgenda!.toFixed(2)}x autobatch agenda` : ""}`,
    );
  }
  vpps.dispose();
}

const result = {
  benchmark: "vpps",
  command: `node --import tsx bench/vpps.ts ${argv.join(" ")}`.trim(),
  date: new Date().toISOString(),
  device: deviceName,
  machine: machine(),
  data: source,
  trees: trees.length,
  vocabulary: vocab.size,
  model: { name: "treelstm", hidden: HIDDEN, embed: EMBED, optimizer: "sgd", clip: 5 },
  method:
    "per batch: build the graph, then Vpps.fb (schedule, encode, one pinned copy, memsets, one launch, returning the " +
    "previous batch's loss); the host builds batch k+1 while the GPU runs batch k. Throughput = sentences / wall " +
    "time of all batches of a size (5 untimed first), ending with a synchronize. Kernel ms from CUDA events around " +
    "each launch. Weight bytes per 128 sentences: matrices read from DRAM once per launch (and written back once). " +
    "With schedule workers (a row's `workers` > 0) fb snapshots the graph and posts it to a worker thread, and " +
    "launches the batches whose scripts are ready, in order; scheduleMs is then the workers' time.",
  jit,
  chosenVariant: chosen,
  firstBatchLoss: firstLoss,
  rows,
  targets: { batch1: 5000, batch8: 15000, batch128: 30000, vsAgendaUpTo32: 3 },
};
if (!quick) {
  const slug = deviceSlug(deviceName);
  console.log(`wrote ${writeResult(`vpps-${slug}`, result)}`);
} else {
  console.log(JSON.stringify(rows.map((r) => [r.cell, r.batch, Math.round(r.sentencesPerSecond)])));
}
