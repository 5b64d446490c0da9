import { type ComputationGraph, Expression, ShapeError } from "../graph/graph.js";
import { Op } from "../graph/opcodes.js";
import { argBuffer, type Buf, type ExprLike, graphOf, nodeOf, type OpKernels, requireVector } from "./common.js";

// ---- builders -------------------------------------------------------------------------------------------------

function checkProduct(g: ComputationGraph, w: number, x: number, op: string, wn: string, xn: string): number {
  const n = requireVector(g, x, op, xn);
  if (g.cols[w] !== n) {
    throw new ShapeError(`${op}: argument '${wn}' has shape ${g.shapeOf(w)}; ${xn} has length ${n}`);
  }
  return g.rows[w]!;
}

/** y = W·x */
export function matVec(W: ExprLike, x: Expression): Expression {
  const g = graphOf("matVec", [W, x]);
  const w = nodeOf(g, W, "matVec", "W");
  const xi = nodeOf(g, x, "matVec", "x");
  const m = checkProduct(g, w, xi, "matVec", "W", "x");
  return new Expression(g, g.addNode(Op.MatVec, m, 1, [w, xi]), g.generation);
}

/** y = b + Σᵢ Wᵢ·xᵢ, with arguments [b, W₁, x₁, W₂, x₂, …] as in DyNet's affine_transform. */
export function affine(args: readonly ExprLike[]): Expression {
  if (args.length < 3 || args.length % 2 === 0) {
    throw new ShapeError(
      `affine: expects [b, W1, x1, W2, x2, ...] (an odd number ≥ 3 of arguments); got ${args.length}`,
    );
  }
  const g = graphOf("affine", args);
  const scratch = argBuffer(args.length);
  const b = nodeOf(g, args[0]!, "affine", "b");
  const m = requireVector(g, b, "affine", "b");
  scratch[0] = b;
  for (let k = 1; k < args.length; k += 2) {
    const j = (k + 1) / 2;
    const w = nodeOf(g, args[k]!, "affine", `W${j}`);
    const x = nodeOf(g, args[k + 1]!, "affine", `x${j}`);
    const r = checkProduct(g, w, x, "affine", `W${j}`, `x${j}`);
    if (r !== m) {
      throw new ShapeError(`affine: argument 'W${j}' has shape ${g.shapeOf(w)}; b has length ${m}`);
    }
    scratch[k] = w;
    scratch[k + 1] = x;
  }
  return new Expression(g, g.addNode(Op.Affine, m, 1, scratch, 0, 0, 0, args.length), g.generation);
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

export const matVecKernels: OpKernels = {
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

export const affineKernels: OpKernels = {
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
