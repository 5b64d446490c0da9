import type { TreeNode } from "../data/tree.js";
import type { Vocabulary } from "../data/vocab.js";
import type { ComputationGraph, Expression } from "../graph/graph.js";
import type { LookupParameter, Parameter } from "../model/parameters.js";
import { ParameterCollection } from "../model/parameters.js";
import {
  add,
  affine,
  cmul,
  concat,
  dropout,
  logistic,
  lookup,
  pickNegLogSoftmax,
  pickRange,
  sum,
  tanh,
  treeLstmLeaf,
  treeLstmNode,
} from "../ops/index.js";

export type CellFormulation = "fused" | "ops";

export interface TreeLstmOptions {
  vocabSize: number;
  /** Word embedding size (DyNet benchmark: 256). */
  embed: number;
  /** Hidden size (DyNet benchmark: 256). */
  hidden: number;
  /** Number of sentiment classes (SST: 5). */
  labels?: number;
  /** "fused": one lstmCell node per tree node; "ops": the same function from plain ops (the DyNet benchmark's graph). */
  cell?: CellFormulation;
  /** Dropout on the embeddings while training (0 = none, the benchmark's setting). */
  dropout?: number;
  seed?: number;
}

/**
 * The binary Tree-LSTM sentiment model of the DyNet benchmark suite (`treenn`): a preterminal's gates i, o, u come
 * from its word's embedding; an internal node's i, o, u from [h₁; h₂] and one forget gate per child (f₁ from h₁,
 * f₂ from h₂); a softmax loss at every node; the prediction is the root's label. The gate matrices of DyNet's
 * model are stacked ([i; o; u] in one matrix) — the same function with fewer, larger products.
 */
export class TreeLstmModel {
  readonly params: ParameterCollection;
  readonly E: LookupParameter;
  readonly W_iou: Parameter;
  readonly U_iou: Parameter;
  readonly U_f1: Parameter;
  readonly U_f2: Parameter;
  readonly b_iou: Parameter;
  readonly b_f: Parameter;
  readonly W_out: Parameter;
  readonly b_out: Parameter;
  readonly hidden: number;
  readonly embed: number;
  readonly labels: number;
  readonly cell: CellFormulation;
  readonly dropout: number;

  constructor(opts: TreeLstmOptions) {
    const H = opts.hidden;
    const D = opts.embed;
    this.hidden = H;
    this.embed = D;
    this.labels = opts.labels ?? 5;
    this.cell = opts.cell ?? "fused";
    this.dropout = opts.dropout ?? 0;
    const pc = new ParameterCollection({ seed: opts.seed ?? 1 });
    this.params = pc;
    this.E = pc.addLookupParameters(opts.vocabSize, D, undefined, "E");
    this.W_iou = pc.addParameters([3 * H, D], undefined, "W_iou");
    this.U_iou = pc.addParameters([3 * H, 2 * H], undefined, "U_iou");
    this.U_f1 = pc.addParameters([H, H], undefined, "U_f1");
    this.U_f2 = pc.addParameters([H, H], undefined, "U_f2");
    this.b_iou = pc.addParameters(3 * H, undefined, "b_iou");
    this.b_f = pc.addParameters(H, undefined, "b_f");
    this.W_out = pc.addParameters([this.labels, H], undefined, "W_out");
    this.b_out = pc.addParameters(this.labels, undefined, "b_out");
  }

