/**
 * The pyramid of the TD-RNN and TD-LSTM: a sentence's n leaves are combined level by level, each adjacent pair of
 * one level into one node of the next, until one node remains: n(n−1)/2 compositions, every inner node of a level
 * feeding two parents (the graph is a DAG, not a tree). Built level by level, as DyNet's benchmark does, so a
 * level's compositions are consecutive nodes of equal depth.
 */
import { ShapeError } from "../../graph/graph.js";

/**
 * Reduces `level` (the handles of a sentence's leaves, in order; overwritten) to the root's handle: level k + 1's
 * i-th node is `compose(left, right)` of level k's i-th and (i+1)-th. A handle is whatever the model composes: a node
 * id, or an index into its own arrays. One leaf is its own root (no composition).
 */
export function reducePyramid(level: number[], compose: (left: number, right: number) => number): number {
  const n = level.length;
  if (n === 0) throw new ShapeError("pyramid: a sentence needs at least one word; got none");
  for (let top = n - 1; top > 0; top--) {
    // in place: level[i + 1] is read before it is overwritten
    for (let i = 0; i < top; i++) level[i] = compose(level[i]!, level[i + 1]!);
  }
  return level[0]!;
}

/** Compositions in the pyramid of n leaves: n(n−1)/2. */
export function pyramidCompositions(n: number): number {
  return (n * (n - 1)) / 2;
}
