import { type ComputationGraph, Expression, type GraphParameter, ShapeError } from "../graph/graph.js";
import { Op } from "../graph/opcodes.js";
import {
  argNode,
  argumentError,
  type Buf,
  describeValue,
  type ExprLike,
  exprGraph,
  graphOf3,
  isParameterLike,
  type OpDefinition,
  type OpFamily,
  requireGraph,
  requireVector,
} from "./common.js";

/*
 * ROW BATCHES. A whole batch as a few nodes instead of a few nodes per word: a matrix [N, K] holds N rows (one per
 * word, packed row, sample — the convention of image batches and the rnn op), and these ops work row by row:
 *
 *   lookupRows(g, E, ids)        [N, dim]  row n = E[ids[n]]             (a lookup per row, one node)
 *   affineRows(b, W, X)          [N, M]    row n = b + W·X[n]           (one GEMM on a GPU)
 *   pickNegLogSoftmaxRows(X, ls) scalar    Σₙ −log softmax(X[n])[ls[n]] (the summed loss of every row)
 *
 * and the elementwise ops (tanh, …) take matrices as they are. Each is the per-row op applied N times, with the same
 * math and the same order of operations within a row, so a batch built from them equals the per-word graph.
 *
 * Node layout. lookupRows: no arguments; aux = the table's index, aux2 = the offset of the N row ids in the graph's
 * input values (float32, so a table may have at most 2²⁴ rows). affineRows: args [b, W, X]. pickNegLogSoftmaxRows:
 * args [X, labels] where labels is an input node of N values.
 */

/** Most rows a table read by lookupRows may have: row ids are stored as float32 input values, exact up to 2²⁴. */
export const MAX_LOOKUP_ROWS_TABLE = 2 ** 24;

function requireIds(ids: unknown, op: string, name: string): ArrayLike<number> {
  const v = ids as Partial<ArrayLike<unknown>> | null;
  if (typeof v !== "object" || v === null || !Number.isSafeInteger(v.length)) {
    throw argumentError(op, name, "an array of integers", ids);
  }
  if (v.length === 0) throw new ShapeError(`${op}: argument '${name}' is empty; a batch needs at least one row`);
  return ids as ArrayLike<number>;
}

/** Y = [E[ids[0]]; E[ids[1]]; …]: rows of a lookup table as the matrix [N, dim] (N = ids.length). */
export function lookupRows(g: ComputationGraph, table: GraphParameter, ids: ArrayLike<number>): Expression {
  const op = "lookupRows";
  requireGraph(g, op);
  if (!isParameterLike(table)) throw argumentError(op, "table", "a lookup table", table);
  if (table.kind !== "lookup") {
    throw new ShapeError(`${op}: '${table.name}' is not a lookup table (use addLookupParameters)`);
  }
  if (table.rows > MAX_LOOKUP_ROWS_TABLE) {
    throw new ShapeError(
      `${op}: table '${table.name}' has ${table.rows} rows; row ids are stored as float32, so it may have at most ` +
        `${MAX_LOOKUP_ROWS_TABLE} (use lookup per row for a larger table)`,
    );
  }
  const rows = requireIds(ids, op, "ids");
  const n = rows.length;
  for (let k = 0; k < n; k++) {
    const r = rows[k];
    if (!Number.isInteger(r) || (r as number) < 0 || (r as number) >= table.rows) {
      if (!Number.isInteger(r)) throw new ShapeError(`${op}: ids[${k}] must be an integer; got ${describeValue(r)}`);
      throw new ShapeError(
        `${op}: ids[${k}] = ${r} is out of range for '${table.name}' with ${table.rows} rows (0 to ${table.rows - 1})`,
      );
    }
  }
  g.useLookup(table);
  const off = g.addInputData(rows);
  return new Expression(g, g.addNode0(Op.LookupRows, n, table.cols, table.index, off), g.generation);
}

/** The row ids of lookupRows node i (a view of the graph's input values). */
export function lookupRowIds(g: ComputationGraph, i: number): Float32Array {
  const off = g.aux2[i]!;
  return g.inputData.subarray(off, off + g.rows[i]!);
}

