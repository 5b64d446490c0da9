import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { TreeNode } from "../data/tree.js";
import type { Vocabulary } from "../data/vocab.js";
import { type Engine, isPipelined } from "../engines/engine.js";
import { ComputationGraph } from "../graph/graph.js";
import type { ParameterCollection } from "../model/parameters.js";
import { loadParameters, saveParameters } from "../model/safetensors.js";
import { makeTrainer, type OptimizerName } from "../train/trainers.js";
import { deriveKey, RandomStream } from "../util/random.js";
import { argmax, type CellFormulation, TreeLstmModel } from "./treelstm.js";

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
  cell: CellFormulation;
  clipThreshold?: number;
  dropout?: number;
  /** Makes the engine for the model's parameters (CPU, eager, autobatch, vpps). */
  makeEngine: (params: ParameterCollection) => Engine;
  /** Where checkpoints go (one safetensors file per epoch, plus state.json); none when absent. */
  outDir?: string;
  /** Continue a run: load this checkpoint and start after `epochsDone` (earlier results are kept in the summary). */
  resume?: { checkpoint: string; epochsDone: number; previous: readonly EpochResult[] };
  onProgress?: (p: TrainProgress) => void;
  onEpoch?: (e: EpochResult) => void;
}

export interface TrainProgress {
  epoch: number;
  sentencesDone: number;
  sentencesTotal: number;
  sentencesPerSecond: number;
  /**
   * Mean loss per tree node over the batches whose losses have arrived (with a pipelined engine they lag the
   * sentences done by a few batches, and no progress is reported until the first arrives).
   */
  loss: number;
  elapsedSeconds: number;
}

export interface EpochResult {
  epoch: number;
  trainLoss: number;
  devAccuracy: number;
  seconds: number;
  sentencesPerSecond: number;
  checkpoint: string | null;
}

export interface TrainSummary {
  epochs: EpochResult[];
  bestDevAccuracy: number;
  parameters: number;
  engine: string;
}

