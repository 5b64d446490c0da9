/**
 * VPPS behind the common Engine interface, so that the CLI and the training loop can use it, in two ways:
 *
 * - Pipelined (`PipelinedEngine`, what trainTreeLstm uses): `trainStep(loss, trainer)` queues forward, backward and
 *   the update of a batch as one `fb` and returns at once, and `takeLosses` hands back the losses of the batches
 *   finished since (in order), so the host builds and schedules later batches (on the Vpps schedule workers) while
 *   the GPU runs earlier ones, as the `Vpps` API does.
 * - Synchronous (`Engine`): forwardScalar → backward → update(trainer) per batch, which needs the loss at once, so
 *   one batch is one `fb` that waits for its own loss (and for any queued trainStep batches before it).
 *
 * The update runs inside the kernel, so the trainer must be known when the batch is launched. trainStep knows it.
 * On the synchronous path the first batch runs once with learning rate 0 (which changes nothing: no weight, no
 * moment, no step count) to produce its loss, and again with the trainer's settings at update(); later batches use
 * the trainer of the previous update() call, read when they are launched. SGD and Adam (SimpleSGDTrainer,
 * AdamTrainer: `trainer.kind`) both run in the kernel; the step count is the trainer's `updates`, which update()
 * and trainStep advance as the trainer's own update() would. A new trainer object starts afresh (Adam's moments
 * zeroed), as its own state would.
 *
 * Forward-only passes (evaluation) are not this engine's: the script format needs a scalar loss to run at all
 * (`capabilities.forwardOnly` is false). The engine registry names the engine that runs them over the same
 * parameters after `syncToHost` (`createEvaluationEngine`, `ForwardPasses` in src/engines/registry.ts).
 */
import type { BuildRequest, GraphBuilderSpec } from "../../graph/builder.js";
import type { ComputationGraph, Expression } from "../../graph/graph.js";
import type { ParameterCollection } from "../../model/parameters.js";
import { AdamTrainer, type Trainer } from "../../optim/trainers.js";
import type { DataParallelEngine, GradientReducer } from "../data-parallel.js";
import { type EngineCapabilities, requireScalar, type WorkerBuildEngine } from "../engine.js";
import { workerBuildFromEnv } from "./options.js";
import { Vpps, type VppsOptions } from "./vpps.js";

export class VppsEngine implements WorkerBuildEngine, DataParallelEngine {
  readonly name = "vpps";
  readonly capabilities: EngineCapabilities = { forwardOnly: false, nodeGradients: false };
  readonly vpps: Vpps;
  private trainer: Trainer | undefined;
  private pending: { g: ComputationGraph; loss: Expression } | undefined;
  private lastLoss: { e: Expression; value: number } | undefined;
  /** Losses of trainStep batches retired and not yet taken, in launch order. */
  private readonly losses: number[] = [];
  /** Whether retired losses are trainStep's (false while a synchronous method waits for its own batch). */
  private collecting = true;
  /** Whether trainStep batches may still be queued (launched or being scheduled) and not yet retired. */
  private queued = false;

  constructor(
    private readonly params: ParameterCollection,
    options: VppsOptions = {},
  ) {
    // schedule workers: the Vpps default (one per spare core) unless the caller says otherwise; trainStep needs them
    // to overlap scheduling with the GPU, and the synchronous path pays only a thread hop per batch for them
    this.vpps = Vpps.createSync(params, options);
    this.vpps.onBatchLoss = (loss) => {
      if (this.collecting) this.losses.push(loss);
    };
  }

  trainStep(loss: Expression, trainer: Trainer, recurring?: BuildRequest): void {
    requireScalar(loss, "trainStep", "loss");
    this.queueStep(trainer, () => this.vpps.fb(loss.graph, loss, recurring));
  }

  /** Queues one training step, `launch` handing the batch to Vpps, with `trainer`'s settings and step count. */
  private queueStep(trainer: Trainer, launch: () => void): void {
    this.useTrainer(trainer);
    // a forwardScalar without update() before this is dropped (its graph may have been renewed since)
    this.pending = undefined;
    this.lastLoss = undefined;
    this.configure(trainer);
    this.queued = true;
    launch();
    // the batch just queued was step updates + 1 (configure), as the trainer's own update() counts it
    trainer.updates++;
  }

  /** False without schedule workers, or with VPPS_WORKER_BUILD=0 (the main thread builds every graph, as before). */
  setGraphBuilder(spec: GraphBuilderSpec): boolean {
    if (this.vpps.scheduleWorkers === 0 || !workerBuildFromEnv()) return false;
    this.vpps.setGraphBuilder(spec);
    return true;
  }

  /**
   * Whether the next batch should be built on the workers: they can (Vpps.buildsInWorkers) and one has room
   * (Vpps.workersHaveRoom); when every worker is busy the loop builds the batch on the main thread meanwhile. Measured
   * on SST at batch 128: workers building every batch made a 6-worker run slower than main-thread builds (the workers
   * became the bound; docs/journal/parallel.md).
   */
  get buildsInWorkers(): boolean {
    return this.vpps.buildsInWorkers && this.vpps.workersHaveRoom;
  }

