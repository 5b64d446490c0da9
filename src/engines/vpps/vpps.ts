/**
 * The VPPS API: `const vpps = await Vpps.create(params, options)` plans the weight distribution with the real
 * device's numbers, generates and JIT-compiles (through the on-disk cache) one kernel per plan variant, uploads the
 * weights; then `vpps.fb(graph, loss)` runs forward, backward and the SGD or Adam update of a whole batch in one
 * launch and returns the loss of an earlier batch while the GPU works on this one.
 *
 * A batch passes through the stage folders in order: plan/ (once: the weight distribution), schedule/ and script/
 * (per batch: instructions per processor, encoded), codegen/ (once: the kernel of each variant, compile.ts), runtime/
 * (per batch: upload, launch, read-back), tune/ (the first batches: which variant stays), instrument/ (on demand).
 *
 * Optimizers: `training.optimizer: "sgd"` (default) or `"adam"`, both the reference trainers' rules with
 * global-norm clipping (src/optim/trainers.ts). Adam's moments live on the device (plan/moments.ts); its step
 * count `updates` advances with every batch launched with a positive learning rate, and the bias corrections of
 * that step go to the kernel with the launch. A learning rate of 0 runs forward and backward only: weights,
 * moments and `updates` stay.
 *
 * Host pipeline: with `host.scheduleWorkers` > 0 (the default where there are spare cores), scheduling and encoding
 * run on worker threads (schedule/pool.ts): `fb` snapshots the graph, posts it, and submits to the GPU, in order,
 * every earlier batch whose script is ready, so that building graphs, scheduling them and running kernels overlap.
 */

import type { DeviceModel } from "../../cuda/hw/device-model.js";
import type { GpuContext, PoolStats } from "../../cuda/index.js";
import type { BuildRequest, GraphBuilderSpec } from "../../graph/builder.js";
import { ComputationGraph, type Expression } from "../../graph/graph.js";
import type { ParameterCollection } from "../../model/parameters.js";
import { argumentError } from "../../ops/common.js";
import { UserError } from "../../util/errors.js";
import type { GradientReducer } from "../data-parallel.js";
import { requireScalar } from "../engine.js";
import { compileVariantsAsync, type VariantInfo } from "./codegen/compile.js";
import { TRACE_SLOTS } from "./codegen/template.js";
import { HostTrace } from "./instrument/host-trace.js";
import { type KernelProfile, summarizeKernelProfile } from "./instrument/profile.js";
import { analyzeKernelTrace, type TraceAnalysis } from "./instrument/trace.js";
import {
  checkStepSettings,
  type ResolvedOptions,
  scheduleOptions,
  type VppsHooks,
  type VppsOptions,
} from "./options.js";
import {
  type AdamHyperParameters,
  adamStep,
  checkAdamHyperParameters,
  momentsBufferOf,
  momentsOfParameters,
} from "./plan/moments.js";
import type { VppsPlan } from "./plan/plan.js";
import { KeptUnions, keptUnionsBytes } from "./runtime/dp-exchange.js";
import { BatchLauncher, type BatchTag, type VppsStats } from "./runtime/launcher.js";
import { ScriptCache, scriptCacheBytes } from "./runtime/script-cache.js";
import type { VppsRuntime } from "./runtime/submit.js";
import { SchedulePool } from "./schedule/pool.js";
import { VppsScheduler } from "./schedule/scheduler.js";
import { assembleVpps, closeVpps, openVpps, type Variant, type VppsSetup } from "./setup.js";
import { VariantProfiler } from "./tune/profiler.js";

export type { CompileProgress, VariantInfo } from "./codegen/compile.js";
export type {
  VppsHooks,
  VppsHostOptions,
  VppsInstrumentOptions,
  VppsOptions,
  VppsTrainingOptions,
  VppsVariantOptions,
} from "./options.js";

export type { VppsStats } from "./runtime/launcher.js";

export class Vpps {
  learningRate: number;
  clip: number;
  /** Adam's hyper-parameters, taken when `fb` is called (like the learning rate). */
  beta1: number;
  beta2: number;
  epsilon: number;
  /**
   * Updates applied so far: batches launched with a positive learning rate (the AdamTrainer's `updates`); the next
   * such batch is Adam's step `updates + 1`. Set it to continue another trainer's count.
   */
  updates = 0;
  private optimizerName: "sgd" | "adam";
  private readonly profiler: VariantProfiler<Variant>;
  /** The workers' graph builder (setGraphBuilder), given again to new workers. */
  private graphBuilder: GraphBuilderSpec | undefined;
  /** The variants by their plan's position in the schedule workers' plan list (a dropped variant leaves a hole). */
  private readonly byPlan: (Variant | undefined)[] = [];
  private disposed = false;
  private readonly launcher: BatchLauncher<Variant>;
  private batchLossHook: ((loss: number) => void) | undefined;
  private reducer: GradientReducer | null = null;
  /** The host timeline (`instrument.hostTrace`), or undefined. */
  private readonly trace: HostTrace | undefined;

