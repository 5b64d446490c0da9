import type { TreeNode } from "../../data/tree.js";
import type { Vocabulary } from "../../data/vocab.js";
import { type ComputationGraph, Expression, ShapeError } from "../../graph/graph.js";
import { Op } from "../../graph/opcodes.js";
import type { LookupParameter, Parameter, ParameterShape } from "../../model/parameters.js";
import { ParameterCollection } from "../../model/parameters.js";
import { cellNode0, cellNode2 } from "../../ops/cells.js";
import { binaryNode, dropoutNode, unaryNode } from "../../ops/elementwise.js";
import { affineNode } from "../../ops/linear.js";
import { pickNegLogSoftmaxNode } from "../../ops/loss.js";
import { concat2Node, concat3Node, lookupNode, pickRangeNode, sumNode } from "../../ops/structure.js";
import { shapesOf } from "../shared/parameter-sizes.js";
import { SST_LABELS } from "../shared/root-head.js";
import { WordIndexCache } from "../shared/word-indices.js";

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
    checkTreeLstmOptions(opts);
    const H = opts.hidden;
    const D = opts.embed;
    this.hidden = H;
    this.embed = D;
    this.labels = opts.labels ?? SST_LABELS;
    this.cell = opts.cell ?? "fused";
    this.dropout = opts.dropout ?? 0;
    const pc = new ParameterCollection({ seed: opts.seed ?? 1 });
    this.params = pc;
    const s = treeLstmSizes(opts.vocabSize, D, H, this.labels);
    this.E = pc.addLookupParameters(s.E[0], s.E[1], undefined, "E");
    this.W_iou = pc.addParameters(s.W_iou, undefined, "W_iou");
    this.U_iou = pc.addParameters(s.U_iou, undefined, "U_iou");
    this.U_f1 = pc.addParameters(s.U_f1, undefined, "U_f1");
    this.U_f2 = pc.addParameters(s.U_f2, undefined, "U_f2");
    this.b_iou = pc.addParameters(s.b_iou, undefined, "b_iou");
    this.b_f = pc.addParameters(s.b_f, undefined, "b_f");
    this.W_out = pc.addParameters(s.W_out, undefined, "W_out");
    this.b_out = pc.addParameters(s.b_out, undefined, "b_out");
  }

  /**
   * Adds one tree to the graph. Returns the sum of the losses at all its nodes (when `withLoss`) and the root's
   * class scores. Uses an explicit post-order walk: trees can be deep.
   */
  buildTree(cg: ComputationGraph, tree: TreeNode, vocab: Vocabulary, withLoss: boolean): TreeOutput {
    const losses: number[] = [];
    const nodes = this.addTree(cg, tree, vocab, withLoss ? losses : null);
    const loss = withLoss ? new Expression(cg, sumNode(cg, losses, losses.length), cg.generation) : null;
    return { loss, rootScores: new Expression(cg, this.lastRootScores, cg.generation), nodes };
  }

  /** The summed loss of a batch of trees (one graph, renewed by the caller). */
  buildBatchLoss(cg: ComputationGraph, trees: readonly TreeNode[], vocab: Vocabulary): Expression {
    const losses: number[] = [];
    const treeLosses: number[] = [];
    for (const t of trees) {
      losses.length = 0;
      this.addTree(cg, t, vocab, losses);
      treeLosses.push(sumNode(cg, losses, losses.length));
    }
    const n = treeLosses.length;
    // (the message sum([]) gave when this summed expressions)
    if (n === 0) throw new ShapeError("sum: needs at least one argument");
    return new Expression(cg, n === 1 ? treeLosses[0]! : sumNode(cg, treeLosses, n), cg.generation);
  }

  /** Node id of the root's class scores of the last tree `addTree` added. */
  private lastRootScores = -1;

  /**
   * Adds the nodes of one tree (appending the id of the loss at each of its nodes to `losses` unless null) and
   * returns the number of tree nodes; the root's class scores are left in `lastRootScores`. The nodes are built with
   * the node builders (NODE BUILDERS in src/ops/common.ts): every argument is a node this walk has just made in
   * `cg`, or a parameter node, so only shapes need checking, and expressions are made only for what is returned.
   */
  private addTree(cg: ComputationGraph, tree: TreeNode, vocab: Vocabulary, losses: number[] | null): number {
    const H = this.hidden;
    const fused = this.cell === "fused";
    const words = this.words.of(tree, vocab);
    // Post-order walk with an explicit stack (trees can be deep): a node is pushed once to expand its children
    // and once more (marked) to be built after them; built (h, c) pairs wait on a value stack.
    const work: TreeNode[] = [tree];
    const expanded: boolean[] = [false];
    const hs: number[] = [];
    const cs: number[] = [];
    let nodes = 0;
    let leaf = 0;
    while (work.length > 0) {
      const n = work[work.length - 1]!;
      const word = n.word;
      if (word === null && !expanded[expanded.length - 1]) {
        expanded[expanded.length - 1] = true;
        work.push(n.children[1]!, n.children[0]!);
        expanded.push(false, false);
        continue;
      }
      work.pop();
      expanded.pop();
      nodes++;
      if (word !== null) {
        let x = lookupNode(cg, this.E, words.index(leaf++, word));
        if (this.dropout > 0) x = dropoutNode(cg, x, this.dropout);
        const g = affineNode(cg, cg.parameterNode(this.b_iou), cg.parameterNode(this.W_iou), x);
        if (fused) {
          const hc = cellNode0(cg, g);
          hs.push(pickRangeNode(cg, hc, 0, H));
          cs.push(pickRangeNode(cg, hc, H, 2 * H));
        } else {
          leafFromOps(cg, g, H, hs, cs);
        }
      } else {
        // the left child was built first, so its pair is below the right child's
        const h2 = hs.pop()!;
        const h1 = hs.pop()!;
        const c2 = cs.pop()!;
        const c1 = cs.pop()!;
        // node order as with the expression builders: an argument's nodes before the parameter nodes it reads
        const h12 = concat2Node(cg, h1, h2);
        const iou = affineNode(cg, cg.parameterNode(this.b_iou), cg.parameterNode(this.U_iou), h12);
        const f1 = affineNode(cg, cg.parameterNode(this.b_f), cg.parameterNode(this.U_f1), h1);
        const f2 = affineNode(cg, cg.parameterNode(this.b_f), cg.parameterNode(this.U_f2), h2);
        if (fused) {
          const hc = cellNode2(cg, concat3Node(cg, iou, f1, f2), c1, c2);
          hs.push(pickRangeNode(cg, hc, 0, H));
          cs.push(pickRangeNode(cg, hc, H, 2 * H));
        } else {
          nodeFromOps(cg, iou, f1, f2, c1, c2, H, hs, cs);
        }
      }
      if (losses !== null || n === tree) {
        const h = hs[hs.length - 1]!;
        const scores = affineNode(cg, cg.parameterNode(this.b_out), cg.parameterNode(this.W_out), h);
        if (losses !== null) losses.push(pickNegLogSoftmaxNode(cg, scores, n.label));
        if (n === tree) this.lastRootScores = scores;
      }
    }
    return nodes;
  }

  /** The vocabulary indices of each tree's words, from the tree's last build (see LeafWords). */
  private readonly words = new WordIndexCache<TreeNode>();
}