  /**
   * Whether the workers build batches at all (Vpps.buildsInWorkers), room or not: recurring batches always go to
   * `trainStepBuilt`, so that each one's script is kept (runtime/script-cache.ts) and reused without a worker.
   */
  get workerBuildReady(): boolean {
    return this.vpps.buildsInWorkers;
  }

  /** `trainStep` for a batch the schedule workers build (Vpps.fbBuilt). */
  trainStepBuilt(request: BuildRequest, trainer: Trainer): void {
    this.queueStep(trainer, () => this.vpps.fbBuilt(request));
  }

  takeLosses(wait: boolean): number[] {
    if (wait) {
      this.waitForQueued();
      // the end of an epoch in the training loop: the host timeline of its steps, when asked for (VPPS_DP_TRACE)
      this.vpps.hostTraceReport();
    }
    return this.losses.splice(0, this.losses.length);
  }

  /** Launches and finishes every queued trainStep batch (their losses are collected), e.g. before a synchronous one. */
  private waitForQueued(): void {
    if (!this.queued) return;
    this.vpps.latestLossSync();
    this.queued = false;
  }

  /** Launches one batch and waits for it, keeping its loss out of trainStep's (the queued ones finish first). */
  private runSync(g: ComputationGraph, e: Expression): number {
    this.waitForQueued();
    this.collecting = false;
    try {
      this.vpps.fb(g, e);
      // flushes the workers and drains the GPU: every batch launched so far retires, this one last, so this is its loss
      return this.vpps.latestLossSync();
    } finally {
      this.collecting = true;
    }
  }

  forward(_e: Expression): void {
    throw new Error(
      "vpps engine: forward-only passes are not supported (the kernel runs whole training steps from a scalar " +
        "loss); run them on createEvaluationEngine's engine after syncToHost()",
    );
  }

  forwardScalar(e: Expression): number {
    requireScalar(e, "forwardScalar", "e");
    const g = e.graph;
    this.configure(this.trainer);
    const value = this.runSync(g, e);
    this.pending = this.trainer === undefined ? { g, loss: e } : undefined;
    this.lastLoss = { e, value };
    return value;
  }

  backward(loss: Expression): void {
    requireScalar(loss, "backward", "loss");
    if (this.lastLoss?.e !== loss) this.forwardScalar(loss);
  }

  value(e: Expression): Float32Array {
    if (this.lastLoss?.e === e) return Float32Array.of(this.lastLoss.value);
    throw new Error(
      "vpps engine: value() is available for the loss of the last batch only; forward-only passes run on " +
        "createEvaluationEngine's engine",
    );
  }

  gradient(_e: Expression): Float32Array {
    throw new Error(
      "vpps engine: per-node gradients stay inside the kernel; use the cpu, eager or autobatch engine to inspect them",
    );
  }

  update(trainer: Trainer): void {
    this.useTrainer(trainer);
    if (this.pending) {
      const { g, loss } = this.pending;
      this.pending = undefined;
      this.configure(trainer);
      this.runSync(g, loss);
    }
    // the batch launched for this update was step updates + 1 (configure), as the trainer's own update() counts it
    trainer.updates++;
  }

  /**
   * A new trainer object switches the kernel's optimizer and starts it from the trainer's own state (batches queued
   * before keep theirs): zero moments for a new AdamTrainer, the saved ones for one restored from a checkpoint.
   */
  private useTrainer(trainer: Trainer): void {
    if (trainer === this.trainer) return;
    const hyper =
      trainer instanceof AdamTrainer ? { beta1: trainer.beta1, beta2: trainer.beta2, epsilon: trainer.epsilon } : {};
    this.vpps.setOptimizer(trainer.kind, hyper);
    if (trainer instanceof AdamTrainer && trainer.hasMoments) {
      this.vpps.setAdamMoments(this.params.all.map((p) => trainer.moments(p)));
    }
    this.trainer = trainer;
  }

  /** Copies Adam's moments from the device into `trainer` when it is the trainer the kernel has been running. */
  syncTrainerToHost(trainer: Trainer): void {
    if (trainer !== this.trainer || !(trainer instanceof AdamTrainer)) return;
    const moments = this.vpps.adamMoments();
    if (moments === undefined) return;
    this.params.all.forEach((p, i) => {
      trainer.setMoments(p, moments[i]!.m, moments[i]!.v);
    });
  }

  /** The trainer's settings for the next launch; no trainer yet: learning rate 0, which takes no step. */
  private configure(t: Trainer | undefined): void {
    const v = this.vpps;
    v.learningRate = t?.learningRate ?? 0;
    v.clip = t?.clipThreshold ?? 0;
    if (t === undefined) return;
    if (t instanceof AdamTrainer) {
      v.beta1 = t.beta1;
      v.beta2 = t.beta2;
      v.epsilon = t.epsilon;
    }
    v.updates = t.updates;
  }

  syncToHost(): void {
    this.vpps.syncToHost();
  }

  /**
   * Data-parallel training: the kernel exports the gradients, the ranks sum them, and the trainer's update runs
   * after the sum (`Vpps.setGradientReducer`); null: the in-kernel update again. Queued batches finish first.
   */
  setGradientReducer(reducer: GradientReducer | null): void {
    this.waitForQueued();
    this.vpps.setGradientReducer(reducer);
  }

  dispose(): void {
    this.vpps.dispose();
  }
}
