// The CUDA layer's public surface: devices, memory, streams/events, compilation and launch, cuBLAS, `vpps info`.
// The raw bindings stay reachable through the ffi/ modules for the engines that need a call not wrapped here.

export {
  type CompileRequest,
  type CompileResult,
  CudaKernel,
  CudaModule,
  compileCuda,
  compileCudaAsync,
  defaultCacheDir,
  getFunction,
  KERNEL_CACHE_FORMAT,
  type KernelAttributes,
  kernelCacheKey,
  type LaunchConfig,
  loadModule,
  writeFileAtomic,
} from "./compile.js";
export {
  CudaDevice,
  cudaAvailable,
  type DeviceProperties,
  type DeviceSpec,
  MAX_REGISTERS_PER_THREAD,
  openDevice,
  parseDeviceSpec,
} from "./device.js";
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
  CudaDriver,
  CudaError,
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
export { CudaGraph } from "./graph.js";
export { type CudaInfo, type CudaLibraryStatus, formatCudaInfo, getCudaInfo } from "./info.js";
export {
  ArenaAllocator,
  DevicePool,
  DevicePoolOutOfMemory,
  MAX_POOL_FLOATS,
  PinnedBuffer,
  POOL_ALIGN_BYTES,
  type PoolArray,
  type PoolStats,
} from "./memory.js";
export { CudaEvent, CudaStream } from "./stream.js";
export { formatBytes } from "./units.js";
