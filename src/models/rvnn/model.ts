import type { TreeNode } from "../../data/tree.js";
import type { Vocabulary } from "../../data/vocab.js";
import { type ComputationGraph, type Expression, ShapeError } from "../../graph/graph.js";
import { Op } from "../../graph/opcodes.js";
import type { LookupParameter, Parameter, ParameterShape } from "../../model/parameters.js";
import { ParameterCollection } from "../../model/parameters.js";
import { unaryNode } from "../../ops/elementwise.js";
import { affineNode } from "../../ops/linear.js";
import { concat2Node, lookupNode } from "../../ops/structure.js";
import { shapesOf } from "../shared/parameter-sizes.js";
import { RootLabelHead, rootHeadSizes, SST_LABELS } from "../shared/root-head.js";
import { WordIndexCache } from "../shared/word-indices.js";

export interface RvnnOptions {
  vocabSize: number;
  /** Word embedding size (the paper: 512). */
  embed: number;
  /** Hidden size (the paper: 512). */
  hidden: number;
  /** Number of sentence labels (SST: 5). */
  labels?: number;
  seed?: number;
}

/**
 * RvNN (VPPS paper §IV-E): a recursive network along the sentence's binary parse tree with untied leaf and internal
 * weights — a preterminal's h = tanh(W_leaf·e + b_leaf), an internal node's h = tanh(W_int·[h_l; h_r] + b_int) — and
 * an MLP on the root's h that predicts the root's label.
 */
export class RvnnModel {
  readonly params: ParameterCollection;
  readonly E: LookupParameter;
  readonly W_leaf: Parameter;
  readonly b_leaf: Parameter;
  readonly W_int: Parameter;
  readonly b_int: Parameter;
  readonly head: RootLabelHead;
  readonly hidden: number;
  readonly embed: number;
  readonly labels: number;
  private readonly words = new WordIndexCache<TreeNode>();
  /** The post-order walk's stacks, reused: nodes to visit (and whether expanded), built h nodes. */
  private readonly work: TreeNode[] = [];
  private readonly expanded: boolean[] = [];
  private readonly hs: number[] = [];

  constructor(opts: RvnnOptions) {
    this.hidden = opts.hidden;
    this.embed = opts.embed;
    this.labels = opts.labels ?? SST_LABELS;
    const s = rvnnSizes(opts.vocabSize, this.embed, this.hidden, this.labels);
    const pc = new ParameterCollection({ seed: opts.seed ?? 1 });
    this.params = pc;
    this.E = pc.addLookupParameters(s.E[0], s.E[1], undefined, "E");
    this.W_leaf = pc.addParameters(s.W_leaf, undefined, "W_leaf");
    this.b_leaf = pc.addParameters(s.b_leaf, undefined, "b_leaf");
    this.W_int = pc.addParameters(s.W_int, undefined, "W_int");
    this.b_int = pc.addParameters(s.b_int, undefined, "b_int");
    this.head = new RootLabelHead(pc, this.hidden, this.labels);
  }

  /** The summed root loss of a batch of trees (one graph, renewed by the caller). */
  buildBatchLoss(cg: ComputationGraph, trees: readonly TreeNode[], vocab: Vocabulary): Expression {
    return this.head.batchLoss(cg, trees, (t) => this.addTree(cg, t, vocab));
  }

  /** The root's class scores of one tree (forward only). */
  buildScores(cg: ComputationGraph, tree: TreeNode, vocab: Vocabulary): Expression {
    return this.head.scoresExpression(cg, this.addTree(cg, tree, vocab));
  }

  /**
   * Adds a tree's nodes (node builders, an explicit post-order walk: trees can be deep) and returns the root's h
   * node. A node without a word must have two children (the SST reader refuses any other; a tree built in code is
   * checked here).
   */
  addTree(cg: ComputationGraph, tree: TreeNode, vocab: Vocabulary): number {
    const indices = this.words.of(tree, vocab);
    const { work, expanded, hs } = this;
    work.length = 0;
    expanded.length = 0;
    hs.length = 0;
    work.push(tree);
    expanded.push(false);
    const bLeaf = cg.parameterNode(this.b_leaf);
    const WLeaf = cg.parameterNode(this.W_leaf);
    const bInt = cg.parameterNode(this.b_int);
    const WInt = cg.parameterNode(this.W_int);
    let leaf = 0;
    while (work.length > 0) {
      const n = work[work.length - 1]!;
      const word = n.word;
      if (word === null && !expanded[expanded.length - 1]) {
        if (n.children.length !== 2) {
          throw new ShapeError(
            `rvnn: a tree node without a word must have exactly two children; one has ${n.children.length}`,
          );
        }
        expanded[expanded.length - 1] = true;
        work.push(n.children[1]!, n.children[0]!);
        expanded.push(false, false);
        continue;
      }
      work.pop();
      expanded.pop();
      let a: number;
      if (word !== null) {
        const x = lookupNode(cg, this.E, indices.index(leaf++, word));
        a = affineNode(cg, bLeaf, WLeaf, x);
      } else {
        // the left child was built first, so its h is below the right child's
        const hr = hs.pop()!;
        const hl = hs.pop()!;
        const lr = concat2Node(cg, hl, hr);
        a = affineNode(cg, bInt, WInt, lr);
      }
      hs.push(unaryNode(cg, Op.Tanh, a));
    }
    return hs[0]!;
  }
}

/** The shape of every parameter, by name, in the order the constructor creates them (E is the lookup table). */
function rvnnSizes(vocabSize: number, embed: number, hidden: number, labels: number) {
  return {
    E: [vocabSize, embed],
    W_leaf: [hidden, embed],
    b_leaf: [hidden],
    W_int: [hidden, 2 * hidden],
    b_int: [hidden],
    ...rootHeadSizes(hidden, hidden, labels),
  } as const;
}

/** The shapes of an `RvnnModel`'s parameters, in its order, without allocating them (`vpps plan`). */
export function rvnnParameterShapes(opts: Omit<RvnnOptions, "seed">): ParameterShape[] {
  return shapesOf(rvnnSizes(opts.vocabSize, opts.embed, opts.hidden, opts.labels ?? SST_LABELS));
}