  private constructor(
    readonly ctx: GpuContext,
    readonly deviceModel: DeviceModel,
    private readonly variants: readonly Variant[],
    private readonly plans: readonly VppsPlan[],
    private readonly runtime: VppsRuntime,
    private readonly o: ResolvedOptions,
    hooks: VppsHooks,
    private readonly params: ParameterCollection,
    pool: SchedulePool<BatchTag> | undefined,
  ) {
    const t = o.training;
    this.learningRate = t.learningRate;
    this.clip = t.clip;
    this.optimizerName = t.optimizer;
    this.beta1 = t.beta1;
    this.beta2 = t.beta2;
    this.epsilon = t.epsilon;
    for (const v of variants) this.byPlan[v.index] = v;
    this.profiler = new VariantProfiler(variants, {
      batches: o.variants.profileBatches,
      nodes: o.variants.profileNodes,
      log: o.log,
    });
    const trace = o.instrument.hostTrace ? new HostTrace() : undefined;
    const launcher = new BatchLauncher<Variant>(
      runtime,
      pool,
      (index) => this.byPlan[index]!,
      {
        scheduleAhead: o.host.scheduleAhead ?? 2 * (pool?.size ?? 0),
        // the trace's GPU busy and idle times come from the timing events
        timing: trace !== undefined && o.instrument.timing === false ? true : o.instrument.timing,
        profiling: () => this.profiler.chosen === undefined,
      },
      hooks,
    );
    this.launcher = launcher;
    // scripts of recurring batches (the training loop's fixed batches), while schedule workers build them
    const keep = scriptCacheBytes();
    if (keep > 0) launcher.scripts = new ScriptCache(keep);
    // and, in data-parallel mode, the unions of the ranks' touched rows that every rank keeps
    const unions = keptUnionsBytes();
    if (unions > 0) launcher.unions = new KeptUnions(unions);
    this.trace = trace;
    launcher.trace = trace;
    runtime.trace = trace;
    runtime.pipeline.onRetired = (batch, loss) => {
      if (launcher.retiredQuiet(batch)) return;
      this.batchLossHook?.(loss);
    };
    const stats = launcher.stats;
    runtime.onKernelTime = (v, _batch, ms, gapMs, afterMs) => {
      stats.kernelMs += ms;
      stats.timedBatches++;
      if (gapMs !== undefined) {
        stats.gapMs += gapMs;
        stats.gapBatches++;
      }
      if (trace) {
        trace.sample("gpuBusy", ms + (afterMs ?? 0));
        if (afterMs !== undefined) trace.sample("gpuAfter", afterMs);
        if (gapMs !== undefined) trace.sample("gpuIdle", gapMs);
      }
      this.profiler.sample(v as Variant, ms);
      this.onKernelTime?.(v.name, ms, gapMs);
    };
  }

  /**
   * Called for every timed batch (option `instrument.timing`; every batch while the variants are profiled) as it
   * retires, in launch order: the kernel variant's name, the kernel's milliseconds (CUDA events), and the GPU's
   * milliseconds between the previous timed kernel's end and this one's start when that kernel was the batch just
   * before (copies, memsets, and any wait for the host), else undefined. For timelines: `npm run bench:vpps-timeline`.
   */
  onKernelTime: ((variant: string, kernelMs: number, gapMs: number | undefined) => void) | undefined;

  /**
   * Plans, compiles (or reads the kernel cache), loads and uploads the weights. Every plan variant compiles at once,
   * NVRTC on worker threads (a cold JIT takes seconds per variant). `hooks` are for tests.
   */
  static async create(params: ParameterCollection, options: VppsOptions = {}, hooks: VppsHooks = {}): Promise<Vpps> {
    const setup = openVpps(params, options);
    try {
      await compileVariantsAsync(setup.ctx, setup.plans, setup.o);
      return Vpps.assemble(setup, params, hooks);
    } catch (e) {
      closeVpps(setup);
      throw e;
    }
  }

