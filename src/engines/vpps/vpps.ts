/**
 * The VPPS API: `const vpps = await Vpps.create(params, options)` plans the weight distribution with the real
 * device's numbers, generates and JIT-compiles (through the on-disk cache) one kernel per plan variant, uploads the
 * weights; then `vpps.fb(graph, loss)` runs forward, backward and the SGD or Adam update of a whole batch in one
 * launch and returns the loss of an earlier batch while the GPU works on this one.
 *
 * Optimizers: `optimizer: "sgd"` (default) or `"adam"`, both the reference trainers' rules with global-norm clipping
 * (src/train/trainers.ts). Adam's moments live on the device (moments.ts); its step count `updates` advances with
 * every batch launched with a positive learning rate, and the bias corrections of that step go to the kernel with
 * the launch. A learning rate of 0 runs forward and backward only: weights, moments and `updates` stay.
 *
 * Host pipeline: with `scheduleWorkers` > 0 (the default where there are spare cores), scheduling and encoding run
 * on worker threads (schedule-pool.ts): `fb` snapshots the graph, posts it, and submits to the GPU, in order,
 * every earlier batch whose script is ready, so that building graphs, scheduling them and running kernels overlap.
 *
 * Profile-guided rpw (DESIGN §6.1): with `rowsPerWarp: "profile"` every valid plan is compiled, the first batches
 * rotate over them with CUDA events around each launch, and the fastest (median kernel time) is kept.
 */

import { type DeviceModel, deviceModelFromProperties } from "../../cuda/hw/device-model.js";
import type { PoolStats } from "../../cuda/index.js";
import type { ComputationGraph, Expression } from "../../graph/graph.js";
import { onChipMatrices, type ParameterCollection } from "../../model/parameters.js";
import { GpuContext, type KernelSet } from "../gpu/context.js";
import { generateKernelSource, kernelName, TRACE_SLOTS } from "./codegen/template.js";
import { type KernelProfile, summarizeKernelProfile } from "./instrument/profile.js";
import { analyzeKernelTrace, type TraceAnalysis } from "./instrument/trace.js";
import { createModelLayout } from "./plan/layout.js";
import { enumeratePlans, type GradientStrategy, type MatrixSpec, planVpps, type VppsPlan } from "./plan/plan.js";
import {
  ADAM_DEFAULTS,
  type AdamHyperParameters,
  type AdamStep,
  adamStep,
  checkAdamHyperParameters,
  momentsOfParameters,
} from "./runtime/moments.js";
import { PIPELINE_SLOTS } from "./runtime/pipeline.js";
import { type KernelVariant, VppsRuntime } from "./runtime/runtime.js";
import type { ScheduledBatch } from "./schedule/batch.js";
import { defaultScheduleWorkers, type PooledBatch, SchedulePool } from "./schedule/pool.js";
import { VppsScheduler } from "./schedule/scheduler.js";

/** VppsOptions.profileNodes by default: about 16 SST trees of the Tree-LSTM per variant. */
export const DEFAULT_PROFILE_NODES = 4096;

