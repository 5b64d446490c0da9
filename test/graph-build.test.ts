import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { describe, test } from "node:test";
import { parseTrees } from "../src/data/sst.js";
import type { TreeNode } from "../src/data/tree.js";
import { Vocabulary } from "../src/data/vocab.js";
import { ComputationGraph, ShapeError } from "../src/graph/graph.js";
import { Op } from "../src/graph/opcodes.js";
import { ParameterCollection } from "../src/model/parameters.js";
import { TreeLstmModel } from "../src/models/treelstm/model.js";
import { cellNode1 } from "../src/ops/cells.js";
import {
  affine,
  concat,
  input,
  lstmCell,
  lstmStep,
  parameter,
  pickRange,
  sum,
  tanh,
  treeLstmLeaf,
  treeLstmNode,
} from "../src/ops/index.js";
import { affine3, affine5Node } from "../src/ops/linear.js";
import { concat2, concat3 } from "../src/ops/structure.js";

/*
 * Graph building is tuned for speed, and every engine depends on exactly what it builds: these tests pin
 * the Tree-LSTM graphs down field by field (hashes recorded with the builders before the tuning), and check that the
 * fast paths (fixed-arity builders, the node builders the model uses, its cache of word indices) build the same
 * nodes and fail with the same messages as the general builders did.
 */

const TREES = [
  "(3 (2 (2 The) (2 Rock)) (4 (3 (2 is) (4 destined)) (2 .)))",
  "(1 (2 not) (1 (0 awful) (2 .)))",
  "(2 word)",
  "(4 (4 (4 (4 (3 a) (2 b)) (1 c)) (0 d)) (2 e))",
  "(0 (1 x) (2 (3 y) (4 (0 z) (1 (2 The) (3 unseen)))))",
  "(3 (2 (2 Rock) (2 Rock)) (2 (2 .) (2 not)))",
].join("\n");

/** sha256 over every per-node field of nodes [0, size), the arguments and the graph-wide counts. */
function hashGraph(cg: ComputationGraph, h = createHash("sha256")) {
  const n = cg.size;
  h.update(`${n} ${cg.argsSize} ${cg.valueSize} ${cg.inputSize}|`);
  for (const a of [cg.rows, cg.cols, cg.argStart, cg.argCount, cg.aux, cg.aux2, cg.depth, cg.valueOffset]) {
    h.update(new Uint8Array(a.buffer, a.byteOffset, 4 * n));
  }
  h.update(new Uint8Array(cg.auxF.buffer, cg.auxF.byteOffset, 4 * n));
  h.update(cg.op.subarray(0, n));
  h.update(new Uint8Array(cg.args.buffer, cg.args.byteOffset, 4 * cg.argsSize));
  return h;
}

/**
 * One hash per (cell, dropout) over: the batch loss of all trees, of each tree alone, and of each tree built
 * without losses; training and evaluation graphs; one graph renewed between builds, as in training.
 */
function structureHashes(trees: TreeNode[], vocab: Vocabulary): string[] {
  const out: string[] = [];
  for (const [cell, dropout] of [
    ["fused", 0],
    ["ops", 0],
    ["fused", 0.25],
    ["ops", 0.25],
  ] as const) {
    const model = new TreeLstmModel({ vocabSize: vocab.size, embed: 3, hidden: 2, cell, dropout, seed: 3 });
    const h = createHash("sha256");
    const cg = new ComputationGraph();
    for (const training of [true, false]) {
      cg.renew();
      cg.training = training;
      cg.dropoutKey = 17;
      const loss = model.buildBatchLoss(cg, trees, vocab);
      hashGraph(cg, h).update(`loss ${loss.id}|`);
      for (const t of trees) {
        cg.renew();
        const one = model.buildBatchLoss(cg, [t], vocab);
        hashGraph(cg, h).update(`one ${one.id}|`);
        cg.renew();
        const out = model.buildTree(cg, t, vocab, false);
        hashGraph(cg, h).update(`tree ${out.rootScores.id} ${out.nodes} ${out.loss === null}|`);
      }
    }
    out.push(`${cell} dropout ${dropout}: ${h.digest("hex")}`);
  }
  return out;
}

