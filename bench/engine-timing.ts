/**
 * Timing the baseline engines on Tree-LSTM training batches, shared by bench/batching.ts and bench/treelstm.ts:
 * the eager engine (one launch per node) and the autobatch engine with DyNet's depth- or agenda-based batching,
 * multiplying with its own tiled GEMM kernels or with cuBLAS. Also what every GPU benchmark here needs: a clean exit
 * without a GPU, device-wide memory samples, and the engines' names on a plot.
 *
 * Per batch: build the graph, backward (which runs forward), SGD update on the device, then read the loss (one wait
 * per batch); warm-up, then the median over repeats of (steps / steps' time). Several engines given to
 * `timeBaselines` at once alternate their repeats, so that slow phases of a shared machine hit every engine alike.
 */
import {
  type CudaDevice,
  CudaEvent,
  type CudaStream,
  cudaAvailable,
  type DeviceProperties,
  openDevice,
  type PoolStats,
} from "../src/cuda/index.js";
import type { TreeNode } from "../src/data/tree.js";
import type { Vocabulary } from "../src/data/vocab.js";
import { AutobatchGpuEngine, type CudaAutobatchDevice } from "../src/engines/autobatch/gpu-engine.js";
import { EagerEngine } from "../src/engines/eager/engine.js";
import type { Engine } from "../src/engines/engine.js";
import type { GpuContext } from "../src/engines/gpu/context.js";
import { ComputationGraph } from "../src/graph/graph.js";
import type { TreeLstmModel } from "../src/models/treelstm/model.js";
import type { Series } from "../src/report/svg-plot.js";
import { makeTrainer } from "../src/train/trainers.js";
import { median } from "./common.js";

/**
 * "autobatch-depth" and "autobatch-agenda" multiply with the engine's own GEMM kernels (gemm: "kernels");
 * "autobatch-agenda-cublas" is the agenda engine with cuBLAS (gemm: "cublas", the engine's default since the batching
 * benchmark measured it faster at hidden 256).
 */
export const BASELINE_ENGINES = ["eager", "autobatch-depth", "autobatch-agenda", "autobatch-agenda-cublas"] as const;
export type BaselineKind = (typeof BASELINE_ENGINES)[number];

/** Every engine bench/treelstm.ts runs, in the order it runs them (baselines first: vpps is compared with them). */
export const TREELSTM_ENGINES = [...BASELINE_ENGINES, "vpps-fused", "vpps-ops"] as const;
export type TreeLstmEngine = (typeof TREELSTM_ENGINES)[number];

/** How each engine is named on the plot and in tables (short: the plot's legend has about 20 characters' room). */
export const ENGINE_LABELS: Readonly<Record<TreeLstmEngine, string>> = {
  eager: "eager",
  "autobatch-depth": "autobatch depth",
  "autobatch-agenda": "agenda, tiled GEMM",
  "autobatch-agenda-cublas": "agenda, cuBLAS",
  "vpps-fused": "vpps (fused cell)",
  "vpps-ops": "vpps (ops cell)",
};

/**
 * Without a usable CUDA driver, says why and exits with status 1 (before any data is read), instead of a stack
 * trace from deep inside the first engine.
 */
export function requireGpu(script: string): void {
  const gpu = cudaAvailable();
  if (gpu.ok) return;
  console.error(
    `${script}: this benchmark needs an NVIDIA GPU and its driver, and none can be used here: ${gpu.reason}`,
  );
  process.exit(1);
}

/** Relative difference of an engine's loss from the CPU engine's (absolute below a loss of 1). */
export function relativeError(loss: number, cpuLoss: number): number {
  return Math.abs(loss - cpuLoss) / Math.max(1, Math.abs(cpuLoss));
}

export function openBaseline(
  kind: BaselineKind,
  model: TreeLstmModel,
): { engine: Engine; stream: CudaStream; name: string; ctx: GpuContext } {
  if (kind === "eager") {
    const e = new EagerEngine(model.params);
    return { engine: e, stream: e.ctx.stream, name: e.ctx.deviceName, ctx: e.ctx };
  }
  const e = new AutobatchGpuEngine(model.params, {
    strategy: kind === "autobatch-depth" ? "depth" : "agenda",
    gemm: kind === "autobatch-agenda-cublas" ? "cublas" : "kernels",
  });
  const ctx = (e.device as CudaAutobatchDevice).ctx;
  return { engine: e, stream: ctx.stream, name: ctx.deviceName, ctx };
}

function launchCounts(e: Engine): { kernels: number; cublas: number; copies: number } {
  if (e instanceof EagerEngine || e instanceof AutobatchGpuEngine) return e.launchCounts();
  throw new Error(`no launch counts for engine ${e.name}`);
}

