import { type ComputationGraph, Expression, ShapeError } from "../graph/graph.js";
import { Op } from "../graph/opcodes.js";
import { randomUniform } from "../util/random.js";
import {
  argNode,
  describeValue,
  type ExprLike,
  exprGraph,
  exprNode,
  graphOf2,
  notExpression,
  type OpDefinition,
  type OpFamily,
  shapeMismatch,
  shapeSignature,
} from "./common.js";

// ---- builders -------------------------------------------------------------------------------------------------

function binary(op: Op, name: string, a: ExprLike, b: ExprLike): Expression {
  const ax = a instanceof Expression;
  const bx = b instanceof Expression;
  const g = ax ? a.graph : bx ? b.graph : graphOf2(name, a, b, "a", "b");
  const ai = argNode(g, a, ax, name, "a");
  const bi = argNode(g, b, bx, name, "b");
  return new Expression(g, binaryNode(g, op, name, ai, bi), g.generation);
}

/**
 * The binary elementwise op `op` (Add, Sub or CMul; `name` for messages) of nodes a and b of g, returning the new
 * node's id (see NODE BUILDERS in common.ts).
 */
export function binaryNode(g: ComputationGraph, op: Op, name: string, a: number, b: number): number {
  const rows = g.rows;
  const cols = g.cols;
  const r = rows[a]!;
  const c = cols[a]!;
  if (rows[b] !== r || cols[b] !== c) throw shapeMismatch(g, a, b, name, "a", "b");
  return g.addNode2(op, r, c, a, b);
}

function unary(op: Op, name: string, x: ExprLike): Expression {
  if (!(x instanceof Expression)) throw notExpression(name, "x", x);
  const g = x.graph;
  return new Expression(g, unaryNode(g, op, exprNode(g, x, name, "x")), g.generation);
}

/**
 * The unary elementwise op `op` (Tanh, Logistic or Relu) of node x of g, returning the new node's id (see NODE
 * BUILDERS in common.ts).
 */
export function unaryNode(g: ComputationGraph, op: Op, x: number): number {
  return g.addNode1(op, g.rows[x]!, g.cols[x]!, x);
}

/** y = a + b */
export const add = (a: ExprLike, b: ExprLike): Expression => binary(Op.Add, "add", a, b);
/** y = a − b */
export const sub = (a: ExprLike, b: ExprLike): Expression => binary(Op.Sub, "sub", a, b);
/** y = a ⊙ b */
export const cmul = (a: ExprLike, b: ExprLike): Expression => binary(Op.CMul, "cmul", a, b);
/** y = tanh(x) */
export const tanh = (x: ExprLike): Expression => unary(Op.Tanh, "tanh", x);
/** y = σ(x) */
export const logistic = (x: ExprLike): Expression => unary(Op.Logistic, "logistic", x);
/** y = max(0, x) */
export const relu = (x: ExprLike): Expression => unary(Op.Relu, "relu", x);

/**
 * Inverted dropout: y = x ⊙ m / (1 − p) with m ~ Bernoulli(1 − p). The mask is a pure function of the graph's
 * dropout key and the node's value offset, so every engine draws the same mask. When the graph is not training,
 * or p = 0, this returns x itself and adds no node.
 */
export function dropout(x: Expression, p: number): Expression {
  const g = exprGraph(x, "dropout", "x");
  if (typeof p !== "number" || !(p >= 0 && p < 1)) {
    throw new ShapeError(`dropout: probability p must be in [0, 1); got ${describeValue(p)}`);
  }
  const xi = g.check(x, "dropout", "x");
  const id = dropoutNode(g, xi, p);
  return id === xi ? x : new Expression(g, id, g.generation);
}

/** `dropout` of node x of g: the new node's id, or x when no node is added (see NODE BUILDERS in common.ts). */
export function dropoutNode(g: ComputationGraph, x: number, p: number): number {
  if (!(p >= 0 && p < 1)) throw new ShapeError(`dropout: probability p must be in [0, 1); got ${p}`);
  if (!g.training || p === 0) return x;
  const id = g.addNode1(Op.Dropout, g.rows[x]!, g.cols[x]!, x, g.dropoutKey, 0, p);
  g.aux2[id] = g.valueOffset[id]!;
  return id;
}

/** Whether element j of dropout node with (key, base, p) is kept; shared by every engine's kernel. */
export function dropoutKeeps(key: number, base: number, j: number, p: number): boolean {
  return randomUniform(key, base + j) >= p;
}

// ---- reference kernels and batching signatures ------------------------------------------------------------------
// Every op here batches by op and shape (shapeSignature): dropout's p, key and mask base are read per node.

export function sigmoid(x: number): number {
  if (x >= 0) return 1 / (1 + Math.exp(-x));
  const e = Math.exp(x);
  return e / (1 + e);
}

function len(g: { rows: Int32Array; cols: Int32Array }, i: number): number {
  return g.rows[i]! * g.cols[i]!;
}

const addOp: OpDefinition = {
  signature: shapeSignature,
  forward(g, i, v) {
    const y = g.valueOffset[i]!;
    const a = g.valueOffset[g.arg(i, 0)]!;
    const b = g.valueOffset[g.arg(i, 1)]!;
    for (let k = 0, n = len(g, i); k < n; k++) v[y + k] = v[a + k]! + v[b + k]!;
  },
  backward(g, i, _v, d) {
    const y = g.valueOffset[i]!;
    const a = g.valueOffset[g.arg(i, 0)]!;
    const b = g.valueOffset[g.arg(i, 1)]!;
    for (let k = 0, n = len(g, i); k < n; k++) {
      d[a + k] = d[a + k]! + d[y + k]!;
      d[b + k] = d[b + k]! + d[y + k]!;
    }
  },
};