/** Y[n] = b + W·X[n] for every row of X: Y = X·Wᵀ + b, with X [N, K], W [M, K], b [M]; Y is [N, M]. */
export function affineRows(b: ExprLike, W: ExprLike, X: ExprLike): Expression {
  const op = "affineRows";
  const bx = b instanceof Expression;
  const wx = W instanceof Expression;
  const xx = X instanceof Expression;
  const g = bx ? b.graph : wx ? W.graph : xx ? X.graph : graphOf3(op, b, W, X, "b", "W", "X");
  const bi = argNode(g, b, bx, op, "b");
  const m = requireVector(g, bi, op, "b");
  const wi = argNode(g, W, wx, op, "W");
  const xi = argNode(g, X, xx, op, "X");
  if (g.rows[wi] !== m) {
    throw new ShapeError(`${op}: argument 'W' has shape ${g.shapeOf(wi)}; b has length ${m}, so W needs ${m} rows`);
  }
  const k = g.cols[wi]!;
  if (g.cols[xi] !== k) {
    const hint =
      g.cols[xi] === 1 && g.rows[xi]! % k === 0
        ? ` (X is a vector; its ${g.rows[xi]! / k} rows must be a matrix [${g.rows[xi]! / k},${k}]: build it with a ` +
          "rows op, or use affine per vector)"
        : "";
    throw new ShapeError(
      `${op}: argument 'X' has shape ${g.shapeOf(xi)}; W is ${g.shapeOf(wi)}, so X must be [N,${k}] (one row of ` +
        `${k} per sample)${hint}`,
    );
  }
  return new Expression(g, g.addNode3(Op.AffineRows, g.rows[xi]!, m, bi, wi, xi), g.generation);
}

/**
 * y = Σₙ −log softmax(X[n])[labels[n]]: the summed negative log-likelihood of one label per row of X [N, C] (a
 * scalar); `pickNegLogSoftmax` of every row, summed.
 */
export function pickNegLogSoftmaxRows(X: Expression, labels: ArrayLike<number>): Expression {
  const op = "pickNegLogSoftmaxRows";
  const g = exprGraph(X, op, "X");
  const xi = g.check(X, op, "X");
  const ls = requireIds(labels, op, "labels");
  const n = g.rows[xi]!;
  const c = g.cols[xi]!;
  if (ls.length !== n) {
    throw new ShapeError(
      `${op}: X has ${n} rows (shape ${g.shapeOf(xi)}); ${ls.length} labels given, one per row needed`,
    );
  }
  for (let k = 0; k < n; k++) {
    const l = ls[k];
    if (!Number.isInteger(l) || (l as number) < 0 || (l as number) >= c) {
      if (!Number.isInteger(l)) throw new ShapeError(`${op}: labels[${k}] must be an integer; got ${describeValue(l)}`);
      throw new ShapeError(`${op}: labels[${k}] = ${l} is out of range for rows of ${c} classes (0 to ${c - 1})`);
    }
  }
  const labelNode = g.addNode0(Op.Input, n, 1, g.addInputData(ls));
  return new Expression(g, g.addNode2(Op.PickNegLogSoftmaxRows, 1, 1, xi, labelNode), g.generation);
}

// ---- reference kernels ----------------------------------------------------------------------------------------

/** lookupRows' forward: copies the rows of `table` (the table's values, [rows, dim]) into node i's value. */
export function lookupRowsForward(g: ComputationGraph, i: number, v: Buf, table: Float32Array): void {
  const dim = g.cols[i]!;
  const ids = lookupRowIds(g, i);
  const y = g.valueOffset[i]!;
  for (let n = 0; n < ids.length; n++) {
    const r = ids[n]! * dim;
    v.set(table.subarray(r, r + dim), y + n * dim);
  }
}

/** lookupRows' backward: adds row n's gradient into row ids[n] of `grad`, n in order, touching each row. */
export function lookupRowsBackward(
  g: ComputationGraph,
  i: number,
  d: Buf,
  grad: Float32Array,
  touch: (row: number) => void,
): void {
  const dim = g.cols[i]!;
  const ids = lookupRowIds(g, i);
  const y = g.valueOffset[i]!;
  for (let n = 0; n < ids.length; n++) {
    const row = ids[n]!;
    const base = row * dim;
    const at = y + n * dim;
    for (let k = 0; k < dim; k++) grad[base + k] = grad[base + k]! + d[at + k]!;
    touch(row);
  }
}

const lookupRowsOp: OpDefinition = {
  // a whole batch already: never batched with another node
  signature(_g, i, key) {
    key[1] = i;
    return 2;
  },
  forward() {
    throw new Error("lookupRows values are supplied by the engine (lookupRowsForward with the table)");
  },
  backward() {},
};

