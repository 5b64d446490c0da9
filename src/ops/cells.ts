import { type ComputationGraph, Expression, ShapeError } from "../graph/graph.js";
import { Op } from "../graph/opcodes.js";
import {
  argBuffer,
  argName,
  argNode,
  type ExprLike,
  exprNode,
  graphOf,
  graphOf3,
  nodeOf,
  nodeOfAt,
  notExpression,
  type OpDefinition,
  type OpFamily,
  requireArray,
  requireVector,
  requireVectorAt,
} from "./common.js";
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
  requireArray(cs, "lstmCell", "cs", "the children's memories");
  const k = cs.length;
  if (k === 0) return treeLstmLeaf(gates);
  if (k === 2) return treeLstmNode(gates, cs[0]!, cs[1]!);
  const g = gates instanceof Expression ? gates.graph : graphOf("lstmCell", [gates, ...cs], cellArgName);
  const gi = nodeOf(g, gates, "lstmCell", "gates");
  const h = hiddenOf(g, gi, k);
  const scratch = argBuffer(k + 1);
  scratch[0] = gi;
  for (let j = 0; j < k; j++) scratch[j + 1] = memoryOf(g, nodeOfAt(g, cs[j]!, "lstmCell", "c", j + 1), j + 1, h);
  return new Expression(g, g.addNode(Op.LstmCell, 2 * h, 1, scratch, k, 0, 0, k + 1), g.generation);
}

/** Argument k of a cell: gates, c1, c2, … */
const cellArgName = (k: number): string => (k === 0 ? "gates" : argName("c", k));

/** H of a cell with k children whose gates are node gi (a vector of (3 + k)·H values). */
function hiddenOf(g: ComputationGraph, gi: number, k: number): number {
  const n = requireVector(g, gi, "lstmCell", "gates");
  if (n % (3 + k) !== 0) {
    throw new ShapeError(`lstmCell: argument 'gates' has length ${n}; with ${k} children it must be ${3 + k}·H`);
  }
  return n / (3 + k);
}

/** Checks that node `id`, child memory c_j (argument 'cj'), is a vector of length h; returns id. */
function memoryOf(g: ComputationGraph, id: number, j: number, h: number): number {
  const len = requireVectorAt(g, id, "lstmCell", "c", j);
  if (len !== h) throw new ShapeError(`lstmCell: argument 'c${j}' has length ${len}; gates imply H = ${h}`);
  return id;
}

/** One LSTM step: gates [i; o; u; f] (4H), previous memory c (H) → [h; c]. */
export function lstmStep(gates: ExprLike, cPrev: ExprLike): Expression {
  return lstmCell(gates, [cPrev]);
}

/** `lstmStep` of nodes gates and cPrev of g, returning the new node's id (see NODE BUILDERS in common.ts). */
export function cellNode1(g: ComputationGraph, gates: number, cPrev: number): number {
  const h = hiddenOf(g, gates, 1);
  memoryOf(g, cPrev, 1, h);
  return g.addNode2(Op.LstmCell, 2 * h, 1, gates, cPrev, 1);
}

/** A binary Tree-LSTM node: gates [i; o; u; f₁; f₂] (5H), children's memories c₁, c₂ → [h; c]. */
export function treeLstmNode(gates: ExprLike, c1: ExprLike, c2: ExprLike): Expression {
  const gx = gates instanceof Expression;
  const ax = c1 instanceof Expression;
  const bx = c2 instanceof Expression;
  const g = gx ? gates.graph : ax ? c1.graph : bx ? c2.graph : graphOf3("lstmCell", gates, c1, c2, "gates", "c1", "c2");
  // each argument is checked as soon as it is read, as lstmCell does (cellNode2 checks them all again)
  const gi = argNode(g, gates, gx, "lstmCell", "gates");
  const h = hiddenOf(g, gi, 2);
  const a = memoryOf(g, argNode(g, c1, ax, "lstmCell", "c1"), 1, h);
  const b = argNode(g, c2, bx, "lstmCell", "c2");
  return new Expression(g, cellNode2(g, gi, a, b), g.generation);
}

/** `treeLstmNode` of nodes gates, c1 and c2 of g, returning the new node's id (see NODE BUILDERS in common.ts). */
export function cellNode2(g: ComputationGraph, gates: number, c1: number, c2: number): number {
  const h = hiddenOf(g, gates, 2);
  memoryOf(g, c1, 1, h);
  memoryOf(g, c2, 2, h);
  return g.addNode3(Op.LstmCell, 2 * h, 1, gates, c1, c2, 2);
}

/** A Tree-LSTM leaf: gates [i; o; u] (3H) → [h; c]. */
export function treeLstmLeaf(gates: ExprLike): Expression {
  if (!(gates instanceof Expression)) throw notExpression("lstmCell", "gates", gates);
  const g = gates.graph;
  return new Expression(g, cellNode0(g, exprNode(g, gates, "lstmCell", "gates")), g.generation);
}

/** `treeLstmLeaf` of node gates of g, returning the new node's id (see NODE BUILDERS in common.ts). */
export function cellNode0(g: ComputationGraph, gates: number): number {
  return g.addNode1(Op.LstmCell, 2 * hiddenOf(g, gates, 0), 1, gates, 0);
}

/** Cells batch by their number of children and H (each node's children are read from its record). */
function cellSignature(g: ComputationGraph, i: number, key: Int32Array): number {
  key[1] = g.aux[i]!;
  key[2] = g.rows[i]!;
  return 3;
}

const lstmCellOp: OpDefinition = {
  signature: cellSignature,
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

/** The cells' definitions (their part of the registry, src/ops/registry.ts). */
export const CELL_OPS = { [Op.LstmCell]: lstmCellOp } satisfies OpFamily;
