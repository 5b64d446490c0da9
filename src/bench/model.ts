/**
 * What the throughput suite needs from a model, and nothing more: its data (batch k of a given size, the same for
 * every engine), a fresh network of a given size (same seed, same weights) and the summed loss of a batch built into
 * a graph. Each model is one small adapter object (models/treelstm.ts); everything else in the suite is the same for
 * every model.
 */
import type { GraphBuilderSpec } from "../graph/builder.js";
import type { ComputationGraph, Expression } from "../graph/graph.js";
import type { ParameterCollection } from "../model/parameters.js";

/** A network as the benchmark trains it. */
export interface BenchNet<T> {
  readonly params: ParameterCollection;
  /** Adds the summed loss of `items` to `cg` (its node count is the graph's size afterwards). */
  batchLoss(cg: ComputationGraph, items: readonly T[]): Expression;
  /**
   * The model's graph builder for worker threads over the task's loaded items (`BenchTask.indices` name a batch's),
   * when the model has one (TaskModel.workerBuilder): VPPS's workers then build batches as in training.
   */
  workerBuilder?(): GraphBuilderSpec;
}

/** One model size the suite runs. */
export interface BenchSize {
  readonly hidden: number;
  readonly embed: number;
}

/** A model's data, loaded: batches of it and networks over its vocabulary. */
export interface BenchTask<T> {
  /** Where the data came from (`SST train (path)`, `synthetic (SST not found)`). */
  readonly source: string;
  /** The file or directory read, as `--data` takes it; undefined for data generated in code (the synthetic task). */
  readonly path?: string;
  /** Sentences (trees) loaded; batches wrap around them. */
  readonly items: number;
  readonly vocabulary: number | undefined;
  /** Batch k of `size` items. */
  batch(size: number, k: number): readonly T[];
  /** The indices of batch k's items among the loaded ones (what a worker-thread graph builder is given). */
  indices(size: number, k: number): Int32Array;
  /**
   * A fresh network (seed 1: every call has the same weights) in `variant` (a name of the model's `variants`), with
   * `options` (values of the model's `choices`) over its defaults.
   */
  net(size: BenchSize, variant: string, options?: Readonly<Record<string, string | number>>): BenchNet<T>;
}

/** A model option the benchmark takes on its command line (`vpps bench bilstm --rnn persistent`). */
export interface BenchChoice {
  /** The model option and the flag: `rnn` is `--rnn`. */
  readonly name: string;
  /** The values it takes, or "density": a kept fraction in (0, 1] (the taggers' --density). */
  readonly values: readonly string[] | "density";
  readonly defaultValue: string | number;
  readonly help: string;
}

export interface BenchModel<T> {
  /** The command's name: `vpps bench <name>`. */
  readonly name: string;
  /** For titles and tables: `Tree-LSTM`. */
  readonly title: string;
  /** What `--data` takes, for the help text. */
  readonly dataHelp: string;
  /** The default sizes: the first is the main one (every engine, every batch size), the others a sweep. */
  readonly sizes: readonly BenchSize[];
  /** The embedding size for a hidden size given with --hidden. */
  embedFor(hidden: number): number;
  /**
   * Formulations of the same function (Tree-LSTM: the fused cell, and the same cell from plain ops). The engines
   * train the first; VPPS runs each one, as `vpps-<variant>` (plain `vpps` when there is only one).
   */
  readonly variants: readonly { readonly name: string; readonly label: string }[];
  /** Model options the command takes (`--rnn`); the engines' networks are built with the values given. */
  readonly choices: readonly BenchChoice[];
  /** Sentences loaded at most. */
  readonly maxItems: number;
  /** Sentences are called this in tables (`sentences`), and a batch's items on the plot's axis (`trees`). */
  readonly unit: string;
  readonly batchUnit: string;
  load(dataFile: string | undefined, maxItems: number): BenchTask<T>;
  /** Throughput targets recorded in the result file (sentences/s, or ratios), when the model has any. */
  readonly targets?: Readonly<Record<string, number>>;
  /** The plot's title: `Tree-LSTM training on SST, hidden 256 — NVIDIA H100 80GB HBM3`. */
  plotTitle(device: string, source: string | undefined, hidden: number): string;
}