/** Where affineRows node i's operands lie in the value (and gradient) buffer, and its sizes: Y [n, m], W [m, k]. */
function affineRowsOperands(g: ComputationGraph, i: number) {
  const wn = g.arg(i, 1);
  return {
    y: g.valueOffset[i]!,
    b: g.valueOffset[g.arg(i, 0)]!,
    w: g.valueOffset[wn]!,
    x: g.valueOffset[g.arg(i, 2)]!,
    m: g.rows[wn]!,
    k: g.cols[wn]!,
    n: g.rows[i]!,
  };
}

const affineRowsOp: OpDefinition = {
  signature(_g, i, key) {
    key[1] = i;
    return 2;
  },
  // per row, affine's order: y = b, then y += (Σ_c W[r,c]·x[c])
  forward(g, i, v) {
    const { y, b, w, x, m, k, n } = affineRowsOperands(g, i);
    for (let row = 0; row < n; row++) {
      const yr = y + row * m;
      const xr = x + row * k;
      for (let r = 0; r < m; r++) {
        let s = 0;
        const wr = w + r * k;
        for (let c = 0; c < k; c++) s += v[wr + c]! * v[xr + c]!;
        v[yr + r] = v[b + r]! + s;
      }
    }
  },
  // db += dy[n], dW += dy[n]·X[n]ᵀ, dX[n] += Wᵀ·dy[n], rows in order
  backward(g, i, v, d) {
    const { y, b, w, x, m, k, n } = affineRowsOperands(g, i);
    for (let row = 0; row < n; row++) {
      const yr = y + row * m;
      const xr = x + row * k;
      for (let r = 0; r < m; r++) {
        const gy = d[yr + r]!;
        d[b + r] = d[b + r]! + gy;
        if (gy === 0) continue;
        const wr = w + r * k;
        for (let c = 0; c < k; c++) {
          d[wr + c] = d[wr + c]! + gy * v[xr + c]!;
          d[xr + c] = d[xr + c]! + gy * v[wr + c]!;
        }
      }
    }
  },
};

/** log Σⱼ e^{x[j]} of the row at `x` (c values), with its maximum subtracted (pickNegLogSoftmax's order). */
function logSumExp(v: Buf, x: number, c: number): number {
  let m = Number.NEGATIVE_INFINITY;
  for (let j = 0; j < c; j++) if (v[x + j]! > m) m = v[x + j]!;
  let s = 0;
  for (let j = 0; j < c; j++) s += Math.exp(v[x + j]! - m);
  return m + Math.log(s);
}

/** Where pickNegLogSoftmaxRows node i's operands lie in the value (and gradient) buffer: X [n, c], n labels. */
function pickRowsOperands(g: ComputationGraph, i: number) {
  const xn = g.arg(i, 0);
  return { x: g.valueOffset[xn]!, labels: g.valueOffset[g.arg(i, 1)]!, n: g.rows[xn]!, c: g.cols[xn]! };
}

const pickNegLogSoftmaxRowsOp: OpDefinition = {
  signature(_g, i, key) {
    key[1] = i;
    return 2;
  },
  // y = Σₙ (log Z(X[n]) − X[n, label n]), rows in order
  forward(g, i, v) {
    const { x, labels, n, c } = pickRowsOperands(g, i);
    let total = 0;
    for (let row = 0; row < n; row++) {
      const xr = x + row * c;
      total += logSumExp(v, xr, c) - v[xr + v[labels + row]!]!;
    }
    v[g.valueOffset[i]!] = total;
  },
  // dX[n] += dy · (softmax(X[n]) − onehot(label n))
  backward(g, i, v, d) {
    const { x, labels, n, c } = pickRowsOperands(g, i);
    const gy = d[g.valueOffset[i]!]!;
    for (let row = 0; row < n; row++) {
      const xr = x + row * c;
      const logZ = logSumExp(v, xr, c);
      for (let j = 0; j < c; j++) d[xr + j] = d[xr + j]! + gy * Math.exp(v[xr + j]! - logZ);
      const at = xr + v[labels + row]!;
      d[at] = d[at]! - gy;
    }
  },
};

/** The row-batch ops' definitions (their part of the registry, src/ops/registry.ts). */
export const ROW_OPS = {
  [Op.LookupRows]: lookupRowsOp,
  [Op.AffineRows]: affineRowsOp,
  [Op.PickNegLogSoftmaxRows]: pickNegLogSoftmaxRowsOp,
} satisfies OpFamily;
