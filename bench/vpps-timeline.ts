/**
 * Where VPPS training loses time between kernels: trains Tree-LSTM batches (hidden 256, embedding 256, fused cell,
 * SGD) as bench/vpps.ts does, with CUDA events around every batch (`Vpps.onKernelTime`), and records per batch the
 * kernel time, the GPU's idle time before it, and what the main thread did (graph build, `fb`, and how long `fb`
 * waited for a schedule worker). The same batches are trained `--passes` times in one process, so the first pass
 * shows the warm-up (V8 optimising the workers, heap growth) against the later ones. Session 7 found with it that
 * the GPU idled for 0.3-5 ms at a time at batch 1 while the main thread waited for one late worker.
 *
 * `npm run bench:vpps-timeline -- --data <SST train.txt> [--batch 1] [--batches 3000] [--passes 3] [--workers N]`
 * Writes bench/results/vpps-timeline-<device>.json.
 */
import { parseArgs } from "node:util";
import { Vocabulary } from "../src/data/vocab.js";
import { Vpps } from "../src/engines/vpps/vpps.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { TreeLstmModel } from "../src/models/treelstm/model.js";
import { batchAt, deviceSlug, loadBenchTrees, median, resultHeader, writeResult } from "./common.js";
import { requireGpu } from "./engine-timing.js";

const usage = (message: string): never => {
  console.error(`bench/vpps-timeline.ts: ${message}\nusage: ${USAGE}`);
  process.exit(2);
};
const USAGE =
  "npm run bench:vpps-timeline -- [--data <SST train.txt>] [--batch 1] [--batches 3000] [--passes 3] [--workers N]";
let values: { data?: string; batch?: string; batches?: string; passes?: string; workers?: string } = {};
try {
  values = parseArgs({
    options: {
      data: { type: "string" },
      batch: { type: "string", default: "1" },
      batches: { type: "string", default: "3000" },
      passes: { type: "string", default: "3" },
      workers: { type: "string" },
    },
  }).values;
} catch (e) {
  usage((e as Error).message);
}
const positive = (name: string, v: string | undefined): number => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) usage(`--${name} must be a whole number >= 1; got ${v}`);
  return n;
};
const BATCH = positive("batch", values.batch);
const BATCHES = positive("batches", values.batches);
const PASSES = positive("passes", values.passes);
const workers = values.workers === undefined ? undefined : Number(values.workers);
if (workers !== undefined && !(Number.isInteger(workers) && workers >= 0)) {
  usage(`--workers must be a whole number >= 0; got ${values.workers}`);
}
requireGpu("bench/vpps-timeline.ts");

const { trees, source } = loadBenchTrees(values.data, 8192);
const vocab = Vocabulary.fromTrees(trees);
const model = new TreeLstmModel({ vocabSize: vocab.size, embed: 256, hidden: 256, seed: 1, cell: "fused" });
const lines: string[] = [];
const vpps = await Vpps.create(model.params, {
  instrument: { timing: true },
  training: { learningRate: 0.05, clip: 5 },
  log: (l) => lines.push(l),
  ...(workers !== undefined ? { host: { scheduleWorkers: workers } } : {}),
});

interface Timed {
  kernelMs: number;
  gapMs: number | undefined;
}
let timed: Timed[] = [];
vpps.onKernelTime = (_variant, kernelMs, gapMs) => timed.push({ kernelMs, gapMs });

const graphs = [new ComputationGraph(), new ComputationGraph(), new ComputationGraph()];
const host = { build: [] as number[], fb: [] as number[], waitMs: 0 };
const train = (k: number): void => {
  const cg = graphs[k % 3]!;
  cg.renew();
  const t0 = performance.now();
  const loss = model.buildBatchLoss(cg, batchAt(trees, BATCH, k), vocab);
  const t1 = performance.now();
  vpps.fb(cg, loss);
  host.build.push(t1 - t0);
  host.fb.push(performance.now() - t1);
};

// the variant profile, on batches after the timed ones
for (let k = 0; vpps.chosenVariant === undefined && vpps.variantInfo.length > 1; k++) train(BATCHES + k);
await vpps.syncLatestLoss();

const q = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? Number.NaN : s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
};
const us = (ms: number) => Number((ms * 1000).toFixed(1));
const passes: Record<string, unknown>[] = [];
for (let pass = 0; pass < PASSES; pass++) {
  timed = [];
  host.build = [];
  host.fb = [];
  const wait0 = vpps.stats.waitMs;
  const t0 = performance.now();
  for (let k = 0; k < BATCHES; k++) train(k);
  await vpps.syncLatestLoss();
  const wall = performance.now() - t0;
  // the first batch's gap reaches back to the previous pass (or the profile): left out
  const gaps = timed.slice(1).flatMap((t) => (t.gapMs === undefined ? [] : [t.gapMs]));
  const long = gaps.filter((g) => g > 0.05);
  const row = {
    pass: pass + 1,
    sentencesPerSecond: Math.round((BATCHES * BATCH) / (wall / 1000)),
    usPerBatch: us(wall / BATCHES),
    kernelUsMedian: us(median(timed.map((t) => t.kernelMs))),
    gapUs: {
      mean: us(gaps.reduce((a, b) => a + b, 0) / Math.max(1, gaps.length)),
      median: us(q(gaps, 0.5)),
      p99: us(q(gaps, 0.99)),
      max: us(Math.max(0, ...gaps)),
    },
    gapsOver50us: long.length,
    usPerBatchInGapsOver50us: us(long.reduce((a, b) => a + b, 0) / Math.max(1, gaps.length)),
    hostUs: {
      buildMedian: us(median(host.build)),
      fbMedian: us(median(host.fb)),
      fbP99: us(q(host.fb, 0.99)),
      workerWaitPerBatch: us((vpps.stats.waitMs - wait0) / BATCHES),
    },
  };
  passes.push(row);
  console.log(
    `pass ${row.pass}: ${row.sentencesPerSecond} sentences/s, ${row.usPerBatch} us/batch, kernel ${row.kernelUsMedian} us; ` +
      `GPU idle before a kernel: median ${row.gapUs.median} us, mean ${row.gapUs.mean}, p99 ${row.gapUs.p99}, max ` +
      `${row.gapUs.max}; ${row.gapsOver50us} gaps over 50 us (${row.usPerBatchInGapsOver50us} us per batch); main ` +
      `thread: build ${row.hostUs.buildMedian} us, fb ${row.hostUs.fbMedian} (p99 ${row.hostUs.fbP99}), waiting for ` +
      `workers ${row.hostUs.workerWaitPerBatch} us per batch`,
  );
}
const device = vpps.ctx.deviceName;
vpps.dispose();
writeResult(`vpps-timeline-${deviceSlug(device)}`, {
  ...resultHeader({
    benchmark: "vpps-timeline",
    command: `node --import tsx bench/vpps-timeline.ts ${process.argv.slice(2).join(" ")}`.trim(),
    device,
    data: source,
    trees: trees.length,
    vocabulary: vocab.size,
  }),
  model: { name: "treelstm", hidden: 256, embed: 256, cell: "fused", optimizer: "sgd" },
  batch: BATCH,
  batchesPerPass: BATCHES,
  workers: vpps.scheduleWorkers,
  variant: lines.filter((l) => l.includes("keeping")),
  method:
    "The same BATCHES batches (the data's first) trained PASSES times in one process after the variant profile; " +
    "CUDA events around every batch: kernel time, and the GPU's idle time from the previous kernel's end (copies, " +
    "memsets, waiting for the host). Main thread: graph build and fb per batch, and fb's time waiting for a worker.",
  passes,
});
