/**
 * The engines vpps knows, in one table: name, what it is, whether it needs a GPU, the options it reads, what it can
 * do, and how to make one. `createEngine` makes engines from it, the CLI builds `--engine` and its help from it, and
 * the training loop asks it which engine evaluates an engine that cannot run forward-only passes (VPPS).
 */
import { CudaLibraryNotFoundError, cudaAvailable, parseDeviceSpec } from "../cuda/index.js";
import type { ParameterCollection } from "../model/parameters.js";
import { UserError } from "../util/errors.js";
import { AutobatchCpuEngine } from "./autobatch/cpu-batched.js";
import { AutobatchGpuEngine } from "./autobatch/gpu-engine.js";
import { CpuEngine } from "./cpu.js";
import { EagerEngine, MAX_EAGER_STREAMS, parseStreams } from "./eager/engine.js";
import type { Engine, EngineCapabilities } from "./engine.js";
import { compileVppsKernels, VppsEngine } from "./vpps/index.js";

export interface CreateEngineOptions {
  /** Autobatching strategy ("agenda" by default). */
  batching?: "depth" | "agenda";
  /** "auto", "cpu" or "cuda:N". */
  device?: string;
  /**
   * The eager engine's stream pool (GLP4NN): "auto" (the kernel analyser chooses), or 1 … 128 streams; "1" by default.
   * The results do not depend on it (one stream's bit for bit), so a saved run does not record it.
   */
  streams?: string;
  /** With `streams` "auto": where the analyser's choice and its reasons go (`--explain`). */
  explain?: (text: string) => void;
  /** VPPS: weight matrices kept off chip (the Vpps option `variants.offChip`; `--off-chip`). */
  offChip?: readonly string[] | "all";
  /** Where an engine's progress lines go while it is made (VPPS: each kernel variant compiled, a re-plan). */
  progress?: (line: string) => void;
}

/** `--streams`: "auto" or a whole number 1 … MAX_EAGER_STREAMS; a RangeError of one line otherwise. */
export function parseStreamsOption(value: string): number | "auto" {
  return parseStreams(value);
}

/** An option of `CreateEngineOptions` as the command line shows it. */
export interface EngineOptionSpec {
  readonly key: keyof CreateEngineOptions;
  /** Commander's flag, with its value placeholder. */
  readonly flag: string;
  readonly help: string;
  readonly default: string;
  /** The accepted values, when they are a fixed list. */
  readonly choices?: readonly string[];
}

/** The engine options, in the order the command line lists them. */
export const ENGINE_OPTIONS: readonly EngineOptionSpec[] = [
  {
    key: "batching",
    flag: "--batching <strategy>",
    help: "autobatch strategy",
    default: "agenda",
    choices: ["depth", "agenda"],
  },
  { key: "device", flag: "--device <spec>", help: "auto, cpu or cuda:N", default: "auto" },
  {
    key: "streams",
    flag: "--streams <n>",
    help: `eager: GLP4NN's stream pool for a level's independent nodes and a convolution's samples, auto or 1 … ${MAX_EAGER_STREAMS}`,
    default: "1",
  },
];

export interface EngineEntry {
  readonly name: string;
  /** A few words for the program's description ("reference"), or "" when the name says it. */
  readonly summary: string;
  /** One line: what the engine does. */
  readonly description: string;
  /** "required": a CUDA GPU; "optional": a GPU unless `device` is "cpu"; "none": runs on the CPU. */
  readonly gpu: "required" | "optional" | "none";
  /** The `CreateEngineOptions` the engine reads. */
  readonly options: readonly (keyof CreateEngineOptions)[];
  /** What its instances' `capabilities` say. */
  readonly capabilities: EngineCapabilities;
  /** Whether it queues whole training steps (`PipelinedEngine`), which the training loop prefers. */
  readonly pipelined: boolean;
  /**
   * Without `capabilities.forwardOnly`: the engines that run its forward-only passes over the same parameters, tried
   * in order (each must compute from the host values or have `reloadParameters`).
   */
  readonly evaluatedBy?: readonly string[];
  create(params: ParameterCollection, opts: CreateEngineOptions): Engine;
  /**
   * Work `create` would otherwise do synchronously that can run first without blocking (VPPS: the JIT of every
   * kernel variant into the kernel cache, on worker threads), for a caller that can await it (the command line,
   * which prints its progress and can be stopped meanwhile).
   */
  prepare?(params: ParameterCollection, opts: CreateEngineOptions): Promise<void>;
}

