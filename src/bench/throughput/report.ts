/**
 * The throughput suite's output: markdown tables (sentences/s per engine and batch size with VPPS's speedup over the
 * better agenda variant; VPPS's host time per batch against its kernel time; device memory per engine; VPPS's JIT
 * time), the result file (`<model>.json`, the same fields as bench/treelstm.ts wrote) and the plot (`<model>.svg`).
 */
import { renderLogLogPlot, type Series } from "../../report/svg-plot.js";
import { resultHeader } from "../common.js";
import { type BenchDevice, resultsDir } from "../device.js";
import type { BaselineRow } from "../engine-timing.js";
import type { BenchModel, BenchTask } from "../model.js";
import { markdownTable, type Transcript, writeJson, writeOutput } from "../output.js";
import type { VppsRow } from "../vpps-timing.js";
import { type Config, LOSS_TOLERANCE, type ThroughputOptions } from "./config.js";
import { AGENDA_ENGINES, engineSpecs, VPPS_OFF_CHIP_ID, vppsEngineIds } from "./engines.js";
import { REFERENCE_ENGINE, REFERENCE_LABEL, type ReferenceRow } from "./reference.js";
import type { ThroughputSuite } from "./suite.js";

export type ResultRow =
  | (BaselineRow & { hidden: number; embed: number })
  | (VppsRow & { engine: string; hidden: number; embed: number; variant: string | null })
  | ReferenceRow;

const f0 = (x: number) => x.toFixed(0);
const f2 = (x: number) => x.toFixed(2);
const f3 = (x: number) => x.toFixed(3);

function labelOf(model: BenchModel<unknown>): (id: string) => string {
  const labels = new Map(engineSpecs(model).map((s) => [s.id, s.label]));
  labels.set(REFERENCE_ENGINE, REFERENCE_LABEL);
  return (id) => labels.get(id) ?? id;
}

/** `vppsFused` / `fusedOverBestAgenda` for variant `fused`; `vpps` / `vppsOverBestAgenda` for a one-variant model. */
function speedupKeys(model: BenchModel<unknown>, id: string): { value: string; ratio: string } {
  if (model.variants.length === 1) return { value: "vpps", ratio: "vppsOverBestAgenda" };
  const v = id.replace(/^vpps-/, "");
  return { value: `vpps${v[0]!.toUpperCase()}${v.slice(1)}`, ratio: `${v}OverBestAgenda` };
}

/** VPPS's sentences/s over the better agenda variant's, per size and batch size measured here. */
export function speedups(suite: ThroughputSuite<unknown>, model: BenchModel<unknown>, configs: readonly Config[]) {
  const out: Record<string, unknown>[] = [];
  const ids = vppsEngineIds(model);
  for (const c of configs) {
    for (const batch of c.batches) {
      const best = suite.bestAgenda(c.hidden, batch);
      const vpps = ids.map((id) => suite.at(id, c.hidden, batch)?.sentencesPerSecond ?? null);
      if (!best || vpps.every((x) => x === null)) continue;
      const row: Record<string, unknown> = { hidden: c.hidden, batch, bestAgenda: best };
      ids.forEach((id, i) => {
        row[speedupKeys(model, id).value] = vpps[i];
      });
      ids.forEach((id, i) => {
        const x = vpps[i]!;
        row[speedupKeys(model, id).ratio] = x === null ? null : x / best.sentencesPerSecond;
      });
      out.push(row);
    }
  }
  return out;
}

