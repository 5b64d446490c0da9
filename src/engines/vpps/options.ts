/**
 * What `Vpps.create` takes: the options, grouped by what they steer (training, the plan variants, the host
 * pipeline, instrumentation), their defaults, and the checks that refuse a bad value before anything is opened or
 * compiled, naming the option by its path (`variants.transposed must be …`).
 */

import { UserError } from "../../util/errors.js";
import { hostTraceFromEnv } from "./instrument/host-trace.js";
import { ADAM_DEFAULTS } from "./plan/moments.js";
import type { GradientStrategy } from "./plan/plan.js";
import { defaultScheduleWorkers } from "./schedule/pool.js";
import type { ScheduleOptions } from "./schedule/scheduler.js";

/** Slots in flight by default: deep enough that a burst of launches does not wait for the GPU. */
export const PIPELINE_SLOTS = 8;

/** VppsOptions.variants.profileNodes by default: about 16 SST trees of the Tree-LSTM per variant. */
export const DEFAULT_PROFILE_NODES = 4096;

/** The update the kernel applies, with its hyper-parameters (all changeable later on the Vpps instance). */
export interface VppsTrainingOptions {
  /** Learning rate; default 0.1. */
  readonly learningRate?: number;
  /** "sgd" (default) or "adam" (the AdamTrainer's rule, moments on the device); `setOptimizer` switches later. */
  readonly optimizer?: "sgd" | "adam";
  /** Adam's β1, β2 and ε (defaults 0.9, 0.999, 1e-8, as the AdamTrainer's). */
  readonly beta1?: number;
  readonly beta2?: number;
  readonly epsilon?: number;
  /** Global-norm gradient clipping threshold, 0 disables; default 5 (the trainers' default). */
  readonly clip?: number;
}

/** Which kernel variants are compiled, and how the first batches pick one of them. */
export interface VppsVariantOptions {
  /** Rows per warp, or "profile" (default): compile every valid variant and time the first batches. */
  readonly rowsPerWarp?: number | "profile";
  /** Persistent CTAs per SM; default: the planner's choice (with "profile": every one that fits). */
  readonly ctasPerSm?: 1 | 2;
  /** Where matrix gradients are formed; default "auto" (registers where they fit). */
  readonly gradients?: GradientStrategy | "auto";
  /**
   * Transposed copies of the matrices where registers allow (plan/types.ts `transposed`): x̄ = Wᵀȳ of short
   * backward lists then runs as a forward-style product on the copies' holders, and W̄ after the backward pass.
   * true: only plans with copies; false: none; "profile" (the default with `rowsPerWarp: "profile"`; false with a
   * fixed rpw): both kinds are compiled and timed with the rpw variants, and the fastest kept (which one wins
   * depends on the batch size: docs/journal/vpps.md).
   */
  readonly transposed?: boolean | "profile";
  /**
   * Matrices kept off chip whether or not they fit in registers (names of the model's weight matrices, or "all"):
   * their products run as tile instructions over the master copy in global memory and their gradients are summed
   * in device memory (plan/types.ts Placement). The planner adds the fewest others without which the rest does not
   * fit; default none forced. A name that is not a weight matrix is refused by `create`, naming the valid ones.
   */
  readonly offChip?: readonly string[] | "all";
  /**
   * Lists of at least this many products of one matrix in one step run as tile instructions (small GEMMs over the
   * master copy, spread over all CTAs) instead of on the matrix's holders; 0 never tiles. Default:
   * schedule/steps.ts DEFAULT_TILE_ENTRIES.
   */
  readonly tileEntries?: number;
  /**
   * Batches profiled (default 4; the first is a warm-up and dropped): each runs on every variant, with learning rate
   * 0 on all but one, so that it trains once and every variant is timed on the same batches.
   */
  readonly profileBatches?: number;
  /**
   * Graph nodes the profiled batches should have at least (default DEFAULT_PROFILE_NODES): small batches are
   * profiled on more of them, since a few small batches do not tell the variants apart reliably.
   */
  readonly profileNodes?: number;
}

/** The host side of the pipeline: who schedules batches, and how many are in flight. */
export interface VppsHostOptions {
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
}

/** Measurement, not training: events around batches, and kernels that count or record where their time goes. */
export interface VppsInstrumentOptions {
  /**
   * Record CUDA events around batches (kernel time and the time between kernels in `stats`): `true` around every
   * batch, a number N around two consecutive batches in every N (the events cost GPU time between the kernels,
   * which matters at small batches).
   */
  readonly timing?: boolean | number;
  /**
   * Compile kernels that count SM cycles per instruction (instrument/profile.ts): `kernelProfile()` then says where
   * the kernel's time went (waits vs matrix work vs the rest). A little slower.
   */
  readonly profileKernel?: boolean;
  /**
   * Compile kernels that record a timeline of each launch (instrument/trace.ts): `kernelTrace()` then follows the
   * last batch's critical path across processors. Exclusive with `profileKernel`.
   */
  readonly traceKernel?: boolean;
  /**
   * Write a per-step timeline of the host to stderr (instrument/host-trace.ts: the median ms of each phase of `fb`, the
   * GPU's busy and idle time per batch), one line at every `hostTraceReport()` (the Engine adapter: every epoch) and
   * at `dispose`. Turns `timing` on. Default: on when VPPS_DP_TRACE is set (and not 0).
   */
  readonly hostTrace?: boolean;
}

