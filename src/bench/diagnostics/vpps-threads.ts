/**
 * `vpps bench vpps threads`: the VPPS host pipeline without the GPU. The main thread builds Tree-LSTM batches
 * (hidden 256, SST) and hands them to `k` schedule workers (SchedulePool, as Vpps.fb does), or schedules them itself
 * (k = 0). Reports, per k and batch size, the main thread's graph-build ns/node (timed around buildBatchLoss only),
 * its snapshot/post and blocked time, the workers' ns/node, and batches/s of the whole pipeline: where the host limit
 * of VPPS training lies, and whether busy workers slow the main thread down. Run it on the machine whose cores you
 * care about (the GPU host). Prints a table (no result file: the numbers depend on the machine's load; quote them
 * with the machine named).
 */
import { availableParallelism, cpus } from "node:os";
import { H100_SXM } from "../../cuda/hw/device-model.js";
import { Vocabulary } from "../../data/vocab.js";
import { createModelLayout, planVpps, SchedulePool, VppsScheduler } from "../../engines/vpps/index.js";
import { ComputationGraph } from "../../graph/graph.js";
import { onChipMatrices } from "../../model/parameters.js";
import { TreeLstmModel } from "../../models/treelstm/model.js";
import { median } from "../common.js";
import { batchAt, loadBenchTrees } from "../trees.js";

export interface VppsThreadsOptions {
  dataFile?: string;
  workers: number[];
  batches: number[];
}

/** Nodes per timed repetition and repetitions per (k, batch); the median repetition is reported. */
const REP_NODES = 400_000;
const REPS = 5;

export function runVppsThreads(o: VppsThreadsOptions): number {
  const { trees, source } = loadBenchTrees(o.dataFile, 8192);
  const vocab = Vocabulary.fromTrees(trees);
  const model = new TreeLstmModel({ vocabSize: vocab.size, embed: 256, hidden: 256, seed: 1 });
  const matrices = onChipMatrices(model.params);
  const plan = planVpps(matrices, H100_SXM);

  console.log(`VPPS host pipeline (no GPU): Tree-LSTM H=256 E=256 on the ${plan.device.name} plan (${plan.ctas} CTAs)`);
  console.log(`data: ${source}; ${cpus()[0]?.model ?? "?"}, ${availableParallelism()} cores, node ${process.version}`);
  console.log(
    `node flags: ${process.execArgv.filter((a) => a.startsWith("--") && !a.startsWith("--import")).join(" ") || "(none)"}\n`,
  );
  console.log(
    "workers  batch  build ns/node  post ms/batch  blocked ms/batch  schedule ns/node  batches/s  sentences/s",
  );

  for (const k of o.workers) {
    const pool = k > 0 ? new SchedulePool<number>({ workers: k, params: model.params.all, plans: [plan] }) : undefined;
    const scheduler = k === 0 ? new VppsScheduler(createModelLayout(model.params.all, plan)) : undefined;
    try {
      for (const batch of o.batches) {
        const graphs = [new ComputationGraph(), new ComputationGraph(), new ComputationGraph()];
        let seq = 0;
        const rep = (count: number) => {
          let build = 0;
          let nodes = 0;
          let scheduleMs = 0;
          const s0 = pool ? { ...pool.stats } : undefined;
          const t0 = performance.now();
          for (let j = 0; j < count; j++) {
            const cg = graphs[seq % 3]!;
            cg.renew();
            const b0 = performance.now();
            const loss = model.buildBatchLoss(cg, batchAt(trees, batch, seq), vocab);
            build += performance.now() - b0;
            nodes += cg.size;
            seq++;
            if (pool) {
              pool.post(cg, loss, 0, seq);
              for (;;) {
                const b = pool.take(pool.pending > pool.size);
                if (b === undefined) break;
                scheduleMs += b.scheduleMs;
                pool.release(b);
              }
            } else {
              const s1 = performance.now();
              scheduler!.schedule(cg, loss);
              scheduleMs += performance.now() - s1;
            }
          }
          if (pool) {
            for (;;) {
              const b = pool.take(true);
              if (b === undefined) break;
              scheduleMs += b.scheduleMs;
              pool.release(b);
            }
          }
          const wall = performance.now() - t0;
          return {
            buildNs: (1e6 * build) / nodes,
            postMs: pool ? (pool.stats.snapshotMs - s0!.snapshotMs) / count : 0,
            blockedMs: pool ? (pool.stats.waitMs - s0!.waitMs) / count : 0,
            scheduleNs: (1e6 * scheduleMs) / nodes,
            batchesPerS: count / (wall / 1000),
          };
        };
        const probe = new ComputationGraph();
        model.buildBatchLoss(probe, batchAt(trees, batch, 0), vocab);
        const count = Math.max(10, Math.round(REP_NODES / probe.size));
        rep(count); // warm-up
        const runs = Array.from({ length: REPS }, () => rep(count));
        const med = (f: (r: (typeof runs)[number]) => number) => median(runs.map(f));
        const bps = med((r) => r.batchesPerS);
        console.log(
          [
            String(k).padStart(7),
            String(batch).padStart(6),
            med((r) => r.buildNs)
              .toFixed(0)
              .padStart(14),
            med((r) => r.postMs)
              .toFixed(3)
              .padStart(14),
            med((r) => r.blockedMs)
              .toFixed(3)
              .padStart(17),
            med((r) => r.scheduleNs)
              .toFixed(0)
              .padStart(17),
            bps.toFixed(0).padStart(10),
            (bps * batch).toFixed(0).padStart(12),
          ].join(" "),
        );
      }
    } finally {
      pool?.dispose();
    }
  }
  return 0;
}