export function printTables(
  out: Transcript,
  suite: ThroughputSuite<unknown>,
  model: BenchModel<unknown>,
  configs: readonly Config[],
  source: string,
  device: string,
): void {
  const label = labelOf(model);
  for (const c of configs) {
    const cols = c.engines.map((e) => e.id);
    if (suite.rows.some((r) => r.engine === REFERENCE_ENGINE && r.hidden === c.hidden)) cols.push(REFERENCE_ENGINE);
    const vppsCols = vppsEngineIds(model).filter((e) => cols.includes(e));
    const hasSpeedup = vppsCols.length > 0 && cols.some((e) => AGENDA_ENGINES.includes(e));
    const head = ["batch", ...cols.map(label)];
    if (hasSpeedup) head.push(...vppsCols.map((e) => `${label(e)} / best agenda`));
    // what registers gain: VPPS's placement over the same model with every matrix off chip
    const overOffChip = cols.includes(VPPS_OFF_CHIP_ID) ? vppsCols : [];
    head.push(...overOffChip.map((e) => `${label(e)} / all off chip`));
    const rows = c.batches.map((b) => {
      const cells = [String(b), ...cols.map((e) => f0Or(suite.at(e, c.hidden, b)?.sentencesPerSecond))];
      if (hasSpeedup) {
        const best = suite.bestAgenda(c.hidden, b);
        for (const e of vppsCols) {
          const r = suite.at(e, c.hidden, b);
          cells.push(r && best ? `${f2(r.sentencesPerSecond / best.sentencesPerSecond)}×` : "–");
        }
      }
      const off = suite.at(VPPS_OFF_CHIP_ID, c.hidden, b);
      for (const e of overOffChip) {
        const r = suite.at(e, c.hidden, b);
        cells.push(r && off ? `${f2(r.sentencesPerSecond / off.sentencesPerSecond)}×` : "–");
      }
      return cells;
    });
    out.print(
      "",
      `${model.title} training, hidden ${c.hidden}, embedding ${c.embed}, ${source}, on ${device} (${model.unit}/s)`,
      ...markdownTable(head, rows),
    );
  }

  const vppsRows = suite.rows.filter((r): r is Extract<ResultRow, { cell: string }> => "cell" in r);
  if (vppsRows.length > 0) {
    out.print(
      "",
      "VPPS host ms per batch (main thread: build; schedule = workers' time when workers > 0, their builds included; " +
        "on workers: the share of batches the workers built, as in training) against kernel ms",
      ...markdownTable(
        [
          "hidden",
          "cell",
          "batch",
          "ms/batch",
          "build",
          "on workers",
          "schedule",
          "workers",
          "snapshot",
          "wait",
          "submit",
          "kernel",
          "weight MiB / 128 sentences",
        ],
        vppsRows.map((r) => [
          String(r.hidden),
          r.engine === VPPS_OFF_CHIP_ID ? `${r.cell}, all off chip` : r.cell,
          String(r.batch),
          f3(r.msPerBatch),
          f3(r.buildMs),
          `${Math.round(100 * (r.builtOnWorkers ?? 0))}%`,
          f3(r.scheduleMs),
          String(r.workers),
          f3(r.snapshotMs),
          f3(r.waitMs),
          f3(r.submitMs),
          f3(r.kernelMs),
          f0(r.weightBytesPer128 / 2 ** 20),
        ]),
        [1],
      ),
    );
  }

  const gpuRuns = suite.runs.filter((r) => r.memory !== null);
  if (gpuRuns.length > 0) {
    out.print(
      "",
      "Device memory per engine (device-wide used = total − free, cuMemGetInfo; MiB)",
      ...markdownTable(
        ["engine", "hidden", "used before", "peak − before", "pool reserved", "pool peak", "status"],
        gpuRuns.map((run) => {
          const m = run.memory!;
          return [
            run.engine,
            String(run.hidden),
            f0(m.baselineMiB),
            f0(m.peakOverBaselineMiB),
            f0Or(m.poolCapacityMiB),
            f0Or(m.poolPeakMiB),
            run.status,
          ];
        }),
        [0, 6],
      ),
    );
  }

  const jits = suite.runs.filter((r) => r.jit !== null);
  if (jits.length > 0) {
    out.print(
      "",
      "VPPS JIT: create ms (first: compiles every variant; second: through the kernel cache)",
      ...markdownTable(
        ["engine", "hidden", "first create", "cached create", "variants: JIT ms (cache hit)", "chosen"],
        jits.map((r) => {
          const j = r.jit!;
          const variants = j.first.map((v) => `${v.name} ${f0(v.jitMs)}${v.cacheHit ? " (hit)" : ""}`).join(", ");
          return [
            r.engine,
            String(r.hidden),
            f0(j.createMs[0]),
            f0(j.createMs[1]),
            variants,
            r.chosenVariant?.name ?? "–",
          ];
        }),
        [0, 4, 5],
      ),
    );
  }

  const notTimed = suite.runs.filter((r) => r.status !== "timed");
  if (notTimed.length > 0) {
    out.print("", "Not timed (or not to the end):");
    for (const r of notTimed) out.print(`- ${r.engine}, hidden ${r.hidden}: ${r.status}: ${r.reason ?? ""}`);
  }
}

