// The sentence models TD-RNN, TD-LSTM and RvNN (src/models/td-rnn, td-lstm, rvnn) on the CPU: the graphs they build
// (the pyramid's n(n−1)/2 compositions, each inner node read by two parents), float64 gradient checks against finite
// differences (the pyramid's fan-out included), shapes without allocating, saved options, the SST data they read,
// bad input, and training on the synthetic task.

import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { parseTrees } from "../src/data/sst.js";
import { syntheticTrees } from "../src/data/synthetic.js";
import { treeWords } from "../src/data/tree.js";
import { Vocabulary } from "../src/data/vocab.js";
import { CpuEngine } from "../src/engines/cpu.js";
import { ComputationGraph, ShapeError } from "../src/graph/graph.js";
import { Op } from "../src/graph/opcodes.js";
import { onChipMatrices } from "../src/model/parameters.js";
import { RvnnModel } from "../src/models/rvnn/model.js";
import { rvnnTask } from "../src/models/rvnn/task.js";
import { reducePyramid } from "../src/models/shared/pyramid.js";
import { SENTENCE_WORDS, SST_SENTENCES, sentenceOf, TREE_WORDS } from "../src/models/shared/sst-data.js";
import type { AnyTask } from "../src/models/task.js";
import { TdLstmModel } from "../src/models/td-lstm/model.js";
import { tdLstmTask } from "../src/models/td-lstm/task.js";
import { TdRnnModel } from "../src/models/td-rnn/model.js";
import { tdRnnTask } from "../src/models/td-rnn/task.js";
import { train } from "../src/train/loop.js";
import { gradientCheck } from "./helpers.js";
import { CASE_SENTENCES, CASE_VOCAB, SENTENCE_MODELS } from "./sentence-cases.js";

/** Nodes of op `op` in cg, and how many nodes read each node (its consumers). */
function census(cg: ComputationGraph, op: Op) {
  const readers = new Int32Array(cg.size);
  let count = 0;
  for (let i = 0; i < cg.size; i++) {
    if (cg.op[i] === op) count++;
    for (let k = 0; k < cg.argCount[i]!; k++) readers[cg.arg(i, k)]!++;
  }
  return { count, readers };
}

