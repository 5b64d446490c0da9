/**
 * The nodes of each tree in the order the tree models build them, with each leaf's vocabulary index, remembered from
 * the tree's last build. Walking a tree chases pointers (node → children array → child, each a likely cache miss in
 * a data set of 300k nodes) one dependent load after another; checking a remembered order reads the same objects
 * from a flat list, so the loads of many nodes overlap, and the build then runs over flat arrays without a stack of
 * objects. Trees are plain mutable objects, so every use checks the record against the tree first (each node's
 * word, each internal node's two children, by identity) and records the tree again when anything changed: a
 * build sees exactly what walking the tree would. A record is two arrays (few cache lines per tree: the check
 * reads it for every tree of every batch).
 */
import type { TreeNode } from "../../data/tree.js";
import type { Vocabulary } from "../../data/vocab.js";

/** One tree's nodes in post-order (left subtree, right subtree, node; the root last) and its leaves' indices. */
export class TreeOrder {
  /** Node k at [2k] and its `word` when recorded at [2k + 1] (null at internal nodes). */
  readonly refs: (TreeNode | string | null)[] = [];
  /**
   * At [2k], the vocabulary index of node k's word (`vocab.index`; -1 at internal nodes); at [2k + 1], the
   * position of its left child (its right child is the node just before it; -1 at leaves).
   */
  ints = new Int32Array(0);
  /** Number of nodes. */
  size = 0;

  constructor(readonly vocab: Vocabulary) {}

  /** Node k. */
  node(k: number): TreeNode {
    return this.refs[2 * k] as TreeNode;
  }

  /**
   * Whether walking `tree` would visit exactly the recorded nodes, with the recorded words; reads each node's label
   * into `labels` (false: some label is not a number, or the tree differs).
   */
  matches(tree: TreeNode, labels: Float64Array): boolean {
    const n = this.size;
    const refs = this.refs;
    const ints = this.ints;
    if (n === 0 || refs[2 * n - 2] !== tree) return false;
    for (let k = 0; k < n; k++) {
      const node = refs[2 * k] as TreeNode;
      const w = node.word;
      if (w !== refs[2 * k + 1]) return false;
      if (w === null) {
        const ch = node.children;
        if (ch[0] !== refs[2 * ints[2 * k + 1]!] || ch[1] !== refs[2 * k - 2]) return false;
      }
      const label = node.label;
      if (typeof label !== "number") return false;
      labels[k] = label;
    }
    return true;
  }

  /**
   * Records `tree`: the walk the models did before (an explicit stack, as trees can be deep; a node without a word
   * is built from its children[0] and children[1]).
   */
  record(tree: TreeNode): void {
    const refs = this.refs;
    refs.length = 0;
    const lefts: number[] = [];
    const work: TreeNode[] = [tree];
    const expanded: boolean[] = [false];
    // positions of built subtrees' roots, waiting for their parent (as the models' value stacks)
    const done: number[] = [];
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
      done.push(lefts.length - 1);
      refs.push(node, w);
    }
    const n = lefts.length;
    if (this.ints.length < 2 * n) this.ints = new Int32Array(2 * n);
    for (let k = 0; k < n; k++) {
      const w = refs[2 * k + 1] as string | null;
      this.ints[2 * k] = w === null ? -1 : this.vocab.index(w);
      this.ints[2 * k + 1] = lefts[k]!;
    }
    this.size = n;
  }
}

/** The `TreeOrder` of every tree a model has built, kept as long as the tree lives. */
export class TreeOrderCache {
  private readonly byTree = new WeakMap<TreeNode, TreeOrder>();
  /**
   * The labels of the tree `of` returned last, by position, when `numericLabels` (else some label is not a
   * number, and the caller reads them from the nodes).
   */
  labels = new Float64Array(64);
  numericLabels = false;

  /** `tree`'s order for `vocab`, checked against the tree and recorded again if it changed; reads its labels. */
  of(tree: TreeNode, vocab: Vocabulary): TreeOrder {
    let o = this.byTree.get(tree);
    if (o === undefined || o.vocab !== vocab) {
      o = new TreeOrder(vocab);
      this.byTree.set(tree, o);
      o.record(tree);
    } else if (o.size > this.labels.length || !o.matches(tree, this.labels)) {
      o.record(tree);
    } else {
      this.numericLabels = true;
      return o;
    }
    if (this.labels.length < o.size) this.labels = new Float64Array(2 * o.size);
    this.numericLabels = o.matches(tree, this.labels);
    return o;
  }
}
