// The two taggers (src/models/bilstm/, src/models/bilstm-char/) on the CPU: the loss equals a plain-loop transcription
// of docs/MODELS.md, float64 gradient checks, every engine that runs without a GPU equals the CPU engine (autobatch on
// the CPU and on the emulated device, both strategies, with SGD and Adam steps; VPPS on its emulator), shapes listed
// without allocating, encoding (unknown words, spelled words, unknown tags), save and restore, and learning the
// synthetic task through the training loop.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { H100_SXM } from "../src/cuda/hw/device-model.js";
import { syntheticTaggedSentences } from "../src/data/synthetic-tagged.js";
import { parseTagged, TaggedFormatError } from "../src/data/tagged.js";
import { AutobatchCpuEngine } from "../src/engines/autobatch/cpu-batched.js";
import { AutobatchGpuEngine } from "../src/engines/autobatch/gpu-engine.js";
import { CpuEngine } from "../src/engines/cpu.js";
import type { Engine } from "../src/engines/engine.js";
import { planVpps } from "../src/engines/vpps/plan/plan.js";
import { refusedOps } from "../src/engines/vpps/schedule/kernel-table.js";
import { ComputationGraph, ShapeError } from "../src/graph/graph.js";
import { Op } from "../src/graph/opcodes.js";
import { onChipMatrices, type ParameterCollection } from "../src/model/parameters.js";
import { biLstmTaggerShapes } from "../src/models/bilstm/model.js";
import { biLstmTask, PLAN_TAGS, type TaggerTaskModel } from "../src/models/bilstm/task.js";
import type { TaggerVocabulary } from "../src/models/bilstm/vocabulary.js";
import { charTaggerShapes } from "../src/models/bilstm-char/model.js";
import { charBiLstmTask } from "../src/models/bilstm-char/task.js";
import { makeTrainer } from "../src/optim/trainers.js";
import { evaluate } from "../src/train/evaluate.js";
import { train as trainLoop } from "../src/train/loop.js";
import { EmulatedAutobatchDevice } from "./autobatch-emulator.js";
import { gradientCheck } from "./helpers.js";
import { CPU_SIDE_ENGINES, compareWithCpu, scaleTolerance } from "./op-suite.js";
import { referenceLoss } from "./tagger-reference.js";

/** Hand-made training sentences: with --min-count 2, Borburg, Calburg and Ö are spelled. */
const TRAIN = parseTagged(
  ["mr|O Alson|I-PER said|O", "in|O Borburg|I-LOC mr|O Alson|I-PER", "said|O in|O Calburg|I-LOC", "Ö|O"].join("\n"),
  "train.txt",
);
const TINY = {
  embed: 4,
  hidden: 3,
  mlp: 3,
  splitSeed: 1,
  charEmbed: 2,
  minCount: 2,
  rnn: "steps" as const,
  density: 1,
};
/** Both tasks, typed as the one with more options (the word-only tagger ignores the character options). */
type TaggerTask = typeof charBiLstmTask;
const TASKS: readonly TaggerTask[] = [biLstmTask as unknown as TaggerTask, charBiLstmTask];

function tiny(task: TaggerTask, seed = 3, sentences = TRAIN) {
  const vocab = task.vocabulary.build(sentences, TINY);
  return { vocab, model: task.create(TINY, vocab, seed) as TaggerTaskModel };
}

