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
    // Post-order walk with an explicit stack (trees can be deep): a node is pushed once to expand its children
    // and once more (marked) to be built after them; built (h, c) pairs wait on a value stack.
    const work: TreeNode[] = [tree];
    const expanded: boolean[] = [false];
    const hs: Expression[] = [];
    const cs: Expression[] = [];
    let rootScores: Expression | null = null;
    let nodes = 0;
    while (work.length > 0) {
      const n = work[work.length - 1]!;
      if (n.word === null && !expanded[expanded.length - 1]) {
        expanded[expanded.length - 1] = true;
        work.push(n.children[1]!, n.children[0]!);
        expanded.push(false, false);
        continue;
      }
      work.pop();
      expanded.pop();
      nodes++;
      let h: Expression;
      let c: Expression;
      if (n.word !== null) {
        let x = lookup(cg, this.E, vocab.index(n.word));
        if (this.dropout > 0) x = dropout(x, this.dropout);
        const g = affine([this.b_iou, this.W_iou, x]);
        if (this.cell === "fused") {
          const hc = treeLstmLeaf(g);
          h = pickRange(hc, 0, H);
          c = pickRange(hc, H, 2 * H);
        } else {
          const pair = leafFromOps(g, H);
          h = pair[0];
          c = pair[1];
        }
      } else {
        // the left child was built first, so its pair is below the right child's
        const h2 = hs.pop()!;
        const h1 = hs.pop()!;
        const c2 = cs.pop()!;
        const c1 = cs.pop()!;
        const iou = affine([this.b_iou, this.U_iou, concat([h1, h2])]);
        const f1 = affine([this.b_f, this.U_f1, h1]);
        const f2 = affine([this.b_f, this.U_f2, h2]);
        if (this.cell === "fused") {
          const hc = treeLstmNode(concat([iou, f1, f2]), c1, c2);
          h = pickRange(hc, 0, H);
          c = pickRange(hc, H, 2 * H);
        } else {
          const pair = nodeFromOps(iou, f1, f2, c1, c2, H);
          h = pair[0];
          c = pair[1];
        }
      }
      hs.push(h);
      cs.push(c);
      if (withLoss || n === tree) {
        const scores = affine([this.b_out, this.W_out, h]);
        if (withLoss) losses.push(pickNegLogSoftmax(scores, n.label));
        if (n === tree) rootScores = scores;
      }
    }
    return { loss: withLoss ? sum(losses) : null, rootScores: rootScores!, nodes };
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
