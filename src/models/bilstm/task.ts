/**
 * The BiLSTM tagger's registry entry, and what both taggers share (`taggerTask`): tagged sentences (--data split by
 * --split-seed, or the synthetic named-entity task), the tagger vocabulary, entity F1 and token accuracy, the
 * options every tagger takes. bilstm-char/task.ts is the same task with character features.
 */

import { splitSyntheticTagged } from "../../data/synthetic-tagged.js";
import { readTagged, type TaggedSentence } from "../../data/tagged.js";
import { loadTaggedSplits } from "../../data/tagged-split.js";
import type { GraphBuilderSpec } from "../../graph/builder.js";
import type { ComputationGraph, Expression } from "../../graph/graph.js";
import type { ParameterCollection, ParameterShape } from "../../model/parameters.js";
import { entityF1, tokenAccuracy } from "../metrics.js";
import { taskBuilderSpec } from "../shared/task-builder.js";
import { checkModelOption, type ModelOption, type ModelOptions, type Task, type TaskModel } from "../task.js";
import { BiLstmTagger, biLstmTaggerShapes, type SpelledSentence } from "./model.js";
import { TAGGER_RNNS, type TaggerRnn } from "./packed.js";
import { TaggerVocabulary } from "./vocabulary.js";

/** The options of every tagger: sizes, and the seed of the split of a single data file. */
export type TaggerOptions = {
  readonly embed: number;
  readonly hidden: number;
  readonly mlp: number;
  readonly splitSeed: number;
  /** How the BiLSTM runs: an affine and a cell per word (steps), or one rnn op per batch (persistent). */
  readonly rnn: TaggerRnn;
  /** The fraction of each BiLSTM's recurrent weights kept (row-balanced magnitude pruning; 1: dense). */
  readonly density: number;
};

/**
 * How many tags `vpps plan` assumes (WikiNER's O, I-PER, I-LOC, I-ORG, I-MISC): the output layer W_out [tags, mlp] is
 * a matrix VPPS holds, and a plan is made from the options alone.
 */
export const PLAN_TAGS = 5;

/** A tagger with its vocabulary, as the training loop uses it: sentences are encoded once and remembered. */
export class TaggerTaskModel implements TaskModel<TaggedSentence> {
  private readonly encoded = new WeakMap<TaggedSentence, SpelledSentence>();
  /**
   * Worker threads build its batches with the generic builder (shared/task-builder.ts) in the per-step formulation
   * (`--rnn persistent` batches are a handful of rnn-op nodes, nothing to move off the main thread).
   */
  readonly workerBuilder?: (train: readonly TaggedSentence[]) => GraphBuilderSpec;

  constructor(
    readonly net: BiLstmTagger<SpelledSentence>,
    readonly vocab: TaggerVocabulary,
    /** Its task's name and options: for worker threads (`workerBuilder`). */
    origin?: { readonly task: string; readonly options: TaggerOptions },
  ) {
    if (origin !== undefined && origin.options.rnn === "steps") {
      const { task, options } = origin;
      this.workerBuilder = (train) => taskBuilderSpec(task, options, vocab.toJSON(), train);
    }
  }

  get params(): ParameterCollection {
    return this.net.params;
  }

  /** `s` as the network reads it (a tag outside the training tags is an error at its file:line:column). */
  encode(s: TaggedSentence): SpelledSentence {
    let e = this.encoded.get(s);
    if (e === undefined) {
      e = this.vocab.encode(s);
      this.encoded.set(s, e);
    }
    return e;
  }

  buildBatchLoss(cg: ComputationGraph, sentences: readonly TaggedSentence[]): Expression {
    return this.net.buildBatchLoss(
      cg,
      sentences.map((s) => this.encode(s)),
    );
  }

  /** A loss at every word. */
  lossUnits(s: TaggedSentence): number {
    return s.words.length;
  }

  buildScores(cg: ComputationGraph, s: TaggedSentence): Expression[] {
    return this.net.buildScores(cg, this.encode(s));
  }
}

const positiveInt = { kind: "positive-int" } as const;

/** The options of every tagger (sizes first, as `vpps plan` names them). */
export const TAGGER_OPTIONS: readonly ModelOption[] = [
  { key: "embed", flag: "--embed <n>", help: "word embedding size", type: positiveInt, planLabel: "embedding" },
  {
    key: "hidden",
    flag: "--hidden <n>",
    help: "LSTM hidden size per direction",
    type: positiveInt,
    planLabel: "hidden",
  },
  {
    key: "mlp",
    flag: "--mlp <n>",
    help: "width of the tanh layer before the output",
    type: positiveInt,
    planLabel: "MLP",
  },
  {
    key: "splitSeed",
    flag: "--split-seed <n>",
    help: "seed of the train/dev/test split of a single --data file (docs/CLI.md states the rule)",
    type: positiveInt,
  },
  {
    key: "rnn",
    flag: "--rnn <kind>",
    help:
      "steps: an affine and an LSTM cell per word; persistent: each batch's BiLSTM as one rnn op over the packed " +
      "batch (PyTorch gate order, docs/MODELS.md)",
    type: { kind: "choice", choices: TAGGER_RNNS },
  },
  {
    key: "density",
    flag: "--density <d>",
    help:
      "with --rnn persistent: keep this fraction of each BiLSTM's recurrent weights W_hh, the largest of every row, " +
      "pruned once, from the initial weights (the pruned ones become 0 and stay 0; docs/RNN.md)",
    type: { kind: "density" },
  },
];

