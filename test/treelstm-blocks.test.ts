/**
 * The Tree-LSTM's fast build (src/models/treelstm/blocks.ts over the checked tree orders of
 * src/models/shared/tree-order.ts, in order of height over the batch) must build exactly what the node builders
 * build: node for node on SST batches, after trees change in any way, and with the builders' messages for what they
 * refuse. The reference is kept here: a walk of the tree objects through the node builders, in the same order.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { parseTrees, readTrees } from "../src/data/sst.js";
import { syntheticTrees } from "../src/data/synthetic.js";
import { type TreeNode, treeSize } from "../src/data/tree.js";
import { Vocabulary } from "../src/data/vocab.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { Op } from "../src/graph/opcodes.js";
import { BY_HEIGHT_MIN_TREES, TreeLstmModel } from "../src/models/treelstm/model.js";
import { TreeLstmTaskModel } from "../src/models/treelstm/task.js";
import { cellNode0, cellNode2 } from "../src/ops/cells.js";
import { affineNode } from "../src/ops/linear.js";
import { pickNegLogSoftmaxNode } from "../src/ops/loss.js";
import { concat2Node, concat3Node, lookupNode, pickRangeNode, sumNode } from "../src/ops/structure.js";

const SST_TRAIN = fileURLToPath(new URL("../../shared/data/sst/train.txt", import.meta.url));
const trees: TreeNode[] = existsSync(SST_TRAIN) ? readTrees(SST_TRAIN, { maxTrees: 300 }) : syntheticTrees(300, 5);
// the last trees' words are left out of the vocabulary: some leaves read the unknown word's row
const vocab = Vocabulary.fromTrees(trees.slice(0, 200));
const sizes = { vocabSize: vocab.size, embed: 6, hidden: 4 };

/** A tree node of a batch, in the post-order the models build: its node, height and its children's entries. */
interface Entry {
  readonly node: TreeNode;
  /** 0 at a leaf; an internal node's is one more than its taller child's. */
  readonly height: number;
  /** Entries of the children (-1 at a leaf: a node with a word, whatever its children). */
  readonly left: number;
  readonly right: number;
}

/** The batch's tree nodes, tree by tree in post-order (walking the tree objects), and each tree's entries. */
function postOrder(batch: readonly TreeNode[]): { entries: Entry[]; perTree: number[][] } {
  const entries: Entry[] = [];
  const perTree: number[][] = [];
  for (const tree of batch) {
    const order: number[] = [];
    const work: TreeNode[] = [tree];
    const expanded: boolean[] = [false];
    const done: number[] = [];
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
      const [left, right] = n.word === null ? [done[done.length - 2]!, done[done.length - 1]!] : [-1, -1];
      if (n.word === null) done.length -= 2;
      const height = n.word === null ? 1 + Math.max(entries[left]!.height, entries[right]!.height) : 0;
      entries.push({ node: n, height, left, right });
      done.push(entries.length - 1);
      order.push(entries.length - 1);
    }
    perTree.push(order);
  }
  return { entries, perTree };
}

/**
 * The fused Tree-LSTM's batch loss through the node builders, walking the tree objects as the model builds it: tree
 * by tree in post-order, or from BY_HEIGHT_MIN_TREES trees on every tree node of the batch in order of its height,
 * ties in batch order and then post-order; each tree's losses summed in post-order, then the trees' sums.
 */