const FULL: EngineCapabilities = { forwardOnly: true, nodeGradients: true };

const ENGINE_TABLE = [
  {
    name: "cpu",
    summary: "reference",
    description: "the reference: plain loops, node by node; float64 mode for gradient checks",
    gpu: "none",
    options: [],
    capabilities: FULL,
    pipelined: false,
    create: (params) => new CpuEngine(params),
  },
  {
    name: "eager",
    summary: "",
    description: "one CUDA kernel or cuBLAS call per node, like PyTorch eager",
    gpu: "required",
    options: ["device", "streams"],
    capabilities: FULL,
    pipelined: false,
    create: (params, opts) =>
      createGpuEngine(
        "eager",
        opts.device ?? "auto",
        () =>
          new EagerEngine(params, {
            device: opts.device,
            streams: parseStreams(opts.streams ?? "1"),
            ...(opts.explain !== undefined ? { explain: opts.explain } : {}),
          }),
      ),
  },
  {
    name: "autobatch",
    summary: "DyNet-style",
    description:
      "DyNet's on-the-fly operation batching (depth or agenda): same-signature nodes become one kernel or GEMM; " +
      "on the CPU with --device cpu",
    gpu: "optional",
    options: ["batching", "device"],
    capabilities: FULL,
    pipelined: false,
    create: (params, opts) => {
      // On the CPU the batched engine runs the same plans with reference kernels (for testing and for machines
      // without a GPU); the GPU backend is the one that is fast.
      if ((opts.device ?? "auto").trim().toLowerCase() === "cpu") {
        return new AutobatchCpuEngine(params, { strategy: opts.batching ?? "agenda" });
      }
      return createGpuEngine(
        "autobatch",
        opts.device ?? "auto",
        () => new AutobatchGpuEngine(params, { strategy: opts.batching ?? "agenda", device: opts.device }),
        "Use --device cpu (the batched CPU engine) or --engine cpu.",
      );
    },
  },
  {
    name: "vpps",
    summary: "persistent kernel",
    description: "one persistent kernel per model, weights in registers, a byte-code script per batch",
    gpu: "required",
    options: ["device"],
    capabilities: { forwardOnly: false, nodeGradients: false },
    pipelined: true,
    // the autobatch GPU engine evaluates fast (the CPU reference took ~37 s per SST dev evaluation at hidden 256,
    // against ~1 s of VPPS training per epoch); the CPU engine where no autobatch GPU engine can be made
    evaluatedBy: ["autobatch", "cpu"],
    // One persistent kernel per model (src/engines/vpps/); SGD or Adam, updated inside the kernel.
    create: (params, opts) =>
      createGpuEngine(
        "vpps",
        opts.device ?? "auto",
        () =>
          new VppsEngine(params, {
            device: opts.device ?? "auto",
            name: "model",
            ...(opts.offChip !== undefined ? { variants: { offChip: opts.offChip } } : {}),
            ...(opts.progress ? { log: opts.progress } : {}),
          }),
      ),
    // the same options as `create`, so that its synchronous JIT finds every variant in the kernel cache
    prepare: async (params, opts) => {
      checkGpuUsable("vpps", opts.device ?? "auto");
      const progress = opts.progress ?? (() => {});
      const started = performance.now();
      let done = 0;
      let total = 0;
      // between two finished variants (NVRTC takes seconds to a minute each), a line every 10 s
      const heartbeat = setInterval(() => {
        const s = ((performance.now() - started) / 1000).toFixed(0);
        progress(`vpps: still compiling the kernel variants: ${done} of ${total} done, ${s} s elapsed`);
      }, 10_000);
      heartbeat.unref();
      const compileOptions = {
        device: opts.device ?? "auto",
        name: "model",
        ...(opts.offChip !== undefined ? { variants: { offChip: opts.offChip } } : {}),
      };
      const compiled = compileVppsKernels(params, compileOptions, (p) => {
        ({ done, total } = p);
        if (p.done === 0) {
          progress(
            `vpps: the persistent kernel's ${p.total} plan variants: compiled at once by NVRTC (the first run of a ` +
              "model and size), or read from the kernel cache",
          );
        } else if (!p.cached || p.done === p.total) {
          progress(
            `vpps: kernel variant ${p.done} of ${p.total} ${p.cached ? "in the cache" : "compiled"}: ${p.name}` +
              ` (${(p.ms / 1000).toFixed(1)} s; ${(p.elapsedMs / 1000).toFixed(1)} s elapsed)`,
          );
        }
      });
      await compiled
        .catch((e: unknown) => {
          throw gpuLibraryError(e, "vpps");
        })
        .finally(() => clearInterval(heartbeat));
    },
  },
] as const satisfies readonly EngineEntry[];

