import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { CpuEngine } from "../src/engines/cpu.js";
import { ComputationGraph, ShapeError } from "../src/graph/graph.js";
import { Op } from "../src/graph/opcodes.js";
import { ParameterCollection } from "../src/model/parameters.js";
import {
  affine,
  cmul,
  concat,
  dropout,
  input,
  lookup,
  lstmCell,
  matVec,
  parameter,
  pickNegLogSoftmax,
  pickRange,
  sum,
  tanh,
} from "../src/ops/index.js";

describe("the graph's node table", () => {
  test("nodes are rows of typed arrays with shapes, arguments, depth and value offsets", () => {
    const pc = new ParameterCollection();
    const W = pc.addParameters([3, 4], undefined, "W");
    const cg = new ComputationGraph();
    const x = input(cg, [1, 2, 3, 4]);
    const y = matVec(W, x);
    const z = tanh(y);
    assert.equal(cg.size, 4); // input, parameter W, matVec, tanh
    assert.equal(cg.op[y.id], Op.MatVec);
    assert.deepEqual([cg.arg(y.id, 0), cg.arg(y.id, 1)], [1, x.id]);
    assert.equal(z.rows, 3);
    assert.equal(cg.depth[z.id], 2);
    assert.equal(cg.valueOffset[y.id], 4 + 12);
    assert.equal(cg.valueSize, 4 + 12 + 3 + 3);
    assert.equal(parameter(cg, W).id, 1, "a parameter has one node per graph");
  });

  test("renew forgets nodes and rejects stale expressions", () => {
    const cg = new ComputationGraph();
    const x = input(cg, [1, 2]);
    cg.renew();
    assert.equal(cg.size, 0);
    assert.throws(() => tanh(x), /tanh: argument 'x' is from a previous batch/);
  });

  test("the arrays grow past their initial capacity", () => {
    const cg = new ComputationGraph();
    let x = input(cg, [0.5]);
    for (let k = 0; k < 5000; k++) x = tanh(x);
    assert.equal(cg.size, 5001);
    assert.equal(cg.depth[x.id], 5000);
    const e = new CpuEngine(new ParameterCollection());
    assert.ok(Math.abs(e.value(x)[0]!) < 0.05);
  });
});

describe("shape errors name the op, the argument and both shapes", () => {
  const pc = new ParameterCollection();
  const W = pc.addParameters([256, 128], undefined, "W");
  const b = pc.addParameters(256, undefined, "b");
  const E = pc.addLookupParameters(10, 8, undefined, "E");
  const cg = new ComputationGraph();
  const x256 = input(cg, new Float32Array(256));
  const x3 = input(cg, [1, 2, 3]);
  const x4 = input(cg, [1, 2, 3, 4]);

  const cases: [string, () => unknown, RegExp][] = [
    ["matVec", () => matVec(W, x256), /^matVec: argument 'W' has shape \[256,128\]; x has length 256$/],
    ["affine W/x", () => affine([b, W, x3]), /^affine: argument 'W1' has shape \[256,128\]; x1 has length 3$/],
    ["affine arity", () => affine([b, W]), /affine: expects \[b, W1, x1, W2, x2, \.\.\.\]/],
    ["cmul", () => cmul(x3, x4), /^cmul: arguments 'a' and 'b' must have the same shape; 'a' is \[3\], 'b' is \[4\]$/],
    ["sum", () => sum([x3, x3, x4]), /^sum: arguments 'xs\[0\]' and 'xs\[2\]' must have the same shape/],
    [
      "concat of a matrix",
      () => concat([x3, W]),
      /^concat: argument 'xs\[1\]' must be a vector; it has shape \[256,128\]$/,
    ],
    ["pickRange", () => pickRange(x3, 2, 5), /pickRange: range \[2, 5\) is not a non-empty range inside x of length 3/],
    ["label", () => pickNegLogSoftmax(x3, 3), /pickNegLogSoftmax: label 3 is out of range for x of length 3/],
    [
      "lstmCell gates",
      () => lstmCell(input(cg, new Float32Array(5)), [x3]),
      /lstmCell: argument 'gates' has length 5; with 1 children it must be 4·H/,
    ],
    [
      "lstmCell memory",
      () => lstmCell(input(cg, new Float32Array(8)), [x3]),
      /lstmCell: argument 'c1' has length 3; gates imply H = 2/,
    ],
    ["lookup row", () => lookup(cg, E, 10), /lookup: row 10 is out of range for 'E' with 10 rows/],
    ["lookup of a dense parameter", () => lookup(cg, W, 0), /lookup: 'W' is not a lookup table/],
    ["parameter of a table", () => parameter(cg, E), /parameter: 'E' is a lookup table/],
    ["dropout p", () => dropout(x3, 1), /dropout: probability p must be in \[0, 1\); got 1/],
    ["empty input", () => input(cg, []), /input: needs at least one value/],
  ];
  for (const [name, f, re] of cases) {
    test(name, () => {
      assert.throws(f, (e: unknown) => e instanceof ShapeError && re.test(e.message));
    });
  }

  test("a mismatch adds no node", () => {
    const before = cg.size;
    assert.throws(() => matVec(W, x3));
    assert.equal(cg.size, before);
  });
});

describe("dropout", () => {
  test("is the identity when not training and keeps about 1 − p otherwise, scaled by 1/(1 − p)", () => {
    const pc = new ParameterCollection();
    const cg = new ComputationGraph();
    cg.training = false;
    const x = input(cg, new Float32Array(1000).fill(1));
    assert.equal(dropout(x, 0.5), x);
    cg.training = true;
    cg.dropoutKey = 99;
    const y = dropout(x, 0.25);
    const v = new CpuEngine(pc).value(y);
    const kept = v.filter((a) => a !== 0);
    assert.ok(kept.length > 700 && kept.length < 800, `kept ${kept.length}`);
    for (const a of kept) assert.ok(Math.abs(a - 1 / 0.75) < 1e-6);
  });
});
