/**
 * A batch's live nodes renumbered in the order the scheduler visits them, filled by layoutBatch's passes: the nodes
 * that emit instructions ("listed") level by level, graph order within a level, then the other live nodes (inputs,
 * parameters, lookups, pickRanges) level by level. Every per-node fact the scheduler reads (the graph's op, shape,
 * arguments and attributes; the layout's offsets, flags and storage roots) is kept in arrays of that numbering,
 * arguments renumbered too, along with the matrix products per level that the scheduler announces per step.
 *
 * Why: the scheduler's passes walk the graph level by level, and in graph order (tree by tree) the nodes of one
 * level lie hundreds of nodes apart, so that each fact of each visited node and of each of its arguments was a
 * cache miss in an array of its own. In this numbering a level is a run of consecutive nodes and the arguments of a
 * level's nodes are runs of the levels below, so the passes (and the per-node dependency records of
 * schedule/writes.ts) stream through memory. Filling it costs stores in the layout's passes, which read those facts
 * in graph order anyway (a copy pass of its own cost as much as it saved: its loads jump across the graph).
 *
 * View node ids are only the scheduler's: the BatchSchedule's layout stays in graph numbering, and `order` maps back
 * (errors and the VPPS_DUMP trace name graph nodes).
 */
import type { ComputationGraph } from "../../../graph/graph.js";
import type { BatchLayout } from "./layout.js";

/** What the scheduler's emitters read of a graph: ComputationGraph itself, or a LevelOrder. */
export interface NodeTable {
  readonly op: Uint8Array;
  readonly rows: Int32Array;
  readonly cols: Int32Array;
  readonly argStart: Int32Array;
  readonly argCount: Int32Array;
  readonly args: Int32Array;
  readonly aux: Int32Array;
  readonly aux2: Int32Array;
  readonly auxF: Float32Array;
  arg(id: number, k: number): number;
  describe(id: number): string;
}

/** Per op, how the level order treats its nodes (the scheduler's table; the layout cannot know VPPS's kernels). */
export const OP_CLASS = { storage: 0, listed: 1, refused: 2 } as const;

/** The level-ordered copy of one batch (kept by a LayoutWorkspace across batches: every array is grow-only). */
export class LevelOrder implements NodeTable {
  op = new Uint8Array(0);
  rows = new Int32Array(0);
  cols = new Int32Array(0);
  argStart = new Int32Array(0);
  argCount = new Int32Array(0);
  args = new Int32Array(0);
  aux = new Int32Array(0);
  aux2 = new Int32Array(0);
  auxF = new Float32Array(0);
  /** Layout facts in this numbering (storage roots as view ids). */
  value = new Int32Array(0);
  grad = new Int32Array(0);
  temp = new Int32Array(0);
  valueRoot = new Int32Array(0);
  gradRoot = new Int32Array(0);
  needGrad = new Uint8Array(0);
  placed = new Uint8Array(0);
  /** Per view node: its graph node. Per graph node: its view node (-1: not live; its bucket during markLive). */
  order = new Int32Array(0);
  pos = new Int32Array(0);
  /**
   * Buckets: b < levels holds level b's listed nodes, levels + d level d's other live nodes. Counted by markLive
   * (nodes, argument words); then `start[b]` is where bucket b starts and nodeNext/argNext are placeNodes' cursors.
   */
  start = new Int32Array(0);
  nodeNext = new Int32Array(0);
  argNext = new Int32Array(0);
  argWords = new Int32Array(0);
  /** Levels (the loss's depth + 1), live nodes, and whether a live node has an op of class `refused`. */
  levels = 0;
  live = 0;
  refused = false;
  /** Matrix products per (level, plan matrix) at level · matrices + m, forward and backward (with kernel work). */
  forwardProducts = new Int32Array(0);
  backwardProducts = new Int32Array(0);
  /** The first product (graph node) whose W is not a matrix of the plan, or -1: the scheduler names it. */
  badProduct = -1;
  /** The graph of the last layout, for describe(). */
  private g: ComputationGraph | undefined;
  private paramNode = new Int32Array(0);
  private readonly lookupNodes: number[] = [];

