/**
 * The training loop, for any model on the task interface (src/models/task.ts) and any engine: shuffled batches,
 * one graph and one update per batch (queued without waiting on a pipelined engine), the mean loss per loss unit,
 * evaluation on the dev split after every epoch (on an evaluation engine when the training engine cannot run
 * forward-only passes), a checkpoint and `state.json` per epoch, and resume from them.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type Engine, isPipelined } from "../engines/engine.js";
import { ForwardPasses } from "../engines/registry.js";
import { ComputationGraph } from "../graph/graph.js";
import type { ParameterCollection } from "../model/parameters.js";
import { loadParameters, saveParameters } from "../model/safetensors.js";
import type { ModelOptions, Task, TaskModel } from "../models/task.js";
import { makeTrainer, type OptimizerName } from "../optim/trainers.js";
import { deriveKey, RandomStream } from "../util/random.js";
import { evaluate } from "./evaluate.js";

export interface TrainConfig<E, V, O extends ModelOptions, M extends TaskModel<E>> {
  task: Task<E, V, O, M>;
  /** The model's options (`task.defaults` with the command line's). */
  options: O;
  train: readonly E[];
  dev: readonly E[];
  vocab: V;
  epochs: number;
  /** Examples per batch (one graph, one update). */
  batch: number;
  learningRate: number;
  optimizer: OptimizerName;
  /** Initialisation, shuffling and dropout. */
  seed: number;
  clipThreshold?: number;
  /** Makes the engine for the model's parameters (CPU, eager, autobatch, vpps). */
  makeEngine: (params: ParameterCollection) => Engine;
  /**
   * Makes the engine that evaluates when the training engine cannot run forward-only passes (default: the engine
   * registry's choice, `createEvaluationEngine`, on the training engine's device).
   */
  makeEvaluationEngine?: (params: ParameterCollection) => Engine;
  /** Where checkpoints go (one safetensors file per epoch, plus state.json); none when absent. */
  outDir?: string;
  /** Continue a run: load this checkpoint and start after `epochsDone` (earlier results are kept in the summary). */
  resume?: { checkpoint: string; epochsDone: number; previous: readonly EpochResult[] };
  onProgress?: (p: TrainProgress) => void;
  onEpoch?: (e: EpochResult) => void;
}

export interface TrainProgress {
  epoch: number;
  /** Examples (sentences, trees) queued so far this epoch. */
  sentencesDone: number;
  sentencesTotal: number;
  sentencesPerSecond: number;
  /**
   * Mean loss per loss unit (tree node, token) over the batches whose losses have arrived (with a pipelined engine
   * they lag the examples done by a few batches, and no progress is reported until the first arrives).
   */
  loss: number;
  elapsedSeconds: number;
}