describe("the pyramid", () => {
  test("n leaves give n(n−1)/2 compositions, level by level, left to right; one leaf is its own root", () => {
    for (let n = 1; n <= 6; n++) {
      const calls: string[] = [];
      let next = 100;
      const names = new Map<number, string>();
      const level = Array.from({ length: n }, (_, i) => i);
      for (let i = 0; i < n; i++) names.set(i, `x${i}`);
      const root = reducePyramid(level, (l, r) => {
        const id = next++;
        names.set(id, `(${names.get(l)} ${names.get(r)})`);
        calls.push(names.get(id)!);
        return id;
      });
      assert.equal(calls.length, (n * (n - 1)) / 2, `${n} leaves`);
      if (n === 1) assert.equal(root, 0);
      if (n === 3) assert.deepEqual(calls, ["(x0 x1)", "(x1 x2)", "((x0 x1) (x1 x2))"]);
    }
    assert.throws(() => reducePyramid([], () => 0), /pyramid: a sentence needs at least one word; got none/);
  });

  test("TD-RNN: one 5-argument affine and one tanh per composition; every inner node feeds two parents", () => {
    const vocab = Vocabulary.fromWords(["a", "b", "c", "d", "e"]);
    const m = new TdRnnModel({ vocabSize: vocab.size, hidden: 3, seed: 1 });
    for (let n = 1; n <= 5; n++) {
      const cg = new ComputationGraph();
      const words = ["a", "b", "c", "d", "e"].slice(0, n);
      const root = m.addSentence(cg, { words, label: 0 }, vocab);
      let compositions = 0;
      for (let i = 0; i < cg.size; i++) if (cg.op[i] === Op.Affine && cg.argCount[i] === 5) compositions++;
      assert.equal(compositions, (n * (n - 1)) / 2, `${n} words`);
      const { readers } = census(cg, Op.Tanh);
      if (n === 1) assert.equal(cg.op[root], Op.Lookup, "a one-word sentence's root is its embedding");
      else assert.equal(cg.op[root], Op.Tanh);
      // levels 0 … n−2 (leaves included): the first and last node of a level feed one parent, the others two
      let fanOut = 0;
      for (let i = 0; i < cg.size; i++)
        if ((cg.op[i] === Op.Tanh || cg.op[i] === Op.Lookup) && readers[i] === 2) fanOut++;
      assert.equal(fanOut, n < 3 ? 0 : ((n - 1) * (n - 2)) / 2, `${n} words: nodes read by two compositions`);
      assert.equal(cg.depth[root], n === 1 ? 0 : 2 * (n - 1), "one level of depth per affine and per tanh");
    }
  });

  test("TD-LSTM: a leaf cell per word, a two-child cell per composition, memories read by two parents", () => {
    const m = new TdLstmModel({ vocabSize: CASE_VOCAB.size, hidden: 2, embed: 3, seed: 1 });
    const cg = new ComputationGraph();
    const s = CASE_SENTENCES[0]!; // 5 words
    m.addSentence(cg, s, CASE_VOCAB);
    let leaves = 0;
    let nodes = 0;
    for (let i = 0; i < cg.size; i++) {
      if (cg.op[i] === Op.LstmCell) cg.aux[i] === 0 ? leaves++ : nodes++;
    }
    assert.deepEqual([leaves, nodes], [5, 10]);
    // h and c of every node of levels 0 … 3 but the first and last of its level feed two cells
    const { readers } = census(cg, Op.PickRange);
    let twice = 0;
    for (let i = 0; i < cg.size; i++) if (cg.op[i] === Op.PickRange && readers[i] === 2) twice++;
    assert.equal(twice, 2 * (3 + 2 + 1), "h and c of the inner nodes of levels 0 … 3");
  });
});

describe("gradients: float64 CPU engine against finite differences", () => {
  // a pyramid is a DAG: a node read by two parents must get both gradients (and a lookup row read by two leaves)
  for (const { name, make } of SENTENCE_MODELS) {
    test(`${name}: every parameter, over sentences of 1 to 6 words (fan-out, repeated and unknown words)`, () => {
      const c = make(5, 3, name === "td-rnn" ? 3 : 2);
      const { checked, mismatches } = gradientCheck(c.params, (cg) => c.build(cg, [0, 2, 3, 5]));
      assert.ok(checked > 60, `${checked} elements checked`);
      assert.deepEqual(mismatches.slice(0, 3), []);
    });
  }

  test("the gradient of a node read by two parents is the sum of what each parent sends", () => {
    // x1 of a 3-word TD-RNN pyramid feeds both compositions of level 1
    const vocab = Vocabulary.fromWords(["a", "b", "c"]);
    const m = new TdRnnModel({ vocabSize: vocab.size, hidden: 4, seed: 9 });
    const cg = new ComputationGraph();
    const loss = m.buildBatchLoss(cg, [{ words: ["a", "b", "c"], label: 2 }], vocab);
    const engine = new CpuEngine(m.params, { precision: "f64" });
    engine.forwardScalar(loss);
    engine.backward(loss);
    const x1 = 1; // lookups come first: x0, x1, x2
    assert.equal(cg.op[x1], Op.Lookup);
    const parents: number[] = [];
    for (let i = 0; i < cg.size; i++)
      for (let k = 0; k < cg.argCount[i]!; k++) if (cg.arg(i, k) === x1) parents.push(i);
    assert.equal(parents.length, 2);
    // each parent's share: (its W)ᵀ·(its gradient); x1 is W_R's input in the first and W_L's in the second
    const share = (parent: number, W: Float32Array) => {
      const dy = engine.gradient(cg.expression(parent));
      return Array.from({ length: 4 }, (_, c) => dy.reduce((s, g, r) => s + g * W[r * 4 + c]!, 0));
    };
    const a = share(parents[0]!, m.W_R.value);
    const b = share(parents[1]!, m.W_L.value);
    const got = engine.gradient(cg.expression(x1));
    for (let c = 0; c < 4; c++) assert.ok(Math.abs(got[c]! - (a[c]! + b[c]!)) < 1e-6, `element ${c}`);
    assert.ok(a.some((v) => Math.abs(v) > 1e-4) && b.some((v) => Math.abs(v) > 1e-4), "both parents contribute");
  });
});

