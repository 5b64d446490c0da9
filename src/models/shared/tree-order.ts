/**
 * The nodes of each tree in the order the tree models build them, with each leaf's vocabulary index, remembered from
 * the tree's last build. Walking a tree chases pointers (node → children array → child, each a likely cache miss in
 * a data set of 300k nodes) one dependent load after another; checking a remembered order reads the same objects
 * from a flat list, so the loads of many nodes overlap, and the build then runs over flat arrays without a stack of
 * objects. Trees are plain mutable objects, so every use checks the record against the tree first (each node's
 * word, each internal node's two children, by identity) and records the tree again when anything changed: a
 * build sees exactly what walking the tree would.
 */
import type { TreeNode } from "../../data/tree.js";
import type { Vocabulary } from "../../data/vocab.js";

/** One tree's nodes in post-order (left subtree, right subtree, node; the root last) and its leaves' indices. */
export class TreeOrder {
  /** The nodes, post-order. */
  readonly nodes: TreeNode[] = [];
  /** Each node's `word` when recorded (null at internal nodes). */
  private readonly words: (string | null)[] = [];
  /** The vocabulary index of each leaf's word (`vocab.index`); -1 at internal nodes. */
  index = new Int32Array(0);
  /** The position of each internal node's left child (its right child is the node just before it); -1 at leaves. */
  left = new Int32Array(0);
  /** Each node's `label`, read at the last check (a build reads them from here, not from the objects again). */
  labels = new Float64Array(0);
  /** Whether every label read was a number (`labels` holds the others converted: NaN, 0, 3 for "3"). */
  numericLabels = true;
  /** Number of nodes. */
  size = 0;

  constructor(readonly vocab: Vocabulary) {}

  /** Whether walking `tree` would visit exactly the recorded nodes, with the recorded words; reads the labels. */
  matches(tree: TreeNode): boolean {
    const n = this.size;
    const nodes = this.nodes;
    const words = this.words;
    const left = this.left;
    const labels = this.labels;
    if (n === 0 || nodes[n - 1] !== tree) return false;
    let numeric = true;
    for (let k = 0; k < n; k++) {
      const node = nodes[k]!;
      const label = node.label;
      labels[k] = label;
      if (typeof label !== "number") numeric = false;
      const w = node.word;
      if (w !== words[k]) return false;
      if (w === null) {
        const ch = node.children;
        if (ch[0] !== nodes[left[k]!] || ch[1] !== nodes[k - 1]) return false;
      }
    }
    this.numericLabels = numeric;
    return true;
  }

  /**
   * Records `tree`: the walk the models did before (an explicit stack, as trees can be deep; a node without a word
   * is built from its children[0] and children[1]).
   */
  record(tree: TreeNode): void {
    const nodes = this.nodes;
    const words = this.words;
    nodes.length = 0;
    words.length = 0;
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
      done.push(nodes.length);
      nodes.push(node);
      words.push(w);
    }
    const n = nodes.length;
    if (this.index.length < n) {
      this.index = new Int32Array(n);
      this.left = new Int32Array(n);
      this.labels = new Float64Array(n);
    }
    this.numericLabels = true;
    for (let k = 0; k < n; k++) {
      const w = words[k]!;
      this.index[k] = w === null ? -1 : this.vocab.index(w);
      this.left[k] = lefts[k]!;
      const label = nodes[k]!.label;
      this.labels[k] = label;
      if (typeof label !== "number") this.numericLabels = false;
    }
    this.size = n;
  }
}

/** The `TreeOrder` of every tree a model has built, kept as long as the tree lives. */
export class TreeOrderCache {
  private readonly byTree = new WeakMap<TreeNode, TreeOrder>();

  /** `tree`'s order for `vocab`, checked against the tree and recorded again if it changed. */
  of(tree: TreeNode, vocab: Vocabulary): TreeOrder {
    let o = this.byTree.get(tree);
    if (o === undefined || o.vocab !== vocab) {
      o = new TreeOrder(vocab);
      this.byTree.set(tree, o);
      o.record(tree);
    } else if (!o.matches(tree)) {
      o.record(tree);
    }
    return o;
  }
}
