/**
 * `vpps bench vpps timeline`: where VPPS training loses time between kernels. Trains Tree-LSTM batches (hidden 256,
 * embedding 256, fused cell, SGD) as `vpps bench vpps timing` does, with CUDA events around every batch
 * (`Vpps.onKernelTime`), and records per batch the kernel time, the GPU's idle time before it, and what the main
 * thread did (graph build, `fb`, and how long `fb` waited for a schedule worker). The same batches are trained
 * `passes` times in one process, so the first pass shows the warm-up (V8 optimising the workers, heap growth)
 * against the later ones. Writes vpps-timeline.json.
 */
import { Vocabulary } from "../../data/vocab.js";
import { Vpps } from "../../engines/vpps/index.js";
import { ComputationGraph } from "../../graph/graph.js";
import { TreeLstmModel } from "../../models/treelstm/model.js";
import { median, resultHeader } from "../common.js";
import { deviceSlug, requireGpu, resultsDir } from "../device.js";
import { writeJson } from "../output.js";
import { batchAt, loadBenchTrees } from "../trees.js";

export interface VppsTimelineOptions {
  dataFile?: string;
  /** Trees per batch, batches per pass, passes. */
  batch: number;
  batches: number;
  passes: number;
  workers?: number;
  out?: string;
  command: string;
}

interface Timed {
  kernelMs: number;
  gapMs: number | undefined;
}

export async function runVppsTimeline(o: VppsTimelineOptions): Promise<number> {
  requireGpu("vpps bench vpps timeline");
  const { batch: BATCH, batches: BATCHES, passes: PASSES } = o;
  const { trees, source } = loadBenchTrees(o.dataFile, 8192);
  const vocab = Vocabulary.fromTrees(trees);
  const model = new TreeLstmModel({ vocabSize: vocab.size, embed: 256, hidden: 256, seed: 1, cell: "fused" });
  const lines: string[] = [];
  const vpps = await Vpps.create(model.params, {
    instrument: { timing: true },
    training: { learningRate: 0.05, clip: 5 },
    log: (l) => lines.push(l),
    ...(o.workers !== undefined ? { host: { scheduleWorkers: o.workers } } : {}),
  });
  let timed: Timed[] = [];
  vpps.onKernelTime = (_variant, kernelMs, gapMs) => timed.push({ kernelMs, gapMs });

  const graphs = [new ComputationGraph(), new ComputationGraph(), new ComputationGraph()];
  const host = { build: [] as number[], fb: [] as number[] };
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

  const q = (xs: number[], p: number) => {
    const s = [...xs].sort((a, b) => a - b);
    return s.length === 0 ? Number.NaN : s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
  };
  const us = (ms: number) => Number((ms * 1000).toFixed(1));
  const passes: Record<string, unknown>[] = [];
  let device: string;
  let workers: number;
  try {
    // the variant profile, on batches after the timed ones
    for (let k = 0; vpps.chosenVariant === undefined && vpps.variantInfo.length > 1; k++) train(BATCHES + k);
    await vpps.syncLatestLoss();
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
    device = vpps.ctx.deviceName;
    workers = vpps.scheduleWorkers;
  } finally {
    vpps.dispose();
  }
  const path = writeJson(resultsDir(deviceSlug(device), o.out), "vpps-timeline", {
    ...resultHeader({
      benchmark: "vpps-timeline",
      command: o.command,
      device,
      data: source,
      trees: trees.length,
      vocabulary: vocab.size,
    }),
    model: { name: "treelstm", hidden: 256, embed: 256, cell: "fused", optimizer: "sgd" },
    batch: BATCH,
    batchesPerPass: BATCHES,
    workers,
    variant: lines.filter((l) => l.includes("keeping")),
    method:
      "The same BATCHES batches (the data's first) trained PASSES times in one process after the variant profile; " +
      "CUDA events around every batch: kernel time, and the GPU's idle time from the previous kernel's end (copies, " +
      "memsets, waiting for the host). Main thread: graph build and fb per batch, and fb's time waiting for a worker.",
    passes,
  });
  console.log(`wrote ${path}`);
  return 0;
}