describe("the sentence tasks", () => {
  test("parameter shapes equal the created model's, and the on-chip matrices are the same from either", () => {
    const expected: Record<string, string[]> = {
      "td-rnn": ["W_L", "W_R", "W_mlp", "W_out"],
      "td-lstm": ["W_leaf", "U_l", "U_r", "W_mlp", "W_out"],
      rvnn: ["W_leaf", "W_int", "W_mlp", "W_out"],
    };
    for (const task of tasks()) {
      const options = { hidden: 6, embed: task === tdRnnTask ? 6 : 4 };
      const model = task.create(options, CASE_VOCAB, 1);
      const shapes = task.parameterShapes(options, CASE_VOCAB.size);
      assert.deepEqual(
        shapes,
        model.params.all.map((p) =>
          p.kind === "lookup"
            ? { kind: p.kind, name: p.name, rows: p.rows, cols: p.cols }
            : { kind: p.kind, name: p.name, rows: p.rows, cols: p.cols, isMatrix: p.isMatrix },
        ),
        task.name,
      );
      assert.deepEqual(onChipMatrices(shapes), onChipMatrices(model.params));
      assert.deepEqual(
        onChipMatrices(shapes).map((m) => m.name),
        expected[task.name],
      );
    }
    assert.deepEqual(
      [tdRnnTask.defaults, tdLstmTask.defaults, rvnnTask.defaults],
      [
        { hidden: 512, embed: 512 },
        { hidden: 256, embed: 256 },
        { hidden: 512, embed: 512 },
      ],
      "the paper's sizes",
    );
  });

  test("TD-RNN refuses an embedding size other than its hidden size, in create and in parameterShapes", () => {
    const why = /^td-rnn: the embedding size \(256\) must equal the hidden size \(512\).*same value$/;
    const isIt = (e: unknown) => e instanceof ShapeError && why.test(e.message);
    assert.throws(() => tdRnnTask.create({ hidden: 512, embed: 256 }, CASE_VOCAB, 1), isIt);
    assert.throws(() => tdRnnTask.parameterShapes({ hidden: 512, embed: 256 }, 10), isIt);
  });

  test("RvNN refuses a tree built in code whose inner node has one child", () => {
    const m = new RvnnModel({ vocabSize: CASE_VOCAB.size, hidden: 2, embed: 2 });
    const bad = { label: 1, word: null, children: [{ label: 1, word: "a", children: [] }] };
    assert.throws(
      () => m.buildBatchLoss(new ComputationGraph(), [bad], CASE_VOCAB),
      (e: unknown) => e instanceof ShapeError && /^rvnn: .*exactly two children; one has 1$/.test(e.message),
    );
  });

  test("saved options and vocabularies rebuild the model; a malformed option is refused naming it", () => {
    for (const task of tasks()) {
      const options = { hidden: 5, embed: 5 };
      const model = task.create(options, CASE_VOCAB, 3);
      const saved = JSON.parse(JSON.stringify(task.savedOptions(options, model)));
      assert.deepEqual(saved, { hidden: 5, embed: 5, labels: 5 });
      assert.deepEqual(task.restoreOptions(saved, task.defaults), options);
      assert.throws(() => task.restoreOptions({ hidden: 0, embed: 5 }, task.defaults), /options\.hidden must be a/);
      assert.throws(() => task.restoreOptions({ hidden: 5 }, task.defaults), /options\.embed must be a/);
      const json = JSON.parse(JSON.stringify(task.vocabulary.toJSON(CASE_VOCAB)));
      const vocab = task.vocabulary.fromJSON(json);
      assert.equal((vocab as Vocabulary).size, CASE_VOCAB.size);
      assert.equal(task.describe(options), `${task.title}, hidden 5, embedding 5`);
      const again = task.create(task.restoreOptions(saved, task.defaults), vocab, 3);
      assert.deepEqual(
        again.params.all.map((p) => p.value),
        model.params.all.map((p) => p.value),
      );
    }
  });
});

