/**
 * The training loop, for any model on the task interface (src/models/task.ts) and any engine: shuffled batches,
 * one graph and one update per batch (queued without waiting on a pipelined engine), the mean loss per loss unit,
 * evaluation on the dev split after every epoch (on an evaluation engine when the training engine cannot run
 * forward-only passes), a checkpoint (weights, optimiser state, run state) and `state.json` per epoch, and resume
 * from them. The output directory is the caller's, opened and locked before anything trains; a NaN or ±∞ input, loss or
 * gradient stops the run before it reaches the weights (TrainingDivergedError, naming the cause).
 */
import { join } from "node:path";
import { supportsDataParallel } from "../engines/data-parallel.js";
import { canBuildInWorkers, type Engine, isPipelined } from "../engines/engine.js";
import { ForwardPasses } from "../engines/registry.js";
import { ComputationGraph } from "../graph/graph.js";
import type { ParameterCollection } from "../model/parameters.js";
import { firstNonFinite } from "../model/safetensors.js";
import type { ModelOptions, Task, TaskModel } from "../models/task.js";
import { makeTrainer, NonFiniteUpdateError, type OptimizerName, type Trainer } from "../optim/trainers.js";
import type { ProcessGroup } from "../parallel/index.js";
import { rankShare } from "../parallel/index.js";
import { UserError } from "../util/errors.js";
import { writeFileAtomic } from "../util/files.js";
import type { MemoryLimit } from "../util/memory-limit.js";
import { deriveKey, RandomStream } from "../util/random.js";
import {
  checkCheckpointOf,
  firstOutOfRange,
  RANGE_RULE,
  readCheckpoint,
  restoreCheckpoint,
  saveCheckpoint,
} from "./checkpoint.js";
import { type DivergencePlace, divergence, TrainingDivergedError } from "./errors.js";
import { evaluate } from "./evaluate.js";
import { checkRunMemory } from "./memory.js";
import type { RunDir } from "./run-dir.js";
import { bestDevAccuracy, type EpochResult, type RunSettings, type RunState, runIdentity } from "./run-state.js";

export type { EpochResult, RunSettings, RunState } from "./run-state.js";

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
  /**
   * How each epoch orders the training set (default "examples"): see ShuffleMode. With "batches" the batches recur
   * every epoch, and an engine that derives something costly from a batch (VPPS: its script) may keep it.
   */
  shuffle?: ShuffleMode;
  clipThreshold?: number;
  /** Makes the engine for the model's parameters (CPU, eager, autobatch, vpps). */
  makeEngine: (params: ParameterCollection) => Engine;
  /**
   * Makes the engine that evaluates when the training engine cannot run forward-only passes (default: the engine
   * registry's choice, `createEvaluationEngine`, on the training engine's device).
   */
  makeEvaluationEngine?: (params: ParameterCollection) => Engine;
  /**
   * Where checkpoints go (one safetensors file per epoch, plus state.json); none when absent. The caller opens it
   * (`RunDir.open`: created, locked, checked for another run) before training and closes it after.
   */
  runDir?: RunDir;
  /**
   * Continue a run: load this checkpoint (weights, and the optimiser's state when it is of the same kind) and start
   * after `epochsDone` (earlier results are kept in the summary).
   */
  resume?: {
    checkpoint: string;
    epochsDone: number;
    previous: readonly EpochResult[];
    /** The run's state (state.json): the checkpoint must be this run's, of epoch `epochsDone` (checkCheckpointOf). */
    state?: RunState;
  };
  /**
   * Which dev set `dev` is (a data directory, the synthetic task and its seed): recorded with every epoch, and the
   * best accuracy compares only epochs on the same one. Undefined: every epoch compares.
   */
  devSet?: string;
  /** What state.json records besides the loop's own settings (the command line's data and engine). */
  settings?: RunSettings;
  onProgress?: (p: TrainProgress) => void;
  onEpoch?: (e: EpochResult) => void;
  /**
   * Check the run's memory before training (train/memory.ts): what is in use, the gradients and optimiser state,
   * and the activations of the largest batch (when `hostActivations`) against `limit`; refused in one line with the
   * largest batch that fits. None: not checked.
   */
  memory?: { limit: MemoryLimit; hostActivations: boolean; sizeFlags: string; device?: MemoryLimit };
  /** Lines for the user: a stale lock taken over, leftover files removed, an optimiser state not continued. */
  onNote?: (line: string) => void;
  /**
   * Data-parallel training (src/parallel/): this process is one rank of `group`. `batch` stays the global batch;
   * this rank builds the graph of its share of every batch (rankShare: dealt by work), the engine sums the gradients over the ranks
   * before each update, and the epoch's loss is the sum over the ranks. Only rank 0 evaluates and writes to
   * `runDir` (the other ranks ignore it); every rank loads `resume`'s checkpoint.
   */
  group?: ProcessGroup;
}

