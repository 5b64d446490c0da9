// What cuda.h declares and vpps uses: the value types that cross the boundary, the enum values, the result names and
// the error a failed call throws, and the C prototypes that koffi binds (driver.ts wraps them in the checked
// CudaDriver class).
//
// Representation of values crossing the boundary:
// - Device pointers (CUdeviceptr) are JS `number`s. CUDA uses unified virtual addressing on 64-bit Linux, and user
//   virtual addresses are below 2^48 (x86-64 and ARM64 with 48-bit VA), so a double holds them exactly (2^53). Numbers
//   keep the hot path cheap: `base + 4 * offset` needs no BigInt allocation, and kernel arguments are packed without
//   conversions. `toDevicePtr` refuses any value that is not a safe integer instead of rounding it.
// - Driver handles (CUcontext, CUstream, CUevent, CUmodule, CUfunction) and host pointers are `bigint`s, which is how
//   koffi 3 represents pointers; nobody does arithmetic on handles. The NULL stream is `0n`.
// - Out-parameters are passed as one-element typed arrays that koffi hands to C by address (no copy), reused across
//   calls so that no call allocates.

import type { LibraryHandle } from "koffi";
import { UserError } from "../../util/errors.js";

/** A device address (CUdeviceptr), exact as a number: see the note at the top of this file. */
export type DevicePtr = number;
/** An opaque driver handle (CUcontext, CUstream, CUevent, CUmodule, CUfunction) as koffi returns it. */
export type Handle = bigint;
/** A host pointer (pinned memory from cuMemAllocHost). */
export type HostPtr = bigint;

/** Host memory handed to a copy: a typed array (passed by address, no copy) or a raw host pointer. */
export type HostMemory = ArrayBufferView | HostPtr;

/** Grid or block dimensions; missing components are 1. */
export type Dim3 = readonly [number, number?, number?];

/** The legacy default stream. */
export const NULL_STREAM: Handle = 0n;

// --- Enums used by vpps (values from cuda.h, CUDA 13.0) ---

/** CUdevice_attribute values vpps reads. */
export const DeviceAttribute = {
  MaxThreadsPerBlock: 1,
  MaxSharedMemoryPerBlock: 8,
  WarpSize: 10,
  MaxRegistersPerBlock: 12,
  ClockRate: 13,
  MultiprocessorCount: 16,
  MemoryClockRate: 36,
  GlobalMemoryBusWidth: 37,
  L2CacheSize: 38,
  MaxThreadsPerMultiprocessor: 39,
  UnifiedAddressing: 41,
  ComputeCapabilityMajor: 75,
  ComputeCapabilityMinor: 76,
  MaxSharedMemoryPerMultiprocessor: 81,
  MaxRegistersPerMultiprocessor: 82,
  CooperativeLaunch: 95,
  MaxSharedMemoryPerBlockOptin: 97,
  MaxBlocksPerMultiprocessor: 106,
  ReservedSharedMemoryPerBlock: 111,
} as const;

/** CUfunction_attribute values. */
export const FunctionAttribute = {
  MaxThreadsPerBlock: 0,
  SharedSizeBytes: 1,
  ConstSizeBytes: 2,
  LocalSizeBytes: 3,
  NumRegs: 4,
  PtxVersion: 5,
  BinaryVersion: 6,
  CacheModeCa: 7,
  MaxDynamicSharedSizeBytes: 8,
  PreferredSharedMemoryCarveout: 9,
} as const;

export const StreamFlags = { Default: 0, NonBlocking: 1 } as const;

/**
 * CUstreamCaptureMode. Relaxed lets the capturing thread make calls that are unsafe under capture (a cuBLAS handle's
 * first workspace allocation); global and thread-local refuse them with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
 */
export const StreamCaptureMode = { Global: 0, ThreadLocal: 1, Relaxed: 2 } as const;

/** CUgraphNodeType values vpps reads. */
export const GraphNodeType = { Kernel: 0, Memcpy: 1, Memset: 2, Host: 3, Graph: 4, Empty: 5 } as const;