describe("Tree-LSTM graphs are built exactly as before the build tuning", () => {
  const trees = parseTrees(TREES);
  // "unseen" is left out of the vocabulary: it reads the unknown word's row
  const vocab = Vocabulary.fromTrees(trees.slice(0, 4));

  test("every node field of fused and plain-ops graphs, with and without dropout, matches the recorded hashes", () => {
    assert.deepEqual(structureHashes(trees, vocab), [
      "fused dropout 0: 9a777df25156b488754dbd670652b8acdcc11be209ffc635ed3f1e7dadd058e3",
      "ops dropout 0: 5265cad36b15e2bd2e613bbdd8bcd9650ab1f3addf9e6918fe32b6ee977ec776",
      "fused dropout 0.25: 75e56b6ef46e9f9d94634e6016655cb737cfb66e87f8a6daee17fe3a06af2c1d",
      "ops dropout 0.25: 27c43cfb6de0c9e786b1404cc81db012bf19c9f2b08fee879f7cc109d6d09498",
    ]);
  });

  test("a fused leaf and a fused internal node are the nodes the engines expect, in order", () => {
    const [tree] = parseTrees("(3 (1 good) (0 bad))");
    const v = Vocabulary.fromTrees([tree!]);
    const model = new TreeLstmModel({ vocabSize: v.size, embed: 4, hidden: 2, seed: 1 });
    const cg = new ComputationGraph();
    model.buildBatchLoss(cg, [tree!], v);
    const lines: string[] = [];
    for (let i = 0; i < cg.size; i++)
      lines.push(`${cg.describe(i)} aux ${cg.aux[i]} ${cg.aux2[i]} depth ${cg.depth[i]}`);
    assert.deepEqual(lines, [
      "#0 lookup() [4] aux 0 1 depth 0",
      "#1 parameter() [6] aux 5 0 depth 0",
      "#2 parameter() [6,4] aux 1 0 depth 0",
      "#3 affine(#1, #2, #0) [6] aux 0 0 depth 1",
      "#4 lstmCell(#3) [4] aux 0 0 depth 2",
      "#5 pickRange(#4) [2] aux 0 2 depth 3",
      "#6 pickRange(#4) [2] aux 2 4 depth 3",
      "#7 parameter() [5] aux 8 0 depth 0",
      "#8 parameter() [5,2] aux 7 0 depth 0",
      "#9 affine(#7, #8, #5) [5] aux 0 0 depth 4",
      "#10 pickNegLogSoftmax(#9) [1] aux 1 0 depth 5",
      "#11 lookup() [4] aux 0 2 depth 0",
      "#12 affine(#1, #2, #11) [6] aux 0 0 depth 1",
      "#13 lstmCell(#12) [4] aux 0 0 depth 2",
      "#14 pickRange(#13) [2] aux 0 2 depth 3",
      "#15 pickRange(#13) [2] aux 2 4 depth 3",
      "#16 affine(#7, #8, #14) [5] aux 0 0 depth 4",
      "#17 pickNegLogSoftmax(#16) [1] aux 0 0 depth 5",
      "#18 concat(#5, #14) [4] aux 0 0 depth 4",
      "#19 parameter() [6,4] aux 2 0 depth 0",
      "#20 affine(#1, #19, #18) [6] aux 0 0 depth 5",
      "#21 parameter() [2] aux 6 0 depth 0",
      "#22 parameter() [2,2] aux 3 0 depth 0",
      "#23 affine(#21, #22, #5) [2] aux 0 0 depth 4",
      "#24 parameter() [2,2] aux 4 0 depth 0",
      "#25 affine(#21, #24, #14) [2] aux 0 0 depth 4",
      "#26 concat(#20, #23, #25) [10] aux 0 0 depth 6",
      "#27 lstmCell(#26, #6, #15) [4] aux 2 0 depth 7",
      "#28 pickRange(#27) [2] aux 0 2 depth 8",
      "#29 pickRange(#27) [2] aux 2 4 depth 8",
      "#30 affine(#7, #8, #28) [5] aux 0 0 depth 9",
      "#31 pickNegLogSoftmax(#30) [1] aux 3 0 depth 10",
      "#32 sum(#10, #17, #31) [1] aux 0 0 depth 11",
    ]);
  });

  test("bad input to the model fails with the builders' messages", () => {
    const v = Vocabulary.fromWords(["a", "b", "c", "d"]);
    for (const cell of ["fused", "ops"] as const) {
      const model = new TreeLstmModel({ vocabSize: 2, embed: 2, hidden: 2, labels: 3, cell });
      const cg = new ComputationGraph();
      const fails = (f: () => unknown, re: RegExp) =>
        assert.throws(f, (e: unknown) => e instanceof ShapeError && re.test(e.message));
      fails(() => model.buildBatchLoss(cg, parseTrees("(1 (1 a) (1 d))"), v), /^lookup: row 4 is out of range for 'E'/);
      fails(() => model.buildBatchLoss(cg, parseTrees("(1 (4 a) (1 a))"), v), /^pickNegLogSoftmax: label 4 is out of/);
      fails(() => model.buildBatchLoss(cg, [], v), /^sum: needs at least one argument$/);
      cg.renew();
      const out = model.buildTree(cg, parseTrees("(1 (4 a) (1 a))")[0]!, v, false);
      assert.equal(out.loss, null);
      assert.equal(out.rootScores.id, cg.size - 1);
      assert.equal(out.nodes, 3);
    }
  });

  test("a tree whose words changed after a build reads the vocabulary again", () => {
    const [tree] = parseTrees("(3 (1 good) (0 bad))");
    const v = Vocabulary.fromWords(["good", "bad", "ugly"]);
    const model = new TreeLstmModel({ vocabSize: v.size, embed: 4, hidden: 2, seed: 1 });
    const cg = new ComputationGraph();
    const rows = () => {
      cg.renew();
      model.buildBatchLoss(cg, [tree!], v);
      const out: number[] = [];
      for (let i = 0; i < cg.size; i++) if (cg.op[i] === Op.Lookup) out.push(cg.aux2[i]!);
      return out;
    };
    assert.deepEqual(rows(), [1, 2]);
    assert.deepEqual(rows(), [1, 2], "built again from the cache");
    tree!.children[1]!.word = "ugly";
    assert.deepEqual(rows(), [1, 3]);
    tree!.children[0]!.word = "nowhere";
    assert.deepEqual(rows(), [0, 3]);
    // another vocabulary gives its own indices
    const other = Vocabulary.fromWords(["ugly", "nowhere"]);
    cg.renew();
    model.buildBatchLoss(cg, [tree!], other);
    const lookups: number[] = [];
    for (let i = 0; i < cg.size; i++) if (cg.op[i] === Op.Lookup) lookups.push(cg.aux2[i]!);
    assert.deepEqual(lookups, [2, 1]);
  });
});