  /** `create` without the promise (variants compile one after another), for the synchronous Engine adapter. */
  static createSync(params: ParameterCollection, options: VppsOptions = {}, hooks: VppsHooks = {}): Vpps {
    const setup = openVpps(params, options);
    try {
      return Vpps.assemble(setup, params, hooks);
    } catch (e) {
      closeVpps(setup);
      throw e;
    }
  }

  /** Builds the API object over what `openVpps` and `assembleVpps` (setup.ts) made. */
  private static assemble(setup: VppsSetup, params: ParameterCollection, hooks: VppsHooks): Vpps {
    const { variants, runtime } = assembleVpps(setup, params);
    return new Vpps(setup.ctx, setup.device, variants, setup.plans, runtime, setup.o, hooks, params, setup.pool);
  }

  /** Host and device time of the batches submitted so far. */
  get stats(): VppsStats {
    return this.launcher.stats;
  }

  /** Every compiled variant, with JIT cost and (after profiling) kernel time. */
  get variantInfo(): readonly VariantInfo[] {
    return this.variants.map((v) => v.info);
  }

  /** The variant in use, once profiling has chosen (or the only one). */
  get chosenVariant(): VariantInfo | undefined {
    return this.profiler.chosen?.info;
  }

  get plan(): VppsPlan {
    return (this.profiler.chosen ?? this.variants[0]!).plan;
  }

  /** Worker threads scheduling batches (0: `fb` schedules on the main thread). */
  get scheduleWorkers(): number {
    return this.launcher.pool?.size ?? 0;
  }

  /** The update the kernel applies ("sgd" or "adam"). */
  get optimizer(): "sgd" | "adam" {
    return this.optimizerName;
  }

  /**
   * Switches the update to `optimizer` for the batches posted from now on (the earlier ones are launched first),
   * with Adam's hyper-parameters when given. Switching to Adam, or calling this with "adam" again, starts Adam
   * afresh as a new AdamTrainer would: moments zeroed (allocated on the device the first time) and `updates` 0.
   */
  setOptimizer(optimizer: "sgd" | "adam", hyper: Partial<AdamHyperParameters> = {}): void {
    if (optimizer !== "sgd" && optimizer !== "adam") {
      throw new RangeError(`Vpps.setOptimizer: optimizer must be "sgd" or "adam"; got '${String(optimizer)}'`);
    }
    const h = {
      beta1: hyper.beta1 ?? this.beta1,
      beta2: hyper.beta2 ?? this.beta2,
      epsilon: hyper.epsilon ?? this.epsilon,
    };
    checkAdamHyperParameters(h);
    this.flush();
    if (optimizer !== this.optimizerName) {
      this.optimizerName = optimizer;
      this.reschedule();
    }
    this.beta1 = h.beta1;
    this.beta2 = h.beta2;
    this.epsilon = h.epsilon;
    if (optimizer === "adam") this.runtime.resetMoments(this.variants[0]!.model);
    this.updates = 0;
  }

  /** Schedulers (and schedule workers) with the current optimizer and mode, for the batches posted from now on. */
  private reschedule(): void {
    const schedule = scheduleOptions(this.o, this.optimizerName, this.reducer !== null);
    for (const v of this.variants) v.scheduler = new VppsScheduler(v.model, schedule);
    // the kept scripts were scheduled with the old options; a new reducer may have other ranks (every rank comes
    // here at the same step, so the kept unions go everywhere alike)
    this.launcher.scripts?.clear();
    this.launcher.unions?.clear();
    const pool = this.launcher.pool;
    if (pool !== undefined) {
      this.launcher.flush(); // the batches posted so far, on the workers that took them
      // the workers' schedulers were made with the old options: new workers with the new ones
      this.launcher.pool = undefined;
      pool.dispose();
      this.launcher.pool = new SchedulePool<BatchTag>({
        workers: pool.size,
        params: this.params.all,
        plans: [...this.plans],
        schedule,
      });
      if (this.graphBuilder !== undefined) this.launcher.pool.startGraphBuilder(this.graphBuilder);
    }
  }