/**
 * How each epoch orders the training set. "examples": the examples are shuffled anew every epoch (new batches each
 * epoch). "batches": the batches are formed once, from the seed's shuffle of the examples, and every epoch shuffles
 * only their order, as fairseq does; a last, shorter batch stays last. The same seed gives the same order either way.
 */
export type ShuffleMode = "examples" | "batches";
export const SHUFFLE_MODES: readonly ShuffleMode[] = ["examples", "batches"];

/** Fills `order` (the training set's indices) with epoch `epoch`'s order (1-based) for batches of `batch`. */
export function epochOrder(order: number[], batch: number, seed: number, epoch: number, mode: ShuffleMode): void {
  for (let i = 0; i < order.length; i++) order[i] = i;
  if (mode === "examples") {
    new RandomStream(deriveKey(seed, "shuffle", epoch)).shuffle(order);
    return;
  }
  // the batches of the first epoch's shuffle, their order reshuffled per epoch
  new RandomStream(deriveKey(seed, "shuffle", 1)).shuffle(order);
  const full = Math.floor(order.length / batch);
  const which = Array.from({ length: full }, (_, k) => k);
  new RandomStream(deriveKey(seed, "batch-order", epoch)).shuffle(which);
  const base = order.slice(0, full * batch);
  which.forEach((k, j) => {
    for (let i = 0; i < batch; i++) order[j * batch + i] = base[k * batch + i]!;
  });
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
  const note = cfg.onNote ?? (() => {});
  const model = task.create(cfg.options, cfg.vocab, cfg.seed);
  const trainer = makeTrainer(cfg.optimizer, {
    learningRate: cfg.learningRate,
    clipThreshold: cfg.clipThreshold ?? 5,
  });
  if (cfg.resume) {
    const ckpt = readCheckpoint(cfg.resume.checkpoint);
    if (cfg.resume.state !== undefined) {
      const unverified = checkCheckpointOf(ckpt, cfg.resume.state, cfg.resume.epochsDone);
      if (unverified !== null) note(unverified);
    }
    const line = restoreCheckpoint(ckpt, model.params, trainer);
    if (line !== null) note(line);
  }
  if (cfg.memory) {
    const ranks = cfg.group?.worldSize ?? 1;
    checkRunMemory({
      model,
      train: cfg.train,
      batch: Math.ceil(cfg.batch / ranks),
      extraBytesPerValue: cfg.optimizer === "adam" ? 12 : 4,
      limit: cfg.memory.limit,
      hostActivations: cfg.memory.hostActivations,
      sharers: ranks,
      sizeFlags: cfg.memory.sizeFlags,
      ...(cfg.memory.device ? { device: cfg.memory.device } : {}),
    });
  }
  const writer = (cfg.group?.rank ?? 0) === 0;
  const outDir = writer ? cfg.runDir?.path : undefined;
  const epochs: EpochResult[] = [...(cfg.resume?.previous ?? [])];
  let engine: Engine | undefined;
  let forwardPasses: ForwardPasses | undefined;
  let finished = false;
  try {
    engine = cfg.makeEngine(model.params);
    if (cfg.group) joinGroup(engine, cfg.group, cfg.train.length, cfg.batch);
    // the engine's workers build the training graphs where both sides can: the main thread then only names batches
    const workerBuild =
      canBuildInWorkers(engine) &&
      model.workerBuilder !== undefined &&
      engine.setGraphBuilder(model.workerBuilder(cfg.train));
    forwardPasses = new ForwardPasses(engine, model.params, cfg.makeEvaluationEngine);
    runEpochs(cfg, { model, trainer, engine, forwardPasses, outDir, epochs, workerBuild });
    finished = true;
  } finally {
    forwardPasses?.dispose();
    // NCCL's communicator goes before the engine's CUDA context; after a failure at once (ncclCommAbort), since
    // the other ranks may never finish the collectives this rank queued
    if (finished) cfg.group?.releaseDevice();
    else cfg.group?.abort();
    engine?.dispose();
  }
  return {
    model,
    summary: {
      epochs,
      bestDevAccuracy: bestDevAccuracy(epochs, cfg.devSet),
      parameters: model.params.count,
      engine: engine.name,
    },
  };
}