export const TAGGER_DEFAULTS: TaggerOptions = {
  embed: 256,
  hidden: 256,
  mlp: 256,
  splitSeed: 1,
  rnn: "steps",
  density: 1,
};

/** A tagger's own parts of its registry entry; `taggerTask` adds what every tagger shares. */
export interface TaggerSpec<O extends TaggerOptions> {
  readonly name: string;
  readonly title: string;
  readonly description: string;
  /** Its options beyond TAGGER_OPTIONS. */
  readonly options: readonly ModelOption[];
  readonly defaults: O;
  /** The vocabulary of the training sentences under these options. */
  buildVocabulary(train: readonly TaggedSentence[], options: O): TaggerVocabulary;
  /** Whether its vocabulary has characters (what state.json must hold). */
  readonly withChars: boolean;
  createNet(options: O, vocab: TaggerVocabulary, seed: number): BiLstmTagger<SpelledSentence>;
  parameterShapes(options: O, vocabSize: number): ParameterShape[];
  describe(options: O): string;
}

/** The registry entry of a tagger: `spec` with the data, vocabulary, metrics and options every tagger shares. */
export function taggerTask<O extends TaggerOptions>(
  spec: TaggerSpec<O>,
): Task<TaggedSentence, TaggerVocabulary, O, TaggerTaskModel> {
  const options = [...TAGGER_OPTIONS, ...spec.options];
  const optionsOf = (given: ModelOptions | undefined): O => ({ ...spec.defaults, ...given }) as O;
  const tagName = (v: TaggerVocabulary, i: number) => v.tags.name(i);
  const gold = (s: TaggedSentence) => s.tags;
  return {
    name: spec.name,
    title: spec.title,
    description: spec.description,
    options,
    defaults: spec.defaults,
    data: {
      help:
        "a directory with train.txt and dev.txt, or one file (or a directory with dev.txt alone, as " +
        "../shared/data/wikiner) split by --split-seed; word|TAG tokens, one sentence per line",
      noun: "sentences",
      fromDirectory: (dir, opts) =>
        loadTaggedSplits(dir, {
          splitSeed: optionsOf(opts.options).splitSeed,
          ...(opts.maxTrain === undefined ? {} : { maxTrain: opts.maxTrain }),
          ...(opts.test ? { test: true } : {}),
        }),
      fromFile: (path) => readTagged(path),
      synthetic: {
        description: "a small synthetic named-entity task",
        make: (seed) => ({ ...splitSyntheticTagged(seed), source: "synthetic named entities (no --data given)" }),
      },
    },
    vocabulary: {
      build: (train, given) => spec.buildVocabulary(train, optionsOf(given)),
      toJSON: (vocab) => vocab.toJSON(),
      fromJSON: (json) => TaggerVocabulary.fromJSON(json, spec.withChars),
      describe: (vocab) => vocab.describe(),
      size: (vocab) => vocab.words.size,
    },
    // entity F1 first: it decides the best epoch (83% of WikiNER's tokens are O, so token accuracy says little)
    metrics: [entityF1(gold, tagName), tokenAccuracy(gold, tagName)],
    create: (o, vocab, seed) =>
      new TaggerTaskModel(spec.createNet(o, vocab, seed), vocab, { task: spec.name, options: o }),
    parameterShapes: (o, vocabSize) => spec.parameterShapes(o, vocabSize),
    describe: (o) => spec.describe(o),
    savedOptions: (o) => Object.fromEntries(options.map((opt) => [opt.key, o[opt.key as keyof O]])),
    restoreOptions(saved, current) {
      if (typeof saved !== "object" || saved === null) throw new Error(`"options" must be an object; got ${saved}`);
      const record = saved as Record<string, unknown>;
      const restored: Record<string, unknown> = { ...current };
      // every option shapes the model or its data (the split, the word table): all come from the run
      for (const o of options) {
        // runs saved before --rnn or --density existed ran the per-step formulation, dense
        if ((o.key === "rnn" || o.key === "density") && record[o.key] === undefined) continue;
        const why = checkModelOption(o, record[o.key]);
        if (why !== null) throw new Error(`options.${o.key} ${why}`);
        restored[o.key] = record[o.key];
      }
      return restored as O;
    },
  };
}

/** The log line's words for a pruned tagger ("" when dense). */
export function describeDensity(o: TaggerOptions): string {
  return o.density < 1
    ? `, recurrent weights pruned to density ${o.density} (row-balanced, pruned at initialisation)`
    : "";
}

export const biLstmTask = taggerTask<TaggerOptions>({
  name: "bilstm",
  title: "BiLSTM tagger",
  description: "the BiLSTM tagger (DyNet benchmark 'bilstm-tagger'): named entities, one tag per word",
  options: [],
  defaults: TAGGER_DEFAULTS,
  withChars: false,
  buildVocabulary: (train) => TaggerVocabulary.build(train),
  createNet: (o, vocab, seed) =>
    new BiLstmTagger({
      vocabSize: vocab.words.size,
      tags: vocab.tags.size,
      embed: o.embed,
      hidden: o.hidden,
      mlp: o.mlp,
      rnn: o.rnn,
      density: o.density,
      seed,
    }),
  parameterShapes: (o, vocabSize) =>
    biLstmTaggerShapes({ vocabSize, tags: PLAN_TAGS, embed: o.embed, hidden: o.hidden, mlp: o.mlp }),
  describe: (o) =>
    `BiLSTM tagger, embedding ${o.embed}, hidden ${o.hidden} per direction, MLP ${o.mlp}` +
    (o.rnn === "persistent" ? ", BiLSTM as one rnn op per batch" : "") +
    describeDensity(o),
});
