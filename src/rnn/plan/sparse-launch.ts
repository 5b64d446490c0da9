/**
 * The launch of one kernel of a sparse layer over a batch: its batch tile, replicas and CTAs per SM (docs/RNN.md,
 * "Launches"). Each batch tile (4, 2 or 1 columns, at most what the batch fills) with one or two CTAs per SM offers a
 * launch: the most replicas (at most one per tile) whose layout keeps that tile, or, where the most take several
 * rounds per step, the fewest replicas with as few rounds. Of these the launch takes the fewest rounds per step, then
 * the least vector each SM copies per step (CTAs per SM × K × tile: a step waits for that copy from L2, which measured
 * on an H100 as the largest cost that varies between launches), then two CTAs per SM (their steps interleave).
 * Without any, one replica with the widest load that fits, or the reason none does.
 */
import type { DeviceModel } from "../../cuda/hw/device-model.js";
import type { RnnCellName, RnnKernelKind } from "./dense.js";
import type { CtasPerSm, SparseIndexBits, SparseRnnKernelPlan, SparseRnnPlanResult, WideLoad } from "./sparse.js";
import { batchTileFor, planSparseRnnWidest } from "./sparse-layer.js";
import { type SparseRows, sparsePairsPerRow } from "./sparse-pairs.js";

/** What pins a launch (comparisons of the rule's choice); default: none. */
export interface SparseLaunchPins {
  /** Only this batch tile (or the widest the batch fills, if narrower). */
  readonly tile?: WideLoad;
  readonly ctasPerSm?: CtasPerSm;
  /** At most this many replicas (1: a step's tiles in turn on one layout). */
  readonly maxReplicas?: number;
  /** Only layouts of this many threads per row group. */
  readonly threadsPerRowGroup?: number;
  /** The pairs' index width (default: 16 where the index range allows). */
  readonly indexBits?: SparseIndexBits;
  /** Padding slots per piece (SparsePlanOptions.slack; default "auto"; 0 for the orders that cannot use them). */
  readonly slack?: number | "auto";
}

/** How a launch of `plan` runs `batch` sequences: tiles per step, replicas, rounds per step, floats an SM copies. */
export function sparseLaunchShape(plan: SparseRnnKernelPlan, batch: number) {
  const tiles = Math.ceil(Math.max(1, batch) / plan.batchTile);
  const replicas = Math.min(tiles, plan.replicas);
  return {
    tiles,
    replicas,
    rounds: Math.ceil(tiles / replicas),
    floatsPerSm: plan.ctasPerSm * plan.cols * plan.batchTile,
  };
}

/** The plan of one kernel of a mask's layer for a launch over `batch` sequences (see the header), or why none fits. */
export function sparseLaunchPlan(
  cell: RnnCellName,
  hidden: number,
  model: DeviceModel,
  kind: RnnKernelKind,
  batch: number,
  csr: SparseRows,
  pins: SparseLaunchPins = {},
): SparseRnnPlanResult {
  const density = Math.max(csr.start[csr.rows]! / (csr.rows * csr.cols), 1 / (csr.rows * csr.cols));
  const options = {
    density,
    batch,
    forwardPairsPerRow: Math.max(1, sparsePairsPerRow(csr, "forward")),
    backwardPairsPerRow: Math.max(1, sparsePairsPerRow(csr, "backward")),
    ...(pins.threadsPerRowGroup === undefined ? {} : { threadsPerRowGroup: pins.threadsPerRowGroup }),
    ...(pins.indexBits === undefined ? {} : { indexBits: pins.indexBits }),
    ...(pins.slack === undefined ? {} : { slack: pins.slack }),
  };
  const cap = pins.maxReplicas ?? model.smCount * 2;
  const widest = batchTileFor(batch);
  const tilesToTry: WideLoad[] =
    pins.tile === undefined
      ? ([4, 2, 1] as const).filter((t) => t <= widest)
      : [Math.min(widest, pins.tile) as WideLoad];
  const cpsToTry: CtasPerSm[] = pins.ctasPerSm === undefined ? [1, 2] : [pins.ctasPerSm];
  let best: { r: Extract<SparseRnnPlanResult, { fits: true }>; key: number[] } | undefined;
  for (const bt of tilesToTry) {
    for (const ctasPerSm of cpsToTry) {
      const tiles = Math.ceil(batch / bt);
      const planOf = (replicas: number) => {
        const r = planSparseRnnWidest(cell, hidden, kind, model, { ...options, maxBatchTile: bt, ctasPerSm, replicas });
        return r.fits && r.plan.batchTile === bt ? r : null;
      };
      let r: ReturnType<typeof planOf> = null;
      for (let replicas = Math.min(tiles, cap); replicas >= 1 && r === null; replicas--) {
        r = planOf(replicas);
        if (r === null || replicas === 1) continue;
        // the most replicas that fit take ⌈tiles / replicas⌉ rounds per step; the fewest replicas with as many
        // rounds spread each over more CTAs (fewer pairs per CTA): 4 tiles on 3 replicas are 2 rounds, as on 2
        const fewest = Math.ceil(tiles / Math.ceil(tiles / replicas));
        if (fewest < replicas) r = planOf(fewest) ?? r;
      }
      if (r === null) continue;
      const shape = sparseLaunchShape(r.plan, batch);
      const key = [shape.rounds, shape.floatsPerSm, -ctasPerSm];
      if (best === undefined || lexLess(key, best.key)) best = { r, key };
    }
  }
  return best?.r ?? planSparseRnnWidest(cell, hidden, kind, model, options);
}

function lexLess(a: readonly number[], b: readonly number[]): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i]! < b[i]!;
  return false;
}
