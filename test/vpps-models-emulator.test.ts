// All six benchmark models (Tree-LSTM fused and from plain ops, RvNN, TD-RNN, TD-LSTM, the BiLSTM tagger and the
// tagger with characters) on the VPPS script emulator against the CPU engine: the loss, every gradient and every
// updated weight, for batches of 1 to 16 examples, with SGD (global-norm clipping) and with Adam over several batches,
// in random interleavings of the processors that respect only the scripts' signal/wait. The batches hold what makes
// scheduling hard: long dependent chains (tagger sentences of 20–60 words each way, the character LSTMs of many rare
// words) and DAGs where one node feeds two parents (the TD pyramids). Sizes are tiny so the file stays fast in CI;
// test/gpu/vpps-models.test.ts runs the same comparison at the paper's sizes on a GPU.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type DeviceModel, H100_SXM } from "../src/cuda/hw/device-model.js";
import { syntheticTrees } from "../src/data/synthetic.js";
import { syntheticTaggedSentences } from "../src/data/synthetic-tagged.js";
import type { TaggedSentence } from "../src/data/tagged.js";
import { Vocabulary } from "../src/data/vocab.js";
import { createModelLayout } from "../src/engines/vpps/plan/layout.js";
import { type PlanOptions, planVpps } from "../src/engines/vpps/plan/plan.js";
import { VppsScheduler } from "../src/engines/vpps/schedule/scheduler.js";
import { emulateBatch } from "../src/engines/vpps/script/emulate-batch.js";
import { instructionWords, Opcode } from "../src/engines/vpps/script/format.js";
import { ComputationGraph, type Expression } from "../src/graph/graph.js";
import { onChipMatrices, type ParameterCollection } from "../src/model/parameters.js";
import { biLstmTask } from "../src/models/bilstm/task.js";
import { charBiLstmTask } from "../src/models/bilstm-char/task.js";
import { RvnnModel } from "../src/models/rvnn/model.js";
import { sentenceOf } from "../src/models/shared/sst-data.js";
import { TdLstmModel } from "../src/models/td-lstm/model.js";
import { TdRnnModel } from "../src/models/td-rnn/model.js";
import { TreeLstmModel } from "../src/models/treelstm/model.js";
import { referenceSgdBatch, tensorDifference } from "./vpps-reference.js";
import { adamTrajectories } from "./vpps-trajectories.js";

/** A small GPU: few CTAs, so matrices spread over several slots of each CTA and processors share work. */
const SMALL: DeviceModel = { ...H100_SXM, name: "small test GPU", smCount: 3 };
const LR = 0.1;
const CLIP = 1;

/** One model instance and a batch builder over its examples. */
interface ModelCase {
  readonly params: ParameterCollection;
  /** How many examples `build` may pick from. */
  readonly examples: number;
  build(cg: ComputationGraph, batch: readonly number[]): Expression;
}

/** Tagged sentences of `min`..`max` words: synthetic sentences joined until long enough (tags stay consistent). */
function longSentences(count: number, min: number, max: number, seed: number): TaggedSentence[] {
  const pieces = syntheticTaggedSentences(count * 12, seed);
  const out: TaggedSentence[] = [];
  let k = 0;
  for (let i = 0; i < count; i++) {
    const target = min + ((i * 7919 + seed) % (max - min + 1));
    const words: string[] = [];
    const tags: string[] = [];
    while (words.length < target) {
      const p = pieces[k++ % pieces.length]!;
      for (let j = 0; j < p.words.length && words.length < target; j++) {
        words.push(p.words[j]!);
        tags.push(p.tags[j]!);
      }
    }
    // the columns of the tags as if the sentence were a line `word|TAG word|TAG …` of a file
    const tagColumns: number[] = [];
    let column = 1;
    for (const [k, w] of words.entries()) {
      tagColumns.push(column + [...w].length + 1);
      column += [...w].length + 1 + tags[k]!.length + 1;
    }
    out.push({ words, tags, file: "long synthetic", line: i + 1, tagColumns });
  }
  return out;
}

