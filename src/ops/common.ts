import { type ComputationGraph, Expression, type GraphParameter, ShapeError } from "../graph/graph.js";

/** A value buffer of an engine: float32 in normal use, float64 for gradient checks. */
export type Buf = Float32Array | Float64Array;

/** An argument of an op: an expression, or a dense parameter (read through the graph's parameter node). */
export type ExprLike = Expression | GraphParameter;

/** The reference math of one op: forward computes node i from its arguments; backward accumulates (+=). */
export interface OpKernels {
  forward(g: ComputationGraph, i: number, v: Buf): void;
  /** d holds gradients at the same offsets as v; adds node i's contribution into its arguments' gradients. */
  backward(g: ComputationGraph, i: number, v: Buf, d: Buf): void;
}

/** Finds the graph of an op's arguments (at least one must be an expression). */
export function graphOf(op: string, args: readonly ExprLike[]): ComputationGraph {
  for (const a of args) if (a instanceof Expression) return a.graph;
  throw new ShapeError(`${op}: no argument is an expression, so there is no graph to add the node to`);
}

/** Turns an argument into a node id of `g`, validating it. */
export function nodeOf(g: ComputationGraph, a: ExprLike, op: string, name: string): number {
  if (a instanceof Expression) return g.check(a, op, name);
  return g.parameterNode(a);
}

/** Requires node `id` to be a vector (cols = 1). */
export function requireVector(g: ComputationGraph, id: number, op: string, name: string): number {
  if (g.cols[id] !== 1) {
    throw new ShapeError(`${op}: argument '${name}' must be a vector; it has shape ${g.shapeOf(id)}`);
  }
  return g.rows[id]!;
}

export function sameShape(g: ComputationGraph, a: number, b: number, op: string, na: string, nb: string): void {
  if (g.rows[a] !== g.rows[b] || g.cols[a] !== g.cols[b]) {
    throw new ShapeError(
      `${op}: arguments '${na}' and '${nb}' must have the same shape; '${na}' is ${g.shapeOf(a)}, '${nb}' is ${g.shapeOf(b)}`,
    );
  }
}

/** Reusable argument buffer for variadic builders (addNode copies what it needs). */
let scratchIds = new Int32Array(64);
export function argBuffer(n: number): Int32Array {
  if (n > scratchIds.length) scratchIds = new Int32Array(Math.max(n, scratchIds.length * 2));
  return scratchIds;
}
