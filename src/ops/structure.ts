import { type ComputationGraph, Expression, type GraphParameter, ShapeError } from "../graph/graph.js";
import { Op } from "../graph/opcodes.js";
import { argBuffer, type ExprLike, graphOf, nodeOf, type OpKernels, requireVector, sameShape } from "./common.js";

// ---- builders -------------------------------------------------------------------------------------------------

/** y = the given values (a vector). */
export function input(g: ComputationGraph, values: ArrayLike<number>): Expression {
  if (values.length === 0) throw new ShapeError("input: needs at least one value");
  const off = g.addInputData(values);
  const id = g.addNode(Op.Input, values.length, 1, [], off);
  return new Expression(g, id, g.generation);
}

/** y = p (a dense parameter as an expression; one node per parameter per graph). */
export function parameter(g: ComputationGraph, p: GraphParameter): Expression {
  return new Expression(g, g.parameterNode(p), g.generation);
}

/** y = E[row]: one row of a lookup table, as a vector. */
export function lookup(g: ComputationGraph, table: GraphParameter, row: number): Expression {
  if (table.kind !== "lookup") {
    throw new ShapeError(`lookup: '${table.name}' is not a lookup table (use addLookupParameters)`);
  }
  if (!Number.isInteger(row) || row < 0 || row >= table.rows) {
    throw new ShapeError(`lookup: row ${row} is out of range for '${table.name}' with ${table.rows} rows`);
  }
  g.useLookup(table);
  const id = g.addNode(Op.Lookup, table.cols, 1, [], table.index, row);
  return new Expression(g, id, g.generation);
}

function variadic(op: string, xs: readonly ExprLike[]): ComputationGraph {
  if (xs.length === 0) throw new ShapeError(`${op}: needs at least one argument`);
  const g = graphOf(op, xs);
  const ids = argBuffer(xs.length);
  for (let k = 0; k < xs.length; k++) ids[k] = nodeOf(g, xs[k]!, op, `xs[${k}]`);
  return g;
}

/** y = [x₁; x₂; …] (vectors). */
export function concat(xs: readonly ExprLike[]): Expression {
  const g = variadic("concat", xs);
  const ids = argBuffer(xs.length);
  let n = 0;
  for (let k = 0; k < xs.length; k++) n += requireVector(g, ids[k]!, "concat", `xs[${k}]`);
  return new Expression(g, g.addNode(Op.Concat, n, 1, ids, 0, 0, 0, xs.length), g.generation);
}

/** y = x[start:end] (a contiguous slice of a vector). */
export function pickRange(x: Expression, start: number, end: number): Expression {
  const g = x.graph;
  const xi = g.check(x, "pickRange", "x");
  const n = requireVector(g, xi, "pickRange", "x");
  if (!Number.isInteger(start) || !Number.isInteger(end) || start < 0 || end > n || start >= end) {
    throw new ShapeError(`pickRange: range [${start}, ${end}) is not a non-empty range inside x of length ${n}`);
  }
  return new Expression(g, g.addNode(Op.PickRange, end - start, 1, [xi], start, end), g.generation);
}

/** y = Σᵢ xᵢ (all the same shape); DyNet's esum. */
export function sum(xs: readonly ExprLike[]): Expression {
  const g = variadic("sum", xs);
  const ids = argBuffer(xs.length);
  const first = ids[0]!;
  for (let k = 1; k < xs.length; k++) sameShape(g, first, ids[k]!, "sum", "xs[0]", `xs[${k}]`);
  return new Expression(g, g.addNode(Op.Sum, g.rows[first]!, g.cols[first]!, ids, 0, 0, 0, xs.length), g.generation);
}

export { sum as esum };

// ---- reference kernels (input, parameter and lookup values are supplied by the engine) --------------------------

export const inputKernels: OpKernels = {
  forward(g, i, v) {
    const y = g.valueOffset[i]!;
    const off = g.aux[i]!;
    const n = g.rows[i]!;
    for (let k = 0; k < n; k++) v[y + k] = g.inputData[off + k]!;
  },
  backward() {},
};

export const concatKernels: OpKernels = {
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

export const pickRangeKernels: OpKernels = {
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

export const sumKernels: OpKernels = {
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