describe("the taggers' graphs", () => {
  test("the loss is docs/MODELS.md's, transcribed in plain loops (float64)", () => {
    for (const task of TASKS) {
      const { model } = tiny(task);
      const engine = new CpuEngine(model.params, { precision: "f64" });
      const cg = new ComputationGraph();
      for (const s of TRAIN) {
        cg.renew();
        const got = engine.valueExact(model.buildBatchLoss(cg, [s]))[0]!;
        const want = referenceLoss(model, s);
        assert.ok(
          Math.abs(got - want) < 1e-9 * Math.max(1, want),
          `${task.name} '${s.words.join(" ")}': ${got} vs ${want}`,
        );
      }
    }
  });

  test("float64 gradient checks of a batch (spelled words, a one-word sentence)", () => {
    for (const task of TASKS) {
      const { model } = tiny(task, 5);
      const { checked, mismatches } = gradientCheck(model.params, (cg) => model.buildBatchLoss(cg, TRAIN));
      assert.deepEqual(mismatches.slice(0, 3), [], `${task.name}: ${mismatches.length} of ${checked}`);
      assert.ok(checked > 250, `${task.name}: ${checked} elements checked`);
    }
  });

  test("every engine without a GPU equals the CPU engine: autobatch CPU and emulated device, VPPS emulated", async () => {
    const sentences = syntheticTaggedSentences(30, 4);
    for (const task of TASKS) {
      const vocab = task.vocabulary.build(sentences, { ...TINY, minCount: 5 });
      const batch = sentences.slice(0, 5);
      const model = task.create(TINY, vocab, 2) as TaggerTaskModel;
      const spelled = batch.flatMap((s) => model.encode(s).spelled.filter((c) => c !== null));
      if (task === charBiLstmTask) assert.ok(spelled.length >= 3, `${spelled.length} spelled words in the batch`);
      for (const engine of CPU_SIDE_ENGINES) {
        const make = () => {
          const m = task.create(TINY, vocab, 2);
          return { params: m.params, build: (cg: ComputationGraph) => m.buildBatchLoss(cg, batch) };
        };
        assert.equal(await compareWithCpu(make, engine), "", `${task.name} on ${engine.name}`);
      }
    }
  });

  test("VPPS runs the taggers: no op of their graphs is refused, and the paper's sizes fit an H100's registers", () => {
    const refused = refusedOps();
    for (const task of TASKS) {
      const { model } = tiny(task);
      const cg = new ComputationGraph();
      model.buildBatchLoss(cg, TRAIN);
      const ops = new Set<number>();
      for (let i = 0; i < cg.size; i++) ops.add(cg.op[i]!);
      assert.ok(ops.has(Op.LstmCell) && ops.has(Op.Input) && ops.has(Op.Lookup), [...ops].map((o) => Op[o]).join());
      for (const op of ops) assert.equal(refused[op], 0, `${task.name}: VPPS refuses ${Op[op]}`);
      const plan = planVpps(onChipMatrices(task.parameterShapes(task.defaults, 1)), H100_SXM);
      assert.ok(
        plan.matrices.every((m) => m.gradients === "registers"),
        `${task.name}: gradients in registers`,
      );
    }
  });

  test("training steps (SGD and Adam, clipping at 1) on autobatch CPU and the emulated device equal the CPU engine's", () => {
    const sentences = syntheticTaggedSentences(12, 6);
    for (const task of TASKS) {
      const vocab = task.vocabulary.build(sentences, { ...TINY, minCount: 3 });
      for (const optimizer of ["sgd", "adam"] as const) {
        const engines: [string, (p: ParameterCollection) => Engine][] = [
          ["autobatch CPU depth", (p) => new AutobatchCpuEngine(p, { strategy: "depth" })],
          ["autobatch CPU agenda", (p) => new AutobatchCpuEngine(p, { strategy: "agenda" })],
          [
            "autobatch GPU agenda (emulated)",
            (p) => new AutobatchGpuEngine(p, { strategy: "agenda" }, new EmulatedAutobatchDevice(p)),
          ],
        ];
        const reference = trainSteps(task, vocab, sentences, optimizer, (p) => new CpuEngine(p));
        for (const [name, make] of engines) {
          const got = trainSteps(task, vocab, sentences, optimizer, make);
          const what = `${task.name} ${optimizer} on ${name}`;
          got.losses.forEach((l, k) => {
            assert.ok(Math.abs(l - reference.losses[k]!) <= 1e-4 * Math.max(1, l), `${what}: loss ${k}`);
          });
          for (const p of reference.params.all) {
            const k = scaleTolerance(1e-4).values(got.params.get(p.name).value, p.value);
            assert.equal(k, -1, `${what}: '${p.name}' element ${k} after 3 updates`);
          }
        }
      }
    }
  });
});