export interface EpochResult {
  epoch: number;
  trainLoss: number;
  /** The task's first metric on the dev split (root accuracy for a sentence model). */
  devAccuracy: number;
  /** Every metric of the task on the dev split, by key. */
  devMetrics: Record<string, number>;
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

/** Trains `cfg.task`'s model; returns it and the per-epoch results. */
export function train<E, V, O extends ModelOptions, M extends TaskModel<E>>(
  cfg: TrainConfig<E, V, O, M>,
): { model: M; summary: TrainSummary } {
  const { task } = cfg;
  const model = task.create(cfg.options, cfg.vocab, cfg.seed);
  if (cfg.resume) loadParameters(model.params, cfg.resume.checkpoint);
  const engine = cfg.makeEngine(model.params);
  const forwardPasses = new ForwardPasses(engine, model.params, cfg.makeEvaluationEngine);
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
      let unitCount = 0;
      let done = 0;
      // A pipelined engine hands losses back some batches later, in order: the loss units of the batches queued
      // and not yet summed wait here, so that the mean is over the same batches as the sum.
      const queuedUnits: number[] = [];
      let nextQueued = 0;
      const addLosses = (values: readonly number[]): void => {
        for (const value of values) {
          if (!Number.isFinite(value)) {
            throw new Error(`training diverged: the loss became ${value} in epoch ${epoch}; lower --lr`);
          }
          if (nextQueued >= queuedUnits.length) {
            throw new Error(
              `engine ${engine.name}: takeLosses returned more losses than the ${queuedUnits.length} batches queued`,
            );
          }
          lossSum += value;
          unitCount += queuedUnits[nextQueued++]!;
        }
      };
      const progress = (): void => {
        if (unitCount === 0) return; // a pipelined engine's first losses have not arrived yet
        const elapsed = (performance.now() - t0) / 1000;
        cfg.onProgress?.({
          epoch,
          sentencesDone: done,
          sentencesTotal: order.length,
          sentencesPerSecond: done / Math.max(elapsed, 1e-9),
          loss: lossSum / unitCount,
          elapsedSeconds: elapsed,
        });
      };
      for (let start = 0; start < order.length; start += cfg.batch) {
        const examples = order.slice(start, start + cfg.batch).map((i) => cfg.train[i]!);
        cg.renew();
        cg.training = true;
        cg.dropoutKey = deriveKey(cfg.seed, "dropout", epoch * 1_000_003 + start);
        const loss = model.buildBatchLoss(cg, examples);
        let units = 0;
        for (const e of examples) units += model.lossUnits(e);
        if (isPipelined(engine)) {
          engine.trainStep(loss, trainer);
          queuedUnits.push(units);
          addLosses(engine.takeLosses(false));
        } else {
          const value = engine.forwardScalar(loss);
          engine.backward(loss);
          engine.update(trainer);
          queuedUnits.push(units);
          addLosses([value]);
        }
        done += examples.length;
        progress();
      }
      if (isPipelined(engine)) {
        addLosses(engine.takeLosses(true));
        progress(); // the whole epoch's loss, and the time the queued batches took
      }
      if (nextQueued !== queuedUnits.length) {
        throw new Error(
          `engine ${engine.name}: ${queuedUnits.length} batches were queued in epoch ${epoch} but ` +
            `${nextQueued} losses came back`,
        );
      }
      const seconds = (performance.now() - t0) / 1000;
      const devMetrics = evaluate(model, task.metrics, cfg.vocab, forwardPasses.engine(), cfg.dev);
      let checkpoint: string | null = null;
      if (cfg.outDir) {
        checkpoint = join(cfg.outDir, `epoch-${epoch}.safetensors`);
        engine.syncToHost();
        saveParameters(model.params, checkpoint, { model: task.name, epoch: String(epoch) });
      }
      const result: EpochResult = {
        epoch,
        trainLoss: lossSum / Math.max(unitCount, 1),
        devAccuracy: devMetrics[task.metrics[0].key]!,
        devMetrics,
        seconds,
        sentencesPerSecond: order.length / seconds,
        checkpoint,
      };
      epochs.push(result);
      if (cfg.outDir) writeRunState(cfg, model, epochs);
      cfg.onEpoch?.(result);
    }
  } finally {
    forwardPasses.dispose();
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

/** What `<outDir>/state.json` holds: with the last checkpoint, enough to rebuild, resume or evaluate the run. */
export interface RunState {
  /** The task's name. */
  model: string;
  /** `task.savedOptions`: the model's shape. */
  options: Record<string, unknown>;
  training: { optimizer: OptimizerName; learningRate: number; batch: number; seed: number };
  epochs: EpochResult[];
  /** `task.vocabulary.toJSON`. */
  vocabulary: unknown;
}

function writeRunState<E, V, O extends ModelOptions, M extends TaskModel<E>>(
  cfg: TrainConfig<E, V, O, M>,
  model: M,
  epochs: EpochResult[],
): void {
  const state: RunState = {
    model: cfg.task.name,
    options: cfg.task.savedOptions(cfg.options, model),
    training: { optimizer: cfg.optimizer, learningRate: cfg.learningRate, batch: cfg.batch, seed: cfg.seed },
    epochs,
    vocabulary: cfg.task.vocabulary.toJSON(cfg.vocab),
  };
  writeFileSync(join(cfg.outDir!, "state.json"), `${JSON.stringify(state)}\n`);
}
