import type { ParameterCollection } from "../model/parameters.js";
import { CpuEngine } from "./cpu.js";
import { ENGINE_NAMES, type Engine, type EngineName } from "./engine.js";

export { CpuEngine, type CpuEngineOptions } from "./cpu.js";
export { ENGINE_NAMES, type Engine, type EngineName } from "./engine.js";

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
export function createEngine(name: string, params: ParameterCollection, _opts: CreateEngineOptions = {}): Engine {
  if (!(ENGINE_NAMES as readonly string[]).includes(name)) {
    throw new EngineUnavailableError(`unknown engine '${name}'; choose one of ${ENGINE_NAMES.join(", ")}`);
  }
  switch (name as EngineName) {
    case "cpu":
      return new CpuEngine(params);
    default:
      throw new EngineUnavailableError(
        `the '${name}' engine does not exist yet in this version of vpps; use --engine cpu (the default)`,
      );
  }
}