export interface VppsOptions {
  /** `auto` (GPU 0) or `cuda:N`. */
  readonly device?: string;
  /** Learning rate (changeable later through `learningRate`); default 0.1. */
  readonly learningRate?: number;
  /**
   * The update the kernel applies: "sgd" (default) or "adam" (the AdamTrainer's rule, moments on the device);
   * `setOptimizer` switches later.
   */
  readonly optimizer?: "sgd" | "adam";
  /** Adam's β1, β2 and ε (defaults 0.9, 0.999, 1e-8 as the AdamTrainer's; changeable later through the fields). */
  readonly beta1?: number;
  readonly beta2?: number;
  readonly epsilon?: number;
  /** Global-norm gradient clipping threshold, 0 disables; default 5 (the trainers' default). */
  readonly clip?: number;
  /** Rows per warp, or "profile" (default): compile every valid variant and time the first batches. */
  readonly rowsPerWarp?: number | "profile";
  /** Persistent CTAs per SM; default: the planner's choice (with "profile": every one that fits). */
  readonly ctasPerSm?: 1 | 2;
  /** Where matrix gradients are formed; default "auto" (registers where they fit). */
  readonly gradients?: GradientStrategy | "auto";
  /**
   * Transposed copies of the matrices where registers allow (plan.ts `transposed`): x̄ = Wᵀȳ of short backward
   * lists then runs as a forward-style product on the copies' holders, and W̄ after the backward pass. true: only
   * plans with copies; false: none; "profile" (the default with `rowsPerWarp: "profile"`; false with a fixed rpw):
   * both kinds are compiled and timed with the rpw variants, and the fastest kept (on the H100 copies made
   * Tree-LSTM kernels 3-5% faster at batches 8-128 and 2-3% slower at batch 1: docs/VPPS.md).
   */
  readonly transposed?: boolean | "profile";
  /** Also write register gradients to device memory every batch (for tests: `gradients()`). */
  readonly exportGradients?: boolean;
  /**
   * Lists of at least this many products of one matrix in one step run as tile instructions (small GEMMs over the
   * master copy, spread over all CTAs) instead of on the matrix's holders; 0 never tiles. Default: measured on the
   * H100 (schedule-steps.ts DEFAULT_TILE_ENTRIES).
   */
  readonly tileEntries?: number;
  /**
   * Batches profiled (default 4; the first is a warm-up and dropped): each runs on every variant, with learning rate
   * 0 on all but one, so that it trains once and every variant is timed on the same batches.
   */
  readonly profileBatches?: number;
  /**
   * Graph nodes the profiled batches should have at least (default DEFAULT_PROFILE_NODES): small batches are
   * profiled on more of them (at batch 1 on the H100, 3 batches picked a variant 30% slower than the best, when
   * each variant still ran different batches).
   */
  readonly profileNodes?: number;
  /**
   * Record CUDA events around batches (kernel time and the time between kernels in `stats`): `true` around every
   * batch, a number N around two consecutive batches in every N (the events cost GPU time between the kernels:
   * 4-12 us per batch on the H100, 2-6% at batch 1).
   */
  readonly timing?: boolean | number;
  /** Kernel cache folder (null: no cache). */
  readonly cacheDir?: string | null;
  readonly poolBytes?: number;
  /** Model name in the kernel's name (default "model"). */
  readonly name?: string;
  /** Spins before a wait reports a timeout (kernel-template.ts default: about 2 s). */
  readonly barrierSpinLimit?: number;
  /**
   * Worker threads that schedule and encode batches while the main thread builds the next graph; 0 schedules on
   * the main thread inside `fb`. Default: one per spare core, at most 6 (`min(6, os.availableParallelism() - 1)`),
   * and 0 when VPPS_DUMP is set (dumps are numbered per scheduler).
   */
  readonly scheduleWorkers?: number;
  /**
   * Batches posted to the schedule workers and not yet launched before `fb` waits for the oldest: default twice
   * `scheduleWorkers`. More keeps the GPU fed through a worker's hiccup (a slow batch, a GC pause).
   */
  readonly scheduleAhead?: number;
  /**
   * Batches queued on the GPU before `fb` waits for the oldest to finish (default PIPELINE_SLOTS, 8). Each has its
   * own device script region and pinned buffer; the loss `fb` returns is up to this many batches old.
   */
  readonly pipelineSlots?: number;
  /** Tests only: edits each batch script before it is sent (to provoke kernel errors), on the main thread. */
  readonly editScript?: (script: Uint32Array, ctas: number) => void;
  /**
   * Compile kernels that count SM cycles per instruction (kernel-profile.ts): `kernelProfile()` then says where the
   * kernel's time went (waits vs matrix work vs the rest). A little slower; for measurement, not training.
   */
  readonly profileKernel?: boolean;
  /**
   * Compile kernels that record a timeline of each launch (kernel-trace.ts): `kernelTrace()` then follows the last
   * batch's critical path across processors. For measurement, not training; exclusive with `profileKernel`.
   */
  readonly traceKernel?: boolean;
  /** Where progress lines go (JIT, profile choice); default: nowhere. */
  readonly log?: (line: string) => void;
}

/** What compiling one variant cost. */
export interface VariantInfo {
  readonly name: string;
  readonly ctasPerSm: 1 | 2;
  readonly rowsPerWarp: number;
  readonly jitMs: number;
  readonly cacheHit: boolean;
  readonly registers: number;
  readonly localBytes: number;
  /** Median kernel ms over the profiled batches (undefined until profiled). */
  profileMs?: number;
}

/**
 * Host and device time of the batches submitted so far (ms, summed). On the main thread, `fb` costs
 * `scheduleMs + submitMs` without schedule workers, and `snapshotMs + waitMs + submitMs` with them.
 */
