// GLP4NN (docs/GLP4NN.md): the resource tracker that records kernels' resources and timings on their first launches,
// the kernel analyser that sizes a stream pool from them, and its explanation for `--explain`. The stream pool
// itself is part of the CUDA runtime (src/cuda/runtime/stream-pool.ts), re-exported here.
// Its users: the conv layer (src/conv/) and the eager engine's levels (src/engines/eager/level-glp.ts).

export { type Lane, type PoolBackend, StreamPool } from "../cuda/index.js";
export {
  analyseConcurrency,
  type ConcurrencyCap,
  type ConcurrencyChoice,
  type ConcurrencyProblem,
  concurrencyProgram,
  DEFAULT_CONNECTIONS,
  hardwareQueues,
  MAX_CONNECTIONS,
} from "./analyser.js";
export { explainChoice } from "./explain.js";
export { callProfiles, captureFootprint, type KernelShape } from "./footprints.js";
export { footprint, type KernelFootprint, type KernelProfile, type Resource } from "./kernels.js";
export { type IntegerProgram, type IntegerSolution, IntegerSolver, loadSolver, lpText } from "./solver.js";
export {
  type LaunchShape,
  median,
  ResourceTracker,
  type TimingEvent,
  type TrackedKernel,
  type TrackedRecord,
  type TrackerOptions,
} from "./tracker.js";
