/**
 * Timing the engines that wait for each batch — the CPU engine, the eager engine (one launch per node) and the
 * autobatch engine with DyNet's depth- or agenda-based batching (on the GPU with its own tiled GEMM kernels or with
 * cuBLAS, or on the CPU) — on training batches of any model (BenchNet).
 *
 * Per batch: build the graph, backward (which runs forward), SGD update, then read the loss (one wait per batch);
 * on the GPU, CUDA events around the device work. Warm-up, then the median over repeats of (steps / steps' time).
 * Several engines given to `timeBaselines` at once alternate their repeats, so that slow phases of a shared machine
 * hit every engine alike.
 */
import { CudaEvent, type CudaStream, type GpuContext } from "../cuda/index.js";
import { AutobatchCpuEngine } from "../engines/autobatch/cpu-batched.js";
import { AutobatchGpuEngine, type CudaAutobatchDevice } from "../engines/autobatch/gpu-engine.js";
import { CpuEngine } from "../engines/cpu.js";
import { EagerEngine } from "../engines/eager/engine.js";
import type { Engine } from "../engines/engine.js";
import { ComputationGraph } from "../graph/graph.js";
import type { ParameterCollection } from "../model/parameters.js";
import { makeTrainer } from "../optim/trainers.js";
import { median } from "./common.js";
import type { BenchNet } from "./model.js";

/**
 * "autobatch-depth" and "autobatch-agenda" multiply with the engine's own GEMM kernels (gemm: "kernels");
 * "autobatch-agenda-cublas" is the agenda engine with cuBLAS (gemm: "cublas", the engine's default since the batching
 * benchmark measured it faster at hidden 256).
 */
export const GPU_BASELINES = ["eager", "autobatch-depth", "autobatch-agenda", "autobatch-agenda-cublas"] as const;
/** The reference engine and the autobatch engine's CPU backend (the same plans, reference kernels). */
export const CPU_BASELINES = ["cpu", "autobatch-depth-cpu", "autobatch-agenda-cpu"] as const;
export const BASELINE_ENGINES = [...GPU_BASELINES, ...CPU_BASELINES] as const;
export type BaselineKind = (typeof BASELINE_ENGINES)[number];

/** An engine opened for timing; `gpu` when its work runs on a CUDA stream (timed with events around it). */
export interface OpenedEngine {
  engine: Engine;
  gpu: { stream: CudaStream; ctx: GpuContext } | null;
}

export function openBaseline(kind: BaselineKind, params: ParameterCollection): OpenedEngine {
  switch (kind) {
    case "cpu":
      return { engine: new CpuEngine(params), gpu: null };
    case "autobatch-depth-cpu":
    case "autobatch-agenda-cpu":
      return {
        engine: new AutobatchCpuEngine(params, { strategy: kind === "autobatch-depth-cpu" ? "depth" : "agenda" }),
        gpu: null,
      };
    case "eager": {
      const e = new EagerEngine(params);
      return { engine: e, gpu: { stream: e.ctx.stream, ctx: e.ctx } };
    }
    default: {
      const e = new AutobatchGpuEngine(params, {
        strategy: kind === "autobatch-depth" ? "depth" : "agenda",
        gemm: kind === "autobatch-agenda-cublas" ? "cublas" : "kernels",
      });
      const ctx = (e.device as CudaAutobatchDevice).ctx;
      return { engine: e, gpu: { stream: ctx.stream, ctx } };
    }
  }
}

function launchCounts(e: Engine): { kernels: number; cublas: number; copies: number } {
  if (e instanceof EagerEngine || e instanceof AutobatchGpuEngine) return e.launchCounts();
  return { kernels: 0, cublas: 0, copies: 0 };
}

export interface Profile {
  /** Host ms per batch: building the graph, planning, encoding, issuing (autobatch on the GPU for the middle three). */
  build: number;
  plan: number;
  encode: number;
  issue: number;
  /** Host ms per batch waiting for the device when the loss is read. */
  syncWait: number;
  /** Device ms per batch from the first to the last of its work (CUDA events; 0 on the CPU). */
  gpuSpan: number;
}

/** Host µs per issued command, by kind (autobatch): measured in a separate untimed pass, wrapping the device. */
export interface IssueCost {
  kernelUs: number;
  gemmUs: number;
  fillUs: number;
  uploadUs: number;
}