export interface Profile {
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

/** Host µs per issued command, by kind (autobatch): measured in a separate untimed pass, wrapping the device. */
export interface IssueCost {
  kernelUs: number;
  gemmUs: number;
  fillUs: number;
  uploadUs: number;
}

/** One baseline engine at one batch size (the rows of bench/results/batching-<device>.json). */
export interface BaselineRow {
  engine: BaselineKind;
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

/** An opened baseline engine with what timing it needs; release it with `disposeBaseline`. */
export interface BaselineRun {
  kind: BaselineKind;
  model: TreeLstmModel;
  engine: Engine;
  stream: CudaStream;
  ctx: GpuContext;
  deviceName: string;
  cg: ComputationGraph;
  trainer: ReturnType<typeof makeTrainer>;
  start: CudaEvent;
  end: CudaEvent;
}

/** Opens `kind` on `model`'s parameters, with an SGD trainer (learning rate 0.05) and two timing events. */
export function startBaseline(kind: BaselineKind, model: TreeLstmModel): BaselineRun {
  const { engine, stream, name, ctx } = openBaseline(kind, model);
  let start: CudaEvent | undefined;
  try {
    start = CudaEvent.create();
    const end = CudaEvent.create();
    return {
      kind,
      model,
      engine,
      stream,
      ctx,
      deviceName: name,
      cg: new ComputationGraph(),
      trainer: makeTrainer("sgd", { learningRate: 0.05 }),
      start,
      end,
    };
  } catch (e) {
    start?.destroy();
    engine.dispose();
    throw e;
  }
}

export function disposeBaseline(r: BaselineRun): void {
  r.start.destroy();
  r.end.destroy();
  r.engine.dispose();
}

/** The engine's loss on `batch` before any update (to compare with the CPU engine's). */
export function baselineFirstLoss(r: BaselineRun, batch: TreeNode[], vocab: Vocabulary): number {
  return r.engine.forwardScalar(r.model.buildBatchLoss(new ComputationGraph(), batch, vocab));
}

export interface BaselineTimingOptions {
  /** Fewer steps and repeats (batching.ts --quick). */
  quick: boolean;
  /** Batch k of `size` trees (every engine sees the same batches). */
  batchOf: (size: number, k: number) => TreeNode[];
  vocab: Vocabulary;
  /** Called after each engine's timed repeat, outside the timed window (memory samples). */
  afterRepeat?: () => void;
}

/**
 * Times every engine of `running` at one batch size, their repeats alternating, and prints a line per engine.
 * Throws when a loss becomes non-finite.
 */
export function timeBaselines(
  running: readonly BaselineRun[],
  batch: number,
  opts: BaselineTimingOptions,
): BaselineRow[] {
  const { quick, batchOf, vocab } = opts;
  const rows: BaselineRow[] = [];
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
      opts.afterRepeat?.();
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
    const row: BaselineRow = {
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
  return rows;
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

// --- device memory ---

const MiB = 1024 * 1024;

/** What one engine held on the device, in MiB (see MemoryProbe). */
export interface MemoryRecord {
  /** Device-wide used memory (total − free) before the engine was created. */
  baselineMiB: number;
  /** The highest device-wide used memory sampled while it lived. */
  peakMiB: number;
  /** peakMiB − baselineMiB: what the engine added. */
  peakOverBaselineMiB: number;
  samples: number;
  /** The engine's DevicePool: its reservation, and the most of it in use at once. */
  poolCapacityMiB: number | null;
  poolPeakMiB: number | null;
}

/** Samples of device-wide used memory for one engine's lifetime. */
export class MemoryTrack {
  readonly baseline: number;
  private peak: number;
  private count = 0;

  constructor(private readonly used: () => number) {
    this.baseline = used();
    this.peak = this.baseline;
  }

  sample(): void {
    const u = this.used();
    this.count++;
    if (u > this.peak) this.peak = u;
  }

  record(pool: PoolStats | null): MemoryRecord {
    return {
      baselineMiB: this.baseline / MiB,
      peakMiB: this.peak / MiB,
      peakOverBaselineMiB: (this.peak - this.baseline) / MiB,
      samples: this.count,
      poolCapacityMiB: pool ? pool.capacityBytes / MiB : null,
      poolPeakMiB: pool ? pool.peakBytes / MiB : null,
    };
  }
}

/**
 * Device-wide used memory through the driver (cuMemGetInfo: total − free). It holds GPU 0's primary context for the
 * whole run, so that the driver can be asked between engines (each engine's own hold is released when it is
 * disposed) and so that the context's own memory is in every baseline rather than appearing and vanishing.
 */
export class MemoryProbe {
  private constructor(private readonly device: CudaDevice) {}

  /** Opens GPU 0 (the device the engines' default `auto` picks). */
  static open(): MemoryProbe {
    return new MemoryProbe(openDevice(0));
  }

  get deviceName(): string {
    return this.device.props.name;
  }

  get props(): DeviceProperties {
    return this.device.props;
  }

  usedBytes(): number {
    const { free, total } = this.device.memInfo();
    return total - free;
  }

  /** A track whose baseline is the used memory now. */
  track(): MemoryTrack {
    return new MemoryTrack(() => this.usedBytes());
  }

  close(): void {
    this.device.close();
  }
}

// --- plots ---

/** The plot's title, the same from bench/treelstm.ts and bench/plot.ts. */
export function throughputTitle(device: string, data: string | undefined, hidden: number): string {
  const on = data === undefined || data.startsWith("SST") ? "SST" : "synthetic trees";
  return `Tree-LSTM training on ${on}, hidden ${hidden} — ${device}`;
}

/** Sentences/s against batch size, one series per engine, for the rows of one hidden size (treelstm-<device>.json). */
export function throughputSeries(
  rows: readonly { engine: string; hidden: number; batch: number; sentencesPerSecond: number }[],
  hidden: number,
): Series[] {
  const out: Series[] = [];
  for (const engine of TREELSTM_ENGINES) {
    const points = rows
      .filter((r) => r.engine === engine && r.hidden === hidden)
      .map((r) => ({ x: r.batch, y: r.sentencesPerSecond }))
      .sort((a, b) => a.x - b.x);
    if (points.length > 0) out.push({ name: ENGINE_LABELS[engine], points });
  }
  return out;
}