/** A kernel node of a graph, as cuGraphKernelNodeGetParams reports it (CUDA_KERNEL_NODE_PARAMS). */
export interface KernelNodeParams {
  /** The CUfunction (resolved from a CUkernel when the node holds one; 0n when neither can be read). */
  readonly func: Handle;
  readonly grid: readonly [number, number, number];
  readonly block: readonly [number, number, number];
  readonly sharedBytes: number;
}
export const EventFlags = { Default: 0, BlockingSync: 1, DisableTiming: 2 } as const;

export const CUDA_SUCCESS = 0;
export const CUDA_ERROR_NOT_READY = 600;

/**
 * Names of the results seen in practice, for messages when cuGetErrorName itself is unavailable (and for tests).
 * The driver's own cuGetErrorName is used whenever the library is loaded.
 */
export const CUDA_RESULT_NAMES: Readonly<Record<number, string>> = {
  0: "CUDA_SUCCESS",
  1: "CUDA_ERROR_INVALID_VALUE",
  2: "CUDA_ERROR_OUT_OF_MEMORY",
  3: "CUDA_ERROR_NOT_INITIALIZED",
  4: "CUDA_ERROR_DEINITIALIZED",
  34: "CUDA_ERROR_STUB_LIBRARY",
  35: "CUDA_ERROR_INSUFFICIENT_DRIVER",
  46: "CUDA_ERROR_DEVICE_UNAVAILABLE",
  100: "CUDA_ERROR_NO_DEVICE",
  101: "CUDA_ERROR_INVALID_DEVICE",
  102: "CUDA_ERROR_DEVICE_NOT_LICENSED",
  200: "CUDA_ERROR_INVALID_IMAGE",
  201: "CUDA_ERROR_INVALID_CONTEXT",
  209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
  214: "CUDA_ERROR_ECC_UNCORRECTABLE",
  216: "CUDA_ERROR_CONTEXT_ALREADY_IN_USE",
  218: "CUDA_ERROR_INVALID_PTX",
  222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
  400: "CUDA_ERROR_INVALID_HANDLE",
  500: "CUDA_ERROR_NOT_FOUND",
  600: "CUDA_ERROR_NOT_READY",
  700: "CUDA_ERROR_ILLEGAL_ADDRESS",
  701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
  702: "CUDA_ERROR_LAUNCH_TIMEOUT",
  716: "CUDA_ERROR_MISALIGNED_ADDRESS",
  719: "CUDA_ERROR_LAUNCH_FAILED",
  720: "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
  800: "CUDA_ERROR_NOT_PERMITTED",
  801: "CUDA_ERROR_NOT_SUPPORTED",
  802: "CUDA_ERROR_SYSTEM_NOT_READY",
  803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
  804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
  805: "CUDA_ERROR_MPS_CONNECTION_FAILED",
  999: "CUDA_ERROR_UNKNOWN",
};

const FREE_THE_GPU = "nvidia-smi lists the processes on it";
/**
 * The failures a user can cause or fix — a model or batch too large for the device, no GPU, a GPU another process
 * holds, a driver too old, a GPU that failed — by CUresult code: what happened and what to do, in words. Every other
 * code (an invalid value or address, a bad handle) is a bug in vpps and stays a `CudaError` with its trace.
 */