describe("fixed-arity builders build the general builders' nodes and fail with their messages", () => {
  const pc = new ParameterCollection();
  const W = pc.addParameters([3, 4], undefined, "W");
  const b = pc.addParameters(3, undefined, "b");
  const E = pc.addLookupParameters(5, 4, undefined, "E");

  /** Node fields of the last node of cg. */
  const last = (cg: ComputationGraph) => {
    const i = cg.size - 1;
    const args: number[] = [];
    for (let k = 0; k < cg.argCount[i]!; k++) args.push(cg.arg(i, k));
    return { op: cg.op[i], rows: cg.rows[i], cols: cg.cols[i], args, aux: cg.aux[i], depth: cg.depth[i] };
  };

  test("affine of 3 arguments, concat of 2 and 3, and cells with 0, 1, 2 children", () => {
    const g1 = new ComputationGraph();
    const g2 = new ComputationGraph();
    const build = (g: ComputationGraph, fast: boolean) => {
      const x = input(g, [1, 2, 3, 4]);
      const y = fast ? affine3(b, W, x) : affine([b, W, x]);
      const c2 = fast ? concat2(y, y) : concat([y, y]);
      const c3 = fast ? concat3(y, c2, y) : concat([y, c2, y]);
      const leaf = fast ? treeLstmLeaf(c3) : lstmCell(c3, []);
      const h = pickRange(leaf, 0, 6);
      const gates = concat([h, h, h, h, h]);
      return [y, c2, c3, leaf, fast ? treeLstmNode(gates, h, h) : lstmCell(gates, [h, h]), lstmStep(concat([h, h]), y)];
    };
    const a = build(g1, false).map((e) => e.id);
    const f = build(g2, true).map((e) => e.id);
    assert.deepEqual(f, a);
    assert.equal(g2.size, g1.size);
    for (let i = 0; i < g1.size; i++) assert.equal(g2.describe(i), g1.describe(i));
    assert.deepEqual(
      [...g2.depth.subarray(0, g2.size), ...g2.aux.subarray(0, g2.size)],
      [...g1.depth.subarray(0, g1.size), ...g1.aux.subarray(0, g1.size)],
    );
    const cg = new ComputationGraph();
    const x = input(cg, [1, 2, 3, 4]);
    affine3(b, W, x);
    assert.deepEqual(last(cg), { op: Op.Affine, rows: 3, cols: 1, args: [1, 2, 0], aux: 0, depth: 1 });
  });

  test("node builders of an LSTM step (affine5Node, cellNode1) build affine([b, W, x, U, h]) and lstmStep's nodes", () => {
    const U = pc.addParameters([3, 2], undefined, "U");
    const g1 = new ComputationGraph();
    const g2 = new ComputationGraph();
    const build = (g: ComputationGraph, fast: boolean) => {
      const x = input(g, [1, 2, 3, 4]);
      const h = input(g, [5, 6]);
      const gates = fast
        ? g.expression(affine5Node(g, g.parameterNode(b), g.parameterNode(W), x.id, g.parameterNode(U), h.id))
        : affine([b, W, x, U, h]);
      const wide = concat([gates, gates, gates, gates]);
      const c = input(g, [0, 0, 0]);
      return fast ? g.expression(cellNode1(g, wide.id, c.id)) : lstmStep(wide, c);
    };
    assert.equal(build(g2, true).id, build(g1, false).id);
    for (let i = 0; i < g1.size; i++) assert.equal(g2.describe(i), g1.describe(i));
    assert.deepEqual([...g2.aux.subarray(0, g2.size)], [...g1.aux.subarray(0, g1.size)]);
    const g = new ComputationGraph();
    const [x, h, p] = [input(g, [1, 2, 3, 4]).id, input(g, [1, 2]).id, (q: typeof W) => g.parameterNode(q)];
    const fails = (f: () => unknown, re: RegExp) =>
      assert.throws(f, (e: unknown) => e instanceof ShapeError && re.test(e.message));
    fails(() => affine5Node(g, p(b), p(W), x, p(U), x), /^affine: argument 'W2' has shape \[3,2\]; x2 has length 4$/);
    fails(() => affine5Node(g, p(b), p(W), h, p(U), h), /^affine: argument 'W1' has shape \[3,4\]; x1 has length 2$/);
    fails(() => affine5Node(g, h, p(W), x, p(U), h), /^affine: argument 'W1' has shape \[3,4\]; b has length 2$/);
    fails(() => cellNode1(g, x, x), /^lstmCell: argument 'c1' has length 4; gates imply H = 1$/);
    fails(() => cellNode1(g, h, h), /^lstmCell: argument 'gates' has length 2; with 1 children it must be 4·H$/);
  });

  test("affine5Node builds affine([b, W1, x1, W2, x2])'s node and fails with its messages", () => {
    const W2 = pc.addParameters([3, 2], undefined, "W2");
    const g1 = new ComputationGraph();
    const g2 = new ComputationGraph();
    const args = (g: ComputationGraph) => [input(g, [1, 2, 3, 4]), input(g, [5, 6])] as const;
    const [a4, a2] = args(g1);
    const [f4, f2] = args(g2);
    affine([b, W, a4, W2, a2]);
    const p = (q: typeof W) => g2.parameterNode(q);
    affine5Node(g2, p(b), p(W), f4.id, p(W2), f2.id);
    assert.equal(g2.size, g1.size);
    for (let i = 0; i < g1.size; i++) assert.equal(g2.describe(i), g1.describe(i));
    assert.deepEqual(last(g2), last(g1));
    // each wrong argument: the general builder's message
    const message = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        assert.ok(e instanceof ShapeError);
        return e.message;
      }
      return "no error";
    };
    for (const [bb, w1, x1, w2, x2] of [
      [b, W, a2, W2, a2],
      [b, W, a4, W2, a4],
      [b, W2, a4, W, a4],
      [a2, W, a4, W2, a2],
      [W, W, a4, W2, a2],
      [b, W, W2, W2, a2],
      [b, W, a4, W2, W],
    ] as const) {
      const general = message(() => affine([bb, w1, x1, w2, x2]));
      const id = (x: typeof b | typeof a4) => ("id" in x ? g2.expression(x === a4 ? f4.id : f2.id).id : p(x));
      assert.notEqual(general, "no error");
      assert.equal(
        message(() => affine5Node(g2, id(bb), id(w1), id(x1), id(w2), id(x2))),
        general,
      );
    }
  });

  const cg = new ComputationGraph();
  const x4 = input(cg, [1, 2, 3, 4]);
  const x3 = input(cg, [1, 2, 3]);
  const x2 = input(cg, [1, 2]);
  const other = input(new ComputationGraph(), [1, 2, 3]);
  // sg: a graph renewed since `stale` was built, and fresh expressions of its current generation
  const sg = new ComputationGraph();
  const stale = input(sg, [1, 2, 3]);
  sg.renew();
  const s4 = input(sg, [1, 2, 3, 4]);
  const s3 = input(sg, [1, 2, 3]);

  const cases: [string, () => unknown, RegExp][] = [
    ["affine W/x", () => affine3(b, W, x3), /^affine: argument 'W1' has shape \[3,4\]; x1 has length 3$/],
    ["affine b/W rows", () => affine3(x2, W, x4), /^affine: argument 'W1' has shape \[3,4\]; b has length 2$/],
    ["affine b a matrix", () => affine3(W, W, x4), /^affine: argument 'b' must be a vector; it has shape \[3,4\]$/],
    ["affine x a matrix", () => affine3(x3, W, W), /^affine: argument 'x1' must be a vector; it has shape \[3,4\]$/],
    [
      "affine b a table",
      () => affine3(E, W, x4),
      /^affine: argument 'b' is lookup table 'E'; read its rows with lookup\(cg, E, row\)$/,
    ],
    [
      "affine b a table (general)",
      () => affine([E, W, x4, W, x4]),
      /^affine: argument 'b' is lookup table 'E'; read its rows with lookup\(cg, E, row\)$/,
    ],
    ["affine no expression", () => affine3(b, W, b), /^affine: no argument is an expression/],
    ["affine other graph", () => affine3(x3, W, other), /^affine: argument 'x1' belongs to a different graph$/],
    ["affine stale", () => affine3(b, W, stale), /^affine: argument 'x1' is from a previous batch/],
    ["affine b stale", () => affine3(stale, W, s4), /^affine: argument 'b' is from a previous batch/],
    ["affine 5 args", () => affine([b, W, x4, W, x3]), /^affine: argument 'W2' has shape \[3,4\]; x2 has length 3$/],
    ["affine 5 args stale", () => affine([b, W, s4, W, stale]), /^affine: argument 'x2' is from a previous batch/],
    ["concat2 matrix", () => concat2(x3, W), /^concat: argument 'xs\[1\]' must be a vector; it has shape \[3,4\]$/],
    ["concat3 other graph", () => concat3(x3, x2, other), /^concat: argument 'xs\[2\]' belongs to a different graph$/],
    ["concat stale", () => concat([s3, s4, stale]), /^concat: argument 'xs\[2\]' is from a previous batch/],
    ["concat2 no expression", () => concat2(b, W), /^concat: no argument is an expression/],
    ["sum shapes", () => sum([x3, x3, x2]), /^sum: arguments 'xs\[0\]' and 'xs\[2\]' must have the same shape/],
    ["sum stale", () => sum([s3, stale]), /^sum: argument 'xs\[1\]' is from a previous batch/],
    ["leaf gates", () => treeLstmLeaf(x4), /^lstmCell: argument 'gates' has length 4; with 0 children it must be 3·H$/],
    ["leaf stale", () => treeLstmLeaf(stale), /^lstmCell: argument 'gates' is from a previous batch/],
    ["leaf no expression", () => treeLstmLeaf(b), /^lstmCell: no argument is an expression/],
    [
      "node c2 length",
      () => treeLstmNode(input(cg, new Float32Array(10)), x2, x3),
      /^lstmCell: argument 'c2' has length 3; gates imply H = 2$/,
    ],
    [
      "node c1 graph",
      () => treeLstmNode(input(cg, new Float32Array(10)), other, x2),
      /^lstmCell: argument 'c1' belongs to a different graph$/,
    ],
    ["node gates stale", () => treeLstmNode(stale, s3, s3), /^lstmCell: argument 'gates' is from a previous batch/],
    ["step c1 matrix", () => lstmStep(x4, W), /^lstmCell: argument 'c1' must be a vector; it has shape \[3,4\]$/],
    ["tanh stale", () => tanh(stale), /^tanh: argument 'x' is from a previous batch/],
    ["tanh no expression", () => tanh(b), /^tanh: no argument is an expression/],
    ["parameter of a table", () => parameter(cg, E), /^parameter: 'E' is a lookup table/],
  ];
  for (const [name, f, re] of cases) {
    test(name, () => {
      const [before, sBefore] = [cg.size, sg.size];
      assert.throws(f, (e: unknown) => e instanceof ShapeError && re.test(e.message));
      // a failed check adds no node beyond the parameter nodes that reading its arguments may have added
      for (const g of [cg, sg]) {
        for (let i = g === cg ? before : sBefore; i < g.size; i++) {
          assert.ok([Op.Parameter, Op.Input].includes(g.op[i]!), g.describe(i));
        }
      }
    });
  }
});