  /**
   * Data-parallel training (src/engines/data-parallel.ts): from the next batch on, the kernel exports the weight
   * gradients instead of updating (the scripts end after backward: schedule option `update: "host"`, the same
   * kernels), the gradients are summed over `reducer`'s ranks, and the update runs after the sum, on the device, by
   * the host-update kernels (runtime/dp-update.ts): the trainer's rule exactly (clip by the global norm, SGD or Adam
   * with bias correction, the union of the ranks' touched lookup rows). `fb` stays asynchronous; its only host
   * exchange (the touched rows) happens when a batch is launched. null: back to the in-kernel update. Waits for the
   * batches posted so far. Every rank must then launch the same number of batches with a positive learning rate.
   */
  setGradientReducer(reducer: GradientReducer | null): void {
    if (this.disposed) throw new Error("Vpps.setGradientReducer: this instance was disposed");
    this.flush();
    this.reducer = reducer;
    this.runtime.setGradientReducer(reducer, this.variants[0]!.model);
    this.reschedule();
  }

  /** The reducer of data-parallel training (setGradientReducer), or null. */
  get gradientReducer(): GradientReducer | null {
    return this.reducer;
  }

  /**
   * Adam's moments per parameter index, laid out like its values (after every batch posted so far; lookup tables:
   * zero in rows never touched); undefined while the optimizer is SGD.
   */
  adamMoments(): { readonly m: Float32Array; readonly v: Float32Array }[] | undefined {
    if (this.optimizerName !== "adam") return undefined;
    this.flush();
    const raw = this.runtime.readMoments();
    return raw === undefined ? undefined : momentsOfParameters(this.variants[0]!.model, raw);
  }

  /**
   * Continues Adam from saved moments (per parameter index, laid out like its values; a missing entry is zero), for
   * the batches posted from now on: after `setOptimizer("adam")`, with `updates` set to the saved step count.
   */
  setAdamMoments(perParameter: readonly ({ readonly m: Float32Array; readonly v: Float32Array } | undefined)[]): void {
    if (this.optimizerName !== "adam") throw new Error('Vpps.setAdamMoments: call setOptimizer("adam") first');
    this.flush();
    this.runtime.writeMoments(momentsBufferOf(this.variants[0]!.model, perParameter));
  }

  /** Waits for the schedule workers and launches every batch posted so far. */
  private flush(): void {
    this.launcher.flush();
  }

  /** What `fb` fixes for its batch: learning rate, clip and, for Adam, the step (which advances `updates`). */
  private tag(): BatchTag {
    const lr = this.learningRate;
    const clip = this.clip;
    checkStepSettings("Vpps.fb: ", lr, clip);
    if (!(lr > 0)) return { lr, clip, adam: undefined, quiet: false };
    this.updates++;
    if (this.optimizerName !== "adam") return { lr, clip, adam: undefined, quiet: false };
    const h = { beta1: this.beta1, beta2: this.beta2, epsilon: this.epsilon };
    checkAdamHyperParameters(h);
    return { lr, clip, adam: adamStep(h, this.updates), quiet: false };
  }

  /**
   * Called with the loss of every batch `fb` launched (profiling batches too: they train), once each and in `fb`
   * order, when the host retires it: inside a later `fb`, `latestLossSync`, or any call that waits for the GPU.
   * `fb` returns only the newest finished loss; this is for callers that need them all (the Engine adapter's
   * pipelined training). Undefined: none. (A profiled batch's runs on the other variants, with learning rate 0,
   * do not report.)
   */
  get onBatchLoss(): ((loss: number) => void) | undefined {
    return this.batchLossHook;
  }
  set onBatchLoss(f: ((loss: number) => void) | undefined) {
    this.batchLossHook = f;
  }

  /**
   * Runs one batch (forward, backward, SGD or Adam update) without waiting for it, and returns the newest loss the
   * GPU has finished (NaN while there is none): an earlier batch's, or while profiling possibly this batch's own,
   * from its run on another variant.
   *
   * Without schedule workers it schedules, encodes and launches this batch. With `host.scheduleWorkers` = W it
   * snapshots the graph (so the caller may renew it at once), posts it to a worker, and launches every earlier
   * batch whose script is ready, in order; it blocks only while more than `host.scheduleAhead` (2W) batches are
   * being scheduled. Launching waits for the GPU only when `host.pipelineSlots` (8) batches are already queued on
   * it. The loss returned is that of the newest batch the GPU has finished by then, so it may be a few batches old,
   * and the same value may be returned more than once; `latestLossSync()` waits and gives the newest. Learning rate
   * and clip are taken when `fb` is called. A scheduling error (an op VPPS cannot run, …) is thrown by the `fb` (or
   * flushing call) that reaches the failed batch, with the worker's message; that batch is skipped.
   */
  fb(graph: ComputationGraph, loss: Expression, recurring?: BuildRequest): number {
    if (this.disposed) throw new Error("Vpps.fb: this instance was disposed");
    if (!(graph instanceof ComputationGraph)) throw argumentError("Vpps.fb", "graph", "a ComputationGraph", graph);
    requireScalar(loss, "Vpps.fb", "loss");
    this.params.checkGraph(graph, "vpps");
    const trace = this.trace;
    if (trace) {
      trace.enterStep(performance.now());
      try {
        return this.fbStep(graph, loss, recurring);
      } finally {
        trace.exitStep(performance.now());
      }
    }
    return this.fbStep(graph, loss, recurring);
  }

