/**
 * The dynamic shared memory of a dense persistent launch, as the kernels lay it out: the vector rows of a group of
 * tiles, the reduction's partial sums (two buffers), and the per-(unit, sequence) state that stays in the CTA.
 */
import { BATCH_TILE, paddedCols, type RnnKernelPlan } from "../plan/index.js";

/**
 * Dynamic shared memory of a launch over `batch` sequences: the tile's vector rows, the reduction's partial sums, and
 * the per-(unit, sequence) state that stays in the CTA (forward: LSTM's c; backward: dc and GRU's dh ⊙ z).
 */
export function sharedBytes(plan: RnnKernelPlan, batch: number, groupRows = BATCH_TILE): number {
  const n32 = Math.ceil((plan.rowsPerThread * BATCH_TILE) / 32) * 32;
  const cw = plan.threadsPerRowGroup / 32;
  // forward: LSTM's c and the pipelined loop's h (its deferred cells read no slot); backward: dc and GRU's dh ⊙ z
  const states = 2;
  const parts = 2; // the pipelined loops alternate two
  return 4 * (groupRows * paddedCols(plan) + parts * cw * plan.rowGroups * n32 + states * plan.unitsPerCta * batch);
}

/**
 * Rows of the vector a launch over `batch` sequences loads per wait: the whole batch (rounded up to whole tiles)
 * where shared memory allows, else as many whole tiles as fit; 0 if not even one tile fits.
 */
export function groupRows(plan: RnnKernelPlan, batch: number, maxSharedBytes: number): number {
  const fixed = sharedBytes(plan, batch, 0);
  const perRow = 4 * paddedCols(plan);
  const fit = Math.floor((maxSharedBytes - fixed) / perRow / BATCH_TILE) * BATCH_TILE;
  return Math.max(0, Math.min(Math.ceil(batch / BATCH_TILE) * BATCH_TILE, fit));
}
