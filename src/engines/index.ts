import { cudaAvailable } from "../cuda/device.js";
import { CudaLibraryNotFoundError } from "../cuda/ffi/find.js";
import type { ParameterCollection } from "../model/parameters.js";
import { AutobatchCpuEngine } from "./autobatch/cpu-batched.js";
import { AutobatchGpuEngine } from "./autobatch/gpu-engine.js";
import { CpuEngine } from "./cpu.js";
import { EagerEngine } from "./eager/engine.js";
import { ENGINE_NAMES, type Engine, type EngineName } from "./engine.js";
import { VppsEngine } from "./vpps/engine.js";

export { AutobatchCpuEngine } from "./autobatch/cpu-batched.js";
export {
  AutobatchGpuEngine,
  type AutobatchGpuOptions,
  type AutobatchLaunchCounts,
  type GemmMode,
} from "./autobatch/gpu-engine.js";
export { CpuEngine, type CpuEngineOptions } from "./cpu.js";
export { EagerEngine, type EagerEngineOptions, type EagerLaunchCounts } from "./eager/engine.js";
export { ENGINE_NAMES, type Engine, type EngineName, isPipelined, type PipelinedEngine } from "./engine.js";
export { VppsEngine } from "./vpps/engine.js";
export { ScheduleWorkerError } from "./vpps/schedule/pool.js";
export {
  Vpps,
  type VppsHostOptions,
  type VppsInstrumentOptions,
  type VppsOptions,
  type VppsTrainingOptions,
  type VppsVariantOptions,
} from "./vpps/vpps.js";

export interface CreateEngineOptions {
  /** Autobatching strategy ("agenda" by default). */
  batching?: "depth" | "agenda";
  /** "auto", "cpu" or "cuda:N". */
  device?: string;
}

/** Thrown when an engine is asked for that this build or machine cannot provide. */
export class EngineUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "EngineUnavailableError";
  }
}

/** Makes the named engine over a model's parameters. */
export function createEngine(name: string, params: ParameterCollection, opts: CreateEngineOptions = {}): Engine {
  if (!(ENGINE_NAMES as readonly string[]).includes(name)) {
    throw new EngineUnavailableError(`unknown engine '${name}'; choose one of ${ENGINE_NAMES.join(", ")}`);
  }
  switch (name as EngineName) {
    case "cpu":
      return new CpuEngine(params);
    case "eager":
      return createGpuEngine("eager", opts.device ?? "auto", () => new EagerEngine(params, { device: opts.device }));
    case "autobatch":
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
    case "vpps":
      // One persistent kernel per model (src/engines/vpps/); SGD or Adam, updated inside the kernel.
      return createGpuEngine(
        "vpps",
        opts.device ?? "auto",
        () => new VppsEngine(params, { device: opts.device ?? "auto", name: "model" }),
      );
    default:
      throw new EngineUnavailableError(
        `the '${name}' engine does not exist yet in this version of vpps; use --engine cpu (the default)`,
      );
  }
}

/**
 * Makes a CUDA engine, turning "no GPU here" into an EngineUnavailableError that says what was missing and what to
 * use instead. `--device cpu` with a CUDA engine is refused: the two ask for different things.
 */
function createGpuEngine(name: string, device: string, make: () => Engine, instead = "Use --engine cpu."): Engine {
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
  try {
    return make();
  } catch (e) {
    if (e instanceof CudaLibraryNotFoundError) {
      throw new EngineUnavailableError(`the '${name}' engine needs ${e.summary}. ${instead}`);
    }
    throw e;
  }
}
