/**
 * The registry entry of a sentence model that predicts one label per sentence at its root (TD-RNN, TD-LSTM, RvNN):
 * SST data (trees or sentences), the word vocabulary, root accuracy, `--hidden` and `--embed`, one loss unit per
 * sentence. Each model's task.ts is this with its name, its data and its network.
 */
import type { Vocabulary } from "../../data/vocab.js";
import type { GraphBuilderSpec } from "../../graph/builder.js";
import type { ComputationGraph, Expression } from "../../graph/graph.js";
import type { ParameterCollection, ParameterShape } from "../../model/parameters.js";
import type { ModelOptions, Task, TaskData, TaskModel, TaskVocabulary } from "../task.js";
import { restoreSavedOptions, SIZE_OPTIONS } from "./options.js";
import { rootAccuracy } from "./sst-data.js";
import { taskBuilderSpec } from "./task-builder.js";

/** The options of a root-label sentence model: its sizes. */
export type SentenceModelOptions = { readonly hidden: number; readonly embed: number };

/** A network that scores an example at its root. */
export interface RootModel<E> {
  readonly params: ParameterCollection;
  readonly labels: number;
  /** The summed loss of a batch (one loss per example, at its root), in one graph. */
  buildBatchLoss(cg: ComputationGraph, examples: readonly E[], vocab: Vocabulary): Expression;
  /** The root's class scores (before the softmax), forward only. */
  buildScores(cg: ComputationGraph, example: E, vocab: Vocabulary): Expression;
}

/** A `RootModel` with its vocabulary, as the training loop uses it. */
export class RootTaskModel<E, N extends RootModel<E>> implements TaskModel<E> {
  constructor(
    readonly net: N,
    readonly vocab: Vocabulary,
    /** Its task's name and options, and the vocabulary as the task saves it: for worker threads (`workerBuilder`). */
    private readonly origin?: { readonly task: string; readonly options: ModelOptions; readonly vocabulary: unknown },
  ) {}

  /** The generic builder (shared/task-builder.ts): workers make this model from its task and build its batches. */
  workerBuilder(train: readonly E[]): GraphBuilderSpec {
    if (this.origin === undefined) throw new Error("RootTaskModel.workerBuilder: made without its task");
    return taskBuilderSpec(this.origin.task, this.origin.options, this.origin.vocabulary, train);
  }

  get params(): ParameterCollection {
    return this.net.params;
  }

  buildBatchLoss(cg: ComputationGraph, examples: readonly E[]): Expression {
    return this.net.buildBatchLoss(cg, examples, this.vocab);
  }

  /** One loss per example, at its root. */
  lossUnits(_example: E): number {
    return 1;
  }

  buildScores(cg: ComputationGraph, example: E): Expression[] {
    return [this.net.buildScores(cg, example, this.vocab)];
  }
}

export interface RootTaskSpec<E, N> {
  readonly name: string;
  readonly title: string;
  readonly description: string;
  readonly data: TaskData<E>;
  readonly vocabulary: TaskVocabulary<E, Vocabulary>;
  /** The paper's sizes. */
  readonly defaults: SentenceModelOptions;
  /** The network over `vocabSize` words, initialised from `seed`. */
  create(options: SentenceModelOptions, vocabSize: number, seed: number): N;
  /** What `create` would allocate, shapes only. */
  parameterShapes(options: SentenceModelOptions, vocabSize: number): ParameterShape[];
}

/** The saved options: the sizes (the label count is recorded too, for readers of state.json). */
const SAVED = ["hidden", "embed"] as const;

/** The task of a root-label sentence model. */
export function rootTask<E extends { readonly label: number }, N extends RootModel<E>>(
  spec: RootTaskSpec<E, N>,
): Task<E, Vocabulary, SentenceModelOptions, RootTaskModel<E, N>> {
  return {
    name: spec.name,
    title: spec.title,
    description: spec.description,
    options: SIZE_OPTIONS,
    defaults: spec.defaults,
    data: spec.data,
    vocabulary: spec.vocabulary,
    metrics: [rootAccuracy<E>()],
    create: (options, vocab, seed) =>
      new RootTaskModel(spec.create(options, vocab.size, seed), vocab, {
        task: spec.name,
        options,
        vocabulary: spec.vocabulary.toJSON(vocab),
      }),
    parameterShapes: (options, vocabSize) => spec.parameterShapes(options, vocabSize),
    describe: (o) => `${spec.title}, hidden ${o.hidden}, embedding ${o.embed}`,
    savedOptions: (o, model) => ({ hidden: o.hidden, embed: o.embed, labels: model.net.labels }),
    restoreOptions: (saved, current) => restoreSavedOptions(SIZE_OPTIONS, SAVED, saved, current),
  };
}
