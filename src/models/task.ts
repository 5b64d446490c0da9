/**
 * A model as the command line (`vpps train | eval | plan | bench`), the training loop (src/train/loop.ts) and the
 * benchmarks see it: a *task* is the model with its data, vocabulary, metric and options. Everything model-specific
 * lives behind this interface, in the model's folder (src/models/<name>/: model.ts, task.ts); the registry
 * (registry.ts) lists the tasks, and the commands are generated from it. docs/ADDING_A_MODEL.md walks through
 * adding one.
 *
 * Type parameters: `E` one example (a tree, a tagged sentence), `V` the vocabulary (or vocabularies: words,
 * characters, tags), `O` the model's options (sizes and switches, as the command line gives them), `M` a built model.
 * The members that take an `E` are declared as methods, so a `Task<TreeNode, …>` is also an `AnyTask`, what the
 * registry holds: each command works through the interface alone.
 */
import type { GraphBuilderSpec } from "../graph/builder.js";
import type { ComputationGraph, Expression } from "../graph/graph.js";
import type { ParameterCollection, ParameterShape } from "../model/parameters.js";

import { quote, showValue } from "../util/text.js";

export { DataError } from "../data/text-file.js";

/** A model's options by key: what its command line options set (`--hidden 256` is `{ hidden: 256 }`). */
export type ModelOptions = Readonly<Record<string, string | number>>;

/** The values a model option accepts; the command line parses and checks them, and `state.json`'s too. */
export type ModelOptionType =
  | { readonly kind: "positive-int" }
  /** A number in [0, 1): a rate. */
  | { readonly kind: "fraction" }
  /** A number in (0, 1]: a density, the fraction of weights kept (1: all). */
  | { readonly kind: "density" }
  | { readonly kind: "choice"; readonly choices: readonly string[] };

/** One of a model's command line options. Its default is the task's `defaults[key]`. */
export interface ModelOption {
  /** The key in the options object: commander's name for the flag (`--max-len` is `maxLen`). */
  readonly key: string;
  /** The flag with its value placeholder: `--hidden <n>`. */
  readonly flag: string;
  readonly help: string;
  readonly type: ModelOptionType;
  /**
   * Set for the sizes that shape the weights: `vpps plan` takes the option too, and names it so in its header
   * ("hidden 256, embedding 256").
   */
  readonly planLabel?: string;
}

/** A model's examples, split. */
export interface Dataset<E> {
  readonly train: E[];
  readonly dev: E[];
  /** The held-out split, when it was asked for and exists. */
  readonly test?: E[];
  /** Where the examples came from: a directory, or what the synthetic task is. */
  readonly source: string;
}

/** Where a task's examples come from: `--data`, one file (`vpps eval --data`), or generated (no `--data`). */
export interface TaskData<E> {
  /** `--data`'s help: what the directory holds and in which format. */
  readonly help: string;
  /** What the examples are called in messages and help ("trees", "sentences"). */
  readonly noun: string;
  /**
   * The train, dev (and test, when asked for) splits of directory `dir`, as `--data dir` names it. `options`: the
   * model's options, where they choose the split (the taggers' `--split-seed`); the defaults when absent.
   */
  fromDirectory(dir: string, opts: { maxTrain?: number; test?: boolean; options?: ModelOptions }): Dataset<E>;
  /** Every example of one file in the format of the directory's files. */
  fromFile(path: string): E[];
  /** The task generated in code when no `--data` is given (so that a fresh machine can train): one line, and the split. */
  readonly synthetic: { readonly description: string; make(seed: number): Dataset<E> };
}

/** Builds, saves and restores a task's vocabulary. */
export interface TaskVocabulary<E, V> {
  /**
   * The vocabulary of the training examples; `options`: the model's options, where they shape it (bilstm-char's
   * `--min-count`), the defaults when absent.
   */
  build(train: readonly E[], options?: ModelOptions): V;
  /** What `state.json` holds under "vocabulary". */
  toJSON(vocab: V): unknown;
  /** The vocabulary `toJSON` saved; throws naming what is malformed. */
  fromJSON(json: unknown): V;
  /** For the log line: "vocabulary 18280". */
  describe(vocab: V): string;
  /** The size `parameterShapes` takes: the rows of the model's lookup table(s). */
  size(vocab: V): number;
}