export const CUDA_USER_FAILURES: Readonly<Record<number, string>> = {
  2: `the GPU is out of memory: use a smaller --batch or --hidden, or free the GPU (${FREE_THE_GPU})`,
  35: "the NVIDIA driver is older than the CUDA 13 libraries vpps uses: update the driver (nvidia-smi shows its version)",
  46: `the GPU is busy or unavailable (another process may hold it in exclusive mode): wait, free it (${FREE_THE_GPU}) or choose another with --device`,
  100: "no CUDA GPU is visible: check nvidia-smi and CUDA_VISIBLE_DEVICES, or use --engine cpu",
  101: "no such GPU: check --device against nvidia-smi and CUDA_VISIBLE_DEVICES",
  102: "the GPU is not licensed for compute: choose another with --device (nvidia-smi lists them)",
  209: "a kernel was built for another GPU architecture: empty vpps's kernel cache ($VPPS_CACHE_DIR, else ~/.cache/vpps/kernels) and rerun",
  214: "the GPU reported an uncorrectable memory (ECC) error: check nvidia-smi -q, and rerun on a healthy GPU",
  216: `the GPU is in use by another thread or process in exclusive mode: wait, free it (${FREE_THE_GPU}) or choose another with --device`,
  222: "the NVIDIA driver is older than the NVRTC that compiled the kernels: update the driver",
  701: "a kernel needs more registers or shared memory than the GPU gives it: use a smaller --hidden or --batch",
  702: "a kernel ran past the display watchdog's time limit: use a GPU without a display, or a smaller --batch",
  719: "a kernel failed on the GPU and its context is lost: check nvidia-smi and the system log for Xid errors, then rerun (with --resume where a run was saved)",
  720: `a persistent kernel needs more of the GPU than is free (another process or MPS may hold SMs): free the GPU (${FREE_THE_GPU}) or use a smaller --hidden`,
  800: "the operation is not permitted on this GPU (a restricted or MIG instance?): check nvidia-smi, or choose another with --device",
  802: "the GPU system is not ready (on NVSwitch systems, is nvidia-fabricmanager running?): check nvidia-smi",
  803: "the NVIDIA driver library and kernel module versions differ: reload the driver or reboot",
  804: "this GPU does not support the forward-compatibility driver in use: use the system's NVIDIA driver",
  805: "the MPS server cannot be reached: start nvidia-cuda-mps-control, or unset CUDA_MPS_PIPE_DIRECTORY",
};

/**
 * A CUDA failure the user can act on (see CUDA_USER_FAILURES): printed by the command line as one line, what happened
 * and what to do, then the call and the CUresult name, e.g. `the GPU is out of memory: use a smaller --batch or
 * --hidden, or free the GPU (…) [cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2), asked for 90.0 GiB; …]`.
 */
export class CudaDeviceError extends UserError {
  constructor(
    readonly call: string,
    readonly code: number,
    readonly codeName: string,
    readonly advice: string,
    readonly context?: string,
  ) {
    super(`${advice} [${call}: ${codeName} (${code})${context ? `, ${oneLine(context)}` : ""}]`);
  }
}

function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, " ").trim();
}

/** The error a failed driver call throws: CudaDeviceError where the user can act on `code`, else CudaError (a bug). */
export function cudaFailure(
  call: string,
  code: number,
  codeName: string,
  description?: string,
  context?: string,
): CudaDeviceError | CudaError {
  const advice = CUDA_USER_FAILURES[code];
  return advice === undefined
    ? new CudaError(call, code, codeName, description, context)
    : new CudaDeviceError(call, code, codeName, advice, context);
}

/** A failed driver call: `cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory — asked for 90.0 GiB`. */
export class CudaError extends Error {
  override readonly name = "CudaError";
  constructor(
    readonly call: string,
    readonly code: number,
    readonly codeName: string,
    readonly description?: string,
    readonly context?: string,
  ) {
    super(cudaErrorMessage(call, code, codeName, description, context));
  }
}

export function cudaErrorMessage(
  call: string,
  code: number,
  codeName: string,
  description?: string,
  context?: string,
): string {
  let message = `${call} failed: ${codeName} (${code})`;
  if (description && description !== codeName) message += `: ${description}`;
  if (context) message += ` — ${context}`;
  return message;
}

/** Converts a 64-bit address from the driver to a DevicePtr, refusing values a double cannot hold exactly. */
export function toDevicePtr(value: bigint | number, what: string): DevicePtr {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0) {
    throw new RangeError(`${what}: device address ${value} is not exactly representable as a number (needs < 2^53)`);
  }
  return n;
}

// --- The C prototypes (cuda.h, CUDA 13.0). Enum and CUdevice arguments are `int`; CUdeviceptr is `uint64_t`;
// handles are `void *`. Out-parameters are typed pointers filled through one-element typed arrays. ---

