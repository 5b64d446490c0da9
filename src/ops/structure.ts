import { type ComputationGraph, Expression, type GraphParameter, ShapeError } from "../graph/graph.js";
import { Op } from "../graph/opcodes.js";
import {
  argBuffer,
  argName,
  argNode,
  argumentError,
  describeValue,
  type ExprLike,
  exprGraph,
  graphOf,
  graphOf2,
  graphOf3,
  isParameterLike,
  nodeOfAt,
  type OpDefinition,
  type OpFamily,
  requireArray,
  requireGraph,
  requireVector,
  requireVectorAt,
  shapeMismatch,
  shapeSignature,
} from "./common.js";

// ---- builders -------------------------------------------------------------------------------------------------

/**
 * y = the given values: a vector, or a row-major matrix of `shape` [rows, cols] (an image batch for conv2d is
 * [samples, C·H·W]: one sample per row, each in channel, row, column order). Each value must be a finite number that
 * float32 can hold: a NaN or an infinity here would reach the weights through the gradients, and a string would
 * become NaN.
 */
export function input(
  g: ComputationGraph,
  values: ArrayLike<number>,
  shape: readonly [number, number] = [values?.length ?? 0, 1],
): Expression {
  requireGraph(g, "input");
  const v = values as Partial<ArrayLike<unknown>> | null;
  if (typeof v !== "object" || v === null || !Number.isSafeInteger(v.length) || v.length! < 0) {
    throw argumentError("input", "values", "an array of numbers", values);
  }
  const n = values.length;
  if (n === 0) throw new ShapeError("input: needs at least one value");
  const [rows, cols] = shape;
  if (!Number.isInteger(rows) || !Number.isInteger(cols) || rows < 1 || cols < 1 || rows * cols !== n) {
    throw new ShapeError(`input: shape [${rows},${cols}] does not hold the ${n} values given`);
  }
  for (let k = 0; k < n; k++) {
    const x = values[k];
    if (typeof x !== "number" || !Number.isFinite(Math.fround(x))) throw badInputValue(x, k);
  }
  const off = g.addInputData(values);
  const id = g.addNode0(Op.Input, rows, cols, off);
  return new Expression(g, id, g.generation);
}

function badInputValue(x: unknown, k: number): ShapeError {
  const why = typeof x === "number" && Number.isFinite(x) ? " (outside float32's range)" : "";
  return new ShapeError(`input: values[${k}] must be a finite number; got ${describeValue(x)}${why}`);
}

/** y = p (a dense parameter as an expression; one node per parameter per graph). */
export function parameter(g: ComputationGraph, p: GraphParameter): Expression {
  requireGraph(g, "parameter");
  if (!isParameterLike(p)) throw argumentError("parameter", "p", "a parameter", p);
  return new Expression(g, g.parameterNode(p), g.generation);
}

/** y = E[row]: one row of a lookup table, as a vector. */
export function lookup(g: ComputationGraph, table: GraphParameter, row: number): Expression {
  requireGraph(g, "lookup");
  if (!isParameterLike(table)) throw argumentError("lookup", "table", "a lookup table", table);
  return new Expression(g, lookupNode(g, table, row), g.generation);
}

/** `lookup` returning the new node's id (see NODE BUILDERS in common.ts). */
export function lookupNode(g: ComputationGraph, table: GraphParameter, row: number): number {
  if (table.kind !== "lookup") {
    throw new ShapeError(`lookup: '${table.name}' is not a lookup table (use addLookupParameters)`);
  }
  if (!Number.isInteger(row) || row < 0 || row >= table.rows) throw badRow(table, row);
  g.useLookup(table);
  return g.addNode0(Op.Lookup, table.cols, 1, table.index, row);
}

function badRow(table: GraphParameter, row: unknown): ShapeError {
  if (!Number.isInteger(row)) return argumentError("lookup", "row", "an integer", row);
  return new ShapeError(
    `lookup: row ${row} is out of range for '${table.name}' with ${table.rows} rows (0 to ${table.rows - 1})`,
  );
}

/** Argument k of a variadic op: xs[k]. */
const variadicArgName = (k: number): string => argName("xs[", k, "]");

/** Validates the arguments of a variadic op into the argument buffer (which it returns). */
function variadic(g: ComputationGraph, op: string, xs: readonly ExprLike[]): Int32Array {
  const ids = argBuffer(xs.length);
  for (let k = 0; k < xs.length; k++) ids[k] = nodeOfAt(g, xs[k]!, op, "xs[", k, "]");
  return ids;
}

function graphOfVariadic(op: string, xs: readonly ExprLike[]): ComputationGraph {
  if (xs.length === 0) throw new ShapeError(`${op}: needs at least one argument`);
  return graphOf(op, xs, variadicArgName);
}

