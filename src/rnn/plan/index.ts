// The planning room of the persistent RNN: the dense register layouts and the largest layer (dense.ts), a launch's
// layout, replicas and loop (launch.ts), and re-planning where ptxas spills (spill-retry.ts). A sparse layout's plan
// would sit beside dense.ts.
export {
  BATCH_TILE,
  largestPersistentHidden,
  paddedCols,
  planRnnKernel,
  planRnnLayer,
  type RnnCellName,
  type RnnKernelKind,
  type RnnKernelPlan,
  type RnnLayout,
  type RnnPlanResult,
  rnnLayouts,
  type WeightPrecision,
} from "./dense.js";
export {
  chooseRnnLaunch,
  fitsWithin,
  pipelinedBackward,
  pipelinedForward,
  type RnnLaunchChoice,
  rnnPipelineSetting,
  stepCycles,
} from "./launch.js";
export { planUntilNoSpill, SPILL_HEADROOM_STEPS } from "./spill-retry.js";