describe("SST data for the sentence models", () => {
  const dir = mkdtempSync(join(tmpdir(), "vpps-sentences-"));
  writeFileSync(join(dir, "train.txt"), "(3 (2 (2 The) (2 Rock)) (4 (2 rocks) (2 .)))\n(1 (2 word) (1 The))\n");
  writeFileSync(join(dir, "dev.txt"), "(2 solo)\n");

  test("a sentence is its tree's words in order and its root label; the vocabulary is the trees'", () => {
    const data = SST_SENTENCES.fromDirectory(dir, {});
    assert.deepEqual(data.train, [
      { words: ["The", "Rock", "rocks", "."], label: 3 },
      { words: ["word", "The"], label: 1 },
    ]);
    assert.deepEqual(data.dev, [{ words: ["solo"], label: 2 }]);
    assert.deepEqual(SST_SENTENCES.fromFile(join(dir, "dev.txt")), data.dev);
    const trees = parseTrees("(3 (2 (2 The) (2 Rock)) (4 (2 rocks) (2 .)))\n(1 (2 word) (1 The))");
    assert.deepEqual(SENTENCE_WORDS.build(data.train).toJSON(), TREE_WORDS.build(trees).toJSON());
    assert.deepEqual(SENTENCE_WORDS.build(data.train).toJSON(), ["<unk>", "The", "Rock", "rocks", ".", "word"]);
    assert.throws(() => SST_SENTENCES.fromDirectory(join(dir, "nowhere"), {}), /no train\.txt there/);
  });

  test("the synthetic sentences are the synthetic trees' words and root labels", () => {
    const data = SST_SENTENCES.synthetic.make(7);
    const trees = syntheticTrees(2000, 7);
    assert.equal(data.train.length, 2000);
    assert.equal(data.dev.length, 300);
    for (const k of [0, 1, 999]) {
      assert.deepEqual(data.train[k]!.words, treeWords(trees[k]!));
      assert.equal(data.train[k]!.label, trees[k]!.label);
    }
    assert.deepEqual(sentenceOf(trees[0]!).words, treeWords(trees[0]!));
  });
});

describe("training on the synthetic task", () => {
  test("each model beats the majority class on short sentences (4 epochs, hidden 16)", () => {
    const trainTrees = syntheticTrees(400, 3, { minWords: 1, maxWords: 4 });
    const devTrees = syntheticTrees(200, 4, { minWords: 1, maxWords: 4 });
    const counts = [0, 0, 0, 0, 0];
    for (const t of devTrees) counts[t.label]!++;
    const majority = Math.max(...counts) / devTrees.length;
    for (const task of tasks()) {
      const asTrees = task.name === "rvnn";
      const trainSet = asTrees ? trainTrees : trainTrees.map(sentenceOf);
      const dev = asTrees ? devTrees : devTrees.map(sentenceOf);
      const { summary } = train({
        task: task as unknown as typeof tdRnnTask,
        options: { hidden: 16, embed: 16 },
        train: trainSet as never,
        dev: dev as never,
        vocab: task.vocabulary.build(trainSet as never),
        epochs: 4,
        batch: 8,
        learningRate: 0.02,
        optimizer: "adam",
        seed: 1,
        makeEngine: (p) => new CpuEngine(p),
      });
      const last = summary.epochs[3]!;
      assert.ok(last.devAccuracy > majority + 0.08, `${task.name}: dev ${last.devAccuracy} vs majority ${majority}`);
      assert.ok(last.trainLoss < summary.epochs[0]!.trainLoss, `${task.name}: the loss goes down`);
    }
  });
});

function tasks(): AnyTask[] {
  return [tdRnnTask, tdLstmTask, rvnnTask];
}