export interface RawDriver {
  cuGetErrorName(error: number, out: string[]): number;
  cuGetErrorString(error: number, out: string[]): number;
  cuInit(flags: number): number;
  cuDriverGetVersion(out: Int32Array): number;
  cuDeviceGetCount(out: Int32Array): number;
  cuDeviceGet(out: Int32Array, ordinal: number): number;
  cuDeviceGetName(name: Uint8Array, len: number, dev: number): number;
  cuDeviceGetAttribute(out: Int32Array, attrib: number, dev: number): number;
  cuDeviceTotalMem_v2(out: BigUint64Array, dev: number): number;
  cuDevicePrimaryCtxRetain(out: BigUint64Array, dev: number): number;
  cuDevicePrimaryCtxRelease_v2(dev: number): number;
  cuCtxSetCurrent(ctx: Handle): number;
  cuCtxSynchronize(): number;
  cuMemAlloc_v2(out: BigUint64Array, bytes: number): number;
  cuMemFree_v2(ptr: DevicePtr): number;
  cuMemGetInfo_v2(free: BigUint64Array, total: BigUint64Array): number;
  cuMemAllocHost_v2(out: BigUint64Array, bytes: number): number;
  cuMemFreeHost(ptr: HostPtr): number;
  cuMemcpyHtoD_v2(dst: DevicePtr, src: HostMemory, bytes: number): number;
  cuMemcpyDtoH_v2(dst: HostMemory, src: DevicePtr, bytes: number): number;
  cuMemcpyDtoD_v2(dst: DevicePtr, src: DevicePtr, bytes: number): number;
  cuMemcpyHtoDAsync_v2(dst: DevicePtr, src: HostMemory, bytes: number, stream: Handle): number;
  cuMemcpyDtoHAsync_v2(dst: HostMemory, src: DevicePtr, bytes: number, stream: Handle): number;
  cuMemcpyDtoDAsync_v2(dst: DevicePtr, src: DevicePtr, bytes: number, stream: Handle): number;
  cuMemsetD32_v2(dst: DevicePtr, value: number, count: number): number;
  cuMemsetD32Async(dst: DevicePtr, value: number, count: number, stream: Handle): number;
  cuMemsetD2D32Async(
    dst: DevicePtr,
    pitch: number,
    value: number,
    width: number,
    height: number,
    stream: Handle,
  ): number;
  cuStreamCreate(out: BigUint64Array, flags: number): number;
  cuStreamSynchronize(stream: Handle): number;
  cuStreamWaitEvent(stream: Handle, event: Handle, flags: number): number;
  cuStreamDestroy_v2(stream: Handle): number;
  cuEventCreate(out: BigUint64Array, flags: number): number;
  cuEventRecord(event: Handle, stream: Handle): number;
  cuEventQuery(event: Handle): number;
  cuEventSynchronize(event: Handle): number;
  cuEventElapsedTime(out: Float32Array, start: Handle, end: Handle): number;
  cuEventDestroy_v2(event: Handle): number;
  cuModuleLoadData(out: BigUint64Array, image: Uint8Array): number;
  cuModuleGetFunction(out: BigUint64Array, module: Handle, name: string): number;
  cuModuleGetGlobal_v2(ptr: BigUint64Array, bytes: BigUint64Array, module: Handle, name: string): number;
  cuModuleUnload(module: Handle): number;
  cuFuncGetAttribute(out: Int32Array, attrib: number, fn: Handle): number;
  cuFuncSetAttribute(fn: Handle, attrib: number, value: number): number;
  cuLaunchKernel(
    fn: Handle,
    gridX: number,
    gridY: number,
    gridZ: number,
    blockX: number,
    blockY: number,
    blockZ: number,
    sharedBytes: number,
    stream: Handle,
    params: BigUint64Array,
    extra: null,
  ): number;
  cuOccupancyMaxActiveBlocksPerMultiprocessor(out: Int32Array, fn: Handle, blockSize: number, dynSmem: number): number;
  cuStreamBeginCapture_v2(stream: Handle, mode: number): number;
  cuStreamEndCapture(stream: Handle, graph: BigUint64Array): number;
  cuStreamIsCapturing(stream: Handle, status: Int32Array): number;
  cuGraphInstantiateWithFlags(exec: BigUint64Array, graph: Handle, flags: number): number;
  cuGraphLaunch(exec: Handle, stream: Handle): number;
  cuGraphExecDestroy(exec: Handle): number;
  cuGraphDestroy(graph: Handle): number;
  cuGraphGetNodes(graph: Handle, nodes: BigUint64Array | null, count: BigUint64Array): number;
  cuGraphNodeGetType(node: Handle, type: Int32Array): number;
}

