import { ComputationGraph, Expression, type GraphParameter, ShapeError } from "../graph/graph.js";
import type { OpTable } from "../graph/opcodes.js";

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

/**
 * An op as the engines see it: its reference math (the CPU engine's kernels, the oracle every engine is tested
 * against) and its batching signature.
 */
export interface OpDefinition extends OpKernels {
  /**
   * Node i's batching signature, DyNet's rule: two nodes with equal signatures do the same operation on the same
   * parameters with compatible shapes, so an autobatching engine may run them as one batched kernel. Writes the
   * signature's integer fields into key[1 …] (key[0] holds the op; key has room for 2·argCount + 4 words) and
   * returns the key's length; 0 for a node that is never batched (parameters).
   */
  signature(g: ComputationGraph, i: number, key: Int32Array): number;
}

/** The definitions of one op family (its file's part of the registry's table). */
export type OpFamily = Partial<OpTable<OpDefinition>>;

/** The signature of most ops: op and shape. */
export function shapeSignature(g: ComputationGraph, i: number, key: Int32Array): number {
  key[1] = g.rows[i]!;
  key[2] = g.cols[i]!;
  return 3;
}

/*
 * NODE BUILDERS. Every op has a builder on expressions (`affine3`, `pickRange`, …: the public API) and, for the ops a
 * model builds once per tree node, one on node ids (`affineNode`, `pickRangeNode`, …) that the expression builder
 * calls once it has checked its arguments. The node builders check shapes and attributes with the same messages, but
 * not that each id is a node of g's current generation: they are for builders that made those nodes themselves in
 * this build (TreeLstmModel), and save the expressions in between (an object per node, and its checks).
 *
 * The builders run once per graph node, tens of thousands of times per batch, so the checks below cost a property
 * load or two when the arguments are fine; every message (and every argument name with a number in it, such as
 * 'W2' or 'xs[3]') is built only once a check has failed.
 */

/*
 * ARGUMENT CHECKS. The public builders take arguments from users' code (TypeScript's types do not reach JavaScript
 * callers, `any`, or a missing array element), so each refuses an argument of the wrong kind — undefined, a number
 * where an expression goes, a lookup table where a matrix goes, a string among input values — with a ShapeError
 * naming the op and the argument, never a TypeError from deep inside. The checks below are what the fast path costs:
 * an `instanceof` or a `typeof` and one property load; `describeValue` and the messages run only once one failed.
 */

/** Cuts a long string for a message (an argument may be a whole file's text). */
function cut(s: string, max = 40): string {
  return s.length <= max ? s : `${s.slice(0, max)}… (${s.length} characters)`;
}

/** Whether `a` looks like a parameter (ops sit below the model layer, so the test is structural). */
export function isParameterLike(a: unknown): a is GraphParameter {
  if (typeof a !== "object" || a === null) return false;
  const p = a as Partial<GraphParameter>;
  return (p.kind === "dense" || p.kind === "lookup") && typeof p.name === "string";
}

/** What `a` is, in a few words, for messages: `undefined`, `3`, `the string "a"`, `lookup table 'E'`, … */
export function describeValue(a: unknown): string {
  if (a instanceof Expression) return `an expression of shape ${a.shapeString()}`;
  if (isParameterLike(a)) return `${a.kind === "lookup" ? "lookup table" : "parameter"} '${a.name}'`;
  switch (typeof a) {
    case "undefined":
    case "number":
    case "boolean":
      return String(a);
    case "bigint":
      return `${a}n`;
    case "string":
      return `the string ${JSON.stringify(cut(a))}`;
    case "function":
      return a.name ? `a function (${a.name})` : "a function";
    case "symbol":
      return "a symbol";
  }
  if (a === null) return "null";
  if (Array.isArray(a)) return `an array of length ${a.length}`;
  const name = (Object.getPrototypeOf(a) as { constructor?: { name?: string } } | null)?.constructor?.name;
  return name && name !== "Object" ? `a ${name}` : "an object";
}

