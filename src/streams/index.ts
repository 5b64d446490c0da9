// GLP4NN (docs/GLP4NN.md): the kernel analyser that sizes a stream pool from the kernels' footprints, its explanation
// for `--explain`, and the kernels' profiles as the resource tracker records them.

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
export { footprint, type KernelFootprint, type KernelProfile, type Resource } from "./kernels.js";
export { type IntegerProgram, type IntegerSolution, IntegerSolver, loadSolver, lpText } from "./solver.js";
