import type { ComputationGraph } from "../../graph/graph.js";

/*
 * The hot loops of the planner (plan.ts), as small functions of typed arrays. V8 optimises a loop inside a larger
 * method by on-stack replacement, and code after such a loop that had not run yet when it was compiled then
 * deoptimised on every call (the OSR code is cached and re-entered): measured, the depth and agenda planners fell
 * back to the interpreter once per plan. A function per loop is optimised as a whole.
 */

export function maxPlannedDepth(nodeSig: Int32Array, depth: Int32Array, from: number, n: number): number {
  let maxDepth = 0;
  for (let li = 0; li < n; li++) if (nodeSig[li]! >= 0 && depth[from + li]! > maxDepth) maxDepth = depth[from + li]!;
  return maxDepth;
}

/** counts[d + 1] = planned nodes of depth d, then prefix sums: counts[d] = start of depth d. */
export function countDepths(
  nodeSig: Int32Array,
  depth: Int32Array,
  from: number,
  n: number,
  counts: Int32Array,
  maxDepth: number,
): void {
  counts.fill(0, 0, maxDepth + 2);
  for (let li = 0; li < n; li++) if (nodeSig[li]! >= 0) counts[depth[from + li]! + 1]!++;
  for (let d = 0; d <= maxDepth; d++) counts[d + 1]! += counts[d]!;
}

/** Stable placement of local ids by depth; afterwards counts[d] is the end of depth d. */
export function placeByDepth(
  nodeSig: Int32Array,
  depth: Int32Array,
  from: number,
  n: number,
  counts: Int32Array,
  order: Int32Array,
): void {
  for (let li = 0; li < n; li++) if (nodeSig[li]! >= 0) order[counts[depth[from + li]!]!++] = li;
}

/** pending[li] = planned arguments of li; consStart[la + 1] = planned consumers of la, then prefix sums. */
export function countConsumers(
  g: ComputationGraph,
  from: number,
  n: number,
  nodeSig: Int32Array,
  pending: Int32Array,
  consStart: Int32Array,
): void {
  pending.fill(0, 0, n);
  consStart.fill(0, 0, n + 1);
  const { args, argStart, argCount } = g;
  for (let li = 0; li < n; li++) {
    if (nodeSig[li]! < 0) continue;
    const a0 = argStart[from + li]!;
    const a1 = a0 + argCount[from + li]!;
    for (let k = a0; k < a1; k++) {
      const la = args[k]! - from;
      if (la >= 0 && nodeSig[la]! >= 0) {
        pending[li]!++;
        consStart[la + 1]!++;
      }
    }
  }
  for (let li = 0; li < n; li++) consStart[li + 1]! += consStart[li]!;
}

/** cons[consStart[la] …] = the planned consumers of la; `fill` is scratch of n entries. */
export function fillConsumers(
  g: ComputationGraph,
  from: number,
  n: number,
  nodeSig: Int32Array,
  consStart: Int32Array,
  cons: Int32Array,
  fill: Int32Array,
): void {
  fill.set(consStart.subarray(0, n));
  const { args, argStart, argCount } = g;
  for (let li = 0; li < n; li++) {
    if (nodeSig[li]! < 0) continue;
    const a0 = argStart[from + li]!;
    const a1 = a0 + argCount[from + li]!;
    for (let k = a0; k < a1; k++) {
      const la = args[k]! - from;
      if (la >= 0 && nodeSig[la]! >= 0) cons[fill[la]!++] = li;
    }
  }
}

/** Index in active[0 … count) of the best group: non-matrix first, then lowest average depth, then first seen. */
export function bestGroup(active: Int32Array, count: number, avg: Float64Array, matrix: Uint8Array): number {
  let bestK = 0;
  let best = active[0]!;
  for (let k = 1; k < count; k++) {
    const s = active[k]!;
    const dm = matrix[s]! - matrix[best]!;
    if (dm < 0 || (dm === 0 && (avg[s]! < avg[best]! || (avg[s] === avg[best] && s < best)))) {
      best = s;
      bestK = k;
    }
  }
  return bestK;
}
