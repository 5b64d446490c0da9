/**
 * Sparse (pruned) recurrent layers as the layer's options see them (docs/RNN.md, "Sparse (pruned) recurrent
 * layers"): `density`, `pruning`, a user's `mask` and `reprune`, checked in one line naming the option; and the
 * masks of a stack, one per (layer, direction). The pruning itself — magnitude order, ties, the masks' counts — is
 * src/ops/prune.ts, shared with the graph op.
 */
import {
  type MaskCounts,
  maskCounts,
  maskProblem,
  PRUNING_MODES,
  type PruningMode,
  pruneByMagnitude,
  type WeightMask,
} from "../ops/prune.js";
import { showValue } from "../util/text.js";
import { directionsOf, gatesOf, RnnArgumentError, type RnnCell, type RnnSpec } from "./spec.js";

export {
  keptPerRow,
  type MaskCounts,
  maskCounts,
  maskProblem,
  PRUNING_MODES,
  type PruningMode,
  pruneByMagnitude,
  pruneKeeping,
  type WeightMask,
} from "../ops/prune.js";

/** How a pruned layer chooses its kept weights: `row-balanced` (default) or `plain`. */
export type RnnPruning = PruningMode;
export const RNN_PRUNINGS = PRUNING_MODES;

/** A number as a message shows it (NaN and ±∞ as themselves, where JSON would say null). */
const shown = (v: unknown): string => (typeof v === "number" ? String(v) : showValue(v));

/** `density` checked: a number in (0, 1] (1 = dense); anything else is refused in one line naming the option. */
export function validateRnnDensity(density: unknown, where = "PersistentRnn"): number {
  if (typeof density !== "number" || !(density > 0 && density <= 1)) {
    throw new RnnArgumentError(
      `${where}: argument 'density' must be a number in (0, 1] (the fraction of W_hh kept; 1 = dense); ` +
        `got ${shown(density)}`,
    );
  }
  return density;
}

/** `pruning` checked (undefined: row-balanced). */
export function validateRnnPruning(pruning: unknown, where = "PersistentRnn"): RnnPruning {
  if (pruning === undefined) return "row-balanced";
  if (typeof pruning === "string" && (PRUNING_MODES as readonly string[]).includes(pruning)) {
    return pruning as RnnPruning;
  }
  throw new RnnArgumentError(
    `${where}: argument 'pruning' must be 'row-balanced' (every row keeps the same count) or 'plain'; ` +
      `got ${shown(pruning)}`,
  );
}

/** `reprune` checked: `{ every: n }`, n a positive integer of optimizer steps. */
export function validateRnnReprune(reprune: unknown, where = "PersistentRnn"): { readonly every: number } {
  const every = typeof reprune === "object" && reprune !== null ? (reprune as { every?: unknown }).every : undefined;
  if (typeof every !== "number" || !Number.isInteger(every) || every < 1) {
    throw new RnnArgumentError(
      `${where}: argument 'reprune' must be { every: n } with n a positive integer (optimizer steps between ` +
        `re-prunings); got ${shown(reprune)}`,
    );
  }
  return { every };
}

/** The rows and columns of a W_hh of this stack: [G·H, H]. */
export function recurrentShape(cell: RnnCell, hidden: number): { readonly rows: number; readonly cols: number } {
  return { rows: gatesOf(cell) * hidden, cols: hidden };
}

/**
 * A user's `mask` checked against the stack: one Uint8Array [G·H·H] for every (layer, direction), or one per
 * (layer, direction) (index l·D + d); 0/1 values, something kept, and under row-balanced pruning the same count in
 * every row. Returns one mask per (layer, direction) (copies: the caller's arrays may change afterwards).
 */
export function validateRnnMasks(
  mask: unknown,
  spec: RnnSpec,
  pruning: RnnPruning,
  where = "PersistentRnn",
): WeightMask[] {
  const K = spec.layers * directionsOf(spec);
  const { rows, cols } = recurrentShape(spec.cell, spec.hidden);
  const list: unknown[] = Array.isArray(mask) ? mask : [mask];
  if (Array.isArray(mask) && mask.length !== K) {
    throw new RnnArgumentError(
      `${where}: argument 'mask' must be one Uint8Array [G·H·H] = [${rows * cols}] for every (layer, direction), ` +
        `or one per (layer, direction): L·D = ${K}; got a list of ${mask.length}`,
    );
  }
  list.forEach((m, k) => {
    const why = maskProblem(m, rows, cols, pruning);
    if (why !== null) throw new RnnArgumentError(`${where}: argument 'mask${list.length > 1 ? `[${k}]` : ""}' ${why}`);
  });
  return Array.from({ length: K }, (_, k) => Uint8Array.from(list[list.length > 1 ? k : 0] as WeightMask));
}

/** The mask of one W_hh [G·H, H] at `density` under `pruning` (the largest |w|; src/ops/prune.ts). */
export function pruneRecurrent(
  weightHh: Float32Array,
  cell: RnnCell,
  hidden: number,
  density: number,
  pruning: RnnPruning,
): WeightMask {
  const { rows, cols } = recurrentShape(cell, hidden);
  return pruneByMagnitude(weightHh, rows, cols, density, pruning);
}

/** What one W_hh mask keeps (its total, density and row counts). */
export function recurrentMaskCounts(mask: WeightMask, cell: RnnCell, hidden: number): MaskCounts {
  const { rows, cols } = recurrentShape(cell, hidden);
  return maskCounts(mask, rows, cols);
}