/** The error of argument `name` of `op` that is not `expected` (an article and a kind: "an integer"). */
export function argumentError(op: string, name: string, expected: string, got: unknown): ShapeError {
  return new ShapeError(`${op}: argument '${name}' must be ${expected}; got ${describeValue(got)}`);
}

/** Why `a`, given where an op takes an expression or a dense parameter, is neither. */
function notAnArgument(op: string, name: string, a: unknown): ShapeError {
  if (isParameterLike(a) && a.kind === "lookup") {
    return new ShapeError(
      `${op}: argument '${name}' is lookup table '${a.name}'; read its rows with lookup(cg, ${a.name}, row)`,
    );
  }
  return argumentError(op, name, "an Expression or a dense parameter", a);
}

/**
 * Why `a`, given where an op takes an expression, is not one: a parameter (the graph to add it to is unknown:
 * the message of an op without expressions), or something else, named.
 */
export function notExpression(op: string, name: string, a: unknown): ShapeError {
  return isParameterLike(a) ? noExpression(op) : argumentError(op, name, "an Expression", a);
}

/** The graph of argument `x` of op `op`, which must be an expression. */
export function exprGraph(x: unknown, op: string, name: string): ComputationGraph {
  if (x instanceof Expression) return x.graph;
  throw notExpression(op, name, x);
}

/** Refuses `g` unless it is a ComputationGraph (the builders that take one: input, parameter, lookup). */
export function requireGraph(g: unknown, op: string): void {
  if (!(g instanceof ComputationGraph)) throw argumentError(op, "g", "a ComputationGraph", g);
}

/** Refuses `xs` unless it is an array (the variadic builders' argument lists). */
export function requireArray(xs: unknown, op: string, name: string, of: string): void {
  if (!Array.isArray(xs)) throw argumentError(op, name, `an array of ${of}`, xs);
}

/** The node of `a`, given where an op takes an expression or a dense parameter and `a` is no expression. */
export function paramNode(g: ComputationGraph, a: ExprLike, op: string, name: string): number {
  const p = a as GraphParameter;
  if (typeof p === "object" && p !== null && p.kind === "dense") return g.parameterNode(p);
  throw notAnArgument(op, name, a);
}

/** The error of an op none of whose arguments is an expression. */
export function noExpression(op: string): ShapeError {
  return new ShapeError(`${op}: no argument is an expression, so there is no graph to add the node to`);
}

/**
 * The error of an op none of whose arguments is an expression: the first argument that is not even a dense
 * parameter, named (`nameOf(k)`), or else noExpression.
 */
function noGraph(op: string, args: ArrayLike<unknown>, nameOf: (k: number) => string): ShapeError {
  for (let k = 0; k < args.length; k++) {
    const a = args[k];
    if (!(typeof a === "object" && a !== null && (a as Partial<GraphParameter>).kind === "dense")) {
      return notAnArgument(op, nameOf(k), a);
    }
  }
  return noExpression(op);
}

/**
 * Finds the graph of an op's arguments (at least one must be an expression); `nameOf(k)` names argument k in the
 * error (a function made once per op, not per call).
 */
export function graphOf(op: string, args: readonly ExprLike[], nameOf: (k: number) => string): ComputationGraph {
  for (let k = 0; k < args.length; k++) {
    const a = args[k];
    if (a instanceof Expression) return a.graph;
  }
  throw noGraph(op, args, nameOf);
}

/** `graphOf` for two arguments named `na` and `nb`, without an array. */
export function graphOf2(op: string, a: ExprLike, b: ExprLike, na: string, nb: string): ComputationGraph {
  if (a instanceof Expression) return a.graph;
  if (b instanceof Expression) return b.graph;
  throw noGraph(op, [a, b], (k) => (k === 0 ? na : nb));
}