function referenceBatchLoss(m: TreeLstmModel, cg: ComputationGraph, batch: readonly TreeNode[], v: Vocabulary): number {
  const H = m.hidden;
  const { entries, perTree } = postOrder(batch);
  const hs: number[] = [];
  const cs: number[] = [];
  const losses: number[] = [];
  const build = (i: number) => {
    const { node: n, left, right } = entries[i]!;
    let hc: number;
    if (n.word !== null) {
      const x = lookupNode(cg, m.E, v.index(n.word));
      hc = cellNode0(cg, affineNode(cg, cg.parameterNode(m.b_iou), cg.parameterNode(m.W_iou), x));
    } else {
      const [h1, h2, c1, c2] = [hs[left]!, hs[right]!, cs[left]!, cs[right]!];
      const h12 = concat2Node(cg, h1, h2);
      const iou = affineNode(cg, cg.parameterNode(m.b_iou), cg.parameterNode(m.U_iou), h12);
      const f1 = affineNode(cg, cg.parameterNode(m.b_f), cg.parameterNode(m.U_f1), h1);
      const f2 = affineNode(cg, cg.parameterNode(m.b_f), cg.parameterNode(m.U_f2), h2);
      hc = cellNode2(cg, concat3Node(cg, iou, f1, f2), c1, c2);
    }
    hs[i] = pickRangeNode(cg, hc, 0, H);
    cs[i] = pickRangeNode(cg, hc, H, 2 * H);
    const scores = affineNode(cg, cg.parameterNode(m.b_out), cg.parameterNode(m.W_out), hs[i]!);
    losses[i] = pickNegLogSoftmaxNode(cg, scores, n.label);
  };
  const sum = (tree: number[]) =>
    sumNode(
      cg,
      tree.map((i) => losses[i]!),
      tree.length,
    );
  let treeLosses: number[];
  if (batch.length >= BY_HEIGHT_MIN_TREES) {
    const order = entries.map((_, i) => i).sort((a, b) => entries[a]!.height - entries[b]!.height || a - b);
    for (const i of order) build(i);
    treeLosses = perTree.map(sum);
  } else {
    // tree by tree, each tree's sum right after its nodes
    treeLosses = perTree.map((tree) => {
      for (const i of tree) build(i);
      return sum(tree);
    });
  }
  return treeLosses.length === 1 ? treeLosses[0]! : sumNode(cg, treeLosses, treeLosses.length);
}

const ARRAYS = ["op", "rows", "cols", "argStart", "argCount", "aux", "aux2", "auxF", "depth", "valueOffset"] as const;

function assertSameGraph(got: ComputationGraph, want: ComputationGraph, what: string): void {
  assert.equal(got.size, want.size, `${what}: nodes`);
  assert.equal(got.argsSize, want.argsSize, `${what}: argument entries`);
  assert.equal(got.valueSize, want.valueSize, `${what}: value size`);
  for (const k of ARRAYS) {
    const a = got[k];
    const b = want[k];
    for (let i = 0; i < got.size; i++) {
      if (a[i] !== b[i])
        assert.fail(`${what}: ${k}[${i}] is ${a[i]}; the builders wrote ${b[i]} (${want.describe(i)})`);
    }
  }
  assert.deepEqual(got.args.subarray(0, got.argsSize), want.args.subarray(0, want.argsSize), `${what}: arguments`);
  assert.deepEqual(Object.keys(got.parameters), Object.keys(want.parameters), `${what}: parameters in use`);
}

/** A graph that counts the node builders' calls into it (the blocks write the arrays without them). */
function countingGraph(): { cg: ComputationGraph; calls: () => number } {
  const cg = new ComputationGraph();
  let calls = 0;
  for (const m of ["addNode", "addNode0", "addNode1", "addNode2", "addNode3"] as const) {
    const f = cg[m].bind(cg) as (...a: unknown[]) => number;
    (cg as unknown as Record<string, unknown>)[m] = (...a: unknown[]) => {
      calls++;
      return f(...a);
    };
  }
  return { cg, calls: () => calls };
}