export interface VppsOptions {
  /** `auto` (GPU 0) or `cuda:N`. */
  readonly device?: string;
  /** Kernel cache folder (null: no cache). */
  readonly cacheDir?: string | null;
  /** Bytes of the device pool (default: the GpuContext's). */
  readonly poolBytes?: number;
  /** Model name in the kernel's name (default "model"). */
  readonly name?: string;
  /** Where progress lines go (JIT, profile choice); default: nowhere. */
  readonly log?: (line: string) => void;
  /** Spins before a wait reports a timeout (codegen/template.ts default: about 2 s). */
  readonly barrierSpinLimit?: number;
  /** Also write register gradients to device memory every batch (for tests: `gradients()`). */
  readonly exportGradients?: boolean;
  readonly training?: VppsTrainingOptions;
  readonly variants?: VppsVariantOptions;
  readonly host?: VppsHostOptions;
  readonly instrument?: VppsInstrumentOptions;
}

/** Hooks for tests, not part of the package's API (the package root does not export them). */
export interface VppsHooks {
  /** Edits each batch script before it is sent (to provoke kernel errors), on the main thread. */
  readonly editScript?: (script: Uint32Array, ctas: number) => void;
}

/** The variant options with their defaults. */
export interface ResolvedVariants {
  readonly rowsPerWarp: number | "profile";
  readonly ctasPerSm: 1 | 2 | undefined;
  readonly gradients: GradientStrategy | "auto";
  /** A fixed rpw fixes the variant: no profile unless asked for. */
  readonly transposed: boolean | "profile";
  readonly offChip: readonly string[] | "all" | undefined;
  readonly tileEntries: number | undefined;
  readonly profileBatches: number;
  readonly profileNodes: number;
}

/** Every option with its default (what the rest of VPPS reads). */
export interface ResolvedOptions {
  readonly device: string;
  readonly cacheDir: string | null | undefined;
  readonly poolBytes: number | undefined;
  readonly name: string;
  readonly log: (line: string) => void;
  readonly barrierSpinLimit: number | undefined;
  readonly exportGradients: boolean;
  readonly training: Required<VppsTrainingOptions>;
  readonly variants: ResolvedVariants;
  /** `scheduleAhead` undefined: twice the workers the pool has. */
  readonly host: {
    readonly scheduleWorkers: number;
    readonly scheduleAhead: number | undefined;
    readonly pipelineSlots: number;
  };
  readonly instrument: Required<VppsInstrumentOptions>;
}

/** Checks every option (see checkOptions) and fills in the defaults. */
export function resolveOptions(o: VppsOptions = {}): ResolvedOptions {
  checkOptions(o);
  const t = o.training ?? {};
  const v = o.variants ?? {};
  const h = o.host ?? {};
  const i = o.instrument ?? {};
  const dump = process.env["VPPS_DUMP"];
  return {
    device: o.device ?? "auto",
    cacheDir: o.cacheDir,
    poolBytes: o.poolBytes,
    name: o.name ?? "model",
    log: o.log ?? (() => {}),
    barrierSpinLimit: o.barrierSpinLimit,
    exportGradients: o.exportGradients ?? false,
    training: {
      learningRate: t.learningRate ?? 0.1,
      optimizer: t.optimizer ?? "sgd",
      beta1: t.beta1 ?? ADAM_DEFAULTS.beta1,
      beta2: t.beta2 ?? ADAM_DEFAULTS.beta2,
      epsilon: t.epsilon ?? ADAM_DEFAULTS.epsilon,
      clip: t.clip ?? 5,
    },
    variants: {
      rowsPerWarp: v.rowsPerWarp ?? "profile",
      ctasPerSm: v.ctasPerSm,
      gradients: v.gradients ?? "auto",
      transposed: v.transposed ?? (typeof v.rowsPerWarp === "number" ? false : "profile"),
      offChip: v.offChip,
      tileEntries: v.tileEntries,
      profileBatches: v.profileBatches ?? 4,
      profileNodes: v.profileNodes ?? DEFAULT_PROFILE_NODES,
    },
    host: {
      scheduleWorkers: h.scheduleWorkers ?? (dump !== undefined && dump !== "" ? 0 : defaultScheduleWorkers()),
      scheduleAhead: h.scheduleAhead,
      pipelineSlots: h.pipelineSlots ?? PIPELINE_SLOTS,
    },
    instrument: {
      timing: i.timing ?? false,
      profileKernel: i.profileKernel ?? false,
      traceKernel: i.traceKernel ?? false,
      hostTrace: i.hostTrace ?? hostTraceFromEnv(),
    },
  };
}

