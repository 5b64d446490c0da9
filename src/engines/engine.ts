import type { BuildRequest, GraphBuilderSpec } from "../graph/builder.js";
import { Expression, ShapeError } from "../graph/graph.js";
import { ParameterCollection } from "../model/parameters.js";
import { argumentError, describeValue } from "../ops/common.js";
import type { Trainer } from "../optim/trainers.js";

/**
 * What every engine does with a graph: compute values forward, gradients backward (accumulated into the
 * parameters' gradients), and apply a trainer's update to the parameters wherever they live.
 * The CPU engine is the reference; the CUDA engines (eager, autobatch, vpps) implement the same interface and
 * are tested against it.
 */
export interface Engine {
  readonly name: string;
  /** What this engine can do beyond training steps (the training loop and the CLI read it). */
  readonly capabilities: EngineCapabilities;
  /** Computes every node up to `e` (incrementally: nodes already computed in this graph are kept). */
  forward(e: Expression): void;
  /** Forward, then the value of a scalar expression (a loss). */
  forwardScalar(e: Expression): number;
  /** Gradients of the scalar `loss` with respect to every node, accumulated into parameter gradients. */
  backward(loss: Expression): void;
  /** A host copy of a computed node's value. */
  value(e: Expression): Float32Array;
  /** A host copy of a node's gradient after `backward`. */
  gradient(e: Expression): Float32Array;
  /** Applies `trainer` to the parameters and zeroes their gradients. */
  update(trainer: Trainer): void;
  /**
   * Makes the host copy of the parameters (the model's `ParameterCollection`) current, e.g. before a checkpoint.
   * Engines that keep parameters on a device copy them back here; the CPU engine has nothing to do.
   */
  syncToHost(): void;
  /**
   * Copies the part of `trainer`'s state this engine keeps on a device (Adam's moments) into the trainer, e.g.
   * before a checkpoint saves it. Engines that update through the trainer itself (the CPU engines) have none. The
   * other way, an engine starts a trainer it has not used before from the trainer's own state (zero moments for a
   * new one, a checkpoint's after `restoreCheckpoint`).
   */
  syncTrainerToHost?(trainer: Trainer): void;
  /**
   * Copies the host values of the parameters over the engine's own copy, after another engine trained them.
   * Engines that compute from the host values (the CPU engines) have none; an engine that keeps the parameters on a
   * device must have it to serve as another engine's evaluation engine (src/engines/registry.ts).
   */
  reloadParameters?(): void;
  /** Releases device resources (no-op on the CPU). */
  dispose(): void;
}

/** What an engine can do besides forward → backward → update on a scalar loss. */
export interface EngineCapabilities {
  /**
   * `forward(e)` and `value(e)` of any node, with no loss and no update: evaluation and prediction. An engine
   * without it (VPPS: its kernel runs whole training steps from a scalar loss) is evaluated on another engine over
   * the same parameters (`createEvaluationEngine`, `ForwardPasses`).
   */
  readonly forwardOnly: boolean;
  /** `gradient(e)` of any node after `backward` (VPPS keeps them inside its kernel). */
  readonly nodeGradients: boolean;
}

/**
 * Engines that queue a whole training step without waiting for it (VPPS: forward, backward and update run in one
 * kernel, and the host builds later batches while the GPU runs earlier ones). Losses come back later, in order.
 * The synchronous methods still work and may be mixed with `trainStep`: they wait for the queued steps first.
 */
export interface PipelinedEngine extends Engine {
  /**
   * Queues forward, backward and `trainer`'s update of the batch whose loss is `loss`; the graph may be renewed as
   * soon as it returns. Advances `trainer.updates` as `update(trainer)` would. `recurring`: the batch as a worker
   * would name it, where the same examples come again (fixed batches): an engine may keep what it derives from this
   * graph under that name (VPPS keeps its script), since a worker's graph of the request equals it node for node.
   */
  trainStep(loss: Expression, trainer: Trainer, recurring?: BuildRequest): void;
  /**
   * Losses of the `trainStep` batches finished since the last call, in the order they were queued; with `wait`,
   * waits for every queued batch first (so the result then covers all of them).
   */
  takeLosses(wait: boolean): number[];
}

/** Whether `e` can queue training steps (`PipelinedEngine`). */
export function isPipelined(e: Engine): e is PipelinedEngine {
  const p = e as Partial<PipelinedEngine>;
  return typeof p.trainStep === "function" && typeof p.takeLosses === "function";
}

/**
 * A pipelined engine whose worker threads can build training graphs themselves from a model's graph builder
 * (src/graph/builder.ts): the training loop then names each batch by its examples (`trainStepBuilt`) whenever
 * `buildsInWorkers` says so, and builds the graph itself (`trainStep`) otherwise.
 */
export interface WorkerBuildEngine extends PipelinedEngine {
  /**
   * Loads the builder in every worker (throws, in one line, if it cannot); false where this engine will not build in
   * workers after all (it has none, or the user turned it off), and the loop builds every graph itself.
   */
  setGraphBuilder(spec: GraphBuilderSpec): boolean;
  /** Whether the next batch should be a `trainStepBuilt` one (else the loop builds it and calls `trainStep`). */
  readonly buildsInWorkers: boolean;
  /**
   * Whether the workers can build batches at all (their builder loaded), whether or not one has room now: the loop
   * then sends every recurring batch (`BuildRequest.recurring`) through `trainStepBuilt`, where the engine keeps what
   * it derives from it, instead of building some itself. Absent: as `buildsInWorkers`.
   */
  readonly workerBuildReady?: boolean;
  /** `trainStep` for a batch the workers build: its examples (indices into the builder's) and dropout settings. */
  trainStepBuilt(request: BuildRequest, trainer: Trainer): void;
}

/** Whether `e` can have its workers build graphs (`WorkerBuildEngine`). */
export function canBuildInWorkers(e: Engine): e is WorkerBuildEngine {
  const p = e as Partial<WorkerBuildEngine>;
  return isPipelined(e) && typeof p.setGraphBuilder === "function" && typeof p.trainStepBuilt === "function";
}

/**
 * Refuses `e` unless it is an expression (the argument of forward, value, gradient): engines read its graph's arrays
 * at once, so anything else would fail deep inside with a TypeError. `method` and `arg` name it in the message.
 */
export function requireExpression(e: unknown, method: string, arg: string): asserts e is Expression {
  if (!(e instanceof Expression)) throw argumentError(method, arg, "an Expression", e);
}

/** Refuses `e` unless it is an expression of one value: the loss of forwardScalar, backward and trainStep. */
export function requireScalar(e: unknown, method: string, arg: string): asserts e is Expression {
  requireExpression(e, method, arg);
  if (e.size !== 1)
    throw new ShapeError(`${method}: argument '${arg}' has shape ${e.shapeString()}; expected a scalar`);
}

/** Refuses `params` unless it is a ParameterCollection (what every engine is made over); `engine` names the engine. */
export function requireCollection(params: unknown, engine: string): asserts params is ParameterCollection {
  if (!(params instanceof ParameterCollection)) {
    throw new TypeError(`${engine} engine: params must be a ParameterCollection; got ${describeValue(params)}`);
  }
}
