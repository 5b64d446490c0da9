/**
 * `vpps bench parallel`: data-parallel scaling. For each configuration (Tree-LSTM on VPPS and on
 * autobatch, the BiLSTM tagger on autobatch), each per-GPU batch and each GPU count, it runs `vpps train … --gpus N
 * --json` as a user would (the launcher, NCCL, rank 0's timing), with VPPS_TIME_ALLREDUCE=1 so that the ranks time
 * their device all-reduces with CUDA events. Epoch 1 is the warm-up (compiles, caches); sentences/s is the median of
 * the later epochs' training time (rank 0's, evaluation excluded). Scaling efficiency compares N GPUs with N times
 * the fastest one-GPU run of the same model and per-GPU batch (for the Tree-LSTM: VPPS with its in-kernel update,
 * no reducer). The all-reduce share is the all-reduces' event time over the epoch's time: it includes the wait for
 * the slowest rank, which is what the step loses to it.
 */
import { spawn } from "node:child_process";
import { join } from "node:path";
import { getDriver, queryDeviceProperties } from "../cuda/index.js";
import { median, PACKAGE_ROOT } from "./common.js";
import { gpuDevice, requireGpu, resultsDir } from "./device.js";
import { BenchError } from "./errors.js";
import { markdownTable, Transcript, writeJson, writeOutput } from "./output.js";

export interface ParallelConfig {
  /** `treelstm-vpps`. */
  id: string;
  model: string;
  engine: string;
}

export const PARALLEL_CONFIGS: readonly ParallelConfig[] = [
  { id: "treelstm-vpps", model: "treelstm", engine: "vpps" },
  { id: "treelstm-autobatch", model: "treelstm", engine: "autobatch" },
  { id: "bilstm-autobatch", model: "bilstm", engine: "autobatch" },
];

export interface ParallelBenchOptions {
  configs?: readonly string[];
  /** GPU counts (default: 1, 2, 4, 8 as far as present). */
  gpus?: readonly number[];
  /** Per-GPU batch sizes (default 32, 128). */
  batches?: readonly number[];
  /** Timed epochs after the warm-up one (default 3). */
  repeats?: number;
  /** Data folders by model (default: the synthetic tasks). */
  data?: Readonly<Record<string, string | undefined>>;
  /** Extra `vpps train` flags for every run (e.g. `--hidden 128`). */
  trainArgs?: readonly string[];
  quick?: boolean;
  out?: string;
  command: string;
}

export interface ParallelRow {
  config: string;
  gpus: number;
  batchPerGpu: number;
  sentencesPerSecond: number;
  /** All epochs' sentences/s, warm-up first. */
  epochs: number[];
  /** Of the timed epochs' time, the device all-reduces' (median); null on one GPU. */
  allReduceShare: number | null;
  /** Against N times the fastest one-GPU run of the model at this per-GPU batch. */
  efficiency: number | null;
  speedup: number | null;
  error?: string;
}

interface TrainJson {
  epochs: { sentencesPerSecond: number; seconds: number }[];
  allReduceMs?: number[];
}

function runTrain(args: readonly string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(PACKAGE_ROOT, "bin", "vpps.js"), "train", ...args], {
      env: { ...process.env, VPPS_TIME_ALLREDUCE: "1" },
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => {
      stdout += d;
    });
    child.stderr.on("data", (d) => {
      stderr += d;
    });
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

