/**
 * VPPS, the face: what code outside src/engines/vpps/ may use. The engine (VppsEngine) and the two-call API
 * (Vpps: create once, `fb` per batch); the planner's answer for `vpps plan`; and what the diagnostics benches
 * (`vpps bench vpps ...`) drive directly — the layout, the scheduler and its worker pool, the instrumented
 * kernels' reports.
 */
export { compileVppsKernels } from "./codegen/ahead.js";
export { VppsEngine } from "./engine.js";
export { formatKernelProfile, type KernelProfile } from "./instrument/profile.js";
export { formatKernelTrace, type TraceAnalysis } from "./instrument/trace.js";
export { workerBuildFromEnv } from "./options.js";
export { formatPlan } from "./plan/format.js";
export { createModelLayout } from "./plan/layout.js";
export { enumeratePlans, planVpps, VppsPlanError } from "./plan/plan.js";
export { VppsKernelError } from "./runtime/pipeline.js";
export { SchedulePool, ScheduleRefusal, ScheduleWorkerError } from "./schedule/pool.js";
export { VppsScheduler } from "./schedule/scheduler.js";
export { DEFAULT_TILE_ENTRIES } from "./schedule/steps.js";
export {
  type VariantInfo,
  Vpps,
  type VppsHostOptions,
  type VppsInstrumentOptions,
  type VppsOptions,
  type VppsTrainingOptions,
  type VppsVariantOptions,
} from "./vpps.js";
