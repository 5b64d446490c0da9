// The planning room of the persistent RNN: the dense register layouts and the largest layer (dense.ts), a launch's
// layout, replicas and loop (launch.ts), and re-planning where ptxas spills (spill-retry.ts); the sparse layouts
// (sparse.ts) and largest layers (sparse-layer.ts), their pair format (sparse-pairs.ts) and bank-aware order
// (sparse-banks.ts), and the launch of a batch (sparse-launch.ts).
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
export {
  autoSlack,
  type CtasPerSm,
  columnPairsEstimate,
  INDEX16_LIMIT,
  type PairsPerRowSource,
  permutesRows,
  planSparseRnnKernel,
  randomOrderWavefronts,
  rowBalancedPairs,
  SPARSE_EXTRA_OVERHEAD,
  type SparseBound,
  type SparseIndexBits,
  type SparsePlanOptions,
  type SparseReduction,
  type SparseRnnKernelPlan,
  type SparseRnnPlanResult,
  WIDE_LOADS,
  type WideLoad,
} from "./sparse.js";
export {
  type BankAwareMethod,
  type BankConflicts,
  bankAwareOrder,
  bankConflicts,
  type SampledBankConflicts,
  sampleBankConflicts,
} from "./sparse-banks.js";
export { type SparseLaunchPins, sparseLaunchPlan, sparseLaunchShape } from "./sparse-launch.js";
export {
  batchTileFor,
  denseEquivalentRatio,
  largestSparseHidden,
  planSparseRnnForward,
  planSparseRnnLayer,
  planSparseRnnWidest,
  type SparseLayerOptions,
  type SparseLayerResult,
  type SparseLimit,
  type SparseLimitOptions,
  sparseLimit,
} from "./sparse-layer.js";
export {
  emptyPairArrays,
  indexOffset,
  layoutProduct,
  localRowOf,
  matrixRowOf,
  PAIR_SLOTS_LIMIT,
  packPairsWithSlots,
  packSparsePairs,
  packSparseRows,
  pairAt,
  randomRowBalancedRows,
  refillPairValues,
  rowOrderOf,
  type SparsePairLayout,
  type SparseRows,
  samePattern,
  slotOffset,
  sparsePairsPerRow,
  sparseRowsOf,
  transposeSparseRows,
  unpackSparsePairs,
  unpackSparseRows,
} from "./sparse-pairs.js";
export { planUntilNoSpill, SPILL_HEADROOM_STEPS } from "./spill-retry.js";