/** Three steps of 4 sentences on one engine: the losses and the parameters after them (on the host). */
function trainSteps(
  task: TaggerTask,
  vocab: TaggerVocabulary,
  sentences: ReturnType<typeof syntheticTaggedSentences>,
  optimizer: "sgd" | "adam",
  make: (p: ParameterCollection) => Engine,
) {
  const model = task.create(TINY, vocab, 7);
  const engine = make(model.params);
  const trainer = makeTrainer(optimizer, { learningRate: optimizer === "sgd" ? 0.5 : 0.05, clipThreshold: 1 });
  const cg = new ComputationGraph();
  const losses: number[] = [];
  for (let step = 0; step < 3; step++) {
    cg.renew();
    const loss = model.buildBatchLoss(cg, sentences.slice(4 * step, 4 * step + 4));
    losses.push(engine.forwardScalar(loss));
    engine.backward(loss);
    engine.update(trainer);
  }
  engine.syncToHost();
  engine.dispose();
  return { losses, params: model.params };
}

describe("the taggers' tasks", () => {
  test("parameter shapes without allocating: the models' own, and the plan's (WikiNER's 5 tags)", () => {
    const listed = (pc: ParameterCollection) =>
      pc.all.map((p) =>
        p.kind === "lookup"
          ? { kind: p.kind, name: p.name, rows: p.rows, cols: p.cols }
          : { kind: p.kind, name: p.name, rows: p.rows, cols: p.cols, isMatrix: p.isMatrix },
      );
    const { vocab, model } = tiny(TASKS[0]!);
    const sizes = { vocabSize: vocab.words.size, tags: vocab.tags.size, embed: 4, hidden: 3, mlp: 3 };
    assert.deepEqual(biLstmTaggerShapes(sizes), listed(model.params));
    const char = tiny(charBiLstmTask);
    const charSizes = { ...sizes, vocabSize: char.vocab.words.size, charCount: char.vocab.chars!.size, charEmbed: 2 };
    assert.deepEqual(charTaggerShapes(charSizes), listed(char.model.params));
    assert.deepEqual(
      onChipMatrices(charTaggerShapes(charSizes)).map((m) => m.name),
      ["Wx_f", "Wh_f", "Wx_b", "Wh_b", "W_mlp", "W_out", "Wx_cf", "Wh_cf", "Wx_cb", "Wh_cb"],
    );
    // the tasks' shapes (what `vpps plan` plans) at the default sizes
    const plan = onChipMatrices(charBiLstmTask.parameterShapes(charBiLstmTask.defaults, 1));
    assert.deepEqual(
      plan.map((m) => `${m.name} ${m.rows}x${m.cols}`),
      [
        "Wx_f 1024x256",
        "Wh_f 1024x256",
        "Wx_b 1024x256",
        "Wh_b 1024x256",
        "W_mlp 256x512",
        `W_out ${PLAN_TAGS}x256`,
        "Wx_cf 512x64",
        "Wh_cf 512x128",
        "Wx_cb 512x64",
        "Wh_cb 512x128",
      ],
    );
    assert.deepEqual(onChipMatrices(biLstmTask.parameterShapes(biLstmTask.defaults, 9)), plan.slice(0, 6));
  });

  test("bilstm-char refuses an odd embedding size in one line", () => {
    assert.throws(
      () => charBiLstmTask.parameterShapes({ ...charBiLstmTask.defaults, embed: 255 }, 1),
      (e: unknown) => e instanceof ShapeError && /^bilstm-char: --embed 255 must be even/.test(e.message),
    );
    assert.throws(
      () => tiny(charBiLstmTask).vocab && charBiLstmTask.create({ ...TINY, embed: 5 }, tiny(charBiLstmTask).vocab, 1),
      ShapeError,
    );
  });

  test("encoding: unknown words are <unk>; only words outside the table are spelled; unknown characters are 0", () => {
    const [s] = parseTagged("mr|O Zed|I-PER Borburg|I-LOC", "eval.txt");
    const plain = tiny(TASKS[0]!).model.encode(s!);
    assert.deepEqual([...plain.words], [1, 0, 5]);
    assert.deepEqual(plain.spelled, [], "the word-only tagger spells nothing");
    const { vocab, model } = tiny(charBiLstmTask);
    assert.deepEqual(vocab.words.toJSON(), ["<unk>", "mr", "Alson", "said", "in"]);
    const e = model.encode(s!);
    assert.deepEqual([...e.words], [1, 0, 0]);
    assert.deepEqual(e.tags, Int32Array.of(0, 1, 2));
    const chars = vocab.chars!;
    assert.deepEqual([...e.spelled[1]!], [0, chars.index("e"), chars.index("d")], "'Z' was never seen");
    assert.equal(e.spelled[0], null);
    assert.equal(model.encode(s!), e, "remembered");
  });

  test("a tag outside the training tags is refused at its file:line:column when a sentence is scored", () => {
    const { model } = tiny(TASKS[0]!);
    const [, s] = parseTagged("mr|O\nmr|O Alson|I-ORG", "eval.txt");
    assert.throws(
      () => model.buildScores(new ComputationGraph(), s!),
      (e: unknown) =>
        e instanceof TaggedFormatError &&
        e.message ===
          "eval.txt:2:12: unknown tag 'I-ORG': expected one of the tags of the training split (O, I-PER, I-LOC)",
    );
  });

  test("saved options and vocabulary rebuild the model; a malformed saved option is refused naming it", () => {
    for (const task of TASKS) {
      const { vocab, model } = tiny(task);
      const given: Record<string, number | string> = { ...TINY, splitSeed: 4 };
      const options = Object.fromEntries(task.options.map((o) => [o.key, given[o.key]])) as unknown as typeof TINY;
      const saved = JSON.parse(JSON.stringify(task.savedOptions(options, model)));
      assert.equal(saved.splitSeed, 4, "--split-seed is saved");
      const restored = task.restoreOptions(saved, task.defaults);
      assert.deepEqual(restored, options);
      const again = task.vocabulary.fromJSON(JSON.parse(JSON.stringify(task.vocabulary.toJSON(vocab))));
      assert.deepEqual(again.toJSON(), vocab.toJSON());
      assert.deepEqual(
        task.create(restored, again, 3).params.all.map((p) => p.value),
        model.params.all.map((p) => p.value),
      );
      assert.throws(
        () => task.restoreOptions({ ...saved, mlp: 0 }, task.defaults),
        /options\.mlp must be a positive integer/,
      );
    }
    assert.throws(() => charBiLstmTask.vocabulary.fromJSON({ words: ["<unk>"], tags: ["O"] }), /no 'chars'/);
  });
});

