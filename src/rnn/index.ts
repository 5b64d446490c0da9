// The persistent recurrent layers' entry point (docs/RNN.md): the layer, its spec and packing helpers, pruning
// (sparse layers), the backend seam and the CPU reference.
export type {
  RnnBackend,
  RnnBackwardLayerArgs,
  RnnBackwardLayerResult,
  RnnForwardLayerArgs,
  RnnForwardLayerResult,
  RnnLayerCall,
  RnnLayerWeights,
  RnnSavedState,
} from "./backend.js";
// For the GPU engines' rnn node, `vpps plan rnn` and `vpps bench rnn`: the planner's answers (layouts, the largest
// layer, the launch a batch gets) and the layers of one direction on a device context.
export { clustered, SPARSE_LADDER, type SparseRung } from "./codegen/index.js";
export {
  PersistentRnn,
  type PersistentRnnOptions,
  type RnnBackwardResult,
  type RnnForwardResult,
  type RnnSequences,
} from "./layer.js";
export { type OpenRnnBackendOptions, openRnnBackend } from "./open-backend.js";
export {
  checkPacked,
  lengthsOf,
  type Packed,
  type PackedSequence,
  packSequences,
  permuteStates,
  type SortOrder,
  sortByLength,
  stepOffsets,
  unpackSequences,
} from "./packed.js";
export {
  chooseRnnLaunch,
  largestPersistentHidden,
  pipelinedBackward,
  pipelinedForward,
  planRnnLayer,
  type RnnCellName,
  type RnnKernelPlan,
  rnnLayouts,
  type WeightPrecision,
} from "./plan/index.js";
// The sparse persistent layouts (docs/RNN.md, "Sparse layouts"): the planner and the largest layers, the pair format a
// sparse kernel loads, the bank-aware order and the bank-conflict model.
export {
  type CtasPerSm,
  columnPairsEstimate,
  INDEX16_LIMIT,
  planSparseRnnKernel,
  rowBalancedPairs,
  type SparseBound,
  type SparseIndexBits,
  type SparsePlanOptions,
  type SparseRnnKernelPlan,
  type SparseRnnPlanResult,
  type WideLoad,
} from "./plan/sparse.js";
export {
  type BankAwareMethod,
  type BankConflicts,
  bankAwareOrder,
  bankConflicts,
  type SampledBankConflicts,
  sampleBankConflicts,
} from "./plan/sparse-banks.js";
export { type SparseLaunchPins, sparseLaunchPlan, sparseLaunchShape } from "./plan/sparse-launch.js";
export {
  batchTileFor,
  denseEquivalentRatio,
  largestSparseHidden,
  planSparseRnnForward,
  planSparseRnnLayer,
  type SparseLayerOptions,
  type SparseLayerResult,
  type SparseLimit,
  sparseLimit,
} from "./plan/sparse-layer.js";
export {
  layoutProduct,
  packSparsePairs,
  packSparseRows,
  pairAt,
  randomRowBalancedRows,
  type SparsePairLayout,
  type SparseRows,
  sparsePairsPerRow,
  sparseRowsOf,
  transposeSparseRows,
  unpackSparsePairs,
  unpackSparseRows,
} from "./plan/sparse-pairs.js";
export {
  keptPerRow,
  type MaskCounts,
  maskCounts,
  maskProblem,
  PRUNING_MODES,
  type PruningMode,
  pruneByMagnitude,
  pruneKeeping,
  pruneRecurrent,
  RNN_PRUNINGS,
  type RnnPruning,
  recurrentMaskCounts,
  validateRnnDensity,
  validateRnnMasks,
  validateRnnPruning,
  type WeightMask,
} from "./prune.js";
export { CpuRnnBackend, type CpuRnnBackendOptions } from "./reference/cpu-backend.js";
export {
  type LayerWeights,
  layerWeightsOf,
  type ReferenceLayer,
  type RnnMasks,
  referenceBackward,
  referenceForward,
  referenceLayerBackward,
  referenceLayerForward,
} from "./reference/reference.js";
export {
  type BackwardArgs,
  openRnnGpu,
  PersistentRnnLayer,
  type RnnDeviceWeights,
  RnnDoesNotFitError,
  type RnnGpu,
  type RnnLayerBase,
  RnnMaskKernel,
  RnnWorkspace,
  SparsePersistentRnnLayer,
  StepwiseRnnLayer,
} from "./runtime/index.js";
export {
  directionsOf,
  gatesOf,
  hasCellState,
  layerInputSize,
  outputSize,
  RNN_CELLS,
  RNN_PRECISIONS,
  RnnArgumentError,
  type RnnCell,
  type RnnParameterInfo,
  type RnnPrecision,
  type RnnSpec,
  type RnnSpecInput,
  recurrentFlops,
  recurrentFlopsPerStep,
  rnnParameterCount,
  rnnParameterLayout,
  validateRnnPrecision,
  validateRnnSpec,
} from "./spec.js";
