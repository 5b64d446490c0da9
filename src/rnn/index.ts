// The persistent recurrent layers' entry point (docs/RNN.md): the layer, its spec and packing helpers, the backend
// seam and the CPU reference.
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
export { CpuRnnBackend, type CpuRnnBackendOptions } from "./reference/cpu-backend.js";
export {
  type LayerWeights,
  layerWeightsOf,
  type ReferenceLayer,
  referenceBackward,
  referenceForward,
  referenceLayerBackward,
  referenceLayerForward,
} from "./reference/reference.js";
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