function f0Or(x: number | null | undefined): string {
  return x === null || x === undefined ? "–" : f0(x);
}

export const METHOD = {
  baselines:
    "eager and autobatch engines (engine-timing.ts): per batch: build the graph, backward (which runs forward), " +
    "SGD update on the device, then read the loss (one wait per batch); warm-up, then the median over repeats of " +
    "(steps / steps' time). Launches = kernels + cuBLAS calls + async copies/memsets per batch, the update's " +
    "included. Profile: host ms per batch by stage (build; autobatch: plan, encode, issue), the wait at the loss " +
    "read, and the device's span between CUDA events recorded before backward and after update. issueCost: host " +
    "µs per command kind, from extra untimed steps with the device's run/upload wrapped. The engines run one after " +
    "another, not side by side (`vpps bench autobatch batching` alternates them).",
  cpuEngines:
    "cpu and the autobatch engine's CPU backend: timed as the GPU baselines (no CUDA events), with 16 sentences " +
    "per repeat (--sentences) and 3 repeats (2 at batch 128), one untimed step first below batch 32 and none " +
    "above (a step of 128 sentences takes about 30 s at hidden 256); they run after every GPU engine.",
  vpps:
    "VPPS (vpps-timing.ts, as `vpps bench vpps timing`): the plan variant is profiled again at each batch size (a " +
    "row's `variant`); per batch: build the graph, then Vpps.fb (schedule, encode, one pinned copy, memsets, one " +
    "launch, returning the previous batch's loss); the host builds batch k+1 while the GPU runs batch k. " +
    "Throughput = sentences / wall time of all batches of a size (after an untimed warm-up of 2,048 sentences, at " +
    "least 5 batches), ending with a synchronize. Kernel ms from CUDA events around two consecutive launches in " +
    "every 16. With schedule workers (a row's `workers` > 0) scheduleMs is the workers' time. vsAutobatchAgenda: " +
    "against this run's agenda engine with cuBLAS (else the tiled-GEMM one) at the same hidden and batch size.",
  weightBytes:
    "weightBytesPer128 (VPPS): bytes of the weight matrices, read from DRAM into registers once per launch (and " +
    "written back once), times the launches 128 sentences take at that batch size. Not measured for the baselines.",
  jit:
    "VPPS is created twice per cell and hidden size: the first create compiles every rpw/CTA variant with NVRTC, " +
    "all at once, into the kernel cache (`options.cacheDir`); its kernels carry a name unique to the configuration " +
    "and run, so that neither that cache nor NVRTC's own cache of programs it has seen serves them (a cold JIT); " +
    "the second create reads them back from the kernel cache. runs[].jit.createMs is [first, second]. The " +
    "baselines' createMs includes their kernels' compile or cache read (default cache).",
  memory:
    "runs[].memory (GPU engines): device-wide used memory (total − free from cuMemGetInfo, GPU 0) sampled before " +
    "the engine is created (baselineMiB) and after its creation, the first-batch check, each timed repeat " +
    "(baselines, outside the timed window) or each batch size (VPPS), and before it is disposed; " +
    "peakOverBaselineMiB = peak − baseline. Device-wide: it includes anything else allocated on the GPU meanwhile " +
    "(the benchmark holds the CUDA context for the whole run, so the context itself is in the baseline; engines " +
    "are disposed before the next one is created). Each engine reserves one DevicePool up front (min(¼ of free " +
    "memory, 4 GiB)), which dominates the device-wide number; poolPeakMiB is the most of that pool in use at once: " +
    "for the baselines the pool's own high-water mark, for VPPS (which reserves the rest of its pool for batches " +
    "at creation) its fixed buffers plus the largest batch's values and gradients (Vpps.deviceMemory()).",
  reference:
    "pytorch (`--reference`): bench/pytorch/<model>.py's bench mode as a child process after the engines, on the " +
    "same data, batch sizes, model size and training step (SGD, learning rate 0.05, clip 5): cuDNN packed LSTMs " +
    "for the taggers, level-batched trees and pyramids for the others (bench/pytorch/README.md). Per batch: " +
    "forward, backward, clip, update, with no wait for the loss (torch queues the next batch while the GPU runs); " +
    "after warm-up steps, the median over 3 repeats of (steps' time / steps), each repeat ending with " +
    "torch.cuda.synchronize(). FP32 (TF32 off). Its first-batch loss is computed with vpps's initial weights and " +
    "checked against the CPU engine's like every engine's.",
  correctness:
    `before timing, each engine's loss on the first batch of 8 (fresh weights) is compared with the CPU engine's; ` +
    `an engine whose |loss − cpu| / max(1, |cpu|) exceeds ${LOSS_TOLERANCE} is not timed (status wrong-loss).`,
};

