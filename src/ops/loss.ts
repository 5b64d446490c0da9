import { type ComputationGraph, Expression, ShapeError } from "../graph/graph.js";
import { Op } from "../graph/opcodes.js";
import { argumentError, exprGraph, type OpDefinition, type OpFamily, requireVector } from "./common.js";

/** y = −log softmax(x)[label]: the negative log-likelihood of `label` under a softmax over x (a scalar). */
export function pickNegLogSoftmax(x: Expression, label: number): Expression {
  const g = exprGraph(x, "pickNegLogSoftmax", "x");
  return new Expression(g, pickNegLogSoftmaxNode(g, g.check(x, "pickNegLogSoftmax", "x"), label), g.generation);
}

/** `pickNegLogSoftmax` of node x of g, returning the new node's id (see NODE BUILDERS in common.ts). */
export function pickNegLogSoftmaxNode(g: ComputationGraph, x: number, label: number): number {
  const n = requireVector(g, x, "pickNegLogSoftmax", "x");
  if (!Number.isInteger(label) || label < 0 || label >= n) {
    if (!Number.isInteger(label)) throw argumentError("pickNegLogSoftmax", "label", "an integer", label);
    throw new ShapeError(`pickNegLogSoftmax: label ${label} is out of range for x of length ${n}`);
  }
  return g.addNode1(Op.PickNegLogSoftmax, 1, 1, x, label);
}

const pickNegLogSoftmaxOp: OpDefinition = {
  // batched by the number of classes (each node's label is read from its record)
  signature(g, i, key) {
    key[1] = g.rows[g.arg(i, 0)]!;
    return 2;
  },
  // y = logΣⱼ e^{xⱼ} − x_label, computed with the max subtracted
  forward(g, i, v) {
    const a = g.arg(i, 0);
    const x = g.valueOffset[a]!;
    const n = g.rows[a]!;
    let m = Number.NEGATIVE_INFINITY;
    for (let k = 0; k < n; k++) if (v[x + k]! > m) m = v[x + k]!;
    let s = 0;
    for (let k = 0; k < n; k++) s += Math.exp(v[x + k]! - m);
    v[g.valueOffset[i]!] = m + Math.log(s) - v[x + g.aux[i]!]!;
  },
  // dx = dy · (softmax(x) − onehot(label))
  backward(g, i, v, d) {
    const a = g.arg(i, 0);
    const x = g.valueOffset[a]!;
    const n = g.rows[a]!;
    const gy = d[g.valueOffset[i]!]!;
    // softmax from the stored loss: log Z = y + x_label
    const logZ = v[g.valueOffset[i]!]! + v[x + g.aux[i]!]!;
    for (let k = 0; k < n; k++) d[x + k] = d[x + k]! + gy * Math.exp(v[x + k]! - logZ);
    d[x + g.aux[i]!] = d[x + g.aux[i]!]! - gy;
  },
};

/** The losses' definitions (their part of the registry, src/ops/registry.ts). */
export const LOSS_OPS = { [Op.PickNegLogSoftmax]: pickNegLogSoftmaxOp } satisfies OpFamily;
