// The Caffe-style convolution layer (docs/GLP4NN.md): per-sample im2col + GEMMs on one stream or on the lanes of
// GLP4NN's stream pool, one stream's results bit for bit on any number of lanes (runner.ts, lanes.ts); a pool's work
// issued from dispatch threads (threads.ts, thread-worker.ts, dispatch.ts); a layer alone on the device, for the
// benchmark and the analysis (layer.ts); and its GLP4NN policy — the layer profiled, analysed and its pools confirmed
// by timing (glp.ts), a runner per layer and direction chosen that way (auto.ts). Its kernels are the eager program's
// (kernels.ts). The eager engine's `conv2d` nodes reach it through src/engines/eager/conv-node.ts.

export { ConvAuto } from "./auto.js";
export {
  analyseConvLayer,
  type CallFootprint,
  type ConfirmedPools,
  type ConvAnalysis,
  callFootprints,
  choosePools,
  confirmPools,
  type LaunchMode,
  neighbourPools,
  type PoolTrial,
} from "./glp.js";
export { type ConvHost, type ConvKernels, directHost, launchShape } from "./kernels.js";
export {
  type ConvLane,
  type ConvLanes,
  oneLane,
  PRODUCT_SLOTS,
  poolLanes,
  WEIGHT_SUMS,
  type WeightSums,
  weightSumsFromEnv,
} from "./lanes.js";
export { ConvLayer, type ConvLayerShape, layerGeometry, MAX_LAYER_LANES } from "./layer.js";
export { type ConvPointers, ConvRunner, type ConvTrace } from "./runner.js";
export { convThreadsFor, lazyConvThreads, MAX_POOL_LANES } from "./threads.js";
