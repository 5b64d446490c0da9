/**
 * Runs one scheduled batch on the emulator the way the runtime runs it on the GPU: fill the pool (parameters,
 * inputs; values poisoned with NaN so a read before a write is loud; gradients zero), run, read the loss, the
 * gradients and the updated parameters (and Adam's moments) — including the host's part when the plan forms some
 * gradients by GEMM.
 */
import type { ComputationGraph } from "../../../graph/graph.js";
import type { ModelLayout } from "../plan/layout.js";
import { type AdamStep, adamRange, momentLayout } from "../plan/moments.js";
import type { BatchSchedule } from "../script/batch-schedule.js";
import { type EmulatorOptions, type EmulatorStats, VppsEmulator } from "./emulator.js";

export interface EmulatedBatch {
  readonly loss: number;
  /** Per parameter index: its gradient (lookup tables: zero outside the rows the batch touched). */
  readonly gradients: Float32Array[];
  /** Per parameter index: its value after the update. */
  readonly values: Float32Array[];
  /** Adam's moments after the update (moments.ts layout), when the batch ran with moments. */
  readonly moments?: Float32Array;
  readonly stats: EmulatorStats;
}

/**
 * Emulates `schedule` (built with `exportGradients: true` when gradients are wanted in kernel-update mode). An Adam
 * batch needs `opts.adam` and the moments before it (`momentLayout(model).floats` floats, not modified; the result
 * has the new ones).
 */
export function emulateBatch(
  model: ModelLayout,
  schedule: BatchSchedule,
  g: ComputationGraph,
  paramValues: readonly Float32Array[],
  opts: EmulatorOptions,
  moments?: Float32Array,
): EmulatedBatch {
  const { mem, stats } = emulateLaunch(model, schedule, g, paramValues, opts, moments);
  return { ...readBatchResults(model, schedule, paramValues, mem, opts), stats };
}

/** The emulated device memory after one launch of `schedule` (the kernel's part only: no host update). */
export interface EmulatedMemory {
  readonly pool: Float32Array;
  readonly master: Float32Array;
  readonly grads: Float32Array;
  readonly moments?: Float32Array;
}

/** Runs `schedule` on the emulator as the runtime launches it on the GPU; returns the memory after the kernel. */
export function emulateLaunch(
  model: ModelLayout,
  schedule: BatchSchedule,
  g: ComputationGraph,
  paramValues: readonly Float32Array[],
  opts: EmulatorOptions,
  moments?: Float32Array,
): { mem: EmulatedMemory; stats: EmulatorStats } {
  const { plan, params } = model;
  const L = schedule.layout;
  const pool = new Float32Array(L.poolFloats);
  pool.fill(Number.NaN, L.inputStart + g.inputSize, L.gradStart);
  pool.set(g.inputData.subarray(0, g.inputSize), L.inputStart);
  const master = new Float32Array(plan.masterFloats);
  for (const p of params) {
    const m = model.matrixOf[p.index]!;
    if (m >= 0) master.set(paramValues[p.index]!, plan.matrices[m]!.masterOffset);
    else pool.set(paramValues[p.index]!, model.paramOffset[p.index]!);
  }
  const grads = new Float32Array(plan.masterFloats);
  const mem = {
    pool,
    master,
    grads,
    barriers: new Uint32Array(schedule.barriers),
    ...(moments !== undefined ? { moments: Float32Array.from(moments) } : {}),
  };
  const stats = new VppsEmulator(plan).run(schedule.script, mem, opts);
  return { mem, stats };
}

/**
 * Loss, gradients and updated parameters from the memory after a launch (the emulator's or a GPU's), doing the
 * host's part (GEMM gradients, clipped SGD or Adam, which updates `mem.moments` in place) when the schedule leaves
 * the update to the host.
 */
