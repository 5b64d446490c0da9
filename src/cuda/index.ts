// The CUDA layer's public surface. ffi/ binds the libraries (one file each: driver, NVRTC, cuBLAS, NCCL); compile/
// turns CUDA C++ into cubins through NVRTC and a content-hash cache, and reads ptxas's spill report; runtime/ is the
// device floor every GPU system stands on (device, memory, streams and events, CUDA graphs, modules and launches,
// GpuContext, GLP4NN's stream pool); info.ts is `vpps info`. The raw bindings stay reachable through the ffi/
// modules for code that needs a call not wrapped here; hw/ (the device model) is a face of its own.

export {
  type CacheKeyInput,
  defaultCacheDir,
  KERNEL_CACHE_FORMAT,
  kernelCacheKey,
  writeFileAtomic,
} from "./compile/cache.js";
export { type CompileRequest, type CompileResult, compileCuda, compileCudaAsync } from "./compile/compile.js";
export {
  assertNoSpills,
  checkNoSpills,
  KernelSpillError,
  type PtxasFunctionReport,
  parsePtxasReport,
} from "./compile/ptxas-report.js";
export {
  Cublas,
  CublasError,
  type CublasHandle,
  CublasOp,
  CublasPointerMode,
  getCublas,
  type RowMajorGemm,
  type RowMajorGemv,
  type RowMajorStridedBatchedGemm,
  rowMajorGemm,
  rowMajorGemv,
  rowMajorStridedBatchedGemm,
} from "./ffi/cublas.js";
export {
  CUDA_USER_FAILURES,
  CudaDeviceError,
  CudaDriver,
  CudaError,
  cudaFailure,
  type DevicePtr,
  type Dim3,
  FunctionAttribute,
  floatBits,
  GraphNodeType,
  getDriver,
  type Handle,
  type HostPtr,
  type KernelNodeParams,
  StreamCaptureMode,
} from "./ffi/driver.js";
export { type CudaLibraryName, CudaLibraryNotFoundError, candidatePaths } from "./ffi/find.js";
export { type KernelArg, type KernelArgType, KernelParams, karg } from "./ffi/kernel-params.js";
export {
  getNccl,
  NCCL_UNIQUE_ID_BYTES,
  Nccl,
  type NcclComm,
  NcclDataType,
  NcclError,
  NcclRedOp,
  NcclUnavailableError,
} from "./ffi/nccl.js";
export { getNvrtc, Nvrtc, NvrtcCompileError, NvrtcError } from "./ffi/nvrtc.js";
export { type CudaInfo, type CudaLibraryStatus, formatCudaInfo, getCudaInfo } from "./info.js";
export {
  type CudaStreamPool,
  DEFAULT_POOL_CAP_BYTES,
  defaultPoolBytes,
  GpuContext,
  type GpuContextOptions,
  gpuIndexOf,
  type KernelSet,
  StagingBuffer,
} from "./runtime/context.js";
export {
  CudaDevice,
  cudaAvailable,
  type DeviceProperties,
  type DeviceSpec,
  MAX_REGISTERS_PER_THREAD,
  openDevice,
  parseDeviceSpec,
  queryDeviceProperties,
} from "./runtime/device.js";
export { CudaGraph } from "./runtime/graph.js";
export { GPU_BLOCK, gridFor, type LaunchCounts } from "./runtime/launch.js";
export {
  ArenaAllocator,
  DevicePool,
  DevicePoolOutOfMemory,
  MAX_POOL_FLOATS,
  PinnedBuffer,
  POOL_ALIGN_BYTES,
  type PoolArray,
  type PoolStats,
} from "./runtime/memory.js";
export {
  CudaKernel,
  CudaModule,
  getFunction,
  type KernelAttributes,
  type LaunchConfig,
  loadModule,
} from "./runtime/module.js";
export { CudaEvent, CudaStream } from "./runtime/stream.js";
export { type Lane, type PoolBackend, StreamPool } from "./runtime/stream-pool.js";
export { formatBytes } from "./units.js";
