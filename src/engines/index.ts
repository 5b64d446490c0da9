export { AutobatchCpuEngine } from "./autobatch/cpu-batched.js";
export {
  AutobatchGpuEngine,
  type AutobatchGpuOptions,
  type AutobatchLaunchCounts,
  type GemmMode,
} from "./autobatch/gpu-engine.js";
export { CpuEngine, type CpuEngineOptions } from "./cpu.js";
export { EagerEngine, type EagerEngineOptions, type EagerLaunchCounts } from "./eager/engine.js";
export { type Engine, type EngineCapabilities, isPipelined, type PipelinedEngine } from "./engine.js";
export {
  type CreateEngineOptions,
  createEngine,
  createEvaluationEngine,
  ENGINE_NAMES,
  ENGINE_OPTIONS,
  ENGINES,
  type EngineEntry,
  type EngineName,
  type EngineOptionSpec,
  EngineUnavailableError,
  engineEntry,
  ForwardPasses,
} from "./registry.js";
export {
  ScheduleWorkerError,
  Vpps,
  VppsEngine,
  type VppsHostOptions,
  type VppsInstrumentOptions,
  type VppsOptions,
  VppsPlanError,
  type VppsTrainingOptions,
  type VppsVariantOptions,
} from "./vpps/index.js";