export async function runParallelBench(o: ParallelBenchOptions): Promise<number> {
  requireGpu("vpps bench parallel");
  const driver = getDriver();
  const count = driver.deviceCount();
  const device = gpuDevice(queryDeviceProperties(driver, 0).name);
  const gpuCounts = (o.gpus ?? [1, 2, 4, 8]).filter((n) => n <= count);
  if (!gpuCounts.includes(1)) gpuCounts.unshift(1);
  const batches = o.batches ?? (o.quick ? [32] : [32, 128]);
  const repeats = o.repeats ?? (o.quick ? 1 : 3);
  const configs = PARALLEL_CONFIGS.filter((c) => (o.configs ?? PARALLEL_CONFIGS.map((x) => x.id)).includes(c.id));
  if (configs.length === 0) throw new BenchError("vpps bench parallel: no configuration chosen");
  const t = new Transcript();
  t.print(`# data-parallel scaling on ${count} × ${device.name}`, "", `command: ${o.command}`, "");
  const rows: ParallelRow[] = [];
  let failed = 0;
  for (const c of configs) {
    for (const b of batches) {
      for (const n of gpuCounts) {
        const args = [
          c.model,
          "--engine",
          c.engine,
          "--gpus",
          String(n),
          "--batch",
          String(b * n),
          "--epochs",
          String(1 + repeats),
          "--json",
          ...(o.data?.[c.model] ? ["--data", o.data[c.model]!] : []),
          ...(o.trainArgs ?? []),
        ];
        const r = await runTrain(args);
        const row: ParallelRow = {
          config: c.id,
          gpus: n,
          batchPerGpu: b,
          sentencesPerSecond: Number.NaN,
          epochs: [],
          allReduceShare: null,
          efficiency: null,
          speedup: null,
        };
        if (r.code !== 0) {
          failed++;
          row.error = r.stderr.trim().split("\n").at(-1) ?? `exit ${r.code}`;
          t.print(`${c.id} batch ${b}/GPU on ${n} GPU(s): failed: ${row.error}`);
        } else {
          const j = JSON.parse(r.stdout) as TrainJson;
          row.epochs = j.epochs.map((e) => e.sentencesPerSecond);
          const timed = j.epochs.slice(1);
          row.sentencesPerSecond = median(timed.map((e) => e.sentencesPerSecond));
          if (j.allReduceMs && n > 1) {
            row.allReduceShare = median(timed.map((e, i) => j.allReduceMs![i + 1]! / 1000 / e.seconds));
          }
          t.print(
            `${c.id} batch ${b}/GPU on ${n} GPU(s): ${row.sentencesPerSecond.toFixed(1)} sent/s` +
              (row.allReduceShare === null ? "" : `, all-reduce ${(100 * row.allReduceShare).toFixed(1)}% of the step`),
          );
        }
        rows.push(row);
      }
    }
  }
  // efficiency against the fastest one-GPU run of the same model and per-GPU batch
  for (const row of rows) {
    const model = configs.find((c) => c.id === row.config)!.model;
    const base = rows
      .filter((r) => r.gpus === 1 && r.batchPerGpu === row.batchPerGpu && r.config.startsWith(`${model}-`))
      .map((r) => r.sentencesPerSecond)
      .filter((x) => Number.isFinite(x));
    if (base.length === 0 || !Number.isFinite(row.sentencesPerSecond)) continue;
    const best = Math.max(...base);
    row.speedup = row.sentencesPerSecond / best;
    row.efficiency = row.speedup / row.gpus;
  }
  const table = markdownTable(
    ["configuration", "batch/GPU", "GPUs", "sent/s", "× best 1 GPU", "efficiency", "all-reduce share"],
    rows.map((r) => [
      r.config,
      String(r.batchPerGpu),
      String(r.gpus),
      Number.isFinite(r.sentencesPerSecond) ? r.sentencesPerSecond.toFixed(1) : "failed",
      r.speedup === null ? "" : `${r.speedup.toFixed(2)}×`,
      r.efficiency === null ? "" : `${(100 * r.efficiency).toFixed(0)}%`,
      r.allReduceShare === null ? "" : `${(100 * r.allReduceShare).toFixed(1)}%`,
    ]),
    [0],
  );
  t.print("", ...table, "");
  t.print(
    `sentences/s: the median of ${repeats} epoch(s) after a warm-up epoch (rank 0's training time, evaluation ` +
      "excluded); × best 1 GPU: against the fastest one-GPU run of the same model and per-GPU batch; all-reduce " +
      "share: the device all-reduces' CUDA-event time (waits for the slowest rank included) over the epoch's.",
  );
  if (!o.quick || o.out !== undefined) {
    const dir = resultsDir(device.slug, o.out);
    // a run of some configurations (each fits one call of a time-limited machine) writes files of its own
    const name = o.configs === undefined ? "parallel" : `parallel-${configs.map((c) => c.id).join("+")}`;
    writeJson(dir, name, { device: device.name, gpus: count, command: o.command, repeats, rows });
    writeOutput(dir, `${name}.md`, t.text);
    t.print(`wrote ${join(dir, `${name}.json`)} and ${name}.md`);
  }
  return failed > 0 ? 1 : 0;
}
