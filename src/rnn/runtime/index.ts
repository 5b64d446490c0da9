// The GPU runtime of the persistent RNN: what both paths of a layer direction share (layer-base.ts: the device and
// stream, workspaces, argument types, the GEMMs), the persistent layer (persistent.ts: launches; persistent-builds.ts:
// its compiled kernels), the stepwise path (stepwise.ts), and the GPU RnnBackend (gpu-backend.ts).
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
export { PersistentRnnLayer, type PersistentRnnOptions, RNN_PENDING_BITS } from "./persistent.js";
export { StepwiseRnnLayer } from "./stepwise.js";