/** Calls read only where the driver has them (footprints of captured library kernels, `CudaGraph.kernelNodes`). */
export interface OptionalDriver {
  cuGraphKernelNodeGetParams?: (node: Handle, params: Uint8Array) => number;
  cuKernelGetFunction?: (fn: BigUint64Array, kernel: Handle) => number;
  cuOccupancyMaxActiveClusters?: (out: Int32Array, fn: Handle, config: Uint8Array) => number;
}

const DRIVER_PROTOTYPES: Record<keyof RawDriver, string> = {
  cuGetErrorName: "int cuGetErrorName(int error, _Out_ const char **pStr)",
  cuGetErrorString: "int cuGetErrorString(int error, _Out_ const char **pStr)",
  cuInit: "int cuInit(unsigned int flags)",
  cuDriverGetVersion: "int cuDriverGetVersion(int *version)",
  cuDeviceGetCount: "int cuDeviceGetCount(int *count)",
  cuDeviceGet: "int cuDeviceGet(int *device, int ordinal)",
  cuDeviceGetName: "int cuDeviceGetName(char *name, int len, int dev)",
  cuDeviceGetAttribute: "int cuDeviceGetAttribute(int *pi, int attrib, int dev)",
  cuDeviceTotalMem_v2: "int cuDeviceTotalMem_v2(size_t *bytes, int dev)",
  cuDevicePrimaryCtxRetain: "int cuDevicePrimaryCtxRetain(void **pctx, int dev)",
  cuDevicePrimaryCtxRelease_v2: "int cuDevicePrimaryCtxRelease_v2(int dev)",
  cuCtxSetCurrent: "int cuCtxSetCurrent(void *ctx)",
  cuCtxSynchronize: "int cuCtxSynchronize()",
  cuMemAlloc_v2: "int cuMemAlloc_v2(uint64_t *dptr, size_t bytesize)",
  cuMemFree_v2: "int cuMemFree_v2(uint64_t dptr)",
  cuMemGetInfo_v2: "int cuMemGetInfo_v2(size_t *free, size_t *total)",
  cuMemAllocHost_v2: "int cuMemAllocHost_v2(void **pp, size_t bytesize)",
  cuMemFreeHost: "int cuMemFreeHost(void *p)",
  cuMemcpyHtoD_v2: "int cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t bytes)",
  cuMemcpyDtoH_v2: "int cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t bytes)",
  cuMemcpyDtoD_v2: "int cuMemcpyDtoD_v2(uint64_t dst, uint64_t src, size_t bytes)",
  cuMemcpyHtoDAsync_v2: "int cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t bytes, void *stream)",
  cuMemcpyDtoHAsync_v2: "int cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t bytes, void *stream)",
  cuMemcpyDtoDAsync_v2: "int cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t bytes, void *stream)",
  cuMemsetD32_v2: "int cuMemsetD32_v2(uint64_t dst, unsigned int value, size_t count)",
  cuMemsetD32Async: "int cuMemsetD32Async(uint64_t dst, unsigned int value, size_t count, void *stream)",
  cuMemsetD2D32Async:
    "int cuMemsetD2D32Async(uint64_t dst, size_t pitch, unsigned int value, size_t width, size_t height, void *stream)",
  cuStreamCreate: "int cuStreamCreate(void **stream, unsigned int flags)",
  cuStreamSynchronize: "int cuStreamSynchronize(void *stream)",
  cuStreamWaitEvent: "int cuStreamWaitEvent(void *stream, void *event, unsigned int flags)",
  cuStreamDestroy_v2: "int cuStreamDestroy_v2(void *stream)",
  cuEventCreate: "int cuEventCreate(void **event, unsigned int flags)",
  cuEventRecord: "int cuEventRecord(void *event, void *stream)",
  cuEventQuery: "int cuEventQuery(void *event)",
  cuEventSynchronize: "int cuEventSynchronize(void *event)",
  // CUDA 12.8 added cuEventElapsedTime_v2 (same signature) and CUDA 13's header maps the name to it; the loader
  // below prefers _v2 and falls back to the original symbol on older drivers.
  cuEventElapsedTime: "int cuEventElapsedTime_v2(float *ms, void *start, void *end)",
  cuEventDestroy_v2: "int cuEventDestroy_v2(void *event)",
  cuModuleLoadData: "int cuModuleLoadData(void **module, const void *image)",
  cuModuleGetFunction: "int cuModuleGetFunction(void **fn, void *module, const char *name)",
  cuModuleGetGlobal_v2: "int cuModuleGetGlobal_v2(uint64_t *dptr, size_t *bytes, void *module, const char *name)",
  cuModuleUnload: "int cuModuleUnload(void *module)",
  cuFuncGetAttribute: "int cuFuncGetAttribute(int *pi, int attrib, void *fn)",
  cuFuncSetAttribute: "int cuFuncSetAttribute(void *fn, int attrib, int value)",
  cuLaunchKernel:
    "int cuLaunchKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, " +
    "unsigned int bz, unsigned int sharedMemBytes, void *stream, void **kernelParams, void **extra)",
  cuOccupancyMaxActiveBlocksPerMultiprocessor:
    "int cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, void *fn, int blockSize, size_t dynamicSMemSize)",
  cuStreamBeginCapture_v2: "int cuStreamBeginCapture_v2(void *stream, int mode)",
  cuStreamEndCapture: "int cuStreamEndCapture(void *stream, void **graph)",
  cuStreamIsCapturing: "int cuStreamIsCapturing(void *stream, int *captureStatus)",
  cuGraphInstantiateWithFlags: "int cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags)",
  cuGraphLaunch: "int cuGraphLaunch(void *exec, void *stream)",
  cuGraphExecDestroy: "int cuGraphExecDestroy(void *exec)",
  cuGraphDestroy: "int cuGraphDestroy(void *graph)",
  cuGraphGetNodes: "int cuGraphGetNodes(void *graph, void **nodes, size_t *numNodes)",
  cuGraphNodeGetType: "int cuGraphNodeGetType(void *node, int *type)",
};