const TAGGER_SIZES = { embed: 4, hidden: 3, mlp: 3, splitSeed: 1, charEmbed: 2, rnn: "steps" as const, density: 1 };

/**
 * The six models by name. Trees: 3–12 words; pyramids: 2–9 words (a 9-word pyramid is 36 compositions deep 8);
 * tagger sentences: 20–60 words (a bilstm-char batch of 16 spells hundreds of rare words, each a character LSTM).
 */
const MODELS: readonly { readonly name: string; make(seed: number): ModelCase }[] = [
  ...(["fused", "ops"] as const).map((cell) => ({
    name: `treelstm (${cell})`,
    make(seed: number): ModelCase {
      const trees = syntheticTrees(16, seed);
      const vocab = Vocabulary.fromTrees(trees.slice(0, 12));
      const m = new TreeLstmModel({ vocabSize: vocab.size, embed: 4, hidden: 3, cell, seed });
      return { params: m.params, examples: 16, build: (cg, b) => m.buildBatchLoss(cg, pick(trees, b), vocab) };
    },
  })),
  {
    name: "rvnn",
    make(seed) {
      const trees = syntheticTrees(16, seed);
      const vocab = Vocabulary.fromTrees(trees.slice(0, 12));
      const m = new RvnnModel({ vocabSize: vocab.size, embed: 4, hidden: 3, seed });
      return { params: m.params, examples: 16, build: (cg, b) => m.buildBatchLoss(cg, pick(trees, b), vocab) };
    },
  },
  {
    name: "td-rnn",
    make(seed) {
      const trees = syntheticTrees(16, seed, { minWords: 1, maxWords: 9 });
      const vocab = Vocabulary.fromTrees(trees.slice(0, 12));
      const sentences = trees.map(sentenceOf);
      const m = new TdRnnModel({ vocabSize: vocab.size, hidden: 4, seed });
      return { params: m.params, examples: 16, build: (cg, b) => m.buildBatchLoss(cg, pick(sentences, b), vocab) };
    },
  },
  {
    name: "td-lstm",
    make(seed) {
      const trees = syntheticTrees(16, seed, { minWords: 1, maxWords: 9 });
      const vocab = Vocabulary.fromTrees(trees.slice(0, 12));
      const sentences = trees.map(sentenceOf);
      const m = new TdLstmModel({ vocabSize: vocab.size, embed: 4, hidden: 3, seed });
      return { params: m.params, examples: 16, build: (cg, b) => m.buildBatchLoss(cg, pick(sentences, b), vocab) };
    },
  },
  {
    name: "bilstm",
    make(seed) {
      const sentences = longSentences(16, 20, 60, seed);
      const vocab = biLstmTask.vocabulary.build(sentences.slice(0, 12), { ...TAGGER_SIZES });
      const m = biLstmTask.create({ ...biLstmTask.defaults, ...TAGGER_SIZES }, vocab, seed);
      return { params: m.params, examples: 16, build: (cg, b) => m.buildBatchLoss(cg, pick(sentences, b)) };
    },
  },
  {
    name: "bilstm-char",
    make(seed) {
      const sentences = longSentences(16, 20, 60, seed);
      const options = { ...charBiLstmTask.defaults, ...TAGGER_SIZES, minCount: 4 };
      const vocab = charBiLstmTask.vocabulary.build(sentences.slice(0, 12), options);
      const m = charBiLstmTask.create(options, vocab, seed);
      return { params: m.params, examples: 16, build: (cg, b) => m.buildBatchLoss(cg, pick(sentences, b)) };
    },
  },
];

function pick<E>(examples: readonly E[], batch: readonly number[]): E[] {
  return batch.map((k) => examples[k]!);
}

