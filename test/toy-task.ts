// A second task on the model interface, unlike the Tree-LSTM in every type the interface is generic over: its
// examples are tagged sentences (one loss and one prediction per word), its vocabulary is words plus a tag count, and
// it has two metrics. The training loop, evaluation and checkpoints must work for it unchanged.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Vocabulary } from "../src/data/vocab.js";
import type { ComputationGraph, Expression } from "../src/graph/graph.js";
import type { LookupParameter, Parameter } from "../src/model/parameters.js";
import { ParameterCollection } from "../src/model/parameters.js";
import { checkModelOption, DataError, type Metric, type Task, type TaskModel } from "../src/models/task.js";
import { affine, lookup, pickNegLogSoftmax, sum } from "../src/ops/index.js";

export interface TaggedSentence {
  words: string[];
  tags: number[];
}

export interface ToyVocabulary {
  words: Vocabulary;
  tags: number;
}

export type ToyOptions = { readonly embed: number };

const WORDS = ["ba", "de", "fi", "go", "ku", "la", "me", "ni", "po", "ru", "sa", "te"];

/** Tag of word w: 1 for the words whose index is a multiple of 3, else 0 (the task is a lookup). */
const tagOf = (w: string): number => (WORDS.indexOf(w) % 3 === 0 ? 1 : 0);

/** `count` sentences of 2..6 words, a pure function of `seed`. */
export function toySentences(count: number, seed: number): TaggedSentence[] {
  let state = seed >>> 0 || 1;
  const next = (n: number): number => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state % n;
  };
  const out: TaggedSentence[] = [];
  for (let k = 0; k < count; k++) {
    const words = Array.from({ length: 2 + next(5) }, () => WORDS[next(WORDS.length)]!);
    out.push({ words, tags: words.map(tagOf) });
  }
  return out;
}

/** `word|tag` tokens, one sentence per line. */
function parseSentences(text: string, file: string): TaggedSentence[] {
  return text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((line, i) => {
      const tokens = line.trim().split(/\s+/);
      const words: string[] = [];
      const tags: number[] = [];
      for (const t of tokens) {
        const [w, tag] = t.split("|");
        if (w === undefined || tag === undefined) throw new DataError(`${file}:${i + 1}: expected word|tag; got ${t}`);
        words.push(w);
        tags.push(Number(tag));
      }
      return { words, tags };
    });
}

class ToyTagger implements TaskModel<TaggedSentence> {
  readonly params: ParameterCollection;
  private readonly E: LookupParameter;
  private readonly W: Parameter;
  private readonly b: Parameter;

  constructor(
    private readonly vocab: ToyVocabulary,
    embed: number,
    seed: number,
  ) {
    this.params = new ParameterCollection({ seed });
    this.E = this.params.addLookupParameters(vocab.words.size, embed, undefined, "E");
    this.W = this.params.addParameters([vocab.tags, embed], undefined, "W");
    this.b = this.params.addParameters(vocab.tags, undefined, "b");
  }

  buildBatchLoss(cg: ComputationGraph, sentences: readonly TaggedSentence[]): Expression {
    const losses: Expression[] = [];
    for (const s of sentences) {
      this.buildScores(cg, s).forEach((scores, i) => {
        losses.push(pickNegLogSoftmax(scores, s.tags[i]!));
      });
    }
    return sum(losses);
  }

  lossUnits(s: TaggedSentence): number {
    return s.words.length;
  }

  buildScores(cg: ComputationGraph, s: TaggedSentence): Expression[] {
    return s.words.map((w) => affine([this.b, this.W, lookup(cg, this.E, this.vocab.words.index(w))]));
  }
}

const tokenAccuracy: Metric<TaggedSentence, ToyVocabulary> = {
  key: "tokenAccuracy",
  name: "token accuracy",
  compute(sentences, predicted) {
    let right = 0;
    let all = 0;
    sentences.forEach((s, k) => {
      s.tags.forEach((t, i) => {
        all++;
        if (predicted[k]![i] === t) right++;
      });
    });
    return all === 0 ? 0 : right / all;
  },
};

const sentenceAccuracy: Metric<TaggedSentence, ToyVocabulary> = {
  key: "sentenceAccuracy",
  name: "sentence accuracy",
  compute(sentences, predicted) {
    let right = 0;
    sentences.forEach((s, k) => {
      if (s.tags.every((t, i) => predicted[k]![i] === t)) right++;
    });
    return sentences.length === 0 ? 0 : right / sentences.length;
  },
};

const EMBED = {
  key: "embed",
  flag: "--embed <n>",
  help: "word embedding size",
  type: { kind: "positive-int" },
} as const;

export const toyTask: Task<TaggedSentence, ToyVocabulary, ToyOptions, ToyTagger> = {
  name: "toy-tagger",
  title: "toy tagger",
  description: "a word-by-word tagger of a made-up language (tests only)",
  options: [{ ...EMBED, planLabel: "embedding" }],
  defaults: { embed: 8 },
  data: {
    help: "directory with train.txt and dev.txt (word|tag tokens, one sentence per line)",
    noun: "sentences",
    fromDirectory: (dir) => ({
      train: parseSentences(readFileSync(join(dir, "train.txt"), "utf8"), "train.txt"),
      dev: parseSentences(readFileSync(join(dir, "dev.txt"), "utf8"), "dev.txt"),
      source: dir,
    }),
    fromFile: (path) => parseSentences(readFileSync(path, "utf8"), path),
    synthetic: {
      description: "made-up tagged sentences",
      make: (seed) => ({ train: toySentences(300, seed), dev: toySentences(60, seed + 1), source: "toy sentences" }),
    },
  },
  vocabulary: {
    build: (train) => ({
      words: Vocabulary.fromWords(train.flatMap((s) => s.words)),
      tags: 1 + Math.max(...train.flatMap((s) => s.tags)),
    }),
    toJSON: (v) => ({ words: v.words.toJSON(), tags: v.tags }),
    fromJSON: (json) => {
      const j = json as { words: string[]; tags: number };
      return { words: Vocabulary.fromJSON(j.words), tags: j.tags };
    },
    describe: (v) => `vocabulary ${v.words.size} words, ${v.tags} tags`,
    size: (v) => v.words.size,
  },
  metrics: [tokenAccuracy, sentenceAccuracy],
  create: (options, vocab, seed) => new ToyTagger(vocab, options.embed, seed),
  parameterShapes: (options, vocabSize) => [
    { kind: "lookup", name: "E", rows: vocabSize, cols: options.embed },
    { kind: "dense", name: "W", rows: 2, cols: options.embed, isMatrix: true },
    { kind: "dense", name: "b", rows: 2, cols: 1, isMatrix: false },
  ],
  describe: (o) => `toy tagger, embedding ${o.embed}`,
  savedOptions: (o) => ({ embed: o.embed }),
  restoreOptions(saved, current) {
    const embed = (saved as { embed?: unknown }).embed;
    const why = checkModelOption(EMBED, embed);
    if (why !== null) throw new Error(`options.embed ${why}`);
    return { ...current, embed: embed as number };
  },
};
