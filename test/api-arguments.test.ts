// Public constructors and setters outside the op builders refuse NaN, negative or wrongly typed settings with one
// line naming the setting: a NaN seed, init value or learning
// rate, a negative size, a clip threshold of NaN, an engine made over something that is not a ParameterCollection.
// Each was accepted before and trained silently wrong (or not at all), or failed later with a TypeError.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { AutobatchCpuEngine } from "../src/engines/autobatch/cpu-batched.js";
import { CpuEngine } from "../src/engines/cpu.js";
import { createEngine } from "../src/engines/registry.js";
import { type Init, MAX_PARAMETER_FLOATS, ParameterCollection } from "../src/model/parameters.js";
import { TreeLstmModel, type TreeLstmOptions, treeLstmParameterShapes } from "../src/models/treelstm/model.js";
import { AdamTrainer, makeTrainer, SimpleSGDTrainer } from "../src/optim/trainers.js";
import { evaluate, predict } from "../src/train/evaluate.js";

// biome-ignore lint/suspicious/noExplicitAny: JavaScript callers pass anything
const bad = (v: unknown): any => v;

/** [case, call, the whole message]. */
type Case = [string, () => unknown, RegExp];

function refuses(cases: Case[]): void {
  for (const [name, call, message] of cases) {
    test(name, () => {
      assert.throws(call, (e: unknown) => {
        assert.ok(e instanceof Error, String(e));
        assert.match(e.message, message);
        assert.doesNotMatch(e.message, /\n/);
        return true;
      });
    });
  }
}

describe("ParameterCollection refuses bad seeds, shapes, inits and names", () => {
  const pc = new ParameterCollection({ seed: 1 });
  const init = (i: unknown): Init => bad(i);
  refuses([
    [
      "seed NaN",
      () => new ParameterCollection({ seed: Number.NaN }),
      /^ParameterCollection: seed must be an integer; got NaN$/,
    ],
    [
      "seed 1.5",
      () => new ParameterCollection({ seed: 1.5 }),
      /^ParameterCollection: seed must be an integer; got 1\.5$/,
    ],
    ["seed a string", () => new ParameterCollection({ seed: bad("7") }), /seed must be an integer; got 7$/],
    ["rows -3", () => pc.addParameters([-3, 2]), /^addParameters: rows must be a positive integer; got -3$/],
    ["cols NaN", () => pc.addParameters([3, Number.NaN]), /^addParameters: cols must be a positive integer; got NaN$/],
    ["a vector of 0", () => pc.addParameters(0), /^addParameters: rows must be a positive integer; got 0$/],
    [
      "shape a string",
      () => pc.addParameters(bad("3")),
      /^addParameters: shape must be n, \[n\] or \[rows, cols\]; got 3$/,
    ],
    ["three dimensions", () => pc.addParameters([2, 2, 2]), /^addParameters: shape must be \[n\] or \[rows, cols\]/],
    [
      "too large for one parameter",
      () => pc.addParameters([65536, 65536]),
      new RegExp(
        `^addParameters: \\[65536, 65536\\] is 4294967296 floats; one parameter holds at most ${MAX_PARAMETER_FLOATS}`,
      ),
    ],
    ["const NaN", () => pc.addParameters(3, { kind: "const", value: Number.NaN }), /init .* needs a finite value$/],
    ["uniform scale -1", () => pc.addParameters(3, { kind: "uniform", scale: -1 }), /needs a finite scale ≥ 0$/],
    [
      "an unknown init",
      () => pc.addParameters(3, init({ kind: "he" })),
      /^addParameters: init \{"kind":"he"\} has no known kind/,
    ],
    ["init a string", () => pc.addParameters(3, init("zero")), /^addParameters: init "zero" is not an Init object$/],
    [
      "an empty name",
      () => pc.addParameters(3, undefined, ""),
      /^addParameters: name must be a non-empty string; got ""$/,
    ],
    ["a numeric name", () => pc.addParameters(3, undefined, bad(5)), /name must be a non-empty string; got 5$/],
    ["vocab 0", () => pc.addLookupParameters(0, 4), /^addLookupParameters: vocab must be a positive integer; got 0$/],
    [
      "dim 2.5",
      () => pc.addLookupParameters(4, 2.5),
      /^addLookupParameters: dim must be a positive integer; got 2\.5$/,
    ],
    ["lookup init NaN", () => pc.addLookupParameters(4, 2, { kind: "uniform", scale: Number.NaN }), /finite scale/],
  ]);

  test("a refused parameter takes no index and no name", () => {
    const c = new ParameterCollection();
    assert.throws(() => c.addParameters(3, { kind: "const", value: Number.NaN }, "b"));
    const b = c.addParameters(3, undefined, "b");
    assert.equal(b.index, 0);
    assert.equal(c.all.length, 1);
  });
});

