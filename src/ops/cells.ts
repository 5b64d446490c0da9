import { Expression, ShapeError } from "../graph/graph.js";
import { Op } from "../graph/opcodes.js";
import { argBuffer, type ExprLike, graphOf, nodeOf, type OpKernels, requireVector } from "./common.js";
import { sigmoid } from "./elementwise.js";

/*
 * Fused LSTM-style cells. One op covers a cell with k children (memory inputs):
 *   gates = [i; o; u; f₁; …; f_k] (pre-activations, (3 + k)·H values), c₁ … c_k the children's memories,
 *   c = σ(i) ⊙ tanh(u) + Σⱼ σ(fⱼ) ⊙ cⱼ,   h = σ(o) ⊙ tanh(c),   output [h; c] (2H values).
 * k = 1 is the LSTM step, k = 2 the binary Tree-LSTM node (one forget gate per child), k = 0 a Tree-LSTM leaf.
 * Fused, a whole cell is one node (one kernel, one VPPS instruction) instead of about 10 + 3k elementwise nodes.
 */

/** [h; c] of an LSTM-style cell with k = cs.length children; see the comment above for the gate layout. */
export function lstmCell(gates: ExprLike, cs: readonly ExprLike[]): Expression {
  const g = graphOf("lstmCell", [gates, ...cs]);
  const gi = nodeOf(g, gates, "lstmCell", "gates");
  const n = requireVector(g, gi, "lstmCell", "gates");
  const k = cs.length;
  if (n % (3 + k) !== 0) {
    throw new ShapeError(`lstmCell: argument 'gates' has length ${n}; with ${k} children it must be ${3 + k}·H`);
  }
  const h = n / (3 + k);
  const scratch = argBuffer(k + 1);
  scratch[0] = gi;
  for (let j = 0; j < k; j++) {
    const c = nodeOf(g, cs[j]!, "lstmCell", `c${j + 1}`);
    const len = requireVector(g, c, "lstmCell", `c${j + 1}`);
    if (len !== h) {
      throw new ShapeError(`lstmCell: argument 'c${j + 1}' has length ${len}; gates imply H = ${h}`);
    }
    scratch[j + 1] = c;
  }
  return new Expression(g, g.addNode(Op.LstmCell, 2 * h, 1, scratch, k, 0, 0, k + 1), g.generation);
}

/** One LSTM step: gates [i; o; u; f] (4H), previous memory c (H) → [h; c]. */
export function lstmStep(gates: ExprLike, cPrev: ExprLike): Expression {
  return lstmCell(gates, [cPrev]);
}

/** A binary Tree-LSTM node: gates [i; o; u; f₁; f₂] (5H), children's memories c₁, c₂ → [h; c]. */
export function treeLstmNode(gates: ExprLike, c1: ExprLike, c2: ExprLike): Expression {
  return lstmCell(gates, [c1, c2]);
}

/** A Tree-LSTM leaf: gates [i; o; u] (3H) → [h; c]. */
export function treeLstmLeaf(gates: ExprLike): Expression {
  return lstmCell(gates, []);
}

export const lstmCellKernels: OpKernels = {
  forward(g, i, v) {
    const k = g.aux[i]!;
    const h = g.rows[i]! / 2;
    const gt = g.valueOffset[g.arg(i, 0)]!;
    const y = g.valueOffset[i]!;
    for (let r = 0; r < h; r++) {
      let c = sigmoid(v[gt + r]!) * Math.tanh(v[gt + 2 * h + r]!);
      for (let j = 0; j < k; j++) c += sigmoid(v[gt + (3 + j) * h + r]!) * v[g.valueOffset[g.arg(i, 1 + j)]! + r]!;
      v[y + h + r] = c;
      v[y + r] = sigmoid(v[gt + h + r]!) * Math.tanh(c);
    }
  },
  backward(g, i, v, d) {
    const k = g.aux[i]!;
    const h = g.rows[i]! / 2;
    const gt = g.valueOffset[g.arg(i, 0)]!;
    const y = g.valueOffset[i]!;
    for (let r = 0; r < h; r++) {
      const c = v[y + h + r]!;
      const tc = Math.tanh(c);
      const so = sigmoid(v[gt + h + r]!);
      const dh = d[y + r]!;
      // dc collects the memory's own gradient and the path through h = σ(o) tanh(c)
      const dc = d[y + h + r]! + dh * so * (1 - tc * tc);
      const si = sigmoid(v[gt + r]!);
      const tu = Math.tanh(v[gt + 2 * h + r]!);
      d[gt + r] = d[gt + r]! + dc * tu * si * (1 - si);
      d[gt + h + r] = d[gt + h + r]! + dh * tc * so * (1 - so);
      d[gt + 2 * h + r] = d[gt + 2 * h + r]! + dc * si * (1 - tu * tu);
      for (let j = 0; j < k; j++) {
        const sf = sigmoid(v[gt + (3 + j) * h + r]!);
        const cj = g.valueOffset[g.arg(i, 1 + j)]! + r;
        d[gt + (3 + j) * h + r] = d[gt + (3 + j) * h + r]! + dc * v[cj]! * sf * (1 - sf);
        d[cj] = d[cj]! + dc * sf;
      }
    }
  },
};