/** The engines, in the order the command line lists them. */
export const ENGINES: readonly EngineEntry[] = ENGINE_TABLE;
export type EngineName = (typeof ENGINE_TABLE)[number]["name"];
export const ENGINE_NAMES: readonly EngineName[] = ENGINE_TABLE.map((e) => e.name);

/** Thrown when an engine is asked for that this build or machine cannot provide. */
export class EngineUnavailableError extends UserError {
  constructor(message: string) {
    super(message);
    this.name = "EngineUnavailableError";
  }
}

/** The registry's entry of engine `name`; an unknown name is refused with the list of known ones. */
export function engineEntry(name: string): EngineEntry {
  const entry = ENGINES.find((e) => e.name === name);
  if (!entry) throw new EngineUnavailableError(`unknown engine '${name}'; choose one of ${ENGINE_NAMES.join(", ")}`);
  return entry;
}

/** The options `createEngine` made each engine with: its evaluation engine goes on the same device. */
const madeWith = new WeakMap<Engine, CreateEngineOptions>();

/** Makes the named engine over a model's parameters. */
export function createEngine(name: string, params: ParameterCollection, opts: CreateEngineOptions = {}): Engine {
  const entry = engineEntry(name);
  checkDevice(entry, opts.device);
  const engine = entry.create(params, opts);
  madeWith.set(engine, opts);
  return engine;
}

/**
 * Checks an engine name and its options before anything is built (the command line calls it before it reads data),
 * as `createEngine` does: an unknown engine, a malformed device, a GPU for an engine that runs only on the CPU.
 */
export function checkEngineOptions(name: string, opts: CreateEngineOptions = {}): void {
  const entry = engineEntry(name);
  checkDevice(entry, opts.device);
  if (opts.streams !== undefined) {
    parseStreams(opts.streams);
    if (opts.streams.trim() !== "1" && !entry.options.includes("streams")) {
      throw new EngineUnavailableError(
        `--streams ${opts.streams.trim()} sizes the eager engine's stream pool; the '${name}' engine does not use one ` +
          "(use --engine eager, or leave --streams out)",
      );
    }
  }
}

/**
 * A malformed device is refused for every engine, and a GPU (`cuda`, `cuda:N`) for an engine that runs only on the
 * CPU: it would be ignored, and the user would believe the run used the GPU they named.
 */
function checkDevice(entry: EngineEntry, device: string | undefined): void {
  if (device === undefined) return;
  const spec = parseDeviceSpec(device);
  if (spec.kind === "cuda" && entry.gpu === "none") {
    throw new EngineUnavailableError(
      `the '${entry.name}' engine runs on the CPU, but --device ${device.trim()} asks for a GPU; choose a GPU engine ` +
        `(--engine ${ENGINES.filter((e) => e.gpu !== "none")
          .map((e) => e.name)
          .join(", ")}) or leave --device out`,
    );
  }
}