/** `graphOf` for three arguments named `na`, `nb` and `nc`, without an array. */
export function graphOf3(
  op: string,
  a: ExprLike,
  b: ExprLike,
  c: ExprLike,
  na: string,
  nb: string,
  nc: string,
): ComputationGraph {
  if (a instanceof Expression) return a.graph;
  if (b instanceof Expression) return b.graph;
  if (c instanceof Expression) return c.graph;
  throw noGraph(op, [a, b, c], (k) => [na, nb, nc][k]!);
}

/** Turns an argument into a node id of `g`, validating it. */
export function nodeOf(g: ComputationGraph, a: ExprLike, op: string, name: string): number {
  if (a instanceof Expression) {
    if (a.graph === g && a.generation === g.generation) return a.id;
    return g.check(a, op, name); // throws, naming what is wrong
  }
  return paramNode(g, a, op, name);
}

/** `nodeOf` for an argument known to be an expression. */
export function exprNode(g: ComputationGraph, e: Expression, op: string, name: string): number {
  if (e.graph === g && e.generation === g.generation) return e.id;
  return g.check(e, op, name); // throws, naming what is wrong
}

/**
 * `nodeOf` with the `instanceof` test already done (`isExpr`): builders test each argument once, to find the graph,
 * and reuse the answer here.
 */
export function argNode(g: ComputationGraph, a: ExprLike, isExpr: boolean, op: string, name: string): number {
  return isExpr ? exprNode(g, a as Expression, op, name) : paramNode(g, a, op, name);
}

/** The name of argument `k` of a numbered family: `argName("W", 2)` is 'W2', `argName("xs[", 3, "]")` 'xs[3]'. */
export function argName(prefix: string, k: number, suffix = ""): string {
  return `${prefix}${k}${suffix}`;
}

/** `nodeOf` for argument `argName(prefix, k, suffix)`; the name is only built if the check fails. */
export function nodeOfAt(g: ComputationGraph, a: ExprLike, op: string, prefix: string, k: number, suffix = ""): number {
  if (a instanceof Expression) {
    if (a.graph === g && a.generation === g.generation) return a.id;
    return g.check(a, op, argName(prefix, k, suffix));
  }
  if (typeof a === "object" && a !== null && a.kind === "dense") return g.parameterNode(a);
  throw notAnArgument(op, argName(prefix, k, suffix), a);
}

function notVector(g: ComputationGraph, id: number, op: string, name: string): ShapeError {
  return new ShapeError(`${op}: argument '${name}' must be a vector; it has shape ${g.shapeOf(id)}`);
}

/** Requires node `id` to be a vector (cols = 1). */
export function requireVector(g: ComputationGraph, id: number, op: string, name: string): number {
  if (g.cols[id] !== 1) throw notVector(g, id, op, name);
  return g.rows[id]!;
}

/** `requireVector` for argument `argName(prefix, k, suffix)`. */
export function requireVectorAt(
  g: ComputationGraph,
  id: number,
  op: string,
  prefix: string,
  k: number,
  suffix = "",
): number {
  if (g.cols[id] !== 1) throw notVector(g, id, op, argName(prefix, k, suffix));
  return g.rows[id]!;
}

/** The error of two arguments that must have the same shape and do not. */
export function shapeMismatch(
  g: ComputationGraph,
  a: number,
  b: number,
  op: string,
  na: string,
  nb: string,
): ShapeError {
  return new ShapeError(
    `${op}: arguments '${na}' and '${nb}' must have the same shape; '${na}' is ${g.shapeOf(a)}, '${nb}' is ${g.shapeOf(b)}`,
  );
}

/** Reusable argument buffer for variadic builders (addNode copies what it needs). */
let scratchIds = new Int32Array(64);
export function argBuffer(n: number): Int32Array {
  if (n > scratchIds.length) scratchIds = new Int32Array(Math.max(n, scratchIds.length * 2));
  return scratchIds;
}