/**
 * The schedulers' options (the same in every variant and worker); `exportMode`: data-parallel training, where the
 * script ends after backward with the gradients exported and the update runs after the ranks' sum.
 */
export function scheduleOptions(o: ResolvedOptions, optimizer: "sgd" | "adam", exportMode = false): ScheduleOptions {
  const tileEntries = o.variants.tileEntries;
  return {
    exportGradients: o.exportGradients,
    optimizer,
    ...(tileEntries !== undefined ? { tileEntries } : {}),
    ...(exportMode ? { update: "host" as const } : {}),
  };
}

/**
 * Refuses a learning rate or clip threshold that is not a finite number ≥ 0 (`prefix` names where it was set):
 * `fb` reads a rate that is not positive as "no step", so a NaN or negative one would train nothing without a word,
 * and a NaN threshold would switch clipping off.
 */
export function checkStepSettings(prefix: string, learningRate: number | undefined, clip: number | undefined): void {
  for (const [name, x, what] of [
    ["learningRate", learningRate, " (0: forward and backward only)"],
    ["clip", clip, " (0: no clipping)"],
  ] as const) {
    if (x !== undefined && !(typeof x === "number" && x >= 0 && x < Number.POSITIVE_INFINITY)) {
      throw new RangeError(`${prefix}${name} must be a finite number >= 0${what}; got ${String(x)}`);
    }
  }
}

const wholeAtLeast = (path: string, v: number | undefined, min: number, what = ""): void => {
  if (v !== undefined && !(Number.isInteger(v) && v >= min)) {
    throw new RangeError(`Vpps: ${path} must be a whole number >= ${min}${what}; got ${String(v)}`);
  }
};

/**
 * Refuses bad options before anything is opened or compiled, naming the option by its path and saying what it
 * must be and what it got.
 */
export function checkOptions(o: VppsOptions): void {
  const t = o.training ?? {};
  if (t.optimizer !== undefined && t.optimizer !== "sgd" && t.optimizer !== "adam") {
    throw new RangeError(`Vpps: training.optimizer must be "sgd" or "adam"; got '${String(t.optimizer)}'`);
  }
  for (const name of ["beta1", "beta2"] as const) {
    const x = t[name];
    if (x !== undefined && !(x >= 0 && x < 1))
      throw new RangeError(`Vpps: training.${name} must be in [0, 1); got ${x}`);
  }
  if (t.epsilon !== undefined && !(t.epsilon > 0)) {
    throw new RangeError(`Vpps: training.epsilon must be positive; got ${t.epsilon}`);
  }
  checkStepSettings("Vpps: training.", t.learningRate, t.clip);
  const v = o.variants ?? {};
  const tr = v.transposed;
  if (tr !== undefined && tr !== true && tr !== false && tr !== "profile") {
    throw new RangeError(`Vpps: variants.transposed must be true, false or "profile"; got ${JSON.stringify(tr)}`);
  }
  const off = v.offChip;
  if (off !== undefined && off !== "all" && !(Array.isArray(off) && off.every((n) => typeof n === "string"))) {
    throw new RangeError(`Vpps: variants.offChip must be "all" or a list of matrix names; got ${JSON.stringify(off)}`);
  }
  wholeAtLeast("variants.profileBatches", v.profileBatches, 1);
  wholeAtLeast("variants.profileNodes", v.profileNodes, 0);
  const h = o.host ?? {};
  wholeAtLeast("host.scheduleWorkers", h.scheduleWorkers, 0, " (0: schedule in fb)");
  wholeAtLeast("host.scheduleAhead", h.scheduleAhead, 1);
  wholeAtLeast("host.pipelineSlots", h.pipelineSlots, 2);
  const timing = o.instrument?.timing;
  if (typeof timing === "number" && !(Number.isInteger(timing) && timing >= 2)) {
    throw new RangeError(
      `Vpps: instrument.timing must be true, false or a whole number >= 2 (one batch pair in N); got ${timing}`,
    );
  }
}

/**
 * Whether the training loop may have the schedule workers build graphs (VPPS_WORKER_BUILD): unset, "" or "1" yes,
 * "0" no; anything else is one clear error.
 */
export function workerBuildFromEnv(env: Readonly<Record<string, string | undefined>> = process.env): boolean {
  const v = env.VPPS_WORKER_BUILD?.trim();
  if (v === undefined || v === "" || v === "1") return true;
  if (v === "0") return false;
  throw new UserError(
    `VPPS_WORKER_BUILD must be 1 (schedule workers build graphs when one is free) or 0 (the main thread builds every graph); got "${env.VPPS_WORKER_BUILD}"`,
  );
}