export interface VppsStats {
  /** Batches submitted to the GPU. */
  batches: number;
  /** Scheduling and encoding: on the main thread, or (with schedule workers) the workers' own time, summed. */
  scheduleMs: number;
  /** Pinned copy, memsets, launch, and the wait for the previous batch. */
  submitMs: number;
  /** Schedule workers: snapshotting graphs and posting them (main thread). */
  snapshotMs: number;
  /** Schedule workers: the main thread blocked, waiting for a script. */
  waitMs: number;
  kernelMs: number;
  timedBatches: number;
  /**
   * Timed batches only: the kernel stream's time between one batch's kernel and the next one's (copies, memsets, and
   * any wait for the host: the GPU idles), summed over `gapBatches` consecutive pairs.
   */
  gapMs: number;
  gapBatches: number;
  nodes: number;
}

/** What `fb` fixes for a batch that is submitted later (schedule workers). */
interface BatchTag {
  readonly lr: number;
  readonly clip: number;
  /** Adam's step for this batch (undefined: SGD, or a learning rate of 0). */
  readonly adam: AdamStep | undefined;
  /** A profiling run of a batch that trains on another variant: learning rate 0, its loss not reported. */
  readonly quiet: boolean;
}

/**
 * Words of each pipeline slot's device script region (16 MB): a Tree-LSTM batch of 128 SST trees takes ~350k words
 * (bench/results/vpps-host.json), so one region holds batches of ~1,500 trees.
 */
const SCRIPT_WORDS = 4 << 20;

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? Number.NaN : s[Math.floor((s.length - 1) / 2)]!;
}

