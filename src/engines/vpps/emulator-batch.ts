/**
 * Runs one scheduled batch on the emulator the way the runtime runs it on the GPU: fill the pool (parameters,
 * inputs; values poisoned with NaN so a read before a write is loud; gradients zero), run, read the loss, the
 * gradients and the updated parameters — including the host's part when the plan forms some gradients by GEMM.
 */
import type { ComputationGraph } from "../../graph/graph.js";
import { type EmulatorOptions, type EmulatorStats, VppsEmulator } from "./emulator.js";
import type { ModelLayout } from "./layout.js";
import type { BatchSchedule } from "./schedule.js";

export interface EmulatedBatch {
  readonly loss: number;
  /** Per parameter index: its gradient (lookup tables: zero outside the rows the batch touched). */
  readonly gradients: Float32Array[];
  /** Per parameter index: its value after the update. */
  readonly values: Float32Array[];
  readonly stats: EmulatorStats;
}

/** Emulates `schedule` (built with `exportGradients: true` when gradients are wanted in kernel-update mode). */
export function emulateBatch(
  model: ModelLayout,
  schedule: BatchSchedule,
  g: ComputationGraph,
  paramValues: readonly Float32Array[],
  opts: EmulatorOptions,
): EmulatedBatch {
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
  const mem = { pool, master, grads, barriers: new Uint32Array(schedule.barriers) };
  const stats = new VppsEmulator(plan).run(schedule.script, mem, opts);
  return { ...readBatchResults(model, schedule, paramValues, mem, opts), stats };
}

/**
 * Loss, gradients and updated parameters from the memory after a launch (the emulator's or a GPU's), doing the
 * host's part (GEMM gradients, clipped SGD) when the schedule leaves the update to the host.
 */
export function readBatchResults(
  model: ModelLayout,
  schedule: BatchSchedule,
  paramValues: readonly Float32Array[],
  mem: { readonly pool: Float32Array; readonly master: Float32Array; readonly grads: Float32Array },
  opts: { readonly learningRate: number; readonly clip: number },
): Omit<EmulatedBatch, "stats"> {
  const { plan, params } = model;
  const L = schedule.layout;
  const { pool, master, grads } = mem;
  const gradients = params.map((p) => {
    const m = model.matrixOf[p.index]!;
    const size = p.rows * p.cols;
    if (m >= 0) {
      const mp = plan.matrices[m]!;
      if (mp.gradients === "registers") return grads.slice(mp.masterOffset, mp.masterOffset + size);
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
  } else {
    values = hostUpdate(paramValues, gradients, opts);
  }
  return { loss: pool[schedule.lossOffset]!, gradients, values };
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

/** The reference SGD step with global-norm clipping, applied by the host when the kernel cannot update. */
function hostUpdate(
  values: readonly Float32Array[],
  gradients: readonly Float32Array[],
  opts: { readonly learningRate: number; readonly clip: number },
): Float32Array[] {
  let sq = 0;
  for (const gr of gradients) for (const v of gr) sq += v * v;
  const norm = Math.sqrt(sq);
  const scale = opts.clip > 0 && norm > opts.clip ? opts.clip / norm : 1;
  const step = opts.learningRate * scale;
  return values.map((v, i) => Float32Array.from(v, (x, k) => x - step * gradients[i]![k]!));
}
