// The GPU runtime of the persistent RNN: what both paths of a layer direction share (layer-base.ts: the device and
// stream, workspaces, argument types, the GEMMs), the persistent layer (persistent.ts: launches; persistent-builds.ts:
// its compiled kernels), the sparse persistent layer of a pruned W_hh (sparse.ts), the stepwise path (stepwise.ts), the
// GPU RnnBackend (gpu-backend.ts), and a pruned W_hh's masked gradient (masked-gradient.ts).
export { GpuRnnBackend, type GpuRnnBackendOptions, type RnnPath } from "./gpu-backend.js";
export {
  type BackwardArgs,
  type ForwardArgs,
  type OwnedRnnGpu,
  openRnnGpu,
  type PackedSteps,
  type RnnDeviceWeights,
  RnnDoesNotFitError,
  type RnnGpu,
  RnnLayerBase,
  RnnWorkspace,
} from "./layer-base.js";
export { RnnMaskKernel } from "./masked-gradient.js";
export { PersistentRnnLayer, type PersistentRnnOptions, RNN_PENDING_BITS } from "./persistent.js";
export { SparsePersistentRnnLayer, type SparseRnnLayerOptions, sparsePlanFor } from "./sparse.js";
export { StepwiseRnnLayer } from "./stepwise.js";
