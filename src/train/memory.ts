/**
 * One memory estimate for a run, checked before its first update: what the process holds already (the data, the
 * weights), the gradients and optimiser state of every parameter, and the activations of the largest batch the data
 * can form — the `batch` largest examples together, measured from the graph the model builds for them (its values,
 * and as many gradients: `valueSize` × 4 bytes × 2) — against the memory the process may use (util/memory-limit.ts:
 * the container's or cgroup's limit, else RAM). Beyond it, one line with the largest batch that fits, or, when one
 * example alone does not, which example; so a run is refused instead of being killed by the kernel mid-epoch.
 * On a GPU the activations are the device's: they, the weights, gradients and optimiser state are checked against the
 * device's memory (`device`) — a lower bound of what the engine allocates (its own buffers come on top).
 */
import { ComputationGraph } from "../graph/graph.js";
import type { TaskModel } from "../models/task.js";
import { UserError } from "../util/errors.js";
import { formatBytes, type MemoryLimit } from "../util/memory-limit.js";

/** A run that would not fit in memory. */
export class RunMemoryError extends UserError {}

/**
 * The size of an example as data: the elements of its arrays and typed arrays and the fields of its objects, walked
 * (iteratively) to the leaves — tree nodes, words, characters, pixels. It orders examples by how large a graph they
 * make; the graph itself is what is measured.
 */
export function structuralSize(x: unknown): number {
  let size = 0;
  const stack: unknown[] = [x];
  const seen = new Set<object>();
  while (stack.length > 0) {
    const v = stack.pop();
    size++;
    if (typeof v !== "object" || v === null) continue;
    if (ArrayBuffer.isView(v)) {
      size += (v as unknown as ArrayLike<number>).length ?? 0;
      continue;
    }
    if (seen.has(v)) continue;
    seen.add(v);
    if (Array.isArray(v)) for (const e of v) stack.push(e);
    else for (const e of Object.values(v)) stack.push(e);
  }
  return size;
}

/** The indices of the `count` largest examples (structuralSize), largest first. */
export function largestExamples<E>(examples: readonly E[], count: number): number[] {
  const sizes = examples.map(structuralSize);
  return sizes
    .map((_, i) => i)
    .sort((a, b) => sizes[b]! - sizes[a]! || a - b)
    .slice(0, Math.max(0, count));
}

/** The bytes of activations (values and their gradients) of one training graph of `examples`. */
export function activationBytes<E>(model: TaskModel<E>, examples: readonly E[]): number {
  if (examples.length === 0) return 0;
  const cg = new ComputationGraph();
  cg.training = true;
  model.buildBatchLoss(cg, examples);
  return cg.valueSize * 4 * 2;
}

export interface RunMemoryCheck<E> {
  model: TaskModel<E>;
  train: readonly E[];
  /** Examples per batch on this process (a rank's share of the global batch). */
  batch: number;
  /** Bytes per parameter value beyond the value itself: its gradient (4), and Adam's two moments (8). */
  extraBytesPerValue: number;
  limit: MemoryLimit;
  /** Whether the activations are in this process's memory (false: on a GPU). */
  hostActivations: boolean;
  /** The processes sharing the limit (ranks on this host). */
  sharers?: number;
  /** The flags to lower for the model's size ("--hidden or --embed"). */
  sizeFlags: string;
  /** The GPU's memory, when the activations are on it (`hostActivations` false). */
  device?: MemoryLimit;
  /** Bytes in use now (default: the process's resident set). */
  inUse?: number;
}

/** Refuses (RunMemoryError, one line) a run whose estimate exceeds its share of the limit; see the module comment. */
export function checkRunMemory<E>(c: RunMemoryCheck<E>): void {
  const inUse = c.inUse ?? process.memoryUsage().rss;
  const optimiser = c.model.params.count * c.extraBytesPerValue;
  const hostShare = c.limit.bytes / Math.max(1, c.sharers ?? 1);
  if (!c.hostActivations && c.device !== undefined) {
    // on the GPU: the weights (4 bytes a value), their gradients and optimiser state, and the activations
    checkAgainst(c, c.device, c.device.bytes, c.model.params.count * 4, "of weights", optimiser, true);
  }
  checkAgainst(c, c.limit, hostShare, inUse, "in use (data and weights)", optimiser, c.hostActivations);
}

/** One limit's check: `inUse` + `optimiser` + (with `withActivations`) the largest batch's activations ≤ `share`. */
function checkAgainst<E>(
  c: RunMemoryCheck<E>,
  limit: MemoryLimit,
  share: number,
  inUse: number,
  inUseWhat: string,
  optimiser: number,
  withActivations: boolean,
): void {
  const order = withActivations ? largestExamples(c.train, c.batch) : [];
  const actOf = (b: number) =>
    activationBytes(
      c.model,
      order.slice(0, b).map((i) => c.train[i]!),
    );
  const activations = actOf(order.length);
  const need = inUse + optimiser + activations;
  if (need <= share) return;
  const limitText =
    `${formatBytes(share)}${share < limit.bytes ? ` (a 1/${c.sharers} share of ${formatBytes(limit.bytes)})` : ""}` +
    ` (${limit.source})`;
  const head =
    `the run needs about ${formatBytes(need)} — ${formatBytes(inUse)} ${inUseWhat}, ` +
    `${formatBytes(optimiser)} of gradients and optimiser state, ${formatBytes(activations)} of activations of the ` +
    `largest batch of ${order.length} — more than the memory limit, ${limitText}`;
  const base = inUse + optimiser;
  if (base > share || order.length === 0) {
    throw new RunMemoryError(`${head}; lower ${c.sizeFlags}`);
  }
  // the largest batch whose largest examples fit (activations grow with the batch)
  let lo = 0;
  let hi = order.length;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (base + actOf(mid) <= share) lo = mid;
    else hi = mid - 1;
  }
  if (lo === 0) {
    const first = order[0]!;
    throw new RunMemoryError(
      `${head}; the largest training example alone (#${first + 1}, ${formatBytes(actOf(1))} of activations) does ` +
        `not fit: remove it from the data (or use --max-sentences), or lower ${c.sizeFlags}`,
    );
  }
  throw new RunMemoryError(
    `${head}; the largest batch that fits is --batch ${lo}${
      (c.sharers ?? 1) > 1 ? ` per rank (--batch ${lo * (c.sharers ?? 1)} in all)` : ""
    }, or lower ${c.sizeFlags}`,
  );
}