/** Trains the Tree-LSTM sentiment model; returns the per-epoch results. */
export function trainTreeLstm(cfg: TrainTreeLstmConfig): { model: TreeLstmModel; summary: TrainSummary } {
  const model = new TreeLstmModel({
    vocabSize: cfg.vocab.size,
    embed: cfg.embed,
    hidden: cfg.hidden,
    cell: cfg.cell,
    dropout: cfg.dropout ?? 0,
    seed: cfg.seed,
  });
  if (cfg.resume) loadParameters(model.params, cfg.resume.checkpoint);
  const engine = cfg.makeEngine(model.params);
  const trainer = makeTrainer(cfg.optimizer, {
    learningRate: cfg.learningRate,
    clipThreshold: cfg.clipThreshold ?? 5,
  });
  const cg = new ComputationGraph();
  const order = cfg.train.map((_, i) => i);
  const epochs: EpochResult[] = [...(cfg.resume?.previous ?? [])];
  if (cfg.outDir) mkdirSync(cfg.outDir, { recursive: true });
  try {
    for (let epoch = (cfg.resume?.epochsDone ?? 0) + 1; epoch <= cfg.epochs; epoch++) {
      // each epoch's order depends on (seed, epoch) alone, so a resumed run sees the same batches
      for (let i = 0; i < order.length; i++) order[i] = i;
      new RandomStream(deriveKey(cfg.seed, "shuffle", epoch)).shuffle(order);
      const t0 = performance.now();
      let lossSum = 0;
      let nodeCount = 0;
      let done = 0;
      // A pipelined engine hands losses back some batches later, in order: the node counts of the batches queued
      // and not yet summed wait here, so that the mean is over the same batches as the sum.
      const queuedNodes: number[] = [];
      let nextQueued = 0;
      const addLosses = (values: readonly number[]): void => {
        for (const value of values) {
          if (!Number.isFinite(value)) {
            throw new Error(`training diverged: the loss became ${value} in epoch ${epoch}; lower --lr`);
          }
          if (nextQueued >= queuedNodes.length) {
            throw new Error(
              `engine ${engine.name}: takeLosses returned more losses than the ${queuedNodes.length} batches queued`,
            );
          }
          lossSum += value;
          nodeCount += queuedNodes[nextQueued++]!;
        }
      };
      const progress = (): void => {
        if (nodeCount === 0) return; // a pipelined engine's first losses have not arrived yet
        const elapsed = (performance.now() - t0) / 1000;
        cfg.onProgress?.({
          epoch,
          sentencesDone: done,
          sentencesTotal: order.length,
          sentencesPerSecond: done / Math.max(elapsed, 1e-9),
          loss: lossSum / nodeCount,
          elapsedSeconds: elapsed,
        });
      };
      for (let start = 0; start < order.length; start += cfg.batch) {
        const idx = order.slice(start, start + cfg.batch);
        const trees = idx.map((i) => cfg.train[i]!);
        cg.renew();
        cg.training = true;
        cg.dropoutKey = deriveKey(cfg.seed, "dropout", epoch * 1_000_003 + start);
        const loss = model.buildBatchLoss(cg, trees, cfg.vocab);
        let nodes = 0;
        for (const t of trees) nodes += countNodes(t);
        if (isPipelined(engine)) {
          engine.trainStep(loss, trainer);
          queuedNodes.push(nodes);
          addLosses(engine.takeLosses(false));
        } else {
          const value = engine.forwardScalar(loss);
          engine.backward(loss);
          engine.update(trainer);
          queuedNodes.push(nodes);
          addLosses([value]);
        }
        done += trees.length;
        progress();
      }
      if (isPipelined(engine)) {
        addLosses(engine.takeLosses(true));
        progress(); // the whole epoch's loss, and the time the queued batches took
      }
      if (nextQueued !== queuedNodes.length) {
        throw new Error(
          `engine ${engine.name}: ${queuedNodes.length} batches were queued in epoch ${epoch} but ` +
            `${nextQueued} losses came back`,
        );
      }
      const seconds = (performance.now() - t0) / 1000;
      const devAccuracy = evaluateTreeLstm(model, engine, cfg.dev, cfg.vocab);
      let checkpoint: string | null = null;
      if (cfg.outDir) {
        checkpoint = join(cfg.outDir, `epoch-${epoch}.safetensors`);
        engine.syncToHost();
        saveParameters(model.params, checkpoint, { model: "treelstm", epoch: String(epoch) });
      }
      const result: EpochResult = {
        epoch,
        trainLoss: lossSum / Math.max(nodeCount, 1),
        devAccuracy,
        seconds,
        sentencesPerSecond: order.length / seconds,
        checkpoint,
      };
      epochs.push(result);
      if (cfg.outDir) {
        const state = {
          model: "treelstm",
          options: { hidden: cfg.hidden, embed: cfg.embed, cell: cfg.cell, labels: model.labels },
          training: { optimizer: cfg.optimizer, learningRate: cfg.learningRate, batch: cfg.batch, seed: cfg.seed },
          epochs,
          vocabulary: cfg.vocab.toJSON(),
        };
        writeFileSync(join(cfg.outDir, "state.json"), `${JSON.stringify(state)}\n`);
      }
      cfg.onEpoch?.(result);
    }
  } finally {
    engine.dispose();
  }
  return {
    model,
    summary: {
      epochs,
      bestDevAccuracy: Math.max(0, ...epochs.map((e) => e.devAccuracy)),
      parameters: model.params.count,
      engine: engine.name,
    },
  };
}

/** Root accuracy: the fraction of trees whose root label is predicted. */
export function evaluateTreeLstm(
  model: TreeLstmModel,
  engine: Engine,
  trees: readonly TreeNode[],
  vocab: Vocabulary,
  batch = 64,
): number {
  if (trees.length === 0) return 0;
  const cg = new ComputationGraph();
  let correct = 0;
  for (let start = 0; start < trees.length; start += batch) {
    cg.renew();
    cg.training = false;
    const part = trees.slice(start, start + batch);
    const roots = part.map((t) => model.buildTree(cg, t, vocab, false).rootScores);
    engine.forward(roots[roots.length - 1]!);
    roots.forEach((r, k) => {
      if (argmax(engine.value(r)) === part[k]!.label) correct++;
    });
  }
  return correct / trees.length;
}

function countNodes(t: TreeNode): number {
  let n = 0;
  const stack = [t];
  while (stack.length > 0) {
    const x = stack.pop()!;
    n++;
    for (const c of x.children) stack.push(c);
  }
  return n;
}