interface Variant extends KernelVariant {
  /** Position in the engine's variant list (and the schedule workers' plan list). */
  readonly index: number;
  /** Replaced by setOptimizer (the script's update depends on the optimizer). */
  scheduler: VppsScheduler;
  readonly info: VariantInfo;
  readonly samples: number[];
}

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
  readonly stats: VppsStats = {
    batches: 0,
    scheduleMs: 0,
    submitMs: 0,
    snapshotMs: 0,
    waitMs: 0,
    kernelMs: 0,
    timedBatches: 0,
    gapMs: 0,
    gapBatches: 0,
    nodes: 0,
  };
  private chosen: Variant | undefined;
  private next = 0;
  /** Graph nodes of the batches profiled so far (see pickVariant). */
  private profiledNodes = 0;
  private last: { variant: Variant; schedule: ScheduledBatch } | undefined;
  /** With schedule workers: the loss `fb` returns (that of the batch before the last one submitted). */
  private latest = Number.NaN;
  private disposed = false;

  /** See VppsOptions.scheduleAhead. */
  private readonly scheduleAhead: number;

  private constructor(
    readonly ctx: GpuContext,
    readonly deviceModel: DeviceModel,
    private readonly variants: readonly Variant[],
    private readonly runtime: VppsRuntime,
    private readonly opts: VppsOptions,
    private readonly params: ParameterCollection,
    private pool: SchedulePool<BatchTag> | undefined,
  ) {
    this.learningRate = opts.learningRate ?? 0.1;
    this.scheduleAhead = opts.scheduleAhead ?? 2 * (pool?.size ?? 0);
    this.clip = opts.clip ?? 5;
    this.optimizerName = opts.optimizer ?? "sgd";
    this.beta1 = opts.beta1 ?? ADAM_DEFAULTS.beta1;
    this.beta2 = opts.beta2 ?? ADAM_DEFAULTS.beta2;
    this.epsilon = opts.epsilon ?? ADAM_DEFAULTS.epsilon;
    if (variants.length === 1) this.chosen = variants[0];
    runtime.pipeline.onRetired = (batch, loss) => {
      if (this.quietBatches.size > 0 && this.quietBatches.delete(batch)) return;
      this.batchLossHook?.(loss);
    };
    runtime.onKernelTime = (v, _batch, ms, gapMs) => {
      this.stats.kernelMs += ms;
      this.stats.timedBatches++;
      if (gapMs !== undefined) {
        this.stats.gapMs += gapMs;
        this.stats.gapBatches++;
      }
      if (!this.chosen) (v as Variant).samples.push(ms);
      this.onKernelTime?.((v as Variant).name, ms, gapMs);
    };
  }

  /**
   * Called for every timed batch (option `timing`; every batch while the variants are profiled) as it retires, in
   * launch order: the kernel variant's name, the kernel's milliseconds (CUDA events), and the GPU's milliseconds
   * between the previous timed kernel's end and this one's start when that kernel was the batch just before
   * (copies, memsets, and any wait for the host), else undefined. For timelines: `npm run bench:vpps-timeline`.
   */
  onKernelTime: ((variant: string, kernelMs: number, gapMs: number | undefined) => void) | undefined;

  /**
   * Plans, compiles (or reads the kernel cache), loads and uploads the weights. Every plan variant compiles at once,
   * NVRTC on worker threads (a cold JIT takes seconds per variant).
   */
  static async create(params: ParameterCollection, options: VppsOptions = {}): Promise<Vpps> {
    const setup = Vpps.open(params, options);
    try {
      const started = performance.now();
      // all settle before anything is disposed: a failed variant must not leave others compiling into a closed context
      const settled = await Promise.allSettled(
        setup.plans.map((plan) => {
          const k = Vpps.source(plan, options);
          return setup.ctx.kernelsAsync(`${k.name}.cu`, k.source, [k.name]);
        }),
      );
      const failed = settled.find((r) => r.status === "rejected");
      if (failed) throw failed.reason;
      const sets = settled.map((r) => (r as PromiseFulfilledResult<KernelSet<string>>).value);
      if (sets.length > 1 && sets.some((k) => !k.compile.fromCache)) {
        const ms = performance.now() - started;
        setup.log(`vpps: ${sets.length} variants compiled in parallel in ${ms.toFixed(0)} ms`);
      }
      return Vpps.assemble(setup, params, options);
    } catch (e) {
      Vpps.close(setup);
      throw e;
    }
  }

  /** `create` without the promise (variants compile one after another), for the synchronous Engine adapter. */
  static createSync(params: ParameterCollection, options: VppsOptions = {}): Vpps {
    const setup = Vpps.open(params, options);
    try {
      return Vpps.assemble(setup, params, options);
    } catch (e) {
      Vpps.close(setup);
      throw e;
    }
  }

  /** Releases what `open` made, when creating the engine failed after it. */
  private static close(setup: ReturnType<typeof Vpps.open>): void {
    setup.pool?.dispose();
    setup.ctx.dispose();
  }

  /** The context, the device's numbers, the plan variants and the schedule workers (started first: they load while the kernels compile). */
  private static open(params: ParameterCollection, options: VppsOptions) {
    const optimizer = options.optimizer ?? "sgd";
    if (optimizer !== "sgd" && optimizer !== "adam") {
      throw new RangeError(`Vpps: optimizer must be "sgd" or "adam"; got '${String(optimizer)}'`);
    }
    checkAdamHyperParameters({ ...ADAM_DEFAULTS, ...definedHyperParameters(options) });
    checkVariantOptions(options);
    const ctx = GpuContext.open({
      device: options.device ?? "auto",
      ...(options.cacheDir !== undefined ? { cacheDir: options.cacheDir } : {}),
      ...(options.poolBytes !== undefined ? { poolBytes: options.poolBytes } : {}),
    });
    try {
      const workers = Vpps.workersFor(options);
      const d = ctx.device.props;
      const device = deviceModelFromProperties({
        name: d.name,
        smCount: d.smCount,
        regsPerSm: d.regsPerSm,
        maxRegsPerThread: d.maxRegsPerThread,
        sharedPerSm: d.sharedPerSm,
        sharedPerBlock: d.sharedPerBlockOptin,
        warpSize: d.warpSize,
        computeCapability: { major: d.ccMajor, minor: d.ccMinor },
      });
      const plans = Vpps.plansFor(onChipMatrices(params), device, options);
      const log = options.log ?? (() => {});
      const pool =
        workers > 0
          ? new SchedulePool<BatchTag>({
              workers,
              params: params.all,
              plans,
              schedule: scheduleOptions(options, options.optimizer ?? "sgd"),
            })
          : undefined;
      return { ctx, device, plans, log, pool };
    } catch (e) {
      ctx.dispose();
      throw e;
    }
  }

  /** Compiles (or loads what create compiled) and checks every variant, uploads the weights. */
  private static assemble(
    setup: ReturnType<typeof Vpps.open>,
    params: ParameterCollection,
    options: VppsOptions,
  ): Vpps {
    const { ctx, device, plans, log, pool } = setup;
    const variants = plans.map((plan, index) => Vpps.compile(ctx, params, plan, index, options, log));
    const first = variants[0]!;
    const runtime = new VppsRuntime(ctx, {
      masterFloats: first.plan.masterFloats,
      modelFloats: first.model.modelFloats,
      scriptWords: SCRIPT_WORDS,
      slots: options.pipelineSlots ?? PIPELINE_SLOTS,
      traceCtas: options.traceKernel ? Math.max(...plans.map((p) => p.ctas)) : 0,
    });
    runtime.uploadWeights(
      first.model,
      params.all.map((p) => p.value),
    );
    if (options.optimizer === "adam") runtime.resetMoments(first.model);
    return new Vpps(ctx, device, variants, runtime, options, params, pool);
  }

  private static workersFor(o: VppsOptions): number {
    const n = o.scheduleWorkers;
    if (n === undefined) {
      const dump = process.env["VPPS_DUMP"];
      return dump !== undefined && dump !== "" ? 0 : defaultScheduleWorkers();
    }
    if (!Number.isInteger(n) || n < 0) {
      throw new RangeError(`Vpps: scheduleWorkers must be an integer >= 0 (0: schedule in fb); got ${n}`);
    }
    return n;
  }

  private static plansFor(matrices: MatrixSpec[], device: DeviceModel, o: VppsOptions): VppsPlan[] {
    const gradients = o.gradients ?? "auto";
    // a fixed rpw fixes the variant: no profile unless asked for
    const mode = o.transposed ?? (typeof o.rowsPerWarp === "number" ? false : "profile");
    // "profile": the plans without copies, then those that have some (a plan with no room for one is not repeated)
    const kinds = mode === "profile" ? [false, true] : [mode];
    const plans: VppsPlan[] = [];
    for (const transposed of kinds) {
      const found =
        typeof o.rowsPerWarp === "number"
          ? [planVpps(matrices, device, { rowsPerWarp: o.rowsPerWarp, gradients, transposed, ...pick(o) })]
          : enumeratePlans(matrices, device, gradients, transposed).filter(
              (p) => o.ctasPerSm === undefined || p.ctasPerSm === o.ctasPerSm,
            );
      plans.push(...found.filter((p) => !(mode === "profile" && transposed && p.transposed.length === 0)));
    }
    if (plans.length === 0) return [planVpps(matrices, device, { gradients, ...pick(o) })]; // throws the refusal
    return plans;
  }

  /** The kernel name and generated CUDA source of one plan variant. */
  private static source(plan: VppsPlan, o: VppsOptions): { name: string; source: string } {
    const spec = {
      model: o.name ?? "model",
      ...(o.barrierSpinLimit !== undefined ? { barrierSpinLimit: o.barrierSpinLimit } : {}),
      ...(o.profileKernel ? { profile: true } : {}),
      ...(o.traceKernel ? { trace: true } : {}),
    };
    return { name: kernelName(plan, spec), source: generateKernelSource(plan, spec) };
  }

  private static compile(
    ctx: GpuContext,
    params: ParameterCollection,
    plan: VppsPlan,
    index: number,
    o: VppsOptions,
    log: (line: string) => void,
  ): Variant {
    const { name, source } = Vpps.source(plan, o);
    const set = ctx.kernels(`${name}.cu`, source, [name]); // loaded by create's parallel compile
    const kernel = set.kernels[name];
    const attr = kernel.attributes();
    const resident = kernel.maxActiveBlocksPerSm(plan.threadsPerCta, 0);
    if (resident < plan.ctasPerSm) {
      throw new Error(
        `VPPS: kernel ${name} needs ${plan.ctasPerSm} resident CTA(s) per SM for its persistent grid, but the ` +
          `device fits ${resident} (${attr.numRegs} registers/thread, ${attr.sharedBytes} B shared)`,
      );
    }
    const model = createModelLayout(params.all, plan);
    const info: VariantInfo = {
      name,
      ctasPerSm: plan.ctasPerSm,
      rowsPerWarp: plan.rowsPerWarp,
      jitMs: set.compile.ms,
      cacheHit: set.compile.fromCache,
      registers: attr.numRegs,
      localBytes: attr.localBytes,
    };
    log(
      `vpps: ${name}: ${info.cacheHit ? "kernel cache hit" : "JIT"} ${info.jitMs.toFixed(0)} ms, ` +
        `${attr.numRegs} registers, ${attr.localBytes} B local${attr.localBytes > 0 ? " (SPILLS)" : ""}`,
    );
    const scheduler = new VppsScheduler(model, scheduleOptions(o, o.optimizer ?? "sgd"));
    return {
      plan,
      model,
      kernel,
      name,
      index,
      scheduler,
      info,
      samples: [],
      profiled: o.profileKernel === true,
      traced: o.traceKernel === true,
    };
  }

  /** Every compiled variant, with JIT cost and (after profiling) kernel time. */
  get variantInfo(): readonly VariantInfo[] {
    return this.variants.map((v) => v.info);
  }

  /** The variant in use, once profiling has chosen (or the only one). */
  get chosenVariant(): VariantInfo | undefined {
    return this.chosen?.info;
  }

  get plan(): VppsPlan {
    return (this.chosen ?? this.variants[0]!).plan;
  }

  /** Worker threads scheduling batches (0: `fb` schedules on the main thread). */
  get scheduleWorkers(): number {
    return this.pool?.size ?? 0;
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
    const h = { beta1: this.beta1, beta2: this.beta2, epsilon: this.epsilon, ...definedHyperParameters(hyper) };
    checkAdamHyperParameters(h);
    this.flush();
    if (optimizer !== this.optimizerName) {
      this.optimizerName = optimizer;
      const schedule = scheduleOptions(this.opts, optimizer);
      for (const v of this.variants) v.scheduler = new VppsScheduler(v.model, schedule);
      const pool = this.pool;
      if (pool !== undefined) {
        // the workers' schedulers were made with the old options: new workers with the new ones
        this.pool = undefined;
        pool.dispose();
        this.pool = new SchedulePool<BatchTag>({
          workers: pool.size,
          params: this.params.all,
          plans: this.variants.map((v) => v.plan),
          schedule,
        });
      }
    }
    this.beta1 = h.beta1;
    this.beta2 = h.beta2;
    this.epsilon = h.epsilon;
    if (optimizer === "adam") this.runtime.resetMoments(this.variants[0]!.model);
    this.updates = 0;
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

  /** What `fb` fixes for its batch: learning rate, clip and, for Adam, the step (which advances `updates`). */
  private tag(): BatchTag {
    const lr = this.learningRate;
    const clip = this.clip;
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
  private batchLossHook: ((loss: number) => void) | undefined;
  /** Pipeline batch numbers of quiet profiling runs not yet retired (their losses are not reported). */
  private readonly quietBatches = new Set<number>();

  /**
   * Runs one batch (forward, backward, SGD or Adam update) without waiting for it, and returns the newest loss the
   * GPU has finished (NaN while there is none): an earlier batch's, or while profiling possibly this batch's own,
   * from its run on another variant.
   *
   * Without schedule workers it schedules, encodes and launches this batch. With `scheduleWorkers` = W it snapshots
   * the graph (so the caller may renew it at once), posts it to a worker, and launches every earlier batch whose
   * script is ready, in order; it blocks only while more than `scheduleAhead` (2W) batches are being scheduled.
   * Launching waits for the GPU only when `pipelineSlots` (8) batches are already queued on it. The loss returned is that of the newest
   * batch the GPU has finished by then, so it may be a few batches old, and the same value may be returned more
   * than once; `latestLossSync()` waits and gives the newest. Learning
   * rate and clip are taken when `fb` is called. A scheduling error (an op VPPS cannot run, …) is thrown by the
   * `fb` (or flushing call) that reaches the failed batch, with the worker's message; that batch is skipped.
   */
  fb(graph: ComputationGraph, loss: Expression): number {
    if (this.disposed) throw new Error("Vpps.fb: this instance was disposed");
    if (this.chosen === undefined) return this.fbProfiled(graph, loss);
    this.run(this.chosen, graph, loss, this.tag());
    return this.latest;
  }

  /**
   * While the variants are profiled: the batch runs on every variant, with learning rate 0 on all but the last
   * (which trains; a learning rate of 0 changes no weight, moment or step count), so that the variants are timed
   * on the same batches: with different batches per variant, one tree's shape decides, and at batch 1 the profile
   * kept a variant 30% slower than the best (session 6) or 4% slower (session 7) before this. Chooses once every
   * variant has run `profileBatches` batches and about `profileNodes` graph nodes.
   */
  private fbProfiled(graph: ComputationGraph, loss: Expression): number {
    const tag = this.tag();
    const quiet: BatchTag = { lr: 0, clip: tag.clip, adam: undefined, quiet: true };
    const n = this.variants.length;
    for (let k = 0; k < n; k++) this.run(this.variants[k]!, graph, loss, k === n - 1 ? tag : quiet);
    this.next++;
    this.profiledNodes += graph.size;
    const per = this.opts.profileBatches ?? 4;
    const minNodes = this.opts.profileNodes ?? DEFAULT_PROFILE_NODES;
    if (this.next >= per && this.profiledNodes >= minNodes) this.choose();
    return this.latest;
  }

  /** Schedules (here or on a worker) and launches one batch on variant v. */
  private run(v: Variant, graph: ComputationGraph, loss: Expression, tag: BatchTag): void {
    const pool = this.pool;
    if (pool === undefined) {
      const t0 = performance.now();
      const s = v.scheduler.schedule(graph, loss);
      this.opts.editScript?.(s.script, v.plan.ctas);
      this.stats.scheduleMs += performance.now() - t0;
      this.latest = this.submit(v, s, graph.inputData.subarray(0, graph.inputSize), tag);
      return;
    }
    pool.post(graph, loss, v.index, tag);
    this.submitScheduled(false);
  }

  /** Launches scheduled batches in order: those ready, or (`all`) every one posted, waiting for the workers. */
  private submitScheduled(all: boolean): void {
    const pool = this.pool;
    if (pool === undefined) return;
    try {
      for (;;) {
        const b = pool.take(all || pool.pending > this.scheduleAhead);
        if (b === undefined) return;
        this.submitPooled(b);
      }
    } finally {
      this.stats.snapshotMs = pool.stats.snapshotMs;
      this.stats.waitMs = pool.stats.waitMs;
    }
  }

  private submitPooled(b: PooledBatch<BatchTag>): void {
    const pool = this.pool!;
    try {
      const v = this.variants[b.variant]!;
      this.stats.scheduleMs += b.scheduleMs;
      this.opts.editScript?.(b.batch.script, v.plan.ctas);
      this.latest = this.submit(v, b.batch, b.inputs, b.tag);
    } finally {
      pool.release(b);
    }
  }

  private submit(v: Variant, s: ScheduledBatch, inputs: Float32Array, tag: BatchTag): number {
    const t1 = performance.now();
    const profiling = this.chosen === undefined;
    const t = this.opts.timing;
    // a sampled batch and the one after it, so that the time between their kernels is measured too
    const timed = profiling || t === true || (typeof t === "number" && this.stats.batches % t < 2);
    const index = this.runtime.pipeline.batches;
    if (tag.quiet) this.quietBatches.add(index);
    let prev: number;
    try {
      prev = this.runtime.submit(v, s, inputs, tag.lr, tag.clip, timed, tag.adam);
    } catch (e) {
      this.quietBatches.delete(index); // not launched: the next batch gets this number
      throw e;
    }
    this.stats.submitMs += performance.now() - t1;
    this.last = { variant: v, schedule: s };
    this.stats.batches++;
    this.stats.nodes += s.liveNodes;
    return prev;
  }

  /** Waits for the schedule workers and launches every batch posted so far. */
  private flush(): void {
    this.submitScheduled(true);
  }

  /** Ends the profile: every profiled batch finishes, and the variant with the least kernel time over them stays. */
  private choose(): void {
    this.flush(); // every profiled batch is launched
    this.runtime.drain(); // the last samples arrive
    // the same batches on every variant: their mean (the first left out: warm-up) is what a variant costs
    for (const x of this.variants) {
      const t = x.samples.slice(1);
      x.info.profileMs = t.length > 0 ? t.reduce((a, b) => a + b, 0) / t.length : median(x.samples);
    }
    const best = [...this.variants].sort((a, b) => a.info.profileMs! - b.info.profileMs!)[0]!;
    this.chosen = best;
    (this.opts.log ?? (() => {}))(
      `vpps: profile: ${this.variants.map((x) => `${x.name} ${x.info.profileMs!.toFixed(3)} ms`).join(", ")}; ` +
        `keeping ${best.name}`,
    );
  }

  /**
   * Profiles the plan variants again on the batches that follow (the fastest variant depends on the batch size and
   * shape: call this when they change); a no-op when there is only one variant. Waits for the queued batches.
   */
  profileAgain(): void {
    if (this.variants.length < 2) return;
    this.flush();
    this.runtime.drain();
    this.chosen = undefined;
    this.next = 0;
    this.profiledNodes = 0;
    for (const v of this.variants) v.samples.length = 0;
  }

  /** Launches every batch still being scheduled, waits for the GPU, and returns the last batch's loss (NaN if none). */
  async syncLatestLoss(): Promise<number> {
    return this.latestLossSync();
  }

  /** `syncLatestLoss` without the promise. */
  latestLossSync(): number {
    this.flush();
    this.latest = this.runtime.drain();
    return this.latest;
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
    if (!this.last) throw new Error("Vpps.gradients: no batch has run yet");
    const { variant, schedule } = this.last;
    if (schedule.update === "kernel" && !this.opts.exportGradients && this.optimizerName !== "adam") {
      throw new Error("Vpps.gradients: create the instance with exportGradients: true to read matrix gradients");
    }
    return this.runtime.readGradients(variant.model, schedule);
  }

  /**
   * Where the kernel's cycles went over the batches since the last call with `reset` (needs `profileKernel`; waits
   * for the queued batches).
   */
  kernelProfile(reset = false): KernelProfile {
    if (!this.opts.profileKernel) throw new Error("Vpps.kernelProfile: create the instance with profileKernel: true");
    this.flush();
    return summarizeKernelProfile(this.runtime.readProfile(reset));
  }

  /**
   * The critical path of the last batch's launch (needs `traceKernel`; waits for the queued batches): which
   * instructions and barrier hops the launch's time went to, from the timeline the traced kernel recorded.
   */
  kernelTrace(): TraceAnalysis {
    if (!this.opts.traceKernel) throw new Error("Vpps.kernelTrace: create the instance with traceKernel: true");
    this.flush();
    const t = this.runtime.readTrace();
    const plan = (this.last?.variant ?? this.variants[0]!).plan;
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
    } finally {
      try {
        this.pool?.dispose();
        this.runtime.dispose();
      } finally {
        this.ctx.dispose();
      }
    }
  }
}

