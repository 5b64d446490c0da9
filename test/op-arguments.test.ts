// Every public op builder refuses an argument of the wrong kind — missing, a number where an expression goes, a lookup
// table where a matrix goes, a string among input values, a row that is not an integer — with one ShapeError line
// naming the op and the argument, and adds no node for it. Shape errors of well-typed arguments
// are in test/graph.test.ts and test/graph-build.test.ts.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ComputationGraph, ShapeError } from "../src/graph/graph.js";
import { Op } from "../src/graph/opcodes.js";
import { ParameterCollection } from "../src/model/parameters.js";
import { describeValue } from "../src/ops/common.js";
import * as ops from "../src/ops/index.js";

const {
  add,
  affine,
  conv2d,
  flatten,
  maxPool2d,
  cmul,
  concat,
  dropout,
  esum,
  input,
  logistic,
  lookup,
  lstmCell,
  lstmStep,
  matVec,
  parameter,
  pickNegLogSoftmax,
  pickRange,
  relu,
  rnn,
  sub,
  sum,
  tanh,
  treeLstmLeaf,
  treeLstmNode,
  lookupRows,
  affineRows,
  pickNegLogSoftmaxRows,
} = ops;

/** Exports of src/ops/index.ts that build no node (math helpers and the registry). */
/** (`conv2dShape`, `maxPool2dShape`: the output shape of an image op, from numbers.) */
const NOT_BUILDERS = new Set([
  "sigmoid",
  "dropoutKeeps",
  "batchSignature",
  "KERNELS",
  "OPS",
  "conv2dShape",
  "maxPool2dShape",
]);

const pc = new ParameterCollection({ seed: 1 });
const W = pc.addParameters([3, 4], undefined, "W");
const b = pc.addParameters(3, undefined, "b");
const E = pc.addLookupParameters(5, 4, undefined, "E");
const cg = new ComputationGraph();
const x4 = input(cg, [1, 2, 3, 4]);
const x3 = input(cg, [1, 2, 3]);
const g6 = input(cg, new Float32Array(6));
/** Gates for H = 3: one child (4H), two (5H), three (6H). */
const g12 = input(cg, new Float32Array(12));
const g15 = input(cg, new Float32Array(15));
const g18 = input(cg, new Float32Array(18));
/** Rows: 2 of 3 classes. */
const rows23 = input(cg, new Float32Array(6), [2, 3]);
/** A tanh RNN of hidden size 3 over inputs of 4: W_ih = W [3, 4], W_hh = Wsq [3, 3], b_ih = b. */
const Wsq = pc.addParameters([3, 3], undefined, "Wsq");
const RNN3 = { W_ih: W, W_hh: Wsq, b_ih: b };

/** Calls with arguments TypeScript would refuse, as JavaScript callers (or `any`) pass them. */
// biome-ignore lint/suspicious/noExplicitAny: the point of these cases
const bad = (v: unknown): any => v;
const EXPR_OR_PARAM = "must be an Expression or a dense parameter";