describe("trainers refuse rates, thresholds and Adam settings that are not finite numbers in range", () => {
  refuses([
    [
      "learning rate NaN",
      () => new SimpleSGDTrainer({ learningRate: Number.NaN }),
      /^learning rate must be positive and finite; got NaN$/,
    ],
    [
      "learning rate Infinity",
      () => new AdamTrainer({ learningRate: Infinity }),
      /learning rate must be positive and finite; got Infinity$/,
    ],
    [
      "learning rate -1",
      () => makeTrainer("sgd", { learningRate: -1 }),
      /learning rate must be positive and finite; got -1$/,
    ],
    [
      "learning rate missing",
      () => makeTrainer("adam", bad({})),
      /learning rate must be positive and finite; got undefined$/,
    ],
    [
      "no options",
      () => new SimpleSGDTrainer(bad(undefined)),
      /^trainer options must be an object with a learningRate; got undefined$/,
    ],
    [
      "clip NaN",
      () => new SimpleSGDTrainer({ learningRate: 1, clipThreshold: Number.NaN }),
      /^clip threshold must be a finite number ≥ 0 \(0: no clipping\); got NaN$/,
    ],
    [
      "clip -5",
      () => new AdamTrainer({ learningRate: 1, clipThreshold: -5 }),
      /clip threshold must be a finite number ≥ 0 .*; got -5$/,
    ],
    ["beta1 1", () => new AdamTrainer({ learningRate: 1, beta1: 1 }), /^Adam: beta1 must be in \[0, 1\); got 1$/],
    [
      "beta2 NaN",
      () => new AdamTrainer({ learningRate: 1, beta2: Number.NaN }),
      /^Adam: beta2 must be in \[0, 1\); got NaN$/,
    ],
    [
      "epsilon 0",
      () => new AdamTrainer({ learningRate: 1, epsilon: 0 }),
      /^Adam: epsilon must be positive and finite; got 0$/,
    ],
  ]);

  test("a schedule's new rate is checked too, and a good one is taken", () => {
    const t = new SimpleSGDTrainer({ learningRate: 0.1 });
    assert.throws(() => {
      t.learningRate = Number.NaN;
    }, /^RangeError: learning rate must be positive and finite; got NaN$/);
    assert.equal(t.learningRate, 0.1);
    t.learningRate = 0.05;
    assert.equal(t.learningRate, 0.05);
    assert.equal(new SimpleSGDTrainer({ learningRate: 1, clipThreshold: 0 }).clipThreshold, 0, "0 turns clipping off");
  });
});

describe("TreeLstmModel refuses options a model cannot be built from, naming the option", () => {
  const ok: TreeLstmOptions = { vocabSize: 10, embed: 4, hidden: 4 };
  refuses([
    [
      "hidden -5",
      () => new TreeLstmModel({ ...ok, hidden: -5 }),
      /^TreeLstmModel: hidden must be a positive integer; got -5$/,
    ],
    [
      "embed NaN",
      () => new TreeLstmModel({ ...ok, embed: Number.NaN }),
      /^TreeLstmModel: embed must be a positive integer; got NaN$/,
    ],
    [
      "vocabSize 0",
      () => new TreeLstmModel({ ...ok, vocabSize: 0 }),
      /^TreeLstmModel: vocabSize must be a positive integer; got 0$/,
    ],
    [
      "labels 2.5",
      () => new TreeLstmModel({ ...ok, labels: 2.5 }),
      /^TreeLstmModel: labels must be a positive integer; got 2\.5$/,
    ],
    [
      "dropout 1",
      () => new TreeLstmModel({ ...ok, dropout: 1 }),
      /^TreeLstmModel: dropout must be in \[0, 1\); got 1$/,
    ],
    ["dropout NaN", () => new TreeLstmModel({ ...ok, dropout: Number.NaN }), /dropout must be in \[0, 1\); got NaN$/],
    [
      "cell bogus",
      () => new TreeLstmModel({ ...ok, cell: bad("bogus") }),
      /^TreeLstmModel: cell must be "fused" or "ops"; got "bogus"$/,
    ],
    [
      "seed NaN",
      () => new TreeLstmModel({ ...ok, seed: Number.NaN }),
      /^ParameterCollection: seed must be an integer; got NaN$/,
    ],
    [
      "shapes of hidden 0",
      () => treeLstmParameterShapes({ ...ok, hidden: 0 }),
      /^TreeLstmModel: hidden must be a positive integer; got 0$/,
    ],
  ]);

  test("good options still build the model", () => {
    assert.equal(new TreeLstmModel({ ...ok, dropout: 0.5, cell: "ops", labels: 3 }).labels, 3);
  });
});

describe("engines are made over a ParameterCollection only", () => {
  refuses([
    [
      "cpu over undefined",
      () => new CpuEngine(bad(undefined)),
      /^cpu engine: params must be a ParameterCollection; got undefined$/,
    ],
    [
      "autobatch over an array",
      () => new AutobatchCpuEngine(bad([])),
      /^autobatch engine: params must be .*; got an array of length 0$/,
    ],
    [
      "createEngine over a model instead of its parameters",
      () => createEngine("cpu", bad(new TreeLstmModel({ vocabSize: 3, embed: 2, hidden: 2 }))),
      /^cpu engine: params must be a ParameterCollection; got a TreeLstmModel$/,
    ],
  ]);
});

describe("evaluation refuses a batch size that is not a positive integer", () => {
  const engine = new CpuEngine(new ParameterCollection());
  refuses([
    // 0 looped for ever; NaN gave one empty batch and no predictions
    [
      "predict batch 0",
      () => predict(bad({}), engine, [1, 2], 0),
      /^predict: batch must be a positive integer \(examples per graph\); got 0$/,
    ],
    [
      "evaluate batch NaN",
      () => evaluate(bad({}), [], {}, engine, [1], Number.NaN),
      /^predict: batch must be a positive integer .*; got NaN$/,
    ],
  ]);
});
