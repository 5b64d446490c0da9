/**
 * A batch's live nodes renumbered in the order the scheduler visits them, filled by layoutBatch's passes: the nodes
 * that emit instructions ("listed") level by level, graph order within a level, then the other live nodes (inputs,
 * parameters, lookups, pickRanges) level by level. Each node is one record of NODE_WORDS words (one 64-byte cache
 * line) holding every fact the scheduler reads of it (op, shape, attribute, arguments, offsets, flags) and the
 * dependency records of its storage (schedule/writes.ts); arguments are renumbered too.
 *
 * Why: the scheduler walks the graph level by level, and in graph order (tree by tree) the nodes of one level lie
 * hundreds of nodes apart, so that each fact of each visited node and of each of its arguments was a cache miss in
 * an array of its own (session 12: the profile was flat and bound by misses). Here a level is a run of consecutive
 * records and the arguments of a level's nodes are runs of the levels below, one line per node. One record per node
 * rather than an array per fact also keeps the layout's stores cheap: filling a dozen arrays in this order cost about
 * what it saved (each store a line of its own), filling records costs one line per node.
 *
 * View node ids are only the scheduler's: the BatchSchedule's layout stays in graph numbering; `order` and `pos` map
 * between the two (errors and the VPPS_DUMP trace name graph nodes).
 */
import type { ComputationGraph } from "../../../graph/graph.js";

/** Words per node record, and the word of each fact (N_FLAGS: needGrad in bit 0, the layout's placement above). */
export const NODE_WORDS = 16;
export const N_OP = 0;
export const N_ROWS = 1;
export const N_COLS = 2;
export const N_AUX = 3;
export const N_ARG_START = 4;
export const N_ARG_COUNT = 5;
export const N_VALUE = 6;
export const N_GRAD = 7;
export const N_TEMP = 8;
export const N_FLAGS = 9;
/**
 * The dependency records (schedule/writes.ts): the buffer ids (record offsets, -1: storage nobody writes in the
 * batch) of the node's value and gradient storage, then the writes of its own value and gradient buffers (newest
 * write and next older one, each a pair of words) when it is a storage root.
 */
export const N_VALUE_BUFFER = 10;
export const N_GRAD_BUFFER = 11;
export const N_VALUE_WRITE = 12;
export const N_GRAD_WRITE = 14;

/** Per op, how the level order treats its nodes (the scheduler's table; the layout cannot know VPPS's kernels). */
export const OP_CLASS = { storage: 0, listed: 1, refused: 2 } as const;

/** The level-ordered records of one batch (kept by a LayoutWorkspace across batches: every array is grow-only). */
export class LevelOrder {
  /**
   * NODE_WORDS words per view node, then (from tempBase) two words per view node: the dependency record of an affine
   * node's temporaries.
   */
  R = new Int32Array(0);
  tempBase = 0;
  /** Arguments of view nodes, as view ids (a record's N_ARG_START, N_ARG_COUNT). */
  args = new Int32Array(0);
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
  /** The graph of the last layout (describe, and the rare attributes records leave out: dropout's). */
  graph: ComputationGraph | undefined;

  /** The graph node's description, under its graph id (what a user can find). */
  describe(id: number): string {
    return this.graph!.describe(this.order[id]!);
  }

  /** Before markLive: a batch of n graph nodes whose loss has depth `lossDepth`; the counts at zero. */
  begin(g: ComputationGraph, n: number, lossDepth: number): void {
    this.graph = g;
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
   * the records, and the product counts of `matrices` plan matrices at zero.
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
    this.tempBase = NODE_WORDS * live;
    if (this.args.length < argWords[buckets]!) this.args = new Int32Array(2 * argWords[buckets]!);
    const products = this.levels * matrices;
    if (this.forwardProducts.length < products) {
      this.forwardProducts = new Int32Array(2 * products);
      this.backwardProducts = new Int32Array(2 * products);
    }
    this.forwardProducts.fill(0, 0, products);
    this.backwardProducts.fill(0, 0, products);
    if (this.R.length < (NODE_WORDS + 2) * live) {
      this.R = new Int32Array(2 * (NODE_WORDS + 2) * live);
      this.order = new Int32Array(2 * live);
    }
  }
}