/** [builder, case, call, the message (whole)]. */
const IMAGE = { channels: 1, height: 2, width: 2 };
const CASES: [string, string, () => unknown, RegExp][] = [
  [
    "conv2d",
    "x missing",
    () => conv2d(bad(undefined), W, b, IMAGE, { kernel: 2 }),
    /^conv2d: argument 'x' must be an Expression or a dense parameter; got undefined$/,
  ],
  [
    "conv2d",
    "W a number",
    () => conv2d(x4, bad(3), b, IMAGE, { kernel: 2 }),
    /^conv2d: argument 'W' must be an Expression or a dense parameter; got 3$/,
  ],
  [
    "maxPool2d",
    "x missing",
    () => maxPool2d(bad(undefined), IMAGE, { kernel: 2 }),
    /^maxPool2d: argument 'x' must be an Expression; got undefined$/,
  ],
  [
    "maxPool2d",
    "x a parameter",
    () => maxPool2d(bad(W), IMAGE, { kernel: 2 }),
    /^maxPool2d: no argument is an expression, so there is no graph to add the node to$/,
  ],
  ["flatten", "x a number", () => flatten(bad(3)), /^flatten: argument 'x' must be an Expression; got 3$/],
  ["matVec", "W undefined", () => matVec(bad(undefined), x4), /^matVec: argument 'W' must be .*; got undefined$/],
  ["matVec", "x undefined", () => matVec(W, bad(undefined)), /^matVec: argument 'x' must be .*; got undefined$/],
  ["matVec", "W a number", () => matVec(bad(3), x4), /^matVec: argument 'W' must be .*; got 3$/],
  ["matVec", "W a table", () => matVec(E, x4), /^matVec: argument 'W' is lookup table 'E'; read its rows with/],
  ["matVec", "x an array", () => matVec(W, bad([1, 2, 3, 4])), /^matVec: argument 'x' must be .*; got an array/],
  ["affine", "args undefined", () => affine(bad(undefined)), /^affine: argument 'args' must be an array of /],
  ["affine", "b null", () => affine([bad(null), W, x4]), /^affine: argument 'b' must be .*; got null$/],
  ["affine", "W1 a string", () => affine([b, bad("W"), x4]), /^affine: argument 'W1' .*; got the string "W"$/],
  ["affine", "x1 missing", () => affine([b, W, bad(undefined)]), /^affine: argument 'x1' must be .*; got undefined$/],
  ["affine", "x2 an object", () => affine([b, W, x4, W, bad({})]), /^affine: argument 'x2' .*; got an object$/],
  ["affine", "W2 a table", () => affine([b, W, x4, E, x4]), /^affine: argument 'W2' is lookup table 'E'/],
  ["affine", "no expression", () => affine([b, W, bad(7)]), /^affine: argument 'x1' must be .*; got 7$/],
  ["add", "a undefined", () => add(bad(undefined), x3), /^add: argument 'a' must be .*; got undefined$/],
  ["add", "b a number", () => add(x3, bad(1)), /^add: argument 'b' must be .*; got 1$/],
  ["sub", "both missing", () => sub(bad(undefined), bad(undefined)), /^sub: argument 'a' must be .*; got undefined$/],
  ["cmul", "b a typed array", () => cmul(x3, bad(new Float32Array(3))), /^cmul: argument 'b' .*; got a Float32Array$/],
  ["tanh", "x undefined", () => tanh(bad(undefined)), /^tanh: argument 'x' must be an Expression; got undefined$/],
  ["logistic", "x a number", () => logistic(bad(0.5)), /^logistic: argument 'x' must be an Expression; got 0\.5$/],
  ["relu", "x null", () => relu(bad(null)), /^relu: argument 'x' must be an Expression; got null$/],
  ["tanh", "x a parameter", () => tanh(W), /^tanh: no argument is an expression/],
  ["dropout", "x undefined", () => dropout(bad(undefined), 0.5), /^dropout: argument 'x' must be an Expression/],
  ["dropout", "p a string", () => dropout(x3, bad("0.5")), /^dropout: probability p must be in \[0, 1\); got the/],
  ["dropout", "p NaN", () => dropout(x3, Number.NaN), /^dropout: probability p must be in \[0, 1\); got NaN$/],
  ["concat", "xs undefined", () => concat(bad(undefined)), /^concat: argument 'xs' must be an array of expressions/],
  ["concat", "xs[1] undefined", () => concat([x3, bad(undefined)]), /^concat: argument 'xs\[1\]' .*; got undefined$/],
  ["concat", "xs[2] a number", () => concat([x3, x3, bad(2)]), /^concat: argument 'xs\[2\]' must be .*; got 2$/],
  ["concat", "xs[3] a table", () => concat([x3, x3, x3, E]), /^concat: argument 'xs\[3\]' is lookup table 'E'/],
  ["concat", "no expression", () => concat([b, bad(undefined)]), /^concat: argument 'xs\[1\]' .*; got undefined$/],
  ["sum", "xs a string", () => sum(bad("x")), /^sum: argument 'xs' must be an array of expressions; got the/],
  ["sum", "xs[0] undefined", () => sum([bad(undefined), x3]), /^sum: argument 'xs\[0\]' must be .*; got undefined$/],
  ["esum", "xs[1] null", () => esum([x3, bad(null)]), /^sum: argument 'xs\[1\]' must be .*; got null$/],
  ["pickRange", "x undefined", () => pickRange(bad(undefined), 0, 1), /^pickRange: argument 'x' must be an Expr/],
  ["pickRange", "start 0.5", () => pickRange(x4, 0.5, 2), /^pickRange: argument 'start' must be an integer; got 0\.5$/],
  ["pickRange", "end a string", () => pickRange(x4, 0, bad("2")), /^pickRange: argument 'end' must be an integer; got/],
  [
    "pickRange",
    "end NaN",
    () => pickRange(x4, 0, Number.NaN),
    /^pickRange: argument 'end' must be an integer; got NaN$/,
  ],
  [
    "pickNegLogSoftmax",
    "x undefined",
    () => pickNegLogSoftmax(bad(undefined), 1),
    /^pickNegLogSoftmax: argument 'x' must be an Expression; got undefined$/,
  ],
  [
    "pickNegLogSoftmax",
    "label 1.5",
    () => pickNegLogSoftmax(x3, 1.5),
    /^pickNegLogSoftmax: argument 'label' must be an integer; got 1\.5$/,
  ],
  [
    "pickNegLogSoftmax",
    "label undefined",
    () => pickNegLogSoftmax(x3, bad(undefined)),
    /^pickNegLogSoftmax: argument 'label' must be an integer; got undefined$/,
  ],
  ["input", "g undefined", () => input(bad(undefined), [1]), /^input: argument 'g' must be a ComputationGraph; got/],
  ["input", "values undefined", () => input(cg, bad(undefined)), /^input: argument 'values' must be an array of num/],
  ["input", "values a string", () => input(cg, bad("12")), /^input: argument 'values' must be .*; got the string/],
  [
    "input",
    "values a number",
    () => input(cg, bad(5)),
    /^input: argument 'values' must be an array of numbers; got 5$/,
  ],
  ["input", "a string value", () => input(cg, bad(["a"])), /^input: values\[0\] must be a finite number; got the/],
  ["input", "NaN", () => input(cg, [1, Number.NaN]), /^input: values\[1\] must be a finite number; got NaN$/],
  ["input", "Infinity", () => input(cg, [1, 2, -Infinity]), /^input: values\[2\] must be a finite .*; got -Infinity$/],
  ["input", "float32 overflow", () => input(cg, [1e39]), /^input: values\[0\] .*; got 1e\+39 \(outside float32's/],
  [
    "input",
    "undefined",
    () => input(cg, bad([1, undefined, 3])),
    /^input: values\[1\] must be a finite number; got undefined$/,
  ],
  ["input", "a boolean", () => input(cg, bad([true])), /^input: values\[0\] must be a finite number; got true$/],
  [
    "parameter",
    "g a number",
    () => parameter(bad(1), W),
    /^parameter: argument 'g' must be a ComputationGraph; got 1$/,
  ],
  [
    "parameter",
    "p undefined",
    () => parameter(cg, bad(undefined)),
    /^parameter: argument 'p' must be a parameter; got/,
  ],
  ["lookup", "g undefined", () => lookup(bad(undefined), E, 0), /^lookup: argument 'g' must be a ComputationGraph/],
  ["lookup", "table undefined", () => lookup(cg, bad(undefined), 0), /^lookup: argument 'table' must be a lookup tab/],
  ["lookup", "a dense table", () => lookup(cg, W, 0), /^lookup: 'W' is not a lookup table/],
  ["lookup", "row 1.5", () => lookup(cg, E, 1.5), /^lookup: argument 'row' must be an integer; got 1\.5$/],
  ["lookup", "row a string", () => lookup(cg, E, bad("1")), /^lookup: argument 'row' must be an integer; got the/],
  ["lookup", "row 5", () => lookup(cg, E, 5), /^lookup: row 5 is out of range for 'E' with 5 rows \(0 to 4\)$/],
  ["lookup", "row -1", () => lookup(cg, E, -1), /^lookup: row -1 is out of range for 'E' with 5 rows \(0 to 4\)$/],
  ["lstmCell", "cs undefined", () => lstmCell(g6, bad(undefined)), /^lstmCell: argument 'cs' must be an array of/],
  ["lstmCell", "gates undefined", () => lstmCell(bad(undefined), [x3]), /^lstmCell: argument 'gates' must be/],
  [
    "lstmCell",
    "c3 undefined",
    () => lstmCell(g18, [x3, x3, bad(undefined)]),
    /^lstmCell: argument 'c3' must be an Expression or a dense parameter; got undefined$/,
  ],
  ["lstmCell", "no expression", () => lstmCell(b, [bad(3)]), /^lstmCell: argument 'c1' must be .*; got 3$/],
  [
    "lstmStep",
    "cPrev undefined",
    () => lstmStep(g12, bad(undefined)),
    /^lstmCell: argument 'c1' must be .*; got undef/,
  ],
  [
    "treeLstmLeaf",
    "gates a number",
    () => treeLstmLeaf(bad(1)),
    /^lstmCell: argument 'gates' must be an Expr.*; got 1$/,
  ],
  ["treeLstmNode", "c2 undefined", () => treeLstmNode(g15, x3, bad(undefined)), /^lstmCell: argument 'c2' must be/],
  ["treeLstmNode", "gates null", () => treeLstmNode(bad(null), x3, x3), /^lstmCell: argument 'gates' .*; got null$/],
  [
    "rnn",
    "x undefined",
    () => rnn(bad(undefined), [1], "rnn-tanh", [RNN3]),
    /^rnn: argument 'x' must be an Expression; got undefined$/,
  ],
  [
    "rnn",
    "cell unknown",
    () => rnn(x4, [1], bad("lstmx"), [RNN3]),
    /^rnn: argument 'cell' must be one of rnn-tanh, rnn-relu, lstm, gru; got lstmx$/,
  ],
  [
    "rnn",
    "directions not an array",
    () => rnn(x4, [1], "rnn-tanh", bad(RNN3)),
    /^rnn: argument 'directions' must be an array of/,
  ],
  [
    "rnn",
    "three directions",
    () => rnn(x4, [1], "rnn-tanh", [RNN3, RNN3, RNN3]),
    /^rnn: argument 'directions' must hold 1 or 2 directions; got 3$/,
  ],
  [
    "rnn",
    "batchSizes increasing",
    () => rnn(x4, [1, 2], "rnn-tanh", [RNN3]),
    /^rnn: argument 'batchSizes' must be positive integers that never increase .*batchSizes\[1\] = 2 after 1$/,
  ],
  [
    "rnn",
    "W_hh a number",
    () => rnn(x4, [1], "rnn-tanh", [{ ...RNN3, W_hh: bad(3) }]),
    /^rnn: argument 'directions\[0\].W_hh' must be an Expression or a dense parameter; got 3$/,
  ],
  [
    "rnn",
    "x of the wrong length",
    () => rnn(x3, [1], "rnn-tanh", [RNN3]),
    /^rnn: argument 'x' has length 3; batchSizes give N = 1 rows of 4 inputs = 4$/,
  ],
  [
    "rnn",
    "W_hh not square",
    () => rnn(x4, [1], "rnn-tanh", [{ ...RNN3, W_hh: W }]),
    /^rnn: argument 'directions\[0\].W_hh' has shape \[3,4\]; a rnn-tanh of hidden size 4 over inputs of 4 needs \[4,4\]$/,
  ],
  [
    "rnn",
    "density 0",
    () => rnn(x4, [1], "rnn-tanh", [RNN3], { density: 0 }),
    /^rnn: argument 'density' must be a number in \(0, 1\] \(the fraction of W_hh kept; 1 = dense\); got 0$/,
  ],
  [
    "rnn",
    "density NaN",
    () => rnn(x4, [1], "rnn-tanh", [RNN3], { density: Number.NaN }),
    /^rnn: argument 'density' must be a number in \(0, 1\] .*; got NaN$/,
  ],
  [
    "rnn",
    "density above 1",
    () => rnn(x4, [1], "rnn-tanh", [RNN3], { density: 1.5 }),
    /^rnn: argument 'density' must be a number in \(0, 1\] .*; got 1.5$/,
  ],
  [
    "rnn",
    "pruning unknown",
    () => rnn(x4, [1], "rnn-tanh", [RNN3], { density: 0.5, pruning: bad("naive") }),
    /^rnn: argument 'pruning' must be one of row-balanced, plain; got "naive"$/,
  ],
  [
    "rnn",
    "sparsity not an object",
    () => rnn(x4, [1], "rnn-tanh", [RNN3], bad(0.5)),
    /^rnn: argument 'sparsity' must be an object \{density\?, pruning\?\}; got 0.5$/,
  ],
  [
    "rnn",
    "b_hh in one direction only",
    () => rnn(x4, [1], "rnn-tanh", [RNN3, { ...RNN3, b_hh: b }]),
    /^rnn: argument 'directions\[1\].b_hh' must be given for every direction or for none$/,
  ],
  [
    "lookupRows",
    "g a number",
    () => lookupRows(bad(3), E, [1]),
    /^lookupRows: argument 'g' must be a ComputationGraph; got 3$/,
  ],
  ["lookupRows", "a dense table", () => lookupRows(cg, W, [1]), /^lookupRows: 'W' is not a lookup table/],
  [
    "lookupRows",
    "ids undefined",
    () => lookupRows(cg, E, bad(undefined)),
    /^lookupRows: argument 'ids' must be an array of integers; got undefined$/,
  ],
  ["lookupRows", "ids empty", () => lookupRows(cg, E, []), /^lookupRows: argument 'ids' is empty; a batch needs/],
  [
    "lookupRows",
    "a fractional id",
    () => lookupRows(cg, E, [1, 1.5]),
    /^lookupRows: ids\[1\] must be an integer; got 1.5$/,
  ],
  [
    "lookupRows",
    "an id past the table",
    () => lookupRows(cg, E, [4, 5]),
    /^lookupRows: ids\[1\] = 5 is out of range for 'E' with 5 rows \(0 to 4\)$/,
  ],
  [
    "affineRows",
    "X a lookup table",
    () => affineRows(b, W, bad(E)),
    /^affineRows: argument 'X' is lookup table 'E'; read its rows with lookup/,
  ],
  ["affineRows", "W undefined", () => affineRows(b, bad(undefined), x4), /^affineRows: argument 'W' must be an Expr/],
  [
    "affineRows",
    "X a vector of the right length",
    () => affineRows(b, W, x4),
    /^affineRows: argument 'X' has shape \[4\]; W is \[3,4\], so X must be \[N,4\] .*X is a vector; its 1 rows must be a matrix \[1,4\]/,
  ],
  [
    "affineRows",
    "W of other rows than b",
    () => affineRows(g6, W, x4),
    /^affineRows: argument 'W' has shape \[3,4\]; b has length 6, so W needs 6 rows$/,
  ],
  [
    "pickNegLogSoftmaxRows",
    "X a parameter",
    () => pickNegLogSoftmaxRows(bad(W), [0]),
    /^pickNegLogSoftmaxRows: no argument is an expression/,
  ],
  [
    "pickNegLogSoftmaxRows",
    "a label per row missing",
    () => pickNegLogSoftmaxRows(rows23, [0]),
    /^pickNegLogSoftmaxRows: X has 2 rows \(shape \[2,3\]\); 1 labels given, one per row needed$/,
  ],
  [
    "pickNegLogSoftmaxRows",
    "a label past the classes",
    () => pickNegLogSoftmaxRows(rows23, [0, 3]),
    /^pickNegLogSoftmaxRows: labels\[1\] = 3 is out of range for rows of 3 classes \(0 to 2\)$/,
  ],
];

describe("op builders refuse arguments of the wrong kind, naming the op and the argument", () => {
  for (const [builder, name, call, message] of CASES) {
    test(`${builder}: ${name}`, () => {
      const before = cg.size;
      assert.throws(call, (e: unknown) => {
        assert.ok(e instanceof ShapeError, `a ShapeError, got ${String(e)}`);
        assert.match(e.message, message);
        return true;
      });
      // no node for the failed call, beyond parameter nodes that reading its valid arguments may have added
      for (let i = before; i < cg.size; i++) assert.equal(cg.op[i], Op.Parameter, cg.describe(i));
    });
  }

  test("every builder exported by src/ops has cases in the table", () => {
    const builders = Object.entries(ops)
      .filter(([name, f]) => typeof f === "function" && !NOT_BUILDERS.has(name))
      .map(([name]) => name);
    const covered = new Set(CASES.map((c) => c[0]));
    assert.deepEqual(
      builders.filter((n) => !covered.has(n)),
      [],
      "builders without argument cases",
    );
  });

  test(`the common message reads "${EXPR_OR_PARAM}"`, () => {
    assert.throws(() => matVec(bad(undefined), x4), {
      message: `matVec: argument 'W' ${EXPR_OR_PARAM}; got undefined`,
    });
  });
});

describe("describeValue names a value in a few words, never the whole of it", () => {
  const cases: [unknown, string][] = [
    [undefined, "undefined"],
    [null, "null"],
    [3, "3"],
    [Number.NaN, "NaN"],
    [true, "true"],
    [10n, "10n"],
    ["a", 'the string "a"'],
    ["x".repeat(1000), `the string "${"x".repeat(40)}… (1000 characters)"`],
    [[1, 2], "an array of length 2"],
    [new Float64Array(2), "a Float64Array"],
    [{}, "an object"],
    [new Map(), "a Map"],
    [Object.create(null), "an object"],
    [() => 0, "a function"],
    [Symbol("s"), "a symbol"],
    [W, "parameter 'W'"],
    [E, "lookup table 'E'"],
    [x3, "an expression of shape [3]"],
  ];
  for (const [value, expected] of cases) {
    test(expected, () => assert.equal(describeValue(value), expected));
  }
});