/** The shape of every parameter, by name, in the order the constructor creates them (E is the lookup table). */
function treeLstmSizes(vocabSize: number, D: number, H: number, labels: number) {
  return {
    E: [vocabSize, D],
    W_iou: [3 * H, D],
    U_iou: [3 * H, 2 * H],
    U_f1: [H, H],
    U_f2: [H, H],
    b_iou: [3 * H],
    b_f: [H],
    W_out: [labels, H],
    b_out: [labels],
  } as const satisfies Record<string, readonly [number] | readonly [number, number]>;
}

/**
 * Refuses options a model cannot be built from, naming the option: sizes that are not positive integers (which
 * would otherwise fail inside addParameters under a parameter's name, or build a model of NaN shapes), a dropout
 * outside [0, 1), an unknown cell.
 */
export function checkTreeLstmOptions(opts: Partial<TreeLstmOptions>): void {
  if (typeof opts !== "object" || opts === null) {
    throw new TypeError(`TreeLstmModel: options must be an object; got ${String(opts)}`);
  }
  for (const key of ["vocabSize", "embed", "hidden", "labels"] as const) {
    const n = opts[key];
    if (key === "labels" && n === undefined) continue;
    if (!Number.isInteger(n) || n! < 1) {
      throw new RangeError(`TreeLstmModel: ${key} must be a positive integer; got ${String(n)}`);
    }
  }
  const p = opts.dropout;
  if (p !== undefined && !(typeof p === "number" && p >= 0 && p < 1)) {
    throw new RangeError(`TreeLstmModel: dropout must be in [0, 1); got ${String(p)}`);
  }
  if (opts.cell !== undefined && opts.cell !== "fused" && opts.cell !== "ops") {
    throw new RangeError(`TreeLstmModel: cell must be "fused" or "ops"; got ${JSON.stringify(opts.cell)}`);
  }
}