/** Hands `group` to `engine` as its gradient reducer, refusing an engine or a batch split that cannot work. */
function joinGroup(engine: Engine, group: ProcessGroup, examples: number, batch: number): void {
  if (!supportsDataParallel(engine)) {
    throw new UserError(
      `the '${engine.name}' engine cannot train data-parallel (it has no gradient reducer); train on one process ` +
        "(--gpus 1) or choose an engine that can (docs/PARALLEL.md lists them)",
    );
  }
  const last = examples % batch;
  if (isPipelined(engine) && last > 0 && last < group.worldSize) {
    throw new UserError(
      `the last batch of every epoch has ${last} example(s), fewer than the ${group.worldSize} ranks, and the ` +
        `'${engine.name}' engine cannot take a step without one; choose a --batch or --max-sentences that leaves ` +
        `0 or at least ${group.worldSize} for the last batch`,
    );
  }
  engine.setGradientReducer(group);
}

/** What `runEpochs` trains with; `epochs` (the results so far) grows by one result per epoch. */
interface RunParts<M> {
  model: M;
  trainer: Trainer;
  engine: Engine;
  forwardPasses: ForwardPasses;
  outDir: string | undefined;
  epochs: EpochResult[];
  /** Whether the engine's workers build the training graphs (WorkerBuildEngine, `model.workerBuilder`). */
  workerBuild: boolean;
}

/** The epochs after those already done: train, evaluate, check, checkpoint. */
function runEpochs<E, V, O extends ModelOptions, M extends TaskModel<E>>(
  cfg: TrainConfig<E, V, O, M>,
  { model, trainer, engine, forwardPasses, outDir, epochs, workerBuild }: RunParts<M>,
): void {
  const { task } = cfg;
  const cg = new ComputationGraph();
  const order = cfg.train.map((_, i) => i);
  // each example's loss units, counted once (a tree walk per example per batch cost the main thread ~0.1 ms a step)
  const units = new Float64Array(cfg.train.length).fill(-1);
  const unitsOf = (i: number): number => {
    let u = units[i]!;
    if (u < 0) {
      u = model.lossUnits(cfg.train[i]!);
      units[i] = u;
    }
    return u;
  };
  const batches = Math.max(1, Math.ceil(order.length / cfg.batch));
  const firstEpoch = (cfg.resume?.epochsDone ?? 0) + 1;
  /** Where the run's batch `k` (counted from its start or resume) is: each batch is one update. */
  const placeOf = (k: number): DivergencePlace => ({
    epoch: firstEpoch + Math.floor(k / batches),
    batch: k % batches,
    batches,
    updatesThisRun: k,
    learningRate: cfg.learningRate,
    resumedFrom: cfg.resume?.checkpoint,
  });
  const startUpdates = trainer.updates;
  /**
   * Runs `f`, naming a refused update where it was queued: a device engine reports it at a later update or sync
   * (the update's kernels changed nothing).
   */
  const guarded = <T>(f: () => T): T => {
    try {
      return f();
    } catch (e) {
      throw e instanceof NonFiniteUpdateError ? refusedUpdate(e, placeOf(e.updatesBefore - startUpdates)) : e;
    }
  };
  let batchesBefore = 0; // batches (updates) of this run before the current epoch
  for (let epoch = firstEpoch; epoch <= cfg.epochs; epoch++) {
    // each epoch's order depends on (seed, epoch, mode) alone, so a resumed run sees the same batches
    epochOrder(order, cfg.batch, cfg.seed, epoch, cfg.shuffle ?? "examples");
    const place = (batch: number): DivergencePlace => placeOf(batchesBefore + batch);
    const { trainLoss, seconds } = guarded(() =>
      trainEpoch(cfg, { model, engine, trainer, cg, unitsOf, workerBuild }, order, epoch, place),
    );
    batchesBefore += batches;
    // only rank 0 evaluates: the parameters are equal on every rank
    const devMetrics =
      (cfg.group?.rank ?? 0) === 0 ? evaluate(model, task.metrics, cfg.vocab, forwardPasses.engine(), cfg.dev) : {};
    const checkpoint = outDir === undefined ? null : join(outDir, `epoch-${epoch}.safetensors`);
    if (checkpoint !== null) {
      guarded(() => {
        engine.syncToHost();
        engine.syncTrainerToHost?.(trainer);
      });
      checkWeights(model.params, place(batches - 1));
    }
    const result: EpochResult = {
      epoch,
      trainLoss,
      devAccuracy: devMetrics[task.metrics[0].key] ?? Number.NaN,
      devMetrics,
      ...(cfg.devSet !== undefined ? { devSet: cfg.devSet } : {}),
      seconds,
      sentencesPerSecond: order.length / seconds,
      checkpoint,
    };
    epochs.push(result);
    if (outDir !== undefined && checkpoint !== null) {
      const state = runState(cfg, model, epochs);
      cfg.runDir?.replaceOtherRun(); // a run --force replaces goes only now that this one has trained an epoch
      // the checkpoint carries the state too, so that it alone can continue the run when state.json is lost
      saveCheckpoint(checkpoint, model.params, trainer, state, epoch);
      writeFileAtomic(join(outDir, "state.json"), `${JSON.stringify(state)}\n`);
    }
    cfg.onEpoch?.(result);
  }
  // the returned model holds the trained weights (a checkpoint's sync did it already), and a device engine's last
  // update is checked
  if (outDir === undefined) guarded(() => engine.syncToHost());
}