/**
 * CUDA_KERNEL_NODE_PARAMS_v2 (CUDA 12): func, gridDim x y z, blockDim x y z, sharedMemBytes, kernelParams, extra, kern,
 * ctx — v1 is its prefix. Read into a buffer larger than either.
 */
const OPTIONAL_PROTOTYPES: Record<keyof OptionalDriver, readonly string[]> = {
  cuGraphKernelNodeGetParams: [
    "int cuGraphKernelNodeGetParams_v2(void *node, void *params)",
    "int cuGraphKernelNodeGetParams(void *node, void *params)",
  ],
  cuKernelGetFunction: ["int cuKernelGetFunction(void **fn, void *kernel)"],
  cuOccupancyMaxActiveClusters: ["int cuOccupancyMaxActiveClusters(int *numClusters, void *fn, void *config)"],
};
/**
 * CUlaunchConfig: gridDim x y z, blockDim x y z, sharedMemBytes (u32 each), then hStream at 32, attrs at 40, numAttrs
 * at 48.
 */
export const LAUNCH_CONFIG_BYTES = 64;
export const KERNEL_NODE_PARAMS_BYTES = 128;
export const KERNEL_NODE_KERN_OFFSET = 56;

export function bindOptional(lib: LibraryHandle): OptionalDriver {
  const out: Record<string, unknown> = {};
  for (const [key, prototypes] of Object.entries(OPTIONAL_PROTOTYPES)) {
    for (const p of prototypes) {
      try {
        out[key] = lib.func(p);
        break;
      } catch {
        // an older driver without this symbol: try the next name, else leave the call out
      }
    }
  }
  return out as OptionalDriver;
}

/** Older symbol names to try when the preferred one is missing from an older driver. */
const FALLBACK_PROTOTYPES: Partial<Record<keyof RawDriver, string>> = {
  cuEventElapsedTime: "int cuEventElapsedTime(float *ms, void *start, void *end)",
};

export function bindDriver(lib: LibraryHandle): RawDriver {
  const raw: Record<string, unknown> = {};
  for (const [key, prototype] of Object.entries(DRIVER_PROTOTYPES) as [keyof RawDriver, string][]) {
    try {
      raw[key] = lib.func(prototype);
    } catch (e) {
      const fallback = FALLBACK_PROTOTYPES[key];
      if (!fallback) throw e;
      raw[key] = lib.func(fallback);
    }
  }
  return raw as unknown as RawDriver;
}