/** Sentences/s against batch size, one series per engine, for the rows of one hidden size. */
export function throughputSeries(
  model: BenchModel<unknown>,
  rows: readonly { engine: string; hidden: number; batch: number; sentencesPerSecond: number }[],
  hidden: number,
): Series[] {
  const out: Series[] = [];
  for (const spec of engineSpecs(model)) {
    const points = rows
      .filter((r) => r.engine === spec.id && r.hidden === hidden)
      .map((r) => ({ x: r.batch, y: r.sentencesPerSecond }))
      .sort((a, b) => a.x - b.x);
    if (points.length > 0) out.push({ name: spec.label, points });
  }
  const reference = rows
    .filter((r) => r.engine === REFERENCE_ENGINE && r.hidden === hidden)
    .map((r) => ({ x: r.batch, y: r.sentencesPerSecond }))
    .sort((a, b) => a.x - b.x);
  if (reference.length > 0) out.push({ name: REFERENCE_LABEL, points: reference });
  return out;
}

export interface ThroughputResults<T> {
  model: BenchModel<T>;
  o: ThroughputOptions;
  task: BenchTask<T>;
  device: BenchDevice;
  configs: readonly Config[];
  suite: ThroughputSuite<T>;
  cacheDir: string;
  tables: Transcript;
}

/** Writes `<model>.json`, `<model>.md` (the tables) and `<model>.svg` (the main size); returns their paths. */
export function writeThroughputResults<T>(r: ThroughputResults<T>): string[] {
  const { model, o, task, device, configs, suite } = r;
  const m = model as BenchModel<unknown>;
  const dir = resultsDir(device.slug, o.out);
  const result = {
    ...resultHeader({
      benchmark: model.name,
      command: o.command,
      device: device.name,
      data: task.source,
      trees: task.items,
      ...(task.vocabulary === undefined ? {} : { vocabulary: task.vocabulary }),
    }),
    options: {
      engines: [...new Set(configs.flatMap((c) => c.engines.map((e) => e.id)))],
      hidden: configs.map((c) => c.hidden),
      batches: configs[0]!.batches,
      sentencesPerRepeat: o.sentences ?? null,
      reference: o.reference ?? false,
      modelOptions: o.modelOptions ?? {},
      workers: o.workers ?? null,
      cacheDir: r.cacheDir,
    },
    models: configs.map((c) => ({
      name: model.name,
      hidden: c.hidden,
      embed: c.embed,
      optimizer: "sgd",
      learningRate: 0.05,
      clip: 5,
      batches: c.batches,
      engines: c.engines.map((e) => e.id),
    })),
    method: METHOD,
    runs: suite.runs,
    rows: suite.rows,
    reference: suite.reference,
    speedup: speedups(suite as ThroughputSuite<unknown>, m, configs),
    ...(model.targets ? { targets: model.targets } : {}),
  };
  const paths = [writeJson(dir, model.name, result), writeOutput(dir, `${model.name}.md`, r.tables.text)];
  const main = configs[0]!.hidden;
  const series = throughputSeries(m, suite.rows, main);
  if (series.length === 0) {
    console.log(`no rows at hidden ${main}: no plot written`);
  } else {
    const svg = renderLogLogPlot(series, {
      title: model.plotTitle(device.name, task.source, main),
      xLabel: `batch size (${model.batchUnit})`,
      yLabel: `${model.unit} / s`,
    });
    paths.push(writeOutput(dir, `${model.name}.svg`, svg));
  }
  return paths;
}