  /**
   * Hands the schedule workers a model's graph builder (src/graph/builder.ts; a task's `workerBuilder`): once they
   * have loaded it, `fbBuilt` names a batch by its examples and a worker builds its graph, so the main thread builds
   * none. Returns at once; the workers load it in the background (importing the module and making the model takes
   * them a moment, and the main thread goes on building), and `buildsInWorkers` turns true when all have — or throws,
   * in one line, if one could not (a module that does not load, a model whose parameters are not this engine's).
   * undefined: forget it. Needs schedule workers (`host.scheduleWorkers` ≥ 1).
   */
  setGraphBuilder(spec: GraphBuilderSpec | undefined): void {
    if (this.disposed) throw new Error("Vpps.setGraphBuilder: this instance was disposed");
    const pool = this.launcher.pool;
    if (spec !== undefined) {
      if (pool === undefined) {
        throw new UserError(
          "Vpps.setGraphBuilder: workers build graphs only with schedule workers (host.scheduleWorkers >= 1)",
        );
      }
      pool.startGraphBuilder(spec);
    }
    this.graphBuilder = spec;
  }

  /**
   * Whether `fbBuilt` may be called now: a graph builder is set, every worker has loaded it, and the variants have
   * been profiled (a profiled batch runs one graph on every variant: those the caller builds and passes to `fb`).
   */
  get buildsInWorkers(): boolean {
    const pool = this.launcher.pool;
    return (
      this.graphBuilder !== undefined &&
      pool !== undefined &&
      this.profiler.chosen !== undefined &&
      pool.graphBuilderReady()
    );
  }

  /**
   * Whether a schedule worker has room for another batch: fewer batches are posted and not yet back than there are
   * workers. A caller that builds graphs itself too (the training loop) builds the next one on the main thread when
   * they have none, so that the main thread and the workers share the builds instead of the main thread idling.
   */
  get workersHaveRoom(): boolean {
    const pool = this.launcher.pool;
    return pool !== undefined && pool.pending < pool.size;
  }

  /**
   * `fb` for a batch the workers' graph builder builds (`setGraphBuilder`): `request` names its examples and the
   * graph's dropout settings. Otherwise as `fb`: queued, the newest finished loss returned.
   */
  fbBuilt(request: BuildRequest): number {
    if (this.disposed) throw new Error("Vpps.fbBuilt: this instance was disposed");
    const chosen = this.profiler.chosen;
    if (!this.buildsInWorkers || chosen === undefined) {
      throw new Error(
        "Vpps.fbBuilt: no graph builder is set (setGraphBuilder), or the variants are still being profiled " +
          "(check buildsInWorkers; build those batches' graphs and call fb)",
      );
    }
    const trace = this.trace;
    if (trace) trace.enterStep(performance.now());
    try {
      this.launcher.runBuilt(chosen, request, this.tag());
    } finally {
      if (trace) trace.exitStep(performance.now());
    }
    return this.launcher.latest;
  }

  private fbStep(graph: ComputationGraph, loss: Expression, recurring: BuildRequest | undefined): number {
    const chosen = this.profiler.chosen;
    if (chosen === undefined) return this.fbProfiled(graph, loss, recurring);
    this.launcher.run(chosen, graph, loss, this.tag(), recurring);
    return this.launcher.latest;
  }

  /**
   * Writes the host timeline of the steps since the last report to stderr, one line (per rank), and forgets them
   * (option `instrument.hostTrace`; nothing without it).
   */
  hostTraceReport(): void {
    const r = this.reducer;
    const line = this.trace?.report(r ? `rank ${r.rank}/${r.worldSize}` : "one process");
    if (line === undefined) return;
    const { scripts, unions } = this.launcher;
    const kept =
      (scripts ? `; kept scripts ${scripts.size} (${scripts.hits} launched)` : "") +
      (unions && r ? `, kept unions ${unions.size} (${unions.hits} launched without an exchange)` : "");
    process.stderr.write(`${line}${kept}\n`);
  }

