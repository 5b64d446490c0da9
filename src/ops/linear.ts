import { type ComputationGraph, Expression, ShapeError } from "../graph/graph.js";
import { Op } from "../graph/opcodes.js";
import {
  argBuffer,
  argName,
  type Buf,
  type ExprLike,
  exprNode,
  graphOf,
  graphOf2,
  graphOf3,
  nodeOf,
  nodeOfAt,
  type OpDefinition,
  type OpFamily,
  paramNode,
  requireArray,
  requireVector,
  requireVectorAt,
} from "./common.js";

// ---- builders -------------------------------------------------------------------------------------------------

/** Shape error of W·x: W's columns are not x's length (x is a vector of length n). */
function productError(g: ComputationGraph, w: number, n: number, op: string, wn: string, xn: string): ShapeError {
  return new ShapeError(`${op}: argument '${wn}' has shape ${g.shapeOf(w)}; ${xn} has length ${n}`);
}

function checkProduct(g: ComputationGraph, w: number, x: number, op: string, wn: string, xn: string): number {
  const n = requireVector(g, x, op, xn);
  if (g.cols[w] !== n) throw productError(g, w, n, op, wn, xn);
  return g.rows[w]!;
}

/** y = W·x */
export function matVec(W: ExprLike, x: Expression): Expression {
  const g = graphOf2("matVec", W, x, "W", "x");
  const w = nodeOf(g, W, "matVec", "W");
  const xi = nodeOf(g, x, "matVec", "x");
  const m = checkProduct(g, w, xi, "matVec", "W", "x");
  return new Expression(g, g.addNode2(Op.MatVec, m, 1, w, xi), g.generation);
}

/** y = b + Σᵢ Wᵢ·xᵢ, with arguments [b, W₁, x₁, W₂, x₂, …] as in DyNet's affine_transform. */
export function affine(args: readonly ExprLike[]): Expression {
  requireArray(args, "affine", "args", "expressions and parameters [b, W1, x1, …]");
  if (args.length === 3) return affine3(args[0]!, args[1]!, args[2]!);
  if (args.length < 3 || args.length % 2 === 0) {
    throw new ShapeError(
      `affine: expects [b, W1, x1, W2, x2, ...] (an odd number ≥ 3 of arguments); got ${args.length}`,
    );
  }
  const g = graphOf("affine", args, affineArgName);
  const scratch = argBuffer(args.length);
  const b = nodeOf(g, args[0]!, "affine", "b");
  const m = requireVector(g, b, "affine", "b");
  scratch[0] = b;
  for (let k = 1; k < args.length; k += 2) {
    const j = (k + 1) / 2;
    const w = nodeOfAt(g, args[k]!, "affine", "W", j);
    const x = nodeOfAt(g, args[k + 1]!, "affine", "x", j);
    const n = requireVectorAt(g, x, "affine", "x", j);
    if (g.cols[w] !== n) throw productError(g, w, n, "affine", argName("W", j), argName("x", j));
    if (g.rows[w] !== m) throw rowsError(g, w, j, m);
    scratch[k] = w;
    scratch[k + 1] = x;
  }
  return new Expression(g, g.addNode(Op.Affine, m, 1, scratch, 0, 0, 0, args.length), g.generation);
}

/** Argument k of affine: b, W1, x1, W2, x2, … */
const affineArgName = (k: number): string => (k === 0 ? "b" : argName(k % 2 === 1 ? "W" : "x", Math.ceil(k / 2)));

function rowsError(g: ComputationGraph, w: number, j: number, m: number): ShapeError {
  return new ShapeError(`affine: argument 'W${j}' has shape ${g.shapeOf(w)}; b has length ${m}`);
}

/**
 * y = b + W·x: `affine([b, W, x])` without the argument array (the same node, checks and messages), for builders
 * that run once per tree node.
 */
export function affine3(b: ExprLike, W: ExprLike, x: ExprLike): Expression {
  // one instanceof per argument (graphOf3 and nodeOf would test each twice): usually b and W are parameters
  const bx = b instanceof Expression;
  const wx = W instanceof Expression;
  const xx = x instanceof Expression;
  const g = bx ? b.graph : wx ? W.graph : xx ? x.graph : graphOf3("affine", b, W, x, "b", "W1", "x1");
  const bi = bx ? exprNode(g, b, "affine", "b") : paramNode(g, b, "affine", "b");
  // b is checked before W and x are read (W's parameter node is not added when b is wrong), as affine does
  requireVector(g, bi, "affine", "b");
  const w = wx ? exprNode(g, W, "affine", "W1") : paramNode(g, W, "affine", "W1");
  const xi = xx ? exprNode(g, x, "affine", "x1") : paramNode(g, x, "affine", "x1");
  return new Expression(g, affineNode(g, bi, w, xi), g.generation);
}

/** `affine3` of nodes b, W and x of g, returning the new node's id (see NODE BUILDERS in common.ts). */
export function affineNode(g: ComputationGraph, b: number, W: number, x: number): number {
  const m = requireVector(g, b, "affine", "b");
  const n = requireVector(g, x, "affine", "x1");
  const rows = g.rows;
  if (g.cols[W] !== n) throw productError(g, W, n, "affine", "W1", "x1");
  if (rows[W] !== m) throw rowsError(g, W, 1, m);
  return g.addNode3(Op.Affine, m, 1, b, W, x);
}