/** Batch sizes compared with SGD, and the plans (each with its interleavings) they run on. */
const SGD_BATCHES: readonly (readonly number[])[] = [[5], [0, 3, 7, 9], [1, 2, 4, 6, 8, 10, 12, 13, 14], range(0, 16)];
const PLANS: readonly { name: string; plan: PlanOptions; device: DeviceModel; tileEntries?: number }[] = [
  { name: "1 CTA/SM, rpw 1", plan: { ctasPerSm: 1, rowsPerWarp: 1 }, device: SMALL },
  {
    name: "2 CTAs/SM, rpw 2, transposed copies",
    plan: { ctasPerSm: 2, rowsPerWarp: 2, transposed: true },
    device: SMALL,
  },
  { name: "tiles (tileEntries 4)", plan: { ctasPerSm: 1, rowsPerWarp: 1 }, device: SMALL, tileEntries: 4 },
  { name: "gradients by GEMM (host update)", plan: { ctasPerSm: 1, rowsPerWarp: 1, gradients: "gemm" }, device: SMALL },
  { name: "132 CTAs (H100 grid)", plan: { ctasPerSm: 1, rowsPerWarp: 1 }, device: H100_SXM },
];

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from }, (_, i) => from + i);
}

describe("every model on the VPPS emulator equals the CPU engine", () => {
  for (const { name, make } of MODELS) {
    test(`${name}: SGD with clipping, batches of 1, 4, 9 and 16, ${PLANS.length} plans, random and greedy interleavings`, () => {
      const c = make(11);
      const values = c.params.all.map((p) => p.value);
      let stalls = 0;
      let waits = 0;
      for (const batch of SGD_BATCHES) {
        const cg = new ComputationGraph();
        const loss = c.build(cg, batch);
        const ref = referenceSgdBatch(c.params, loss, LR, CLIP);
        for (const p of PLANS) {
          const model = createModelLayout(c.params.all, planVpps(onChipMatrices(c.params), p.device, p.plan));
          const opts = {
            exportGradients: true,
            ...(p.tileEntries !== undefined ? { tileEntries: p.tileEntries } : {}),
          };
          const sched = new VppsScheduler(model, opts).schedule(cg, loss);
          waits += countWaits(sched.script, model.plan.ctas);
          for (const [seed, interleaving] of [
            [batch.length, "random"],
            [batch.length + 1, "random"],
            [batch.length + 2, "greedy"],
          ] as const) {
            const got = emulateBatch(model, sched, cg, values, { seed, interleaving, learningRate: LR, clip: CLIP });
            stalls += got.stats.stalls;
            const where = `batch of ${batch.length}, ${p.name}, ${interleaving} seed ${seed}`;
            assert.ok(
              Math.abs(got.loss - ref.loss) <= 1e-5 * Math.max(1, Math.abs(ref.loss)),
              `${where}: loss CPU ${ref.loss}, VPPS ${got.loss}`,
            );
            for (const [i, q] of c.params.all.entries()) {
              const step = (v: Float32Array) => Float32Array.from(v, (x, k) => x - q.value[k]!);
              const d =
                tensorDifference(`gradient of ${q.name}`, ref.gradients[i]!, got.gradients[i]!) ||
                tensorDifference(`update of ${q.name}`, step(ref.values[i]!), step(got.values[i]!));
              assert.equal(d, "", where);
            }
          }
        }
      }
      assert.ok(waits > 0, "no script waited: the batches did not cross processors");
      assert.ok(stalls > 0, "no processor ever waited: the interleavings did not test the barriers");
    });

    test(`${name}: 3 Adam batches (1, 8 and 3 examples) with clipping, in the kernel and with tiles`, () => {
      const c = make(23);
      const batches = [[2], range(4, 12), [15, 0, 9]];
      const graphs = (k: number) => {
        const cg = new ComputationGraph();
        return { cg, loss: c.build(cg, batches[k]!) };
      };
      const loose = { count: 0, total: 0 };
      for (const tileEntries of [undefined, 4]) {
        const out = adamTrajectories(
          c.params,
          graphs,
          SMALL,
          { ctasPerSm: 1, rowsPerWarp: 1 },
          CLIP,
          0.01,
          batches.length,
          loose,
          tileEntries,
        );
        assert.deepEqual(out.slice(0, 3), [], `tileEntries ${tileEntries ?? "default"}`);
      }
      assert.ok(loose.count <= 0.01 * loose.total, `${loose.count} of ${loose.total} steps compared loosely`);
    });
  }

  test("the comparison sees a forgotten wait: with every wait's count set to 0, each model's batch of 4 mismatches", () => {
    for (const { name, make } of MODELS) {
      const c = make(11);
      const cg = new ComputationGraph();
      const loss = c.build(cg, [0, 3, 7, 9]);
      const ref = referenceSgdBatch(c.params, loss, LR, CLIP);
      const model = createModelLayout(c.params.all, planVpps(onChipMatrices(c.params), SMALL, PLANS[0]!.plan));
      const sched = new VppsScheduler(model, { exportGradients: true }).schedule(cg, loss);
      const script = Uint32Array.from(sched.script);
      const ctas = model.plan.ctas;
      for (let cta = 0; cta < ctas; cta++) {
        const end = ctas + 1 + script[cta + 1]!;
        for (let at = ctas + 1 + script[cta]!; at < end; at += instructionWords(script, at)) {
          if ((script[at]! & 0xff) === Opcode.Wait) script[at + 1] = 0;
        }
      }
      const broken = { ...sched, script };
      let caught = false;
      for (let seed = 1; seed <= 8 && !caught; seed++) {
        const got = emulateBatch(
          model,
          broken,
          cg,
          c.params.all.map((p) => p.value),
          {
            seed,
            interleaving: "random",
            learningRate: LR,
            clip: CLIP,
          },
        );
        caught =
          !(Math.abs(got.loss - ref.loss) <= 1e-5 * Math.max(1, Math.abs(ref.loss))) ||
          c.params.all.some((q, i) => tensorDifference(q.name, ref.gradients[i]!, got.gradients[i]!) !== "");
      }
      assert.ok(caught, `${name}: 8 random interleavings without waits all matched the CPU engine`);
    }
  });

  test("the batches are what the file promises: long tagger chains, many spelled words, pyramids", () => {
    const sentences = longSentences(16, 20, 60, 11);
    const lengths = sentences.map((s) => s.words.length);
    assert.ok(Math.min(...lengths) >= 20 && Math.max(...lengths) <= 60, lengths.join());
    assert.ok(Math.max(...lengths) >= 50, `longest sentence ${Math.max(...lengths)}`);
    const options = { ...charBiLstmTask.defaults, ...TAGGER_SIZES, minCount: 4 };
    const vocab = charBiLstmTask.vocabulary.build(sentences.slice(0, 12), options);
    const m = charBiLstmTask.create(options, vocab, 11);
    const spelled = sentences.flatMap((s) => m.encode(s).spelled.filter((w) => w !== null)).length;
    assert.ok(spelled >= 100, `${spelled} spelled words in 16 sentences`);
    const pyramids = syntheticTrees(16, 11, { minWords: 1, maxWords: 9 }).map((t) => sentenceOf(t).words.length);
    assert.ok(Math.max(...pyramids) >= 8, `longest pyramid ${Math.max(...pyramids)} words`);
  });
});

/** `wait` instructions in all processors' scripts. */
function countWaits(script: Uint32Array, ctas: number): number {
  let n = 0;
  for (let c = 0; c < ctas; c++) {
    const end = ctas + 1 + script[c + 1]!;
    for (let at = ctas + 1 + script[c]!; at < end; at += instructionWords(script, at)) {
      if ((script[at]! & 0xff) === Opcode.Wait) n++;
    }
  }
  return n;
}