describe("Tree-LSTM blocks", () => {
  test("build the builders' nodes on SST batches of 1 to 64 trees, one graph renewed between them", () => {
    const fast = new TreeLstmModel(sizes);
    const { cg, calls } = countingGraph();
    const ref = new ComputationGraph();
    for (const batch of [1, 2, 8, BY_HEIGHT_MIN_TREES, 64]) {
      for (let pass = 0; pass < 2; pass++) {
        for (let start = 0; start + batch <= trees.length; start += 97) {
          const b = trees.slice(start, start + batch);
          cg.renew();
          ref.renew();
          const before = calls();
          const loss = fast.buildBatchLoss(cg, b, vocab);
          const builderCalls = calls() - before;
          assert.equal(loss.id, referenceBatchLoss(fast, ref, b, vocab));
          assertSameGraph(cg, ref, `batch ${batch} from ${start}, pass ${pass}`);
          // the first leaf and the first internal node add the parameter nodes through the builders; the losses'
          // sums are builders' too; every other node is a block's
          assert.ok(builderCalls <= 25 + batch + 1, `batch ${batch}: ${builderCalls} builder calls`);
        }
      }
    }
  });

  test("a tree changed after a build is built as the builders build it now", () => {
    const [tree] = parseTrees("(3 (2 (2 The) (2 Rock)) (4 (3 (2 is) (4 destined)) (2 .)))");
    const other = parseTrees("(1 (0 not) (1 good))")[0]!;
    const v = Vocabulary.fromTrees([tree!, other]);
    const s = { vocabSize: v.size, embed: 3, hidden: 2 };
    const fast = new TreeLstmModel(s);
    const cg = new ComputationGraph();
    // two trees (built tree by tree) and BY_HEIGHT_MIN_TREES of them (by height), the changed one among them
    const large = [other, tree!, ...Array.from({ length: BY_HEIGHT_MIN_TREES - 3 }, () => other), tree!];
    const check = (what: string, wellFormed = true) => {
      for (const batch of [[other, tree!], large]) {
        cg.renew();
        fast.buildBatchLoss(cg, batch, v);
        const ref = new ComputationGraph();
        referenceBatchLoss(fast, ref, batch, v);
        assertSameGraph(cg, ref, `${what}, ${batch.length} trees`);
      }
      // a loss unit per loss node built, while every node with a word has no children
      if (!wellFormed) return;
      cg.renew();
      fast.buildBatchLoss(cg, [tree!], v);
      let losses = 0;
      for (let i = 0; i < cg.size; i++) if (cg.op[i] === Op.PickNegLogSoftmax) losses++;
      assert.equal(new TreeLstmTaskModel(fast, v).lossUnits(tree!), losses, `${what}: loss units`);
      assert.equal(losses, treeSize(tree!), `${what}: tree nodes`);
    };
    check("first build");
    check("built again from the record");
    const t = tree!;
    t.children[1]!.label = 0;
    check("a label changed");
    t.children[1]!.children[1]!.word = "good";
    check("a word changed");
    t.children[1]!.children[0]!.word = "is";
    check("a word given to an internal node (a leaf now; its children are not built)", false);
    t.children[1]!.children[0]!.word = null;
    check("and taken back");
    t.children.reverse();
    check("children swapped");
    t.children[0] = { label: 2, word: "not", children: [] };
    check("a subtree replaced by a leaf");
    t.children[0] = { label: 1, word: null, children: [other.children[1]!, other.children[0]!] };
    check("a leaf replaced by a subtree of nodes of another tree");
  });

  test("a label or row the builders refuse fails with their message after a build from the record", () => {
    const [tree] = parseTrees("(3 (2 (2 a) (2 b)) (4 c))");
    const v = Vocabulary.fromTrees([tree!]);
    const fast = new TreeLstmModel({ vocabSize: v.size, embed: 3, hidden: 2 });
    const cg = new ComputationGraph();
    cg.renew();
    fast.buildBatchLoss(cg, [tree!, tree!], v);
    const message = (model: TreeLstmModel, vocabulary: Vocabulary, copies = 2) => {
      const g = new ComputationGraph();
      try {
        model.buildBatchLoss(
          g,
          Array.from({ length: copies }, () => tree!),
          vocabulary,
        );
      } catch (e) {
        return (e as Error).message;
      }
      return "no error";
    };
    const reference = () => {
      try {
        referenceBatchLoss(fast, new ComputationGraph(), [tree!, tree!], v);
      } catch (e) {
        return (e as Error).message;
      }
      return "no error";
    };
    for (const bad of [7, 2.5, "3", -1, Number.NaN] as unknown[]) {
      tree!.children[0]!.children[1]!.label = bad as number;
      const want = reference();
      assert.match(want, /^pickNegLogSoftmax: /);
      assert.equal(message(fast, v), want, `label ${String(bad)}`);
      // a batch large enough to be written by height is refused before any node, then built tree by tree
      assert.equal(message(fast, v, BY_HEIGHT_MIN_TREES), want, `label ${String(bad)}, ${BY_HEIGHT_MIN_TREES} trees`);
    }
    tree!.children[0]!.children[1]!.label = 2;
    assert.equal(message(fast, v), "no error");
    // a vocabulary larger than the lookup table: the builders' row check
    const big = Vocabulary.fromWords(["x", "y", "z", "w", "a", "b", "c"]);
    const small = new TreeLstmModel({ vocabSize: 3, embed: 3, hidden: 2 });
    assert.match(message(small, big), /^lookup: row \d+ is out of range for 'E'/);
  });
});