/** y = [x₁; x₂; …] (vectors). */
export function concat(xs: readonly ExprLike[]): Expression {
  requireArray(xs, "concat", "xs", "expressions");
  if (xs.length === 2) return concat2(xs[0]!, xs[1]!);
  if (xs.length === 3) return concat3(xs[0]!, xs[1]!, xs[2]!);
  const g = graphOfVariadic("concat", xs);
  const ids = variadic(g, "concat", xs);
  let n = 0;
  for (let k = 0; k < xs.length; k++) n += requireVectorAt(g, ids[k]!, "concat", "xs[", k, "]");
  return new Expression(g, g.addNode(Op.Concat, n, 1, ids, 0, 0, 0, xs.length), g.generation);
}

/** `concat([a, b])` without the argument array (the same node, checks and messages). */
export function concat2(a: ExprLike, b: ExprLike): Expression {
  const ax = a instanceof Expression;
  const bx = b instanceof Expression;
  const g = ax ? a.graph : bx ? b.graph : graphOf2("concat", a, b, "xs[0]", "xs[1]");
  const ai = argNode(g, a, ax, "concat", "xs[0]");
  const bi = argNode(g, b, bx, "concat", "xs[1]");
  return new Expression(g, concat2Node(g, ai, bi), g.generation);
}

/** `concat2` of nodes a and b of g, returning the new node's id (see NODE BUILDERS in common.ts). */
export function concat2Node(g: ComputationGraph, a: number, b: number): number {
  const n = requireVector(g, a, "concat", "xs[0]") + requireVector(g, b, "concat", "xs[1]");
  return g.addNode2(Op.Concat, n, 1, a, b);
}

/** `concat([a, b, c])` without the argument array (the same node, checks and messages). */
export function concat3(a: ExprLike, b: ExprLike, c: ExprLike): Expression {
  const ax = a instanceof Expression;
  const bx = b instanceof Expression;
  const cx = c instanceof Expression;
  const g = ax ? a.graph : bx ? b.graph : cx ? c.graph : graphOf3("concat", a, b, c, "xs[0]", "xs[1]", "xs[2]");
  const ai = argNode(g, a, ax, "concat", "xs[0]");
  const bi = argNode(g, b, bx, "concat", "xs[1]");
  const ci = argNode(g, c, cx, "concat", "xs[2]");
  return new Expression(g, concat3Node(g, ai, bi, ci), g.generation);
}

/** `concat3` of nodes a, b and c of g, returning the new node's id (see NODE BUILDERS in common.ts). */
export function concat3Node(g: ComputationGraph, a: number, b: number, c: number): number {
  const n =
    requireVector(g, a, "concat", "xs[0]") +
    requireVector(g, b, "concat", "xs[1]") +
    requireVector(g, c, "concat", "xs[2]");
  return g.addNode3(Op.Concat, n, 1, a, b, c);
}

/** y = x[start:end] (a contiguous slice of a vector). */
export function pickRange(x: Expression, start: number, end: number): Expression {
  const g = exprGraph(x, "pickRange", "x");
  return new Expression(g, pickRangeNode(g, g.check(x, "pickRange", "x"), start, end), g.generation);
}

/** `pickRange` of node x of g, returning the new node's id (see NODE BUILDERS in common.ts). */
export function pickRangeNode(g: ComputationGraph, x: number, start: number, end: number): number {
  const n = requireVector(g, x, "pickRange", "x");
  if (!Number.isInteger(start) || !Number.isInteger(end) || start < 0 || end > n || start >= end) {
    throw badRange(start, end, n);
  }
  return g.addNode1(Op.PickRange, end - start, 1, x, start, end);
}

function badRange(start: unknown, end: unknown, n: number): ShapeError {
  if (!Number.isInteger(start)) return argumentError("pickRange", "start", "an integer", start);
  if (!Number.isInteger(end)) return argumentError("pickRange", "end", "an integer", end);
  return new ShapeError(`pickRange: range [${start}, ${end}) is not a non-empty range inside x of length ${n}`);
}

/** y = Σᵢ xᵢ (all the same shape); DyNet's esum. */
export function sum(xs: readonly ExprLike[]): Expression {
  requireArray(xs, "sum", "xs", "expressions");
  const g = graphOfVariadic("sum", xs);
  return new Expression(g, sumNode(g, variadic(g, "sum", xs), xs.length), g.generation);
}

/** `sum` of the first n (≥ 1) nodes of g in `ids`, returning the new node's id (see NODE BUILDERS in common.ts). */
export function sumNode(g: ComputationGraph, ids: ArrayLike<number>, n: number): number {
  const first = ids[0]!;
  const rows = g.rows;
  const cols = g.cols;
  const r = rows[first]!;
  const c = cols[first]!;
  for (let k = 1; k < n; k++) {
    const id = ids[k]!;
    if (rows[id] !== r || cols[id] !== c) throw shapeMismatch(g, first, id, "sum", "xs[0]", argName("xs[", k, "]"));
  }
  return g.addNode(Op.Sum, r, c, ids, 0, 0, 0, n);
}