/**
 * An engine that runs forward-only passes over `params` for engine `name`: a new engine of that name where it can
 * run them, else the first of its entry's `evaluatedBy` that can be made here, on the same device. It reads the
 * host values of `params` as they are when it is made (a trained engine's `syncToHost()` comes first) and, later,
 * after `reloadParameters` (what `ForwardPasses` does).
 */
export function createEvaluationEngine(
  name: string,
  params: ParameterCollection,
  opts: CreateEngineOptions = {},
): Engine {
  const entry = engineEntry(name);
  if (entry.capabilities.forwardOnly) return createEngine(name, params, opts);
  const choices = entry.evaluatedBy ?? [];
  for (let k = 0; k < choices.length; k++) {
    try {
      // the device goes to an engine that reads it; the CPU engine, the last resort, runs where it is
      const reads = engineEntry(choices[k]!).options.includes("device");
      return createEngine(choices[k]!, params, reads ? { device: opts.device } : {});
    } catch (e) {
      if (k === choices.length - 1) throw e;
    }
  }
  throw new EngineUnavailableError(`the '${name}' engine cannot run forward-only passes, and names no engine that can`);
}

/**
 * Forward-only passes (evaluation, prediction) over a training engine's parameters: on the engine itself when it
 * can run them; otherwise on an evaluation engine (`createEvaluationEngine`, or `make`) made on first use and kept,
 * whose copy of the weights is refreshed from the training engine's before every use.
 */
export class ForwardPasses {
  private evaluator: Engine | undefined;

  constructor(
    private readonly training: Engine,
    private readonly params: ParameterCollection,
    private readonly make: (params: ParameterCollection) => Engine = (p) =>
      createEvaluationEngine(training.name, p, madeWith.get(training)),
  ) {}

  /** The engine to run forward passes on now, holding the weights the training engine has trained so far. */
  engine(): Engine {
    if (this.training.capabilities.forwardOnly) return this.training;
    this.training.syncToHost();
    if (this.evaluator === undefined)
      this.evaluator = this.make(this.params); // reads the host values as they are now
    else this.evaluator.reloadParameters?.();
    return this.evaluator;
  }

  /** Releases the evaluation engine (the training engine is the caller's). */
  dispose(): void {
    this.evaluator?.dispose();
    this.evaluator = undefined;
  }
}

/**
 * Makes a CUDA engine, turning "no GPU here" into an EngineUnavailableError that says what was missing and what to
 * use instead. `--device cpu` with a CUDA engine is refused: the two ask for different things.
 */
function createGpuEngine(name: string, device: string, make: () => Engine, instead = "Use --engine cpu."): Engine {
  checkGpuUsable(name, device, instead);
  try {
    return make();
  } catch (e) {
    throw gpuLibraryError(e, name, instead);
  }
}

/** Refuses `--device cpu` for a GPU engine, and a machine where no GPU can be used, in one line. */
function checkGpuUsable(name: string, device: string, instead = "Use --engine cpu."): void {
  if (device.trim().toLowerCase() === "cpu") {
    throw new EngineUnavailableError(
      `the '${name}' engine runs on a GPU and cannot run with --device cpu; use --engine cpu, or --device auto or cuda:N`,
    );
  }
  const available = cudaAvailable();
  if (!available.ok) {
    throw new EngineUnavailableError(
      `the '${name}' engine needs a CUDA GPU, and none can be used here: ${available.reason}. ${instead}`,
    );
  }
}

/** A missing CUDA library as the engine's one-line refusal; any other error as it is. */
function gpuLibraryError(e: unknown, name: string, instead = "Use --engine cpu."): unknown {
  return e instanceof CudaLibraryNotFoundError
    ? new EngineUnavailableError(`the '${name}' engine needs ${e.summary}. ${instead}`)
    : e;
}
