/**
 * The nodes of each tree in the order the tree models build them, with each leaf's vocabulary index, remembered from
 * the tree's last build. Walking a tree chases pointers (node → children array → child, each a likely cache miss in
 * a data set of 300k nodes) one dependent load after another; checking a remembered order reads the same objects
 * from a flat list, so the loads of many nodes overlap, and the build then runs over flat arrays without a stack of
 * objects. Trees are plain mutable objects, so every use checks the record against the tree first (each node's
 * word, each internal node's two children, by identity) and records the tree again when anything changed: a
 * build sees exactly what walking the tree would. A record is one array (few cache lines per tree, and no typed
 * array to allocate off the heap: the check reads it for every tree of every batch, and the first epoch makes one
 * per tree).
 */
import type { TreeNode } from "../../data/tree.js";
import type { Vocabulary } from "../../data/vocab.js";

/** One tree's nodes in post-order (left subtree, right subtree, node; the root last) and its leaves' indices. */
export class TreeOrder {
  /**
   * Four entries per node k, from 4k: the node, its `word` when recorded (null at internal nodes), the vocabulary
   * index of that word (`vocab.index`; -1 at internal nodes), and the position of its left child (its right child
   * is the node just before it; -1 at leaves).
   */
  readonly rec: (TreeNode | string | null | number)[] = [];
  /** Number of nodes. */
  size = 0;
  /** The largest vocabulary row of its leaves (-1 without leaves). */
  maxRow = -1;
  /** Whether every label read at the last check was an integer in [0, limit) (see `TreeOrderCache.of`). */
  labelsBelow = false;

  constructor(readonly vocab: Vocabulary) {}

  /** Node k. */
  node(k: number): TreeNode {
    return this.rec[4 * k] as TreeNode;
  }

  /** The vocabulary index of node k's word; -1 at an internal node. */
  row(k: number): number {
    return this.rec[4 * k + 2] as number;
  }

  /** The position of node k's left child; -1 at a leaf. */
  left(k: number): number {
    return this.rec[4 * k + 3] as number;
  }

  /**
   * Whether walking `tree` would visit exactly the recorded nodes, with the recorded words; reads each node's label
   * into `labels` (false: some label is not a number, or the tree differs), and `labelsBelow` tells whether every
   * label is an integer in [0, limit).
   */
  matches(tree: TreeNode, labels: Float64Array, limit: number): boolean {
    const n = this.size;
    const rec = this.rec;
    if (n === 0 || rec[4 * n - 4] !== tree) return false;
    let below = true;
    for (let k = 0; k < n; k++) {
      const node = rec[4 * k] as TreeNode;
      const w = node.word;
      if (w !== rec[4 * k + 1]) return false;
      if (w === null) {
        const ch = node.children;
        if (ch[0] !== rec[4 * (rec[4 * k + 3] as number)] || ch[1] !== rec[4 * k - 4]) return false;
      }
      const label = node.label;
      if (typeof label !== "number") return false;
      labels[k] = label;
      if (!(label >= 0 && label < limit && Number.isInteger(label))) below = false;
    }
    this.labelsBelow = below;
    return true;
  }

  /**
   * Records `tree` — the walk the models did before (an explicit stack, as trees can be deep; a node without a word
   * is built from its children[0] and children[1]) — and reads its labels into `labels` (see `matches`; false: a
   * label is not a number); `labels` gives an array with room for them.
   */
  record(tree: TreeNode, labels: () => Float64Array, limit: number): boolean {
    const rec = this.rec;
    rec.length = 0;
    this.maxRow = -1;
    const { work, expanded, done, lefts } = scratch;
    work.length = 0;
    expanded.length = 0;
    done.length = 0;
    lefts.length = 0;
    work.push(tree);
    expanded.push(false);
    // done: positions of built subtrees' roots, waiting for their parent (as the models' value stacks)
    while (work.length > 0) {
      const node = work[work.length - 1]!;
      const w = node.word;
      if (w === null && !expanded[expanded.length - 1]) {
        expanded[expanded.length - 1] = true;
        work.push(node.children[1]!, node.children[0]!);
        expanded.push(false, false);
        continue;
      }
      work.pop();
      expanded.pop();
      if (w === null) {
        done.pop(); // the right child: the node just before this one
        lefts.push(done.pop()!);
      } else {
        lefts.push(-1);
      }
      const row = w === null ? -1 : this.vocab.index(w);
      if (row > this.maxRow) this.maxRow = row;
      rec.push(node, w, row, lefts[lefts.length - 1]!);
      done.push(lefts.length - 1);
    }
    const n = lefts.length;
    this.size = n;
    const out = labels();
    let numeric = true;
    let below = true;
    for (let k = 0; k < n; k++) {
      const label = (rec[4 * k] as TreeNode).label;
      if (typeof label !== "number") numeric = false;
      out[k] = label;
      if (!(label >= 0 && label < limit && Number.isInteger(label))) below = false;
    }
    this.labelsBelow = below;
    work.length = 0; // no tree kept alive from here
    return numeric;
  }
}

/** The walk's stacks, shared by every record (they are emptied before and after each). */
const scratch = { work: [] as TreeNode[], expanded: [] as boolean[], done: [] as number[], lefts: [] as number[] };

/** The `TreeOrder` of every tree a model has built, kept as long as the tree lives. */
export class TreeOrderCache {
  private readonly byTree = new WeakMap<TreeNode, TreeOrder>();
  /**
   * The labels of the tree `of` returned last, by position, when `numericLabels` (else some label is not a
   * number, and the caller reads them from the nodes).
   */
  labels = new Float64Array(64);
  numericLabels = false;

  /**
   * `tree`'s order for `vocab`, checked against the tree and recorded again if it changed; reads its labels (and
   * whether each is an integer below `labelLimit`: `TreeOrder.labelsBelow`).
   */
  of(tree: TreeNode, vocab: Vocabulary, labelLimit = 0): TreeOrder {
    let o = this.byTree.get(tree);
    if (
      o !== undefined &&
      o.vocab === vocab &&
      o.size <= this.labels.length &&
      o.matches(tree, this.labels, labelLimit)
    ) {
      this.numericLabels = true;
      return o;
    }
    if (o === undefined || o.vocab !== vocab) {
      o = new TreeOrder(vocab);
      this.byTree.set(tree, o);
    }
    this.numericLabels = o.record(tree, () => this.room(o.size), labelLimit);
    return o;
  }

  /** `labels`, with room for `n` labels. */
  private room(n: number): Float64Array {
    if (this.labels.length < n) this.labels = new Float64Array(2 * n);
    return this.labels;
  }
}