  /** The layout L (of this order's batch) in this numbering: per-node arrays of this object, the rest L's. */
  layout(L: BatchLayout): BatchLayout {
    const params = L.paramNode.length;
    if (this.paramNode.length < params) this.paramNode = new Int32Array(params);
    const paramNode = this.paramNode.subarray(0, params);
    const pos = this.pos;
    for (let p = 0; p < params; p++) paramNode[p] = L.paramNode[p]! < 0 ? -1 : pos[L.paramNode[p]!]!;
    const lookupNodes = this.lookupNodes;
    lookupNodes.length = 0;
    for (const i of L.lookupRows.node) lookupNodes.push(pos[i]!);
    return {
      ...L,
      value: this.value,
      grad: this.grad,
      temp: this.temp,
      valueRoot: this.valueRoot,
      gradRoot: this.gradRoot,
      needGrad: this.needGrad,
      placed: this.placed,
      paramNode,
      lookupRows: { ...L.lookupRows, node: lookupNodes },
    };
  }

  arg(id: number, k: number): number {
    return this.args[this.argStart[id]! + k]!;
  }

  /** The graph node's description, under its graph id (what a user can find). */
  describe(id: number): string {
    return this.g!.describe(this.order[id]!);
  }

  /** Before markLive: a batch of n graph nodes whose loss has depth `lossDepth`; the counts at zero. */
  begin(g: ComputationGraph, n: number, lossDepth: number): void {
    this.g = g;
    const levels = lossDepth + 1;
    this.levels = levels;
    this.live = 0;
    this.refused = false;
    this.badProduct = -1;
    if (this.pos.length < n) this.pos = new Int32Array(2 * n);
    if (this.start.length < 2 * levels + 1) {
      const size = 4 * levels + 2;
      this.start = new Int32Array(size);
      this.nodeNext = new Int32Array(size);
      this.argNext = new Int32Array(size);
      this.argWords = new Int32Array(size);
    }
    this.start.fill(0, 0, 2 * levels + 1);
    this.argWords.fill(0, 0, 2 * levels + 1);
  }

  /**
   * After markLive counted the buckets (start[b + 1] nodes, argWords[b + 1] argument words): the cursors, room for
   * the view, and the product counts of `matrices` plan matrices at zero.
   */
  place(matrices: number): void {
    const buckets = 2 * this.levels;
    const { start, argWords, nodeNext, argNext } = this;
    for (let b = 1; b <= buckets; b++) {
      start[b]! += start[b - 1]!;
      argWords[b]! += argWords[b - 1]!;
    }
    for (let b = 0; b < buckets; b++) {
      nodeNext[b] = start[b]!;
      argNext[b] = argWords[b]!;
    }
    const live = start[buckets]!;
    this.live = live;
    if (this.args.length < argWords[buckets]!) this.args = new Int32Array(2 * argWords[buckets]!);
    const products = this.levels * matrices;
    if (this.forwardProducts.length < products) {
      this.forwardProducts = new Int32Array(2 * products);
      this.backwardProducts = new Int32Array(2 * products);
    }
    this.forwardProducts.fill(0, 0, products);
    this.backwardProducts.fill(0, 0, products);
    if (this.op.length >= live) return;
    const size = 2 * live;
    this.op = new Uint8Array(size);
    this.rows = new Int32Array(size);
    this.cols = new Int32Array(size);
    this.argStart = new Int32Array(size);
    this.argCount = new Int32Array(size);
    this.aux = new Int32Array(size);
    this.aux2 = new Int32Array(size);
    this.auxF = new Float32Array(size);
    this.value = new Int32Array(size);
    this.grad = new Int32Array(size);
    this.temp = new Int32Array(size);
    this.valueRoot = new Int32Array(size);
    this.gradRoot = new Int32Array(size);
    this.needGrad = new Uint8Array(size);
    this.placed = new Uint8Array(size);
    this.order = new Int32Array(size);
  }
}