  /**
   * Adds one tree to the graph. Returns the sum of the losses at all its nodes (when `withLoss`) and the root's
   * class scores. Uses an explicit post-order walk: trees can be deep.
   */
  buildTree(cg: ComputationGraph, tree: TreeNode, vocab: Vocabulary, withLoss: boolean): TreeOutput {
    const H = this.hidden;
    const losses: Expression[] = [];
    const hOf = new Map<TreeNode, Expression>();
    const cOf = new Map<TreeNode, Expression>();
    const stack: TreeNode[] = [tree];
    const order: TreeNode[] = [];
    while (stack.length > 0) {
      const n = stack.pop()!;
      order.push(n);
      for (const ch of n.children) stack.push(ch);
    }
    let rootScores: Expression | null = null;
    for (let k = order.length - 1; k >= 0; k--) {
      const n = order[k]!;
      let h: Expression;
      let c: Expression;
      if (n.word !== null) {
        let x = lookup(cg, this.E, vocab.index(n.word));
        if (this.dropout > 0) x = dropout(x, this.dropout);
        const g = affine([this.b_iou, this.W_iou, x]);
        [h, c] = this.cell === "fused" ? split(treeLstmLeaf(g), H) : leafFromOps(g, H);
      } else {
        const [l, r] = n.children as [TreeNode, TreeNode];
        const h1 = hOf.get(l)!;
        const h2 = hOf.get(r)!;
        const c1 = cOf.get(l)!;
        const c2 = cOf.get(r)!;
        const iou = affine([this.b_iou, this.U_iou, concat([h1, h2])]);
        const f1 = affine([this.b_f, this.U_f1, h1]);
        const f2 = affine([this.b_f, this.U_f2, h2]);
        [h, c] =
          this.cell === "fused"
            ? split(treeLstmNode(concat([iou, f1, f2]), c1, c2), H)
            : nodeFromOps(iou, f1, f2, c1, c2, H);
        hOf.delete(l);
        hOf.delete(r);
        cOf.delete(l);
        cOf.delete(r);
      }
      hOf.set(n, h);
      cOf.set(n, c);
      if (withLoss || n === tree) {
        const scores = affine([this.b_out, this.W_out, h]);
        if (withLoss) losses.push(pickNegLogSoftmax(scores, n.label));
        if (n === tree) rootScores = scores;
      }
    }
    return { loss: withLoss ? sum(losses) : null, rootScores: rootScores!, nodes: order.length };
  }

  /** The summed loss of a batch of trees (one graph, renewed by the caller). */
  buildBatchLoss(cg: ComputationGraph, trees: readonly TreeNode[], vocab: Vocabulary): Expression {
    const losses = trees.map((t) => this.buildTree(cg, t, vocab, true).loss!);
    return losses.length === 1 ? losses[0]! : sum(losses);
  }
}

export interface TreeOutput {
  /** Sum of the per-node losses, or null when built without losses. */
  loss: Expression | null;
  /** Class scores at the root (before the softmax). */
  rootScores: Expression;
  /** Tree nodes (preterminals + internal). */
  nodes: number;
}

function split(hc: Expression, H: number): [Expression, Expression] {
  return [pickRange(hc, 0, H), pickRange(hc, H, 2 * H)];
}

/** Leaf from plain ops: c = σ(i) ⊙ tanh(u), h = σ(o) ⊙ tanh(c). */
function leafFromOps(g: Expression, H: number): [Expression, Expression] {
  const i = logistic(pickRange(g, 0, H));
  const o = logistic(pickRange(g, H, 2 * H));
  const u = tanh(pickRange(g, 2 * H, 3 * H));
  const c = cmul(i, u);
  return [cmul(o, tanh(c)), c];
}

/** Internal node from plain ops: c = σ(i) ⊙ tanh(u) + σ(f₁) ⊙ c₁ + σ(f₂) ⊙ c₂, h = σ(o) ⊙ tanh(c). */
function nodeFromOps(
  iou: Expression,
  f1: Expression,
  f2: Expression,
  c1: Expression,
  c2: Expression,
  H: number,
): [Expression, Expression] {
  const i = logistic(pickRange(iou, 0, H));
  const o = logistic(pickRange(iou, H, 2 * H));
  const u = tanh(pickRange(iou, 2 * H, 3 * H));
  const c = add(add(cmul(i, u), cmul(logistic(f1), c1)), cmul(logistic(f2), c2));
  return [cmul(o, tanh(c)), c];
}

/** Index of the largest score. */
export function argmax(xs: ArrayLike<number>): number {
  let best = 0;
  for (let k = 1; k < xs.length; k++) if (xs[k]! > xs[best]!) best = k;
  return best;
}