  /**
   * While the variants are profiled (tune/profiler.ts): the batch runs on every variant, with learning rate 0 on
   * all but the last (which trains; a learning rate of 0 changes no weight, moment or step count).
   */
  private fbProfiled(graph: ComputationGraph, loss: Expression, recurring: BuildRequest | undefined): number {
    const tag = this.tag();
    const quiet: BatchTag = { lr: 0, clip: tag.clip, adam: undefined, quiet: true };
    const n = this.variants.length;
    for (let k = 0; k < n; k++) {
      this.launcher.run(this.variants[k]!, graph, loss, k === n - 1 ? tag : quiet, recurring);
    }
    if (this.profiler.batchRan(graph.size)) {
      this.flush(); // every profiled batch is launched
      this.runtime.drain(); // the last samples arrive
      this.profiler.choose();
    }
    return this.launcher.latest;
  }

  /**
   * Profiles the plan variants again on the batches that follow (the fastest variant depends on the batch size and
   * shape: call this when they change); a no-op when there is only one variant. Waits for the queued batches.
   */
  profileAgain(): void {
    if (this.variants.length < 2) return;
    this.flush();
    this.runtime.drain();
    this.profiler.restart();
  }

  /** Launches every batch still being scheduled, waits for the GPU, and returns the last batch's loss (NaN if none). */
  async syncLatestLoss(): Promise<number> {
    return this.latestLossSync();
  }

  /** `syncLatestLoss` without the promise. */
  latestLossSync(): number {
    this.flush();
    this.launcher.latest = this.runtime.drain();
    return this.launcher.latest;
  }

  /**
   * Device memory of this engine's pool as batches use it: capacity (reserved at creation), and the bytes up to the
   * end of the largest batch submitted so far (weights, gradients, script, model region, values, gradients).
   */
  deviceMemory(): PoolStats {
    return this.runtime.poolStats();
  }

  /**
   * Per parameter, the latest batch's gradient (needs `exportGradients`, Adam, whose update reads exported matrix
   * gradients, or a plan whose host forms them).
   */
  gradients(): Float32Array[] {
    this.flush();
    const last = this.launcher.last;
    if (!last) throw new Error("Vpps.gradients: no batch has run yet");
    const { variant, schedule } = last;
    if (schedule.update === "kernel" && !this.o.exportGradients && this.optimizerName !== "adam") {
      throw new Error("Vpps.gradients: create the instance with exportGradients: true to read matrix gradients");
    }
    return this.runtime.readGradients(variant.model, schedule);
  }

  /**
   * Where the kernel's cycles went over the batches since the last call with `reset` (needs
   * `instrument.profileKernel`; waits for the queued batches).
   */
  kernelProfile(reset = false): KernelProfile {
    if (!this.o.instrument.profileKernel) {
      throw new Error("Vpps.kernelProfile: create the instance with instrument.profileKernel: true");
    }
    this.flush();
    return summarizeKernelProfile(this.runtime.readProfile(reset));
  }

  /**
   * The critical path of the last batch's launch (needs `instrument.traceKernel`; waits for the queued batches):
   * which instructions and barrier hops the launch's time went to, from the timeline the traced kernel recorded.
   */
  kernelTrace(): TraceAnalysis {
    if (!this.o.instrument.traceKernel) {
      throw new Error("Vpps.kernelTrace: create the instance with instrument.traceKernel: true");
    }
    this.flush();
    const t = this.runtime.readTrace();
    const plan = (this.launcher.last?.variant ?? this.variants[0]!).plan;
    const names = [...plan.matrices, ...plan.transposed].map((m) => m.name);
    return analyzeKernelTrace(t.script, t.ctas, t.words, TRACE_SLOTS, names);
  }

  /** Copies the device's weights into the ParameterCollection's host values (after every batch posted so far). */
  syncToHost(): void {
    this.flush();
    this.runtime.downloadWeights(
      this.variants[0]!.model,
      this.params.all.map((p) => p.value),
    );
  }

  /** Launches and finishes what is queued, then stops the schedule workers and frees the device. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    try {
      this.flush();
      this.hostTraceReport();
    } finally {
      try {
        this.launcher.pool?.dispose();
        this.runtime.dispose();
      } finally {
        this.ctx.dispose();
      }
    }
  }
}