export { sum as esum };

// ---- reference kernels and batching signatures (parameter and lookup values are supplied by the engine) ---------

const inputOp: OpDefinition = {
  signature: shapeSignature,
  forward(g, i, v) {
    const y = g.valueOffset[i]!;
    const off = g.aux[i]!;
    const n = g.rows[i]! * g.cols[i]!;
    for (let k = 0; k < n; k++) v[y + k] = g.inputData[off + k]!;
  },
  backward() {},
};

const parameterOp: OpDefinition = {
  // one node per parameter per graph: never batched (engines load parameters, or point at them)
  signature: () => 0,
  forward() {
    throw new Error("parameter values are supplied by the engine");
  },
  backward() {},
};

const lookupOp: OpDefinition = {
  // batched by table: one row gather (and one scatter of gradients) per table
  signature(g, i, key) {
    key[1] = g.aux[i]!;
    return 2;
  },
  forward() {
    throw new Error("lookup values are supplied by the engine");
  },
  backward() {},
};

const concatOp: OpDefinition = {
  // batched by the lengths of the parts
  signature(g, i, key) {
    const n = g.argCount[i]!;
    const a0 = g.argStart[i]!;
    for (let k = 0; k < n; k++) key[1 + k] = g.rows[g.args[a0 + k]!]!;
    return 1 + n;
  },
  forward(g, i, v) {
    let y = g.valueOffset[i]!;
    const n = g.argCount[i]!;
    for (let k = 0; k < n; k++) {
      const a = g.arg(i, k);
      const x = g.valueOffset[a]!;
      const len = g.rows[a]!;
      for (let r = 0; r < len; r++) v[y + r] = v[x + r]!;
      y += len;
    }
  },
  backward(g, i, _v, d) {
    let y = g.valueOffset[i]!;
    const n = g.argCount[i]!;
    for (let k = 0; k < n; k++) {
      const a = g.arg(i, k);
      const x = g.valueOffset[a]!;
      const len = g.rows[a]!;
      for (let r = 0; r < len; r++) d[x + r] = d[x + r]! + d[y + r]!;
      y += len;
    }
  },
};

const pickRangeOp: OpDefinition = {
  // batched by the argument's length and the range
  signature(g, i, key) {
    key[1] = g.rows[g.arg(i, 0)]!;
    key[2] = g.aux[i]!;
    key[3] = g.aux2[i]!;
    return 4;
  },
  forward(g, i, v) {
    const y = g.valueOffset[i]!;
    const x = g.valueOffset[g.arg(i, 0)]! + g.aux[i]!;
    const n = g.rows[i]!;
    for (let r = 0; r < n; r++) v[y + r] = v[x + r]!;
  },
  backward(g, i, _v, d) {
    const y = g.valueOffset[i]!;
    const x = g.valueOffset[g.arg(i, 0)]! + g.aux[i]!;
    const n = g.rows[i]!;
    for (let r = 0; r < n; r++) d[x + r] = d[x + r]! + d[y + r]!;
  },
};

const sumOp: OpDefinition = {
  // batched by the number of terms and the shape
  signature(g, i, key) {
    key[1] = g.argCount[i]!;
    key[2] = g.rows[i]!;
    key[3] = g.cols[i]!;
    return 4;
  },
  forward(g, i, v) {
    const y = g.valueOffset[i]!;
    const len = g.rows[i]! * g.cols[i]!;
    const n = g.argCount[i]!;
    v.fill(0, y, y + len);
    for (let k = 0; k < n; k++) {
      const x = g.valueOffset[g.arg(i, k)]!;
      for (let r = 0; r < len; r++) v[y + r] = v[y + r]! + v[x + r]!;
    }
  },
  backward(g, i, _v, d) {
    const y = g.valueOffset[i]!;
    const len = g.rows[i]! * g.cols[i]!;
    const n = g.argCount[i]!;
    for (let k = 0; k < n; k++) {
      const x = g.valueOffset[g.arg(i, k)]!;
      for (let r = 0; r < len; r++) d[x + r] = d[x + r]! + d[y + r]!;
    }
  },
};

/** The structural ops' definitions (their part of the registry, src/ops/registry.ts). */
export const STRUCTURE_OPS = {
  [Op.Input]: inputOp,
  [Op.Parameter]: parameterOp,
  [Op.Lookup]: lookupOp,
  [Op.Concat]: concatOp,
  [Op.PickRange]: pickRangeOp,
  [Op.Sum]: sumOp,
} satisfies OpFamily;
