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
import { type TreeOrder, TreeOrderCache } from "../shared/tree-order.js";
import { type BlockParams, leafBlock, lossSumBlock, nodeBlock } from "./blocks.js";

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

  /**
   * The summed loss of a batch of trees (one graph, renewed by the caller). With the fused cell (and no active
   * dropout) a batch of at least BY_HEIGHT_MIN_TREES trees is written by tree-node height (`buildByHeight`);
   * otherwise tree by tree.
   */
  buildBatchLoss(cg: ComputationGraph, trees: readonly TreeNode[], vocab: Vocabulary): Expression {
    const byHeight = this.buildByHeight(cg, trees, vocab);
    if (byHeight !== null) return byHeight;
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
   * The batch with every tree's nodes written in order of their tree node's height: all leaves, then every node of
   * height 1, and so on (a node of height h is a leaf or has a child of height h − 1), each as the builders or the
   * blocks write it; each tree's losses are then summed in its post-order, and the trees' sums in batch order, as
   * the tree-by-tree build does. The graph computes the same function; only node ids differ. Nodes of one depth level
   * then lie close together (a tree node's h is at depth 3 + 5·height), where tree by tree they are scattered over
   * the batch: schedulers and engines that walk the graph level by level touch far fewer cache lines. Returns null
   * (nothing added) for fewer than BY_HEIGHT_MIN_TREES trees, or when a tree cannot be
   * written as blocks (ops cell, active dropout, a row or label the builders refuse): the tree-by-tree build then
   * runs, with the builders' messages at the same node as ever.
   */
  private buildByHeight(cg: ComputationGraph, trees: readonly TreeNode[], vocab: Vocabulary): Expression | null {
    if (trees.length < BY_HEIGHT_MIN_TREES || this.cell !== "fused" || (this.dropout > 0 && cg.training)) return null;
    const b = this.batch;
    b.orders.length = 0;
    // each tree node's label, height and tree, flat over the batch (tree by tree, post-order)
    let total = 0;
    let maxHeight = 0;
    for (let t = 0; t < trees.length; t++) {
      const o = this.orders.of(trees[t]!, vocab, this.labels);
      if (!this.blocksFit(cg, o)) {
        b.orders.length = 0;
        return null;
      }
      b.orders.push(o);
      b.reserve(total + o.size);
      const { label, height, tree, leftOf, row } = b;
      const labels = this.orders.labels;
      for (let k = 0; k < o.size; k++) {
        const f = total + k;
        const left = o.left(k);
        const hk = left < 0 ? 0 : 1 + Math.max(height[total + left]!, height[f - 1]!);
        height[f] = hk;
        label[f] = labels[k]!;
        tree[f] = t;
        leftOf[f] = left < 0 ? -1 : total + left;
        row[f] = o.row(k);
        if (hk > maxHeight) maxHeight = hk;
      }
      total += o.size;
    }
    const { label, height, tree, leftOf, row, h, c, loss, byHeight } = b;
    // the batch's tree nodes by height (stable: batch order, then post-order), a counting sort
    const start = b.heightStart(maxHeight);
    for (let f = 0; f < total; f++) start[height[f]! + 1]!++;
    for (let k = 1; k <= maxHeight + 1; k++) start[k]! += start[k - 1]!;
    for (let f = 0; f < total; f++) byHeight[start[height[f]!]!++] = f;
    const base = b.base(trees.length);
    for (let t = 1; t < trees.length; t++) base[t] = base[t - 1]! + b.orders[t - 1]!.size;
    const { hs, cs } = this;
    const one: number[] = [];
    let p = this.blockParams(cg);
    for (let j = 0; j < total; j++) {
      const f = byHeight[j]!;
      const left = leftOf[f]!;
      const leaf = left < 0;
      if (!leaf) {
        hs[0] = h[left]!;
        cs[0] = c[left]!;
        hs[1] = h[f - 1]!;
        cs[1] = c[f - 1]!;
      }
      // the blocks need the parameter nodes the builders add where each is first read
      if (p === null || (!leaf && p.UF2 < 0)) {
        one.length = 0;
        const t = tree[f]!;
        this.builderNode(cg, b.orders[t]!, f - base[t]!, leaf ? 0 : 2, one);
        loss[f] = one[0]!;
        p = this.blockParams(cg);
      } else {
        loss[f] = leaf ? leafBlock(cg, p, row[f]!, label[f]!, hs, cs, 0) : nodeBlock(cg, p, label[f]!, hs, cs, 0);
      }
      h[f] = hs[0]!;
      c[f] = cs[0]!;
    }
    const treeLosses: number[] = [];
    for (let t = 0; t < trees.length; t++) {
      const n = b.orders[t]!.size;
      const from = base[t]!;
      treeLosses.push(lossSumBlock(cg, loss, from, n));
    }
    // the scores feed the loss node right after them (blocks and builders alike)
    this.lastRootScores = loss[base[trees.length - 1]! + b.orders[trees.length - 1]!.size - 1]! - 1;
    b.orders.length = 0; // no tree kept alive from here
    const n = treeLosses.length;
    return new Expression(cg, n === 1 ? treeLosses[0]! : sumNode(cg, treeLosses, n), cg.generation);
  }

  /** buildByHeight's per-batch scratch (grow-only). */
  private readonly batch = new BatchScratch();

  /**
   * Adds the nodes of one tree (appending the id of the loss at each of its nodes to `losses` unless null) and
   * returns the number of tree nodes; the root's class scores are left in `lastRootScores`. Runs over the tree's
   * remembered order (TreeOrder: checked against the tree, recorded again if it changed). With the fused cell and
   * losses, and once the graph has every parameter node the blocks read, each tree node's nodes are written as one
   * block (blocks.ts); otherwise, and for a tree with a row or label the builders would refuse, with the node
   * builders (NODE BUILDERS in src/ops/common.ts: every argument is a node this walk has just made in `cg`, or a
   * parameter node, so only shapes need checking). Both give the same nodes in the same order.
   */
  private addTree(cg: ComputationGraph, tree: TreeNode, vocab: Vocabulary, losses: number[] | null): number {
    const order = this.orders.of(tree, vocab, this.labels);
    const n = order.size;
    if (this.hs.length < n) {
      this.hs = new Int32Array(2 * n);
      this.cs = new Int32Array(2 * n);
    }
    const { hs, cs } = this;
    const labels = this.orders.labels;
    const fits = losses !== null && this.blocksFit(cg, order);
    let p = fits ? this.blockParams(cg) : null;
    let sp = 0;
    for (let k = 0; k < n; k++) {
      const leaf = order.left(k) < 0;
      // the blocks need the parameter nodes the builders add where each is first read
      if (p !== null && !leaf && p.UF2 < 0) p = null;
      if (p !== null) {
        // an internal node's children are the top two subtrees (the left one below)
        const loss = leaf
          ? leafBlock(cg, p, order.row(k), labels[k]!, hs, cs, sp++)
          : nodeBlock(cg, p, labels[k]!, hs, cs, --sp - 1);
        losses!.push(loss);
        if (k === n - 1) this.lastRootScores = loss - 1;
        continue;
      }
      sp = this.builderNode(cg, order, k, sp, losses);
      if (fits) p = this.blockParams(cg);
    }
    return n;
  }

  /**
   * Whether the nodes of this tree may be written as blocks (blocks.ts) rather than by the builders: fused cell, no
   * active dropout, and each row and label one the builders accept (so that a tree the builders refuse fails with
   * their message, at the same node).
   */
  private blocksFit(cg: ComputationGraph, order: TreeOrder): boolean {
    if (this.cell !== "fused" || (this.dropout > 0 && cg.training)) return false;
    return this.orders.numericLabels && order.labelsBelow && order.maxRow < this.E.rows;
  }

  /** The last complete `blockParams` result and the graph generation it is for (parameter nodes stay put in one). */
  private blocks: { cg: ComputationGraph; generation: number; p: BlockParams } | undefined;

  /**
   * The sizes and parameter nodes for blocks.ts, or null before the graph has the lookup table and the leaves'
   * parameter nodes; the internal nodes' are -1 until present (a leaf block reads b_iou, W_iou, b_out and W_out; an
   * internal node's, all eight).
   */
  private blockParams(cg: ComputationGraph): BlockParams | null {
    const b = this.blocks;
    if (b !== undefined && b.cg === cg && b.generation === cg.generation) return b.p;
    const E = this.E;
    if (cg.parameters[E.index] !== E) return null;
    const node = (q: Parameter) => cg.presentParameterNode(q);
    const p: BlockParams = {
      H: this.hidden,
      D: this.embed,
      labels: this.labels,
      table: E.index,
      bIou: node(this.b_iou),
      WIou: node(this.W_iou),
      UIou: node(this.U_iou),
      bF: node(this.b_f),
      UF1: node(this.U_f1),
      UF2: node(this.U_f2),
      bOut: node(this.b_out),
      WOut: node(this.W_out),
    };
    if ((p.bIou | p.WIou | p.bOut | p.WOut) < 0) return null;
    // UF2 stands for the internal nodes' set in addTree's test
    if ((p.UIou | p.bF | p.UF1 | p.UF2) < 0) return { ...p, UF2: -1 };
    this.blocks = { cg, generation: cg.generation, p };
    return p;
  }

  /**
   * Tree node k of `order` through the node builders (any cell, dropout, losses or not), with the value stacks at
   * depth `sp`; returns the new depth.
   */
  private builderNode(cg: ComputationGraph, order: TreeOrder, k: number, sp: number, losses: number[] | null): number {
    const H = this.hidden;
    const fused = this.cell === "fused";
    const { hs, cs } = this;
    const row = order.row(k);
    if (row >= 0) {
      let x = lookupNode(cg, this.E, row);
      if (this.dropout > 0) x = dropoutNode(cg, x, this.dropout);
      const g = affineNode(cg, cg.parameterNode(this.b_iou), cg.parameterNode(this.W_iou), x);
      if (fused) {
        const hc = cellNode0(cg, g);
        hs[sp] = pickRangeNode(cg, hc, 0, H);
        cs[sp] = pickRangeNode(cg, hc, H, 2 * H);
      } else {
        leafFromOps(cg, g, H, hs, cs, sp);
      }
      sp++;
    } else {
      // the left child was built first, so its pair is below the right child's
      sp -= 2;
      const h1 = hs[sp]!;
      const h2 = hs[sp + 1]!;
      const c1 = cs[sp]!;
      const c2 = cs[sp + 1]!;
      // node order as with the expression builders: an argument's nodes before the parameter nodes it reads
      const h12 = concat2Node(cg, h1, h2);
      const iou = affineNode(cg, cg.parameterNode(this.b_iou), cg.parameterNode(this.U_iou), h12);
      const f1 = affineNode(cg, cg.parameterNode(this.b_f), cg.parameterNode(this.U_f1), h1);
      const f2 = affineNode(cg, cg.parameterNode(this.b_f), cg.parameterNode(this.U_f2), h2);
      if (fused) {
        const hc = cellNode2(cg, concat3Node(cg, iou, f1, f2), c1, c2);
        hs[sp] = pickRangeNode(cg, hc, 0, H);
        cs[sp] = pickRangeNode(cg, hc, H, 2 * H);
      } else {
        nodeFromOps(cg, iou, f1, f2, c1, c2, H, hs, cs, sp);
      }
      sp++;
    }
    const root = k === order.size - 1;
    if (losses !== null || root) {
      const scores = affineNode(cg, cg.parameterNode(this.b_out), cg.parameterNode(this.W_out), hs[sp - 1]!);
      if (losses !== null) losses.push(pickNegLogSoftmaxNode(cg, scores, order.node(k).label));
      if (root) this.lastRootScores = scores;
    }
    return sp;
  }

  /** Each tree's nodes in build order with its words' vocabulary indices, from its last build (see TreeOrder). */
  private readonly orders = new TreeOrderCache();
  /** The blocks' (h, c) stacks, reused from tree to tree. */
  private hs = new Int32Array(64);
  private cs = new Int32Array(64);
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

/** Leaf from plain ops: c = σ(i) ⊙ tanh(u), h = σ(o) ⊙ tanh(c); leaves h at hs[sp] and c at cs[sp]. */
function leafFromOps(g: ComputationGraph, gates: number, H: number, hs: Int32Array, cs: Int32Array, sp: number): void {
  const i = unaryNode(g, Op.Logistic, pickRangeNode(g, gates, 0, H));
  const o = unaryNode(g, Op.Logistic, pickRangeNode(g, gates, H, 2 * H));
  const u = unaryNode(g, Op.Tanh, pickRangeNode(g, gates, 2 * H, 3 * H));
  const c = binaryNode(g, Op.CMul, "cmul", i, u);
  hs[sp] = binaryNode(g, Op.CMul, "cmul", o, unaryNode(g, Op.Tanh, c));
  cs[sp] = c;
}

/**
 * Internal node from plain ops: c = σ(i) ⊙ tanh(u) + σ(f₁) ⊙ c₁ + σ(f₂) ⊙ c₂, h = σ(o) ⊙ tanh(c); leaves h at
 * hs[sp] and c at cs[sp].
 */
function nodeFromOps(
  g: ComputationGraph,
  iou: number,
  f1: number,
  f2: number,
  c1: number,
  c2: number,
  H: number,
  hs: Int32Array,
  cs: Int32Array,
  sp: number,
): void {
  const i = unaryNode(g, Op.Logistic, pickRangeNode(g, iou, 0, H));
  const o = unaryNode(g, Op.Logistic, pickRangeNode(g, iou, H, 2 * H));
  const u = unaryNode(g, Op.Tanh, pickRangeNode(g, iou, 2 * H, 3 * H));
  const iu = binaryNode(g, Op.CMul, "cmul", i, u);
  const fc1 = binaryNode(g, Op.CMul, "cmul", unaryNode(g, Op.Logistic, f1), c1);
  const sum1 = binaryNode(g, Op.Add, "add", iu, fc1);
  const fc2 = binaryNode(g, Op.CMul, "cmul", unaryNode(g, Op.Logistic, f2), c2);
  const c = binaryNode(g, Op.Add, "add", sum1, fc2);
  hs[sp] = binaryNode(g, Op.CMul, "cmul", o, unaryNode(g, Op.Tanh, c));
  cs[sp] = c;
}

/**
 * The fewest trees a batch must have to be written by height (TreeLstmModel.buildByHeight). Measured on the 2-core
 * development machine: what a schedule worker does per batch, the build and the VPPS schedule of consecutive SST
 * batches (fused cell, hidden 256, H100 plan; median of per-batch ratios against the tree-by-tree build,
 * interleaved): 0.92 at 128 trees (schedule 0.91, build 0.98–1.04), 0.97 at 32, 0.98–1.00 at 16; below 16 the
 * order gained nothing (0.99 at 8) and cost at 1 tree (1.04–1.07).
 */
export const BY_HEIGHT_MIN_TREES = 16;

/** Flat per-tree-node arrays over a batch (buildByHeight), kept across batches. */
class BatchScratch {
  readonly orders: TreeOrder[] = [];
  label = new Float64Array(0);
  height = new Int32Array(0);
  tree = new Int32Array(0);
  /** Flat index of each tree node's left child (-1: a leaf; the right child is the node just before). */
  leftOf = new Int32Array(0);
  /** Each leaf's vocabulary row (-1 at internal nodes). */
  row = new Int32Array(0);
  h = new Int32Array(0);
  c = new Int32Array(0);
  loss = new Int32Array(0);
  byHeight = new Int32Array(0);
  private starts = new Int32Array(64);
  private bases = new Int32Array(64);

  /** Room for `n` tree nodes, keeping the labels, heights and trees written so far. */
  reserve(n: number): void {
    if (this.height.length >= n) return;
    const size = 2 * n;
    const grown = <A extends Float64Array | Int32Array>(a: A, b: A): A => {
      b.set(a);
      return b;
    };
    this.label = grown(this.label, new Float64Array(size));
    this.height = grown(this.height, new Int32Array(size));
    this.tree = grown(this.tree, new Int32Array(size));
    this.leftOf = grown(this.leftOf, new Int32Array(size));
    this.row = grown(this.row, new Int32Array(size));
    this.h = new Int32Array(size);
    this.c = new Int32Array(size);
    this.loss = new Int32Array(size);
    this.byHeight = new Int32Array(size);
  }

  /** Zeroed counters for heights 0…max (entry k + 1 counts height k). */
  heightStart(max: number): Int32Array {
    if (this.starts.length < max + 2) this.starts = new Int32Array(2 * (max + 2));
    this.starts.fill(0, 0, max + 2);
    return this.starts;
  }

  /** Each tree's first flat index (entry 0 is 0). */
  base(trees: number): Int32Array {
    if (this.bases.length < trees) this.bases = new Int32Array(2 * trees);
    this.bases[0] = 0;
    return this.bases;
  }
}