/**
 * `affine([b, W1, x1, W2, x2])` of nodes of g (the same node, checks and messages), returning the new node's id (see
 * NODE BUILDERS in common.ts): an LSTM step's gates b + W_x·x + W_h·h, a pyramid's adjacent pair.
 */
export function affine5Node(g: ComputationGraph, b: number, W1: number, x1: number, W2: number, x2: number): number {
  const m = requireVector(g, b, "affine", "b");
  const n1 = requireVector(g, x1, "affine", "x1");
  const rows = g.rows;
  if (g.cols[W1] !== n1) throw productError(g, W1, n1, "affine", "W1", "x1");
  if (rows[W1] !== m) throw rowsError(g, W1, 1, m);
  const n2 = requireVector(g, x2, "affine", "x2");
  if (g.cols[W2] !== n2) throw productError(g, W2, n2, "affine", "W2", "x2");
  if (rows[W2] !== m) throw rowsError(g, W2, 2, m);
  const args = argBuffer(5);
  args[0] = b;
  args[1] = W1;
  args[2] = x1;
  args[3] = W2;
  args[4] = x2;
  return g.addNode(Op.Affine, m, 1, args, 0, 0, 0, 5);
}

// ---- reference kernels ----------------------------------------------------------------------------------------

/** y += W·x for row-major W [m,n] at offset w. */
function gemvAdd(v: Buf, y: number, w: number, x: number, m: number, n: number): void {
  for (let r = 0; r < m; r++) {
    let s = 0;
    const row = w + r * n;
    for (let c = 0; c < n; c++) s += v[row + c]! * v[x + c]!;
    v[y + r] = v[y + r]! + s;
  }
}

/** dW += dy·xᵀ and dx += Wᵀ·dy. */
function gemvBackward(v: Buf, d: Buf, dy: number, w: number, x: number, m: number, n: number): void {
  for (let r = 0; r < m; r++) {
    const gy = d[dy + r]!;
    if (gy === 0) continue;
    const row = w + r * n;
    for (let c = 0; c < n; c++) {
      d[row + c] = d[row + c]! + gy * v[x + c]!;
      d[x + c] = d[x + c]! + gy * v[row + c]!;
    }
  }
}

// ---- batching signature ---------------------------------------------------------------------------------------

/** Tags in a product's signature: a parameter (index follows), a computed node (id follows, or 0 for a bias). */
const TAG_PARAM = 0;
const TAG_NODE = 1;

/**
 * Products batch by output length and weights: the same parameter W (one GEMM over gathered columns), or the same
 * computed W node; affine adds its bias, a parameter or any computed vector (biases are added per node).
 */
function productSignature(g: ComputationGraph, i: number, key: Int32Array): number {
  const affine = g.op[i] === Op.Affine;
  const n = g.argCount[i]!;
  const a0 = g.argStart[i]!;
  const args = g.args;
  key[1] = g.rows[i]!;
  let len = 2;
  for (let k = affine ? 1 : 0; k < n; k += 2) {
    const w = args[a0 + k]!;
    const isParam = g.op[w] === Op.Parameter;
    key[len++] = isParam ? TAG_PARAM : TAG_NODE;
    key[len++] = isParam ? g.aux[w]! : w;
  }
  if (affine) {
    const b = args[a0]!;
    const isParam = g.op[b] === Op.Parameter;
    key[len++] = isParam ? TAG_PARAM : TAG_NODE;
    key[len++] = isParam ? g.aux[b]! : 0;
  }
  return len;
}

const matVecOp: OpDefinition = {
  signature: productSignature,
  forward(g, i, v) {
    const w = g.arg(i, 0);
    const x = g.arg(i, 1);
    const y = g.valueOffset[i]!;
    const m = g.rows[i]!;
    v.fill(0, y, y + m);
    gemvAdd(v, y, g.valueOffset[w]!, g.valueOffset[x]!, m, g.cols[w]!);
  },
  backward(g, i, v, d) {
    const w = g.arg(i, 0);
    const x = g.arg(i, 1);
    gemvBackward(v, d, g.valueOffset[i]!, g.valueOffset[w]!, g.valueOffset[x]!, g.rows[i]!, g.cols[w]!);
  },
};

const affineOp: OpDefinition = {
  signature: productSignature,
  forward(g, i, v) {
    const y = g.valueOffset[i]!;
    const m = g.rows[i]!;
    const b = g.valueOffset[g.arg(i, 0)]!;
    for (let r = 0; r < m; r++) v[y + r] = v[b + r]!;
    const n = g.argCount[i]!;
    for (let k = 1; k < n; k += 2) {
      const w = g.arg(i, k);
      gemvAdd(v, y, g.valueOffset[w]!, g.valueOffset[g.arg(i, k + 1)]!, m, g.cols[w]!);
    }
  },
  backward(g, i, v, d) {
    const y = g.valueOffset[i]!;
    const m = g.rows[i]!;
    const b = g.valueOffset[g.arg(i, 0)]!;
    for (let r = 0; r < m; r++) d[b + r] = d[b + r]! + d[y + r]!;
    const n = g.argCount[i]!;
    for (let k = 1; k < n; k += 2) {
      const w = g.arg(i, k);
      gemvBackward(v, d, y, g.valueOffset[w]!, g.valueOffset[g.arg(i, k + 1)]!, m, g.cols[w]!);
    }
  },
};

/** The products' definitions (their part of the registry, src/ops/registry.ts). */
export const LINEAR_OPS = { [Op.MatVec]: matVecOp, [Op.Affine]: affineOp } satisfies OpFamily;
