/**
 * Tiny instances of the sentence models (TD-RNN, TD-LSTM, RvNN) and batches for them, shared by the CPU-side tests
 * (test/sentence-models.test.ts, test/sentence-engines.test.ts) and the GPU test (test/gpu/models-sentences.test.ts).
 * The batches have one-word and two-word sentences, repeated words (one lookup row read by several leaves) and a
 * word outside the vocabulary.
 */
import { parseTrees } from "../src/data/sst.js";
import type { TreeNode } from "../src/data/tree.js";
import { Vocabulary } from "../src/data/vocab.js";
import type { ComputationGraph, Expression } from "../src/graph/graph.js";
import type { ParameterCollection } from "../src/model/parameters.js";
import { RvnnModel } from "../src/models/rvnn/model.js";
import { type Sentence, sentenceOf } from "../src/models/shared/sst-data.js";
import { TdLstmModel } from "../src/models/td-lstm/model.js";
import { TdRnnModel } from "../src/models/td-rnn/model.js";

export const CASE_TREES: readonly TreeNode[] = parseTrees(
  [
    "(3 (2 (2 The) (2 Rock)) (4 (3 (2 is) (4 destined)) (2 .)))",
    "(1 (2 not) (1 (0 awful) (2 .)))",
    "(2 word)",
    "(0 (1 (1 a) (2 a)) (2 b))",
    "(4 (4 (4 (4 (3 a) (2 b)) (1 c)) (0 d)) (2 e))",
    "(3 (2 The) (3 unseen))",
  ].join("\n"),
);
export const CASE_SENTENCES: readonly Sentence[] = CASE_TREES.map(sentenceOf);
/** Every word but "unseen": it reads the unknown word's row. */
export const CASE_VOCAB = Vocabulary.fromTrees(CASE_TREES.slice(0, 5) as TreeNode[]);

/** A model's parameters and its loss over a batch, as the engine comparisons take them. */
export interface SentenceCase {
  readonly params: ParameterCollection;
  build(cg: ComputationGraph, batch?: number[]): Expression;
}

/** The three models by name, at sizes `hidden` and `embed` (TD-RNN: both `hidden`); `batch` picks examples. */
export const SENTENCE_MODELS: readonly {
  readonly name: string;
  make(seed: number, hidden: number, embed: number): SentenceCase;
}[] = [
  {
    name: "td-rnn",
    make(seed, hidden) {
      const m = new TdRnnModel({ vocabSize: CASE_VOCAB.size, hidden, seed });
      return { params: m.params, build: (cg, b) => m.buildBatchLoss(cg, pick(CASE_SENTENCES, b), CASE_VOCAB) };
    },
  },
  {
    name: "td-lstm",
    make(seed, hidden, embed) {
      const m = new TdLstmModel({ vocabSize: CASE_VOCAB.size, hidden, embed, seed });
      return { params: m.params, build: (cg, b) => m.buildBatchLoss(cg, pick(CASE_SENTENCES, b), CASE_VOCAB) };
    },
  },
  {
    name: "rvnn",
    make(seed, hidden, embed) {
      const m = new RvnnModel({ vocabSize: CASE_VOCAB.size, hidden, embed, seed });
      return { params: m.params, build: (cg, b) => m.buildBatchLoss(cg, pick(CASE_TREES, b), CASE_VOCAB) };
    },
  },
];

function pick<E>(examples: readonly E[], batch: number[] | undefined): E[] {
  return batch === undefined ? [...examples] : batch.map((k) => examples[k]!);
}