/** A quality measure on held-out examples (`V`: the vocabulary, to name predicted classes: tags for entity F1). */
export interface Metric<E, V = unknown> {
  /** Its key in results (`devMetrics`, `vpps eval --json`): "rootAccuracy". */
  readonly key: string;
  /** In messages: "root accuracy". */
  readonly name: string;
  /**
   * The measure, in [0, 1], from each example's predicted classes: the argmax of each score expression
   * `buildScores` made for it, in its order.
   */
  compute(examples: readonly E[], predicted: readonly (readonly number[])[], vocab: V): number;
}

/** A built model: its parameters and the graphs of its loss and its predictions. */
export interface TaskModel<E> {
  readonly params: ParameterCollection;
  /** The summed loss of a batch of examples, in `cg` (renewed by the caller); one graph, one update. */
  buildBatchLoss(cg: ComputationGraph, examples: readonly E[]): Expression;
  /** How many losses an example adds to the sum (tree nodes, tokens): the training loss is reported per unit. */
  lossUnits(example: E): number;
  /**
   * Forward only: the class scores (before the softmax) an example is judged on, added to `cg` — the root's for a
   * sentence model, one per word for a tagger. Built with `cg.training` false (no dropout).
   */
  buildScores(cg: ComputationGraph, example: E): Expression[];
  /**
   * Optional: how worker threads build this model's training graphs themselves (src/graph/builder.ts), the batches'
   * examples given as indices into `train`. Engines whose workers can (VPPS) then take only the indices from the
   * training loop, and the main thread builds no graph. The graphs must equal `buildBatchLoss`'s node for node.
   */
  workerBuilder?(train: readonly E[]): GraphBuilderSpec;
}

export interface Task<E, V, O extends ModelOptions, M extends TaskModel<E>> {
  /** The command line's name: `vpps train <name>`. */
  readonly name: string;
  /** For people: "Tree-LSTM". */
  readonly title: string;
  /** One line: what the model is. */
  readonly description: string;
  /** The model's own command line options (the training loop's options are common to every task). */
  readonly options: readonly ModelOption[];
  /** The default of every option, by key. */
  readonly defaults: O;
  readonly data: TaskData<E>;
  readonly vocabulary: TaskVocabulary<E, V>;
  /** The metrics evaluation reports; the first decides the best epoch (and is `devAccuracy` in results). */
  readonly metrics: readonly [Metric<E, V>, ...Metric<E, V>[]];
  /** A model with these options over this vocabulary, its parameters initialised from `seed`. */
  create(options: O, vocab: V, seed: number): M;
  /**
   * The parameters `create` would make, shapes only (nothing allocated): `vpps plan` plans any size from them, with
   * the one on-chip rule (`onChipMatrices`).
   */
  parameterShapes(options: O, vocabSize: number): ParameterShape[];
  /** One line for the training log: "Tree-LSTM (fused cell), hidden 256, embedding 256". */
  describe(options: O): string;
  /** What `state.json` records under "options": enough, with the vocabulary, to rebuild the model. */
  savedOptions(options: O, model: M): Record<string, unknown>;
  /**
   * The options of a saved run: those `savedOptions` recorded (checked: a malformed value throws, naming it), the
   * others from `current` (the command line).
   */
  restoreOptions(saved: unknown, current: O): O;
}

/** A task of any model, as the registry and the commands hold it. */
export type AnyTask = Task<unknown, unknown, ModelOptions, TaskModel<unknown>>;

/** Why `value` is not a value of `option`, or null when it is. */
export function checkModelOption(option: ModelOption, value: unknown): string | null {
  const t = option.type;
  const shown = typeof value === "string" ? quote(value) : showValue(value);
  switch (t.kind) {
    case "positive-int":
      return typeof value === "number" && Number.isInteger(value) && value > 0
        ? null
        : `must be a positive integer; got ${shown}`;
    case "fraction":
      return typeof value === "number" && value >= 0 && value < 1 ? null : `must be a number in [0, 1); got ${shown}`;
    case "density":
      return typeof value === "number" && value > 0 && value <= 1 ? null : `must be a number in (0, 1]; got ${shown}`;
    case "choice":
      return typeof value === "string" && t.choices.includes(value)
        ? null
        : `must be one of ${t.choices.join(", ")}; got ${shown}`;
  }
}