/** One epoch's batches: the mean loss per loss unit and the seconds they took. */
function trainEpoch<E, V, O extends ModelOptions, M extends TaskModel<E>>(
  cfg: TrainConfig<E, V, O, M>,
  parts: {
    model: M;
    engine: Engine;
    trainer: Trainer;
    cg: ComputationGraph;
    unitsOf: (example: number) => number;
    workerBuild: boolean;
  },
  order: readonly number[],
  epoch: number,
  place: (batch: number) => DivergencePlace,
): { trainLoss: number; seconds: number } {
  const { model, engine, trainer, cg, unitsOf } = parts;
  const builder = parts.workerBuild && canBuildInWorkers(engine) ? engine : undefined;
  const t0 = performance.now();
  const group = cfg.group;
  let lossSum = 0;
  let unitCount = 0;
  /** Loss units of the global batches (all ranks' slices): the epoch's mean divides the ranks' summed loss by it. */
  let globalUnits = 0;
  let done = 0;
  // A pipelined engine hands losses back some batches later, in order: the loss units of the batches queued
  // and not yet summed wait here, so that the mean is over the same batches as the sum.
  const queuedUnits: number[] = [];
  let nextQueued = 0;
  const addLosses = (values: readonly number[]): void => {
    for (const value of values) {
      if (nextQueued >= queuedUnits.length) {
        throw new Error(
          `engine ${engine.name}: takeLosses returned more losses than the ${queuedUnits.length} batches queued`,
        );
      }
      if (!Number.isFinite(value)) throw divergence(`the loss is ${value}`, place(nextQueued));
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
    const batch = start / cfg.batch;
    const globalIndices = order.slice(start, start + cfg.batch);
    for (const i of globalIndices) globalUnits += unitsOf(i);
    // this rank's share of the global batch, balanced by loss units (all of it without a group)
    const indices = group ? rankShare(globalIndices, unitsOf, group.rank, group.worldSize) : globalIndices;
    let units = 0;
    for (const i of indices) units += unitsOf(i);
    const dropoutKey = deriveKey(cfg.seed, "dropout", epoch * 1_000_003 + start);
    // fixed batches go to the workers whenever they can build (the engine keeps what it derives from each batch);
    // otherwise a batch goes to them when one has room, and the main thread builds it meanwhile
    const recurring = cfg.shuffle === "batches";
    const toWorkers = recurring ? (builder?.workerBuildReady ?? builder?.buildsInWorkers) : builder?.buildsInWorkers;
    if (builder !== undefined && toWorkers === true && indices.length > 0) {
      // a worker builds this batch's graph from the indices (it checks the inputs for NaN and ±∞ there)
      builder.trainStepBuilt({ examples: Int32Array.from(indices), training: true, dropoutKey, recurring }, trainer);
      queuedUnits.push(units);
      addLosses(builder.takeLosses(false));
      done += globalIndices.length;
      progress();
      continue;
    }
    const examples = indices.map((i) => cfg.train[i]!);
    cg.renew();
    if (examples.length === 0) {
      // a short last batch left this rank nothing: it still takes part in the update (its gradients are zero)
      engine.update(trainer);
      done += globalIndices.length;
      continue;
    }
    cg.training = true;
    cg.dropoutKey = dropoutKey;
    const loss = model.buildBatchLoss(cg, examples);
    checkInputs(cg, indices, place(batch));
    if (isPipelined(engine)) {
      // a fixed batch built here keeps its script too, under the name the workers would use
      engine.trainStep(
        loss,
        trainer,
        recurring ? { examples: Int32Array.from(indices), training: true, dropoutKey, recurring } : undefined,
      );
      queuedUnits.push(units);
      addLosses(engine.takeLosses(false));
    } else {
      // the loss is checked before its gradient reaches the weights
      const value = engine.forwardScalar(loss);
      queuedUnits.push(units);
      addLosses([value]);
      engine.backward(loss);
      engine.update(trainer);
    }
    done += globalIndices.length;
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
  if (group) {
    // the epoch's loss is the sum over the ranks (each summed its own slices)
    const sum = Float64Array.of(lossSum);
    group.allReduceHost(sum);
    return { trainLoss: sum[0]! / Math.max(globalUnits, 1), seconds: (performance.now() - t0) / 1000 };
  }
  return { trainLoss: lossSum / Math.max(unitCount, 1), seconds: (performance.now() - t0) / 1000 };
}

/** The run's error for an update the trainer (or a device engine) refused. */
function refusedUpdate(e: NonFiniteUpdateError, at: DivergencePlace): TrainingDivergedError {
  return divergence(`${e.message.replace(/; refusing to apply update \d+$/, "")} (not applied)`, at);
}

/** Refuses a batch whose graph has a NaN or ±∞ input value before it runs: the data, not the training, are at fault. */
function checkInputs(cg: ComputationGraph, indices: readonly number[], at: DivergencePlace): void {
  const bad = firstNonFinite(cg.inputData.subarray(0, cg.inputSize));
  if (bad === null) return;
  const shown = indices.slice(0, 8).map((i) => `#${i + 1}`);
  if (indices.length > 8) shown.push("…");
  throw new TrainingDivergedError(
    `training stopped in epoch ${at.epoch}, batch ${at.batch + 1} of ${at.batches}: input value ${bad.index} of the ` +
      `batch is ${bad.value} (training examples ${shown.join(", ")}); the data are at fault, not the learning rate`,
  );
}

/**
 * Refuses to checkpoint weights that are not finite or are beyond ±2^64 (checkpoint.ts, MAX_MAGNITUDE: such a
 * checkpoint could not be loaded again): an engine that updates inside its kernel (VPPS) applies an update before
 * its loss is seen, so a divergence can reach the weights there.
 */
function checkWeights(params: ParameterCollection, at: DivergencePlace): void {
  for (const p of params.all) {
    const bad = firstOutOfRange(p.value);
    if (bad) {
      const why = Number.isFinite(bad.value) ? `, ${RANGE_RULE}` : "";
      throw divergence(
        `parameter '${p.name}' holds ${bad.value} at element ${bad.index}${why}; no checkpoint written`,
        at,
      );
    }
  }
}

function runState<E, V, O extends ModelOptions, M extends TaskModel<E>>(
  cfg: TrainConfig<E, V, O, M>,
  model: M,
  epochs: EpochResult[],
): RunState {
  const state: RunState = {
    model: cfg.task.name,
    options: cfg.task.savedOptions(cfg.options, model),
    training: {
      ...cfg.settings,
      optimizer: cfg.optimizer,
      learningRate: cfg.learningRate,
      batch: cfg.batch,
      seed: cfg.seed,
      clip: cfg.clipThreshold ?? 5,
      shuffle: cfg.shuffle ?? "examples",
    },
    epochs,
    vocabulary: cfg.task.vocabulary.toJSON(cfg.vocab),
  };
  return { ...state, identity: runIdentity(state) };
}