export function readBatchResults(
  model: ModelLayout,
  schedule: BatchSchedule,
  paramValues: readonly Float32Array[],
  mem: {
    readonly pool: Float32Array;
    readonly master: Float32Array;
    readonly grads: Float32Array;
    readonly moments?: Float32Array;
  },
  opts: { readonly learningRate: number; readonly clip: number; readonly adam?: AdamStep },
): Omit<EmulatedBatch, "stats"> {
  const { plan, params } = model;
  const L = schedule.layout;
  const { pool, master, grads } = mem;
  const gradients = params.map((p) => {
    const m = model.matrixOf[p.index]!;
    const size = p.rows * p.cols;
    if (m >= 0) {
      const mp = plan.matrices[m]!;
      // register gradients exported there, off-chip ones summed there by tile.wbar
      if (mp.gradients !== "gemm") return grads.slice(mp.masterOffset, mp.masterOffset + size);
      return gemmGradient(pool, L.collectY[m]!, L.collectX[m]!, L.collectCount[m]!, mp.rows, mp.cols);
    }
    const out = new Float32Array(size);
    if (p.kind === "dense") {
      if (L.paramGrad[p.index]! >= 0) out.set(pool.subarray(L.paramGrad[p.index]!, L.paramGrad[p.index]! + size));
    } else {
      const rows = L.lookupRows;
      for (let r = 0; r < rows.offset.length; r++) {
        if (rows.table[r] !== p.index) continue;
        out.set(pool.subarray(rows.offset[r]!, rows.offset[r]! + p.cols), rows.row[r]! * p.cols);
      }
    }
    return out;
  });

  let values: Float32Array[];
  if (schedule.update === "kernel") {
    values = params.map((p) => {
      const m = model.matrixOf[p.index]!;
      const size = p.rows * p.cols;
      const at = m >= 0 ? plan.matrices[m]!.masterOffset : model.paramOffset[p.index]!;
      return (m >= 0 ? master : pool).slice(at, at + size);
    });
  } else if (opts.adam !== undefined) {
    if (mem.moments === undefined) throw new Error("VPPS host update: Adam needs the moments");
    values = hostAdam(model, schedule, paramValues, gradients, mem.moments, { ...opts, adam: opts.adam });
  } else {
    values = hostUpdate(paramValues, gradients, opts);
  }
  const result = { loss: pool[schedule.lossOffset]!, gradients, values };
  return mem.moments !== undefined ? { ...result, moments: mem.moments } : result;
}

/** W̄ = Σⱼ ȳⱼ xⱼᵀ over the collected rows: what one cuBLAS GEMM (ȲᵀX) computes after the kernel. */
function gemmGradient(
  pool: Float32Array,
  ys: number,
  xs: number,
  count: number,
  rows: number,
  cols: number,
): Float32Array {
  const out = new Float32Array(rows * cols);
  for (let j = 0; j < count; j++) {
    for (let r = 0; r < rows; r++) {
      const gy = pool[ys + j * rows + r]!;
      if (gy === 0) continue;
      for (let c = 0; c < cols; c++) out[r * cols + c]! += gy * pool[xs + j * cols + c]!;
    }
  }
  return out;
}

/** The clipping factor of the reference trainers from every parameter's gradient (lookup tables: zero elsewhere). */
function hostClipScale(gradients: readonly Float32Array[], clip: number): number {
  let sq = 0;
  for (const gr of gradients) for (const v of gr) sq += v * v;
  const norm = Math.sqrt(sq);
  return clip > 0 && norm > clip ? clip / norm : 1;
}

/**
 * The host's Adam (runtime/host-update.ts `vpps_adam_list`): every matrix and every other dense parameter, used in the batch or
 * not (an unused one has a zero gradient and still moves by its moments), and the lookup-table rows the batch
 * touched — the AdamTrainer's rule — with the kernel's fp32 arithmetic.
 */
function hostAdam(
  model: ModelLayout,
  schedule: BatchSchedule,
  values: readonly Float32Array[],
  gradients: readonly Float32Array[],
  moments: Float32Array,
  opts: { readonly learningRate: number; readonly clip: number; readonly adam: AdamStep },
): Float32Array[] {
  const out = values.map((v) => Float32Array.from(v));
  if (opts.learningRate === 0) return out; // no step, as on the device
  const scale = hostClipScale(gradients, opts.clip);
  const ML = momentLayout(model);
  const rows = schedule.layout.lookupRows;
  const step = (p: number, at: number, n: number, m: number, v: number) =>
    adamRange(out[p]!, at, gradients[p]!, at, scale, moments, m + at, v + at, n, opts.adam, opts.learningRate);
  for (const p of model.params) {
    const mi = model.matrixOf[p.index]!;
    if (mi >= 0) {
      const o = model.plan.matrices[mi]!.masterOffset;
      step(p.index, 0, p.rows * p.cols, ML.masterM + o, ML.masterV + o);
    } else if (p.kind === "dense") {
      const o = model.paramOffset[p.index]!;
      step(p.index, 0, p.rows * p.cols, ML.modelM + o, ML.modelV + o);
    } else {
      const o = model.paramOffset[p.index]!;
      for (let r = 0; r < rows.offset.length; r++) {
        if (rows.table[r] === p.index) step(p.index, rows.row[r]! * p.cols, p.cols, ML.modelM + o, ML.modelV + o);
      }
    }
  }
  return out;
}

/** The reference SGD step with global-norm clipping, applied by the host when the kernel cannot update. */
function hostUpdate(
  values: readonly Float32Array[],
  gradients: readonly Float32Array[],
  opts: { readonly learningRate: number; readonly clip: number },
): Float32Array[] {
  const step = opts.learningRate * hostClipScale(gradients, opts.clip);
  return values.map((v, i) => Float32Array.from(v, (x, k) => x - step * gradients[i]![k]!));
}