describe("learning the synthetic task through the training loop", () => {
  test("both taggers reach a high entity F1 in two epochs (tiny sizes); evaluation is deterministic", () => {
    const data = biLstmTask.data.synthetic.make(2);
    const trainSet = data.train.slice(0, 400);
    for (const task of TASKS) {
      const options = { ...task.defaults, embed: 12, hidden: 12, mlp: 12, charEmbed: 6 };
      const vocab = task.vocabulary.build(trainSet, options);
      const { model, summary } = trainLoop({
        task,
        options,
        train: trainSet,
        dev: data.dev,
        vocab,
        epochs: 2,
        batch: 8,
        learningRate: 0.02,
        optimizer: "adam",
        seed: 1,
        makeEngine: (p) => new CpuEngine(p),
      });
      const last = summary.epochs[1]!;
      assert.deepEqual(Object.keys(last.devMetrics), ["entityF1", "tokenAccuracy"]);
      assert.equal(last.devAccuracy, last.devMetrics.entityF1);
      // always O gives entity F1 0 and 77% of the tokens
      assert.ok(last.devMetrics.entityF1! > 0.8, `${task.name}: entity F1 ${last.devMetrics.entityF1}`);
      assert.ok(last.devMetrics.tokenAccuracy! > 0.9, `${task.name}: token accuracy ${last.devMetrics.tokenAccuracy}`);
      const again = evaluate(model, task.metrics, vocab, new CpuEngine(model.params), data.dev);
      assert.deepEqual(again, last.devMetrics);
      console.log(
        `${task.name}: dev entity F1 ${last.devMetrics.entityF1}, token accuracy ${last.devMetrics.tokenAccuracy}`,
      );
    }
  });
});
