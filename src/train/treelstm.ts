/**
 * The Tree-LSTM's training API from before the model registry, kept for its users: thin wrappers over the generic
 * loop (`train`, loop.ts) and evaluation (`evaluate`) with the Tree-LSTM task.
 */
import { dirname } from "node:path";
import type { TreeNode } from "../data/tree.js";
import type { Vocabulary } from "../data/vocab.js";
import type { Engine } from "../engines/engine.js";
import { ForwardPasses } from "../engines/registry.js";
import type { ParameterCollection } from "../model/parameters.js";
import type { CellFormulation, TreeLstmModel } from "../models/treelstm/model.js";
import { TreeLstmTaskModel, treeLstmTask } from "../models/treelstm/task.js";
import type { OptimizerName } from "../optim/trainers.js";
import { evaluate } from "./evaluate.js";
import { type EpochResult, type ShuffleMode, type TrainProgress, type TrainSummary, train } from "./loop.js";
import { RunDir } from "./run-dir.js";

export interface TrainTreeLstmConfig {
  train: readonly TreeNode[];
  dev: readonly TreeNode[];
  vocab: Vocabulary;
  epochs: number;
  batch: number;
  hidden: number;
  embed: number;
  learningRate: number;
  optimizer: OptimizerName;
  seed: number;
  /** How epochs order the trees (the training loop's ShuffleMode; default "examples"). */
  shuffle?: ShuffleMode;
  cell: CellFormulation;
  clipThreshold?: number;
  dropout?: number;
  /** Makes the engine for the model's parameters (CPU, eager, autobatch, vpps). */
  makeEngine: (params: ParameterCollection) => Engine;
  /**
   * Where checkpoints go (one safetensors file per epoch, plus state.json); none when absent. Opened for the run
   * (created, locked) and refused when it holds a run other than the one resumed.
   */
  outDir?: string;
  /** Continue a run: load this checkpoint and start after `epochsDone` (earlier results are kept in the summary). */
  resume?: { checkpoint: string; epochsDone: number; previous: readonly EpochResult[] };
  onProgress?: (p: TrainProgress) => void;
  onEpoch?: (e: EpochResult) => void;
}

/** Trains the Tree-LSTM sentiment model; returns the per-epoch results. */
export function trainTreeLstm(cfg: TrainTreeLstmConfig): { model: TreeLstmModel; summary: TrainSummary } {
  const { hidden, embed, cell, dropout, outDir, ...rest } = cfg;
  const runDir = outDir === undefined ? undefined : RunDir.open(outDir);
  try {
    runDir?.checkOtherRun({
      model: treeLstmTask.name,
      ...(cfg.resume ? { resumeDir: dirname(cfg.resume.checkpoint) } : {}),
      force: false,
    });
    const { model, summary } = train({
      ...rest,
      task: treeLstmTask,
      options: { hidden, embed, cell, dropout: dropout ?? 0 },
      ...(runDir ? { runDir } : {}),
    });
    return { model: model.net, summary };
  } finally {
    runDir?.close();
  }
}

/**
 * Root accuracy: the fraction of trees whose root label is predicted, from forward-only passes on `engine` (or, for
 * an engine that cannot run them, on its evaluation engine with its current weights).
 */
export function evaluateTreeLstm(
  model: TreeLstmModel,
  engine: Engine,
  trees: readonly TreeNode[],
  vocab: Vocabulary,
  batch = 64,
): number {
  const metric = treeLstmTask.metrics[0];
  const passes = new ForwardPasses(engine, model.params);
  try {
    return evaluate(new TreeLstmTaskModel(model, vocab), [metric], vocab, passes.engine(), trees, batch)[metric.key]!;
  } finally {
    passes.dispose();
  }
}
