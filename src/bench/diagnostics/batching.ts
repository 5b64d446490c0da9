/**
 * `vpps bench autobatch batching`: Tree-LSTM training (forward + backward + SGD update, the loss read back every
 * batch) in sentences/s on SST training trees, hidden 256, embedding 256, for batch sizes 1, 2, 4, …, 128, with the
 * eager engine (one launch per node) and the autobatch engine with both strategies (DyNet's depth- and agenda-based
 * batching, with the engine's GEMM kernels), and the agenda engine with cuBLAS products, in one run, the engines'
 * repeats alternating. Before timing, each engine's loss on the first batch of 8 is compared with the CPU engine's.
 * For the autobatch engine it also reports where the time of a batch goes: host time building the graph, planning,
 * encoding the tables and commands, issuing them (koffi calls), the wait for the device at the loss read, and the
 * device's span (CUDA events around the batch's work). Writes batching.json (not with --quick).
 */
import { CpuEngine } from "../../engines/cpu.js";
import { ComputationGraph } from "../../graph/graph.js";
import { resultHeader } from "../common.js";
import { deviceSlug, requireGpu, resultsDir } from "../device.js";
import {
  type BaselineRow,
  type BaselineRun,
  baselineFirstLoss,
  disposeBaseline,
  GPU_BASELINES,
  startBaseline,
  timeBaselines,
} from "../engine-timing.js";
import { checkFirstLoss } from "../first-loss.js";
import { benchModel } from "../models/index.js";
import { markdownTable, writeJson } from "../output.js";

export interface BatchingOptions {
  dataFile?: string;
  quick: boolean;
  out?: string;
  command: string;
}

const SIZE = { hidden: 256, embed: 256 };

export function runBatching(o: BatchingOptions): number {
  requireGpu("vpps bench autobatch batching");
  const BATCHES = o.quick ? [1, 8, 64] : [1, 2, 4, 8, 16, 32, 64, 128];
  const task = benchModel("treelstm").load(o.dataFile, 4096);
  const makeNet = () => task.net(SIZE, "fused");
  const batchOf = task.batch;

  // the reference loss of the first batch of 8, before any update
  const reference = makeNet();
  const cpuLoss = new CpuEngine(reference.params).forwardScalar(
    reference.batchLoss(new ComputationGraph(), batchOf(8, 0)),
  );

  const rows: BaselineRow[] = [];
  const firstLoss: Record<string, number> = { cpu: cpuLoss };
  // all engines at once, so that each batch size's repeats can alternate between them: slow phases of a shared
  // machine then hit every engine alike
  const running: BaselineRun<unknown>[] = [];
  /** Engines whose first-batch loss disagreed with the CPU engine's (not timed). */
  const failed: string[] = [];
  let device = "unknown";
  try {
    for (const kind of GPU_BASELINES) {
      const r = startBaseline(kind, makeNet());
      device = r.gpu!.ctx.deviceName;
      running.push(r as BaselineRun<unknown>);
      const loss = baselineFirstLoss(r, batchOf(8, 0));
      const { check, refusal } = checkFirstLoss(kind, { batch: 8, cpu: cpuLoss, loss, tolerance: 1e-4 });
      firstLoss[kind] = loss;
      console.log(
        `${kind}: first batch of 8: loss ${loss.toFixed(6)} (cpu ${cpuLoss.toFixed(6)}), rel. error ${check.relativeError.toExponential(2)}`,
      );
      if (refusal !== null) {
        console.error(refusal);
        failed.push(kind);
        disposeBaseline(running.pop()!);
      }
    }
    for (const batch of BATCHES) rows.push(...timeBaselines(running, batch, { quick: o.quick, batchOf }));
  } finally {
    for (const r of running) disposeBaseline(r);
  }

  // the table: sentences/s per engine and batch size, and launches per batch
  const at = (kind: string, batch: number) => rows.find((r) => r.engine === kind && r.batch === batch);
  console.log(
    `\nTree-LSTM training, hidden ${SIZE.hidden}, embedding ${SIZE.embed}, ${task.source}, on ${device} (sentences/s; launches per batch)`,
  );
  const cell = (k: string, b: number) => {
    const r = at(k, b);
    return r ? `${r.sentencesPerSecond.toFixed(0)} (${Math.round(r.launchesPerBatch)})` : "–";
  };
  const table = BATCHES.map((b) => {
    const e = at("eager", b);
    const a = at("autobatch-agenda", b);
    const ratio = e && a ? `${(a.sentencesPerSecond / e.sentencesPerSecond).toFixed(1)}×` : "–";
    return [String(b), ...GPU_BASELINES.map((k) => cell(k, b)), ratio];
  });
  const head = ["batch", "eager", "autobatch depth", "autobatch agenda", "agenda, cuBLAS", "agenda / eager"];
  for (const line of markdownTable(head, table)) console.log(line);
  const e64 = at("eager", 64);
  const a64 = at("autobatch-agenda", 64);
  const target = e64 && a64 ? { eager: e64.sentencesPerSecond, agenda: a64.sentencesPerSecond } : null;
  if (target) {
    const ratio = target.agenda / target.eager;
    console.log(
      `\nissue target: agenda at batch 64 ≥ 10× eager at batch 64: ${ratio.toFixed(1)}× — ${ratio >= 10 ? "met" : "missed"}`,
    );
  }

  if (!o.quick || o.out !== undefined) {
    const path = writeJson(resultsDir(deviceSlug(device), o.out), "batching", {
      ...resultHeader({
        benchmark: "batching",
        command: o.command,
        device,
        data: task.source,
        trees: task.items,
        vocabulary: task.vocabulary,
      }),
      model: { name: "treelstm", cell: "fused", hidden: SIZE.hidden, embed: SIZE.embed, optimizer: "sgd" },
      method:
        "per batch: build the graph, backward (which runs forward), SGD update on the device, then read the loss " +
        "(one wait per batch); warm-up, then the median over repeats of (steps / steps' time). Launches = kernels + " +
        "cuBLAS calls + async copies/memsets per batch, the update's included. Profile: host ms per batch by stage, " +
        "the wait at the loss read, and the device's span between CUDA events recorded before backward and after " +
        "update. The engines run side by side: each batch size's repeats alternate between them. issueCost: host µs " +
        "per command kind, from extra untimed steps with the device's run/upload wrapped.",
      firstBatchLoss: { batch: 8, ...firstLoss },
      notTimed: failed,
      target: target && { ...target, ratio: target.agenda / target.eager, met: target.agenda / target.eager >= 10 },
      rows,
    });
    console.log(`wrote ${path}`);
  }
  return failed.length > 0 ? 1 : 0;
}