/** One engine at one batch size. */
export interface BaselineRow {
  engine: string;
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

/** An opened engine with what timing it needs; release it with `disposeBaseline`. */
export interface BaselineRun<T> {
  kind: string;
  net: BenchNet<T>;
  engine: Engine;
  gpu: { stream: CudaStream; ctx: GpuContext; start: CudaEvent; end: CudaEvent } | null;
  cg: ComputationGraph;
  trainer: ReturnType<typeof makeTrainer>;
}

/**
 * Wraps an opened engine on `net`'s parameters with an SGD trainer (learning rate 0.05) and, on the GPU, two timing
 * events. `open` defaults to the engine named `kind`.
 */
export function startBaseline<T>(
  kind: string,
  net: BenchNet<T>,
  open: (params: ParameterCollection) => OpenedEngine = (p) => openBaseline(kind as BaselineKind, p),
): BaselineRun<T> {
  const { engine, gpu } = open(net.params);
  let start: CudaEvent | undefined;
  try {
    let events: BaselineRun<T>["gpu"] = null;
    if (gpu) {
      start = CudaEvent.create();
      events = { ...gpu, start, end: CudaEvent.create() };
    }
    return {
      kind,
      net,
      engine,
      gpu: events,
      cg: new ComputationGraph(),
      trainer: makeTrainer("sgd", { learningRate: 0.05 }),
    };
  } catch (e) {
    start?.destroy();
    engine.dispose();
    throw e;
  }
}

export function disposeBaseline<T>(r: BaselineRun<T>): void {
  r.gpu?.start.destroy();
  r.gpu?.end.destroy();
  r.engine.dispose();
}

/** The engine's loss on `batch` before any update (to compare with the CPU engine's). */
export function baselineFirstLoss<T>(r: BaselineRun<T>, batch: readonly T[]): number {
  return r.engine.forwardScalar(r.net.batchLoss(new ComputationGraph(), batch));
}

export interface BaselineTimingOptions<T> {
  /** Fewer repeats (2 or 3 instead of 3 or 5). */
  quick: boolean;
  /** Sentences per timed repeat (steps per repeat = this / batch, at least 1): 64, or 16 when quick. */
  sentencesPerRepeat?: number;
  /** Untimed steps first (default: min(3, steps per repeat) + 1). */
  warmSteps?: number;
  /** Batch k of `size` items (every engine sees the same batches). */
  batchOf: (size: number, k: number) => readonly T[];
  /** Called after each engine's timed repeat, outside the timed window (memory samples). */
  afterRepeat?: () => void;
  /** Where the per-engine line goes. */
  log?: (line: string) => void;
}

/**
 * Times every engine of `running` at one batch size, their repeats alternating, and prints a line per engine.
 * Throws when a loss becomes non-finite.
 */
export function timeBaselines<T>(
  running: readonly BaselineRun<T>[],
  batch: number,
  opts: BaselineTimingOptions<T>,
): BaselineRow[] {
  const { quick, batchOf } = opts;
  const log = opts.log ?? ((l: string) => console.log(l));
  const rows: BaselineRow[] = [];
  const perRepeat = Math.max(1, Math.round((opts.sentencesPerRepeat ?? (quick ? 16 : 64)) / batch));
  const repeats = batch >= 128 ? (quick ? 2 : 3) : quick ? 3 : 5;
  const state = running.map((r) => {
    const prof: Profile = { build: 0, plan: 0, encode: 0, issue: 0, syncWait: 0, gpuSpan: 0 };
    let nodes = 0;
    let batchIndex = 1; // every engine sees the same batches
    const { engine, net, cg, trainer, gpu } = r;
    const step = () => {
      const t0 = performance.now();
      cg.renew();
      const loss = net.batchLoss(cg, batchOf(batch, batchIndex++));
      const t1 = performance.now();
      prof.build += t1 - t0;
      nodes += cg.size;
      gpu?.start.record(gpu.stream);
      engine.backward(loss);
      engine.update(trainer);
      gpu?.end.record(gpu.stream);
      const t2 = performance.now();
      const value = engine.value(loss)[0]!;
      prof.syncWait += performance.now() - t2;
      if (gpu) prof.gpuSpan += gpu.end.elapsedMsSince(gpu.start);
      if (!Number.isFinite(value)) throw new Error(`${r.kind}: loss became ${value} at batch size ${batch}`);
    };
    // warm-up: layouts, pinned buffers, cuBLAS heuristics, V8's optimised code
    const warm = opts.warmSteps ?? Math.min(3, perRepeat) + 1;
    for (let w = 0; w < warm; w++) step();
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
    const planned =
      engine instanceof AutobatchGpuEngine || engine instanceof AutobatchCpuEngine ? engine.lastForwardPlan : undefined;
    const row: BaselineRow = {
      engine: kind,
      batch,
      sentencesPerSecond: (1000 * batch) / ms,
      msPerBatch: ms,
      repeats: st.times,
      nodesPerBatch: st.nodes() / steps,
      planBatches: planned === undefined ? null : (planned?.batchCount ?? null),
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
    log(
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
  // node commands (the rnn op's whole layers) are timed but not reported: they are no per-command issue cost
  const t = { kernel: 0, gemm: 0, fill: 0, node: 0, upload: 0 };
  const n = { kernel: 0, gemm: 0, fill: 0, node: 0, upload: 0 };
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