/** The schedulers' options (the same in every variant and worker). */
function scheduleOptions(o: VppsOptions, optimizer: "sgd" | "adam") {
  return {
    exportGradients: o.exportGradients ?? false,
    optimizer,
    ...(o.tileEntries !== undefined ? { tileEntries: o.tileEntries } : {}),
  };
}

/** The hyper-parameters given (an explicit undefined is not given). */
/**
 * Refuses bad plan-variant options before anything is opened or compiled: `transposed` (true, false or "profile"),
 * `profileBatches` (a whole number >= 1) and `profileNodes` (a whole number >= 0).
 */
export function checkVariantOptions(o: VppsOptions): void {
  const t = o.transposed;
  if (t !== undefined && t !== true && t !== false && t !== "profile") {
    throw new RangeError(`Vpps: transposed must be true, false or "profile"; got ${JSON.stringify(t)}`);
  }
  for (const [name, min] of [
    ["profileBatches", 1],
    ["profileNodes", 0],
    ["scheduleAhead", 1],
    ["pipelineSlots", 2],
  ] as const) {
    const v = o[name];
    if (v !== undefined && !(Number.isInteger(v) && v >= min)) {
      throw new RangeError(`Vpps: ${name} must be a whole number >= ${min}; got ${String(v)}`);
    }
  }
  const timing = o.timing;
  if (typeof timing === "number" && !(Number.isInteger(timing) && timing >= 2)) {
    throw new RangeError(
      `Vpps: timing must be true, false or a whole number >= 2 (one batch pair in N); got ${timing}`,
    );
  }
}

function definedHyperParameters(h: Partial<AdamHyperParameters>): Partial<AdamHyperParameters> {
  return {
    ...(h.beta1 !== undefined ? { beta1: h.beta1 } : {}),
    ...(h.beta2 !== undefined ? { beta2: h.beta2 } : {}),
    ...(h.epsilon !== undefined ? { epsilon: h.epsilon } : {}),
  };
}

function pick(o: VppsOptions): { ctasPerSm?: 1 | 2 } {
  return o.ctasPerSm !== undefined ? { ctasPerSm: o.ctasPerSm } : {};
}