const subOp: OpDefinition = {
  signature: shapeSignature,
  forward(g, i, v) {
    const y = g.valueOffset[i]!;
    const a = g.valueOffset[g.arg(i, 0)]!;
    const b = g.valueOffset[g.arg(i, 1)]!;
    for (let k = 0, n = len(g, i); k < n; k++) v[y + k] = v[a + k]! - v[b + k]!;
  },
  backward(g, i, _v, d) {
    const y = g.valueOffset[i]!;
    const a = g.valueOffset[g.arg(i, 0)]!;
    const b = g.valueOffset[g.arg(i, 1)]!;
    for (let k = 0, n = len(g, i); k < n; k++) {
      d[a + k] = d[a + k]! + d[y + k]!;
      d[b + k] = d[b + k]! - d[y + k]!;
    }
  },
};

const cmulOp: OpDefinition = {
  signature: shapeSignature,
  forward(g, i, v) {
    const y = g.valueOffset[i]!;
    const a = g.valueOffset[g.arg(i, 0)]!;
    const b = g.valueOffset[g.arg(i, 1)]!;
    for (let k = 0, n = len(g, i); k < n; k++) v[y + k] = v[a + k]! * v[b + k]!;
  },
  backward(g, i, v, d) {
    const y = g.valueOffset[i]!;
    const a = g.valueOffset[g.arg(i, 0)]!;
    const b = g.valueOffset[g.arg(i, 1)]!;
    for (let k = 0, n = len(g, i); k < n; k++) {
      const gy = d[y + k]!;
      d[a + k] = d[a + k]! + gy * v[b + k]!;
      d[b + k] = d[b + k]! + gy * v[a + k]!;
    }
  },
};

const tanhOp: OpDefinition = {
  signature: shapeSignature,
  forward(g, i, v) {
    const y = g.valueOffset[i]!;
    const x = g.valueOffset[g.arg(i, 0)]!;
    for (let k = 0, n = len(g, i); k < n; k++) v[y + k] = Math.tanh(v[x + k]!);
  },
  // dx = dy (1 − y²)
  backward(g, i, v, d) {
    const y = g.valueOffset[i]!;
    const x = g.valueOffset[g.arg(i, 0)]!;
    for (let k = 0, n = len(g, i); k < n; k++) {
      const t = v[y + k]!;
      d[x + k] = d[x + k]! + d[y + k]! * (1 - t * t);
    }
  },
};

const logisticOp: OpDefinition = {
  signature: shapeSignature,
  forward(g, i, v) {
    const y = g.valueOffset[i]!;
    const x = g.valueOffset[g.arg(i, 0)]!;
    for (let k = 0, n = len(g, i); k < n; k++) v[y + k] = sigmoid(v[x + k]!);
  },
  // dx = dy · y (1 − y)
  backward(g, i, v, d) {
    const y = g.valueOffset[i]!;
    const x = g.valueOffset[g.arg(i, 0)]!;
    for (let k = 0, n = len(g, i); k < n; k++) {
      const s = v[y + k]!;
      d[x + k] = d[x + k]! + d[y + k]! * s * (1 - s);
    }
  },
};

const reluOp: OpDefinition = {
  signature: shapeSignature,
  forward(g, i, v) {
    const y = g.valueOffset[i]!;
    const x = g.valueOffset[g.arg(i, 0)]!;
    for (let k = 0, n = len(g, i); k < n; k++) {
      const a = v[x + k]!;
      v[y + k] = Math.max(a, 0);
    }
  },
  backward(g, i, v, d) {
    const y = g.valueOffset[i]!;
    const x = g.valueOffset[g.arg(i, 0)]!;
    for (let k = 0, n = len(g, i); k < n; k++) if (v[x + k]! > 0) d[x + k] = d[x + k]! + d[y + k]!;
  },
};

const dropoutOp: OpDefinition = {
  signature: shapeSignature,
  forward(g, i, v) {
    const y = g.valueOffset[i]!;
    const x = g.valueOffset[g.arg(i, 0)]!;
    const p = g.auxF[i]!;
    const scale = 1 / (1 - p);
    const key = g.aux[i]!;
    const base = g.aux2[i]!;
    for (let k = 0, n = len(g, i); k < n; k++) v[y + k] = dropoutKeeps(key, base, k, p) ? v[x + k]! * scale : 0;
  },
  backward(g, i, _v, d) {
    const y = g.valueOffset[i]!;
    const x = g.valueOffset[g.arg(i, 0)]!;
    const p = g.auxF[i]!;
    const scale = 1 / (1 - p);
    const key = g.aux[i]!;
    const base = g.aux2[i]!;
    for (let k = 0, n = len(g, i); k < n; k++) {
      if (dropoutKeeps(key, base, k, p)) d[x + k] = d[x + k]! + d[y + k]! * scale;
    }
  },
};

/** The elementwise ops' definitions (their part of the registry, src/ops/registry.ts). */
export const ELEMENTWISE_OPS = {
  [Op.Add]: addOp,
  [Op.Sub]: subOp,
  [Op.CMul]: cmulOp,
  [Op.Tanh]: tanhOp,
  [Op.Logistic]: logisticOp,
  [Op.Relu]: reluOp,
  [Op.Dropout]: dropoutOp,
} satisfies OpFamily;