/**
 * The shapes of the parameters a `TreeLstmModel` with these options has, in its order, without allocating them
 * (`vpps plan` of sizes too large to allocate).
 */
export function treeLstmParameterShapes(
  opts: Pick<TreeLstmOptions, "vocabSize" | "embed" | "hidden" | "labels">,
): ParameterShape[] {
  checkTreeLstmOptions(opts);
  return shapesOf(treeLstmSizes(opts.vocabSize, opts.embed, opts.hidden, opts.labels ?? SST_LABELS));
}

export interface TreeOutput {
  /** Sum of the per-node losses, or null when built without losses. */
  loss: Expression | null;
  /** Class scores at the root (before the softmax). */
  rootScores: Expression;
  /** Tree nodes (preterminals + internal). */
  nodes: number;
}

/** Leaf from plain ops: c = σ(i) ⊙ tanh(u), h = σ(o) ⊙ tanh(c); pushes h onto hs and c onto cs. */
function leafFromOps(g: ComputationGraph, gates: number, H: number, hs: number[], cs: number[]): void {
  const i = unaryNode(g, Op.Logistic, pickRangeNode(g, gates, 0, H));
  const o = unaryNode(g, Op.Logistic, pickRangeNode(g, gates, H, 2 * H));
  const u = unaryNode(g, Op.Tanh, pickRangeNode(g, gates, 2 * H, 3 * H));
  const c = binaryNode(g, Op.CMul, "cmul", i, u);
  hs.push(binaryNode(g, Op.CMul, "cmul", o, unaryNode(g, Op.Tanh, c)));
  cs.push(c);
}

/**
 * Internal node from plain ops: c = σ(i) ⊙ tanh(u) + σ(f₁) ⊙ c₁ + σ(f₂) ⊙ c₂, h = σ(o) ⊙ tanh(c); pushes h onto hs
 * and c onto cs.
 */
function nodeFromOps(
  g: ComputationGraph,
  iou: number,
  f1: number,
  f2: number,
  c1: number,
  c2: number,
  H: number,
  hs: number[],
  cs: number[],
): void {
  const i = unaryNode(g, Op.Logistic, pickRangeNode(g, iou, 0, H));
  const o = unaryNode(g, Op.Logistic, pickRangeNode(g, iou, H, 2 * H));
  const u = unaryNode(g, Op.Tanh, pickRangeNode(g, iou, 2 * H, 3 * H));
  const iu = binaryNode(g, Op.CMul, "cmul", i, u);
  const fc1 = binaryNode(g, Op.CMul, "cmul", unaryNode(g, Op.Logistic, f1), c1);
  const sum1 = binaryNode(g, Op.Add, "add", iu, fc1);
  const fc2 = binaryNode(g, Op.CMul, "cmul", unaryNode(g, Op.Logistic, f2), c2);
  const c = binaryNode(g, Op.Add, "add", sum1, fc2);
  hs.push(binaryNode(g, Op.CMul, "cmul", o, unaryNode(g, Op.Tanh, c)));
  cs.push(c);
}
