// The CUDA driver API (libcuda.so.1) through koffi: one typed class whose methods check every result (a failure
// throws CudaError) and turn out-parameters into return values, and the process-wide instance. The types, enum
// values, errors and C prototypes it binds are in driver-api.ts; the public ones are re-exported here, so that
// `ffi/driver.js` is the one module to import for libcuda.

import koffi from "koffi";
import { formatBytes } from "../units.js";
import {
  bindDriver,
  bindOptional,
  CUDA_ERROR_NOT_READY,
  CUDA_RESULT_NAMES,
  CUDA_SUCCESS,
  cudaFailure,
  type DevicePtr,
  type Dim3,
  EventFlags,
  type Handle,
  type HostMemory,
  type HostPtr,
  KERNEL_NODE_KERN_OFFSET,
  KERNEL_NODE_PARAMS_BYTES,
  type KernelNodeParams,
  LAUNCH_CONFIG_BYTES,
  type OptionalDriver,
  type RawDriver,
  StreamCaptureMode,
  StreamFlags,
  toDevicePtr,
} from "./driver-api.js";
import { type LoadedLibrary, loadCudaLibrary } from "./find.js";

export {
  CUDA_RESULT_NAMES,
  CUDA_USER_FAILURES,
  CudaDeviceError,
  CudaError,
  cudaErrorMessage,
  cudaFailure,
  DeviceAttribute,
  type DevicePtr,
  type Dim3,
  EventFlags,
  FunctionAttribute,
  GraphNodeType,
  type Handle,
  type HostMemory,
  type HostPtr,
  type KernelNodeParams,
  NULL_STREAM,
  StreamCaptureMode,
  StreamFlags,
  toDevicePtr,
} from "./driver-api.js";

/**
 * The hardware work queues vpps asks CUDA for (CUDA_DEVICE_MAX_CONNECTIONS) when the environment does not set it: the
 * most CUDA takes, so that each stream of a GLP4NN pool has a queue of its own (measured on an H100:
 * GLP4NN's choice held to 8 streams by CUDA's default ran up to 24% slower on the small Table 5 layers).
 */
export const VPPS_DEFAULT_CONNECTIONS = 32;

/** The CUDA driver API with checked results. Obtain it with `getDriver()` (loads and initialises once). */
export class CudaDriver {
  private readonly raw: RawDriver;
  private readonly optional: OptionalDriver;
  // Reused out-parameters: koffi passes typed arrays by address, so nothing is allocated per call.
  private readonly i32 = new Int32Array(1);
  private readonly f32 = new Float32Array(1);
  private readonly u64 = new BigUint64Array(1);
  private readonly u64b = new BigUint64Array(1);
  private initialised = false;

  constructor(readonly library: LoadedLibrary) {
    this.raw = bindDriver(library.handle);
    this.optional = bindOptional(library.handle);
  }

  /** Loads libcuda (without initialising it). Throws CudaLibraryNotFoundError. */
  static load(): CudaDriver {
    return new CudaDriver(loadCudaLibrary("cuda"));
  }

  /** The library file in use (the mapped file when known, else the name that loaded). */
  get path(): string {
    return this.library.file ?? this.library.path;
  }

  // --- errors ---

  /** The result's enum name (`CUDA_ERROR_OUT_OF_MEMORY`), from the driver when it knows it. */
  errorName(code: number): string {
    const out: string[] = [""];
    if (this.raw.cuGetErrorName(code, out) === CUDA_SUCCESS && out[0]) return out[0];
    return CUDA_RESULT_NAMES[code] ?? `CUDA_ERROR_${code}`;
  }

  /** The driver's one-line description of a result. */
  errorString(code: number): string | undefined {
    const out: string[] = [""];
    if (this.raw.cuGetErrorString(code, out) === CUDA_SUCCESS && out[0]) return out[0];
    return undefined;
  }

  /**
   * Throws for a non-zero result: CudaDeviceError where the user can act on it (out of memory, no or busy device, a
   * failed launch: CUDA_USER_FAILURES), CudaError otherwise; `context` is only evaluated on failure.
   */
  check(code: number, call: string, context?: () => string): void {
    if (code !== CUDA_SUCCESS) {
      throw cudaFailure(call, code, this.errorName(code), this.errorString(code), context?.());
    }
  }

  // --- initialisation and devices ---

  /**
   * cuInit(0), once. Fails with CUDA_ERROR_NO_DEVICE (100) on a machine without a GPU. Where the environment does not
   * say, opens VPPS_DEFAULT_CONNECTIONS hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS, which CUDA reads when it
   * initialises; its own default of 8 makes a ninth stream share a queue, and GLP4NN's pools hold up to 33 streams).
   */
  init(): void {
    if (this.initialised) return;
    if ((process.env["CUDA_DEVICE_MAX_CONNECTIONS"] ?? "").trim() === "") {
      process.env["CUDA_DEVICE_MAX_CONNECTIONS"] = String(VPPS_DEFAULT_CONNECTIONS);
    }
    this.check(this.raw.cuInit(0), "cuInit");
    this.initialised = true;
  }

  /** The driver's CUDA version as an integer: 13000 for 13.0 (works before init). */
  driverVersion(): number {
    this.check(this.raw.cuDriverGetVersion(this.i32), "cuDriverGetVersion");
    return this.i32[0]!;
  }

  deviceCount(): number {
    this.check(this.raw.cuDeviceGetCount(this.i32), "cuDeviceGetCount");
    return this.i32[0]!;
  }

  /** The CUdevice for an ordinal. */
  device(ordinal: number): number {
    this.check(this.raw.cuDeviceGet(this.i32, ordinal), "cuDeviceGet", () => `ordinal ${ordinal}`);
    return this.i32[0]!;
  }

  deviceName(dev: number): string {
    const buf = new Uint8Array(256);
    this.check(this.raw.cuDeviceGetName(buf, buf.length, dev), "cuDeviceGetName");
    const end = buf.indexOf(0);
    return new TextDecoder().decode(buf.subarray(0, end < 0 ? buf.length : end));
  }

  deviceAttribute(attrib: number, dev: number): number {
    this.check(
      this.raw.cuDeviceGetAttribute(this.i32, attrib, dev),
      "cuDeviceGetAttribute",
      () => `attribute ${attrib}`,
    );
    return this.i32[0]!;
  }

  deviceTotalMemory(dev: number): number {
    this.check(this.raw.cuDeviceTotalMem_v2(this.u64, dev), "cuDeviceTotalMem_v2");
    return Number(this.u64[0]!);
  }

  /** Retains the device's primary context (the one the runtime API and cuBLAS share). */
  primaryContextRetain(dev: number): Handle {
    this.check(this.raw.cuDevicePrimaryCtxRetain(this.u64, dev), "cuDevicePrimaryCtxRetain", () => `device ${dev}`);
    return this.u64[0]!;
  }

  primaryContextRelease(dev: number): void {
    this.check(this.raw.cuDevicePrimaryCtxRelease_v2(dev), "cuDevicePrimaryCtxRelease_v2", () => `device ${dev}`);
  }

  setCurrentContext(ctx: Handle): void {
    this.check(this.raw.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  }

  /** Waits for all work in the current context; asynchronous kernel faults surface here. */
  contextSynchronize(): void {
    this.check(this.raw.cuCtxSynchronize(), "cuCtxSynchronize");
  }

  // --- memory ---

  memAlloc(bytes: number): DevicePtr {
    this.check(this.raw.cuMemAlloc_v2(this.u64, bytes), "cuMemAlloc_v2", () => this.allocContext(bytes));
    return toDevicePtr(this.u64[0]!, "cuMemAlloc_v2");
  }

  private allocContext(bytes: number): string {
    try {
      const { free, total } = this.memInfo();
      return `asked for ${formatBytes(bytes)}; device has ${formatBytes(free)} free of ${formatBytes(total)}`;
    } catch {
      return `asked for ${formatBytes(bytes)}`;
    }
  }

  memFree(ptr: DevicePtr): void {
    this.check(this.raw.cuMemFree_v2(ptr), "cuMemFree_v2");
  }

  /** Free and total device memory of the current context's device, in bytes. */
  memInfo(): { free: number; total: number } {
    this.check(this.raw.cuMemGetInfo_v2(this.u64, this.u64b), "cuMemGetInfo_v2");
    return { free: Number(this.u64[0]!), total: Number(this.u64b[0]!) };
  }

  /** Page-locked host memory (needed for truly asynchronous copies). */
  memAllocHost(bytes: number): HostPtr {
    this.check(
      this.raw.cuMemAllocHost_v2(this.u64, bytes),
      "cuMemAllocHost_v2",
      () => `asked for ${formatBytes(bytes)}`,
    );
    return this.u64[0]!;
  }

  memFreeHost(ptr: HostPtr): void {
    this.check(this.raw.cuMemFreeHost(ptr), "cuMemFreeHost");
  }

  /** Copies `bytes` (default: the whole view) from host to device. */
  memcpyHtoD(dst: DevicePtr, src: HostMemory, bytes = hostBytes(src, "memcpyHtoD")): void {
    checkHostBytes(src, bytes, "memcpyHtoD");
    this.check(this.raw.cuMemcpyHtoD_v2(dst, src, bytes), "cuMemcpyHtoD_v2", () => copyContext(bytes));
  }

  memcpyDtoH(dst: HostMemory, src: DevicePtr, bytes = hostBytes(dst, "memcpyDtoH")): void {
    checkHostBytes(dst, bytes, "memcpyDtoH");
    this.check(this.raw.cuMemcpyDtoH_v2(dst, src, bytes), "cuMemcpyDtoH_v2", () => copyContext(bytes));
  }

  memcpyDtoD(dst: DevicePtr, src: DevicePtr, bytes: number): void {
    this.check(this.raw.cuMemcpyDtoD_v2(dst, src, bytes), "cuMemcpyDtoD_v2", () => copyContext(bytes));
  }

  /**
   * Asynchronous host-to-device copy. It only overlaps with the host when `src` is pinned memory; the source must stay
   * unchanged until the stream reaches the copy.
   */
  memcpyHtoDAsync(dst: DevicePtr, src: HostMemory, bytes: number, stream: Handle): void {
    checkHostBytes(src, bytes, "memcpyHtoDAsync");
    this.check(this.raw.cuMemcpyHtoDAsync_v2(dst, src, bytes, stream), "cuMemcpyHtoDAsync_v2", () =>
      copyContext(bytes),
    );
  }

  memcpyDtoHAsync(dst: HostMemory, src: DevicePtr, bytes: number, stream: Handle): void {
    checkHostBytes(dst, bytes, "memcpyDtoHAsync");
    this.check(this.raw.cuMemcpyDtoHAsync_v2(dst, src, bytes, stream), "cuMemcpyDtoHAsync_v2", () =>
      copyContext(bytes),
    );
  }

  memcpyDtoDAsync(dst: DevicePtr, src: DevicePtr, bytes: number, stream: Handle): void {
    this.check(this.raw.cuMemcpyDtoDAsync_v2(dst, src, bytes, stream), "cuMemcpyDtoDAsync_v2", () =>
      copyContext(bytes),
    );
  }

  /** Sets `count` 32-bit words to `value` (an unsigned 32-bit pattern; see `floatBits` for floats). */
  memsetD32(dst: DevicePtr, value: number, count: number): void {
    this.check(this.raw.cuMemsetD32_v2(dst, value >>> 0, count), "cuMemsetD32_v2");
  }

  memsetD32Async(dst: DevicePtr, value: number, count: number, stream: Handle): void {
    this.check(this.raw.cuMemsetD32Async(dst, value >>> 0, count, stream), "cuMemsetD32Async");
  }

  /**
   * Sets `width` 32-bit words of each of `height` rows `pitchBytes` apart to `value` (one strided fill; the contiguous
   * case is memsetD32Async).
   */
  memsetD2D32Async(
    dst: DevicePtr,
    pitchBytes: number,
    value: number,
    width: number,
    height: number,
    stream: Handle,
  ): void {
    if (pitchBytes === 4 * width || height <= 1) {
      this.memsetD32Async(dst, value, width * height, stream);
      return;
    }
    this.check(this.raw.cuMemsetD2D32Async(dst, pitchBytes, value >>> 0, width, height, stream), "cuMemsetD2D32Async");
  }

  // --- streams and events ---

  streamCreate(flags: number = StreamFlags.Default): Handle {
    this.check(this.raw.cuStreamCreate(this.u64, flags), "cuStreamCreate");
    return this.u64[0]!;
  }

  streamSynchronize(stream: Handle): void {
    this.check(this.raw.cuStreamSynchronize(stream), "cuStreamSynchronize");
  }

  /** Makes future work on `stream` wait for `event`'s last record. */
  streamWaitEvent(stream: Handle, event: Handle): void {
    this.check(this.raw.cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent");
  }

  streamDestroy(stream: Handle): void {
    this.check(this.raw.cuStreamDestroy_v2(stream), "cuStreamDestroy_v2");
  }

  eventCreate(flags: number = EventFlags.Default): Handle {
    this.check(this.raw.cuEventCreate(this.u64, flags), "cuEventCreate");
    return this.u64[0]!;
  }

  eventRecord(event: Handle, stream: Handle): void {
    this.check(this.raw.cuEventRecord(event, stream), "cuEventRecord");
  }

  /** True when all work captured by the event's last record has completed. */
  eventQuery(event: Handle): boolean {
    const code = this.raw.cuEventQuery(event);
    if (code === CUDA_ERROR_NOT_READY) return false;
    this.check(code, "cuEventQuery");
    return true;
  }

  eventSynchronize(event: Handle): void {
    this.check(this.raw.cuEventSynchronize(event), "cuEventSynchronize");
  }

  /** Milliseconds between two recorded, completed events (resolution about 0.5 µs). */
  eventElapsedMs(start: Handle, end: Handle): number {
    this.check(this.raw.cuEventElapsedTime(this.f32, start, end), "cuEventElapsedTime");
    return this.f32[0]!;
  }

  eventDestroy(event: Handle): void {
    this.check(this.raw.cuEventDestroy_v2(event), "cuEventDestroy_v2");
  }

  // --- modules and kernels ---

  /** Loads a cubin (or NUL-terminated PTX) image into the current context. */
  moduleLoadData(image: Uint8Array, what = "module"): Handle {
    this.check(
      this.raw.cuModuleLoadData(this.u64, image),
      "cuModuleLoadData",
      () => `${what} (${formatBytes(image.byteLength)} image)`,
    );
    return this.u64[0]!;
  }

  moduleGetFunction(module: Handle, name: string): Handle {
    this.check(this.raw.cuModuleGetFunction(this.u64, module, name), "cuModuleGetFunction", () => `kernel "${name}"`);
    return this.u64[0]!;
  }

  /** Address and size of a `__device__` global; `name` is its mangled name unless declared `extern "C"`. */
  moduleGetGlobal(module: Handle, name: string): { ptr: DevicePtr; bytes: number } {
    this.check(
      this.raw.cuModuleGetGlobal_v2(this.u64, this.u64b, module, name),
      "cuModuleGetGlobal_v2",
      () => `global "${name}"`,
    );
    return { ptr: toDevicePtr(this.u64[0]!, "cuModuleGetGlobal_v2"), bytes: Number(this.u64b[0]!) };
  }

  moduleUnload(module: Handle): void {
    this.check(this.raw.cuModuleUnload(module), "cuModuleUnload");
  }

  funcGetAttribute(attrib: number, fn: Handle): number {
    this.check(this.raw.cuFuncGetAttribute(this.i32, attrib, fn), "cuFuncGetAttribute", () => `attribute ${attrib}`);
    return this.i32[0]!;
  }

  funcSetAttribute(fn: Handle, attrib: number, value: number): void {
    this.check(this.raw.cuFuncSetAttribute(fn, attrib, value), "cuFuncSetAttribute", () => `attribute ${attrib}`);
  }

  /**
   * Launches a kernel. `params` is the `void**` array from `KernelParams.pack`. The driver copies the argument values
   * during the call, so the same KernelParams may be packed again right after.
   */
  launchKernel(
    fn: Handle,
    grid: Dim3,
    block: Dim3,
    sharedBytes: number,
    stream: Handle,
    params: BigUint64Array,
    context?: () => string,
  ): void {
    const code = this.raw.cuLaunchKernel(
      fn,
      grid[0],
      grid[1] ?? 1,
      grid[2] ?? 1,
      block[0],
      block[1] ?? 1,
      block[2] ?? 1,
      sharedBytes,
      stream,
      params,
      null,
    );
    if (code !== CUDA_SUCCESS) {
      this.check(code, "cuLaunchKernel", () => {
        const dims = `grid [${grid.join(",")}], block [${block.join(",")}], ${sharedBytes} B dynamic shared`;
        return context ? `${context()}, ${dims}` : dims;
      });
    }
  }

  /** How many blocks of `blockSize` threads fit on one SM at once. */
  occupancyMaxActiveBlocksPerSm(fn: Handle, blockSize: number, dynamicSharedBytes = 0): number {
    this.check(
      this.raw.cuOccupancyMaxActiveBlocksPerMultiprocessor(this.i32, fn, blockSize, dynamicSharedBytes),
      "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    );
    return this.i32[0]!;
  }

  // --- CUDA graphs (stream capture) ---

  /** Starts capturing the work queued on `stream` (and on streams that join it through events) into a graph. */
  streamBeginCapture(stream: Handle, mode: number = StreamCaptureMode.Relaxed): void {
    this.check(this.raw.cuStreamBeginCapture_v2(stream, mode), "cuStreamBeginCapture_v2");
  }

  /** Ends the capture begun on `stream` and returns the graph (CUgraph). */
  streamEndCapture(stream: Handle): Handle {
    this.check(
      this.raw.cuStreamEndCapture(stream, this.u64),
      "cuStreamEndCapture",
      () => "every stream forked from the capturing stream must join it again before the capture ends",
    );
    return this.u64[0]!;
  }

  /** Whether `stream` is being captured into a graph (CU_STREAM_CAPTURE_STATUS_ACTIVE). */
  streamIsCapturing(stream: Handle): boolean {
    this.check(this.raw.cuStreamIsCapturing(stream, this.i32), "cuStreamIsCapturing");
    return this.i32[0] === 1;
  }

  /** An executable graph (CUgraphExec) of `graph`. */
  graphInstantiate(graph: Handle): Handle {
    this.check(this.raw.cuGraphInstantiateWithFlags(this.u64, graph, 0), "cuGraphInstantiateWithFlags");
    return this.u64[0]!;
  }

  graphLaunch(exec: Handle, stream: Handle): void {
    this.check(this.raw.cuGraphLaunch(exec, stream), "cuGraphLaunch");
  }

  graphExecDestroy(exec: Handle): void {
    this.check(this.raw.cuGraphExecDestroy(exec), "cuGraphExecDestroy");
  }

  graphDestroy(graph: Handle): void {
    this.check(this.raw.cuGraphDestroy(graph), "cuGraphDestroy");
  }

  /** The graph's nodes (CUgraphNode handles). */
  graphNodes(graph: Handle): Handle[] {
    this.check(this.raw.cuGraphGetNodes(graph, null, this.u64), "cuGraphGetNodes");
    const count = Number(this.u64[0]!);
    if (count === 0) return [];
    const nodes = new BigUint64Array(count);
    this.u64[0] = BigInt(count);
    this.check(this.raw.cuGraphGetNodes(graph, nodes, this.u64), "cuGraphGetNodes");
    return [...nodes.subarray(0, Number(this.u64[0]!))];
  }

  /** A node's CUgraphNodeType (`GraphNodeType`). */
  graphNodeType(node: Handle): number {
    this.check(this.raw.cuGraphNodeGetType(node, this.i32), "cuGraphNodeGetType");
    return this.i32[0]!;
  }

  /**
   * A kernel node's function and launch shape; undefined where this driver cannot say (no
   * cuGraphKernelNodeGetParams). A library kernel (cuBLAS's) may be held as a CUkernel: resolved to its CUfunction in
   * the current context.
   */
  graphKernelNodeParams(node: Handle): KernelNodeParams | undefined {
    const get = this.optional.cuGraphKernelNodeGetParams;
    if (get === undefined) return undefined;
    const buf = new Uint8Array(KERNEL_NODE_PARAMS_BYTES);
    this.check(get(node, buf), "cuGraphKernelNodeGetParams");
    const view = new DataView(buf.buffer);
    let func = view.getBigUint64(0, true);
    const kern = view.getBigUint64(KERNEL_NODE_KERN_OFFSET, true);
    const resolve = this.optional.cuKernelGetFunction;
    if (func === 0n && kern !== 0n && resolve !== undefined) {
      this.check(resolve(this.u64, kern), "cuKernelGetFunction");
      func = this.u64[0]!;
    }
    const u32 = (at: number) => view.getUint32(at, true);
    return {
      func,
      grid: [u32(8), u32(12), u32(16)],
      block: [u32(20), u32(24), u32(28)],
      sharedBytes: u32(32),
    };
  }

  /**
   * How many thread-block clusters of a kernel compiled with `__cluster_dims__` can be resident at once for this
   * launch shape (cuOccupancyMaxActiveClusters); undefined where the driver has no such call.
   */
  occupancyMaxActiveClusters(fn: Handle, grid: number, block: number, sharedBytes: number): number | undefined {
    const get = this.optional.cuOccupancyMaxActiveClusters;
    if (get === undefined) return undefined;
    const buf = new Uint8Array(LAUNCH_CONFIG_BYTES);
    const view = new DataView(buf.buffer);
    [grid, 1, 1, block, 1, 1, sharedBytes].forEach((v, i) => {
      view.setUint32(4 * i, v, true);
    });
    this.check(get(this.i32, fn, buf), "cuOccupancyMaxActiveClusters");
    return this.i32[0]!;
  }

  /** An ArrayBuffer over host memory at `ptr` (no copy), e.g. pinned memory from memAllocHost. */
  hostView(ptr: HostPtr, bytes: number): ArrayBuffer {
    return koffi.view(ptr, bytes);
  }
}

function hostBytes(host: HostMemory, call: string): number {
  if (typeof host === "bigint") throw new TypeError(`${call}: a raw host pointer needs an explicit byte count`);
  return host.byteLength;
}

/** Refuses copies larger than a typed array: the driver would read or write past its end. */
function checkHostBytes(host: HostMemory, bytes: number, call: string): void {
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new RangeError(`${call}: byte count ${bytes} is not valid`);
  if (typeof host !== "bigint" && bytes > host.byteLength) {
    throw new RangeError(`${call}: copying ${bytes} bytes but the host array holds only ${host.byteLength} bytes`);
  }
}

function copyContext(bytes: number): string {
  return `copying ${formatBytes(bytes)}`;
}

const floatScratch = new Float32Array(1);
const floatScratchBits = new Uint32Array(floatScratch.buffer);

/** The IEEE-754 bit pattern of a float32, for memsetD32. */
export function floatBits(value: number): number {
  floatScratch[0] = value;
  return floatScratchBits[0]!;
}

// --- the process-wide driver ---

let driverInstance: CudaDriver | undefined;
let driverFailure: Error | undefined;

/**
 * The process-wide driver, loaded and initialised (cuInit) on first use. A failure (library missing, no device) is
 * remembered and rethrown, so that `--device auto` probing is cheap.
 */
export function getDriver(): CudaDriver {
  if (driverInstance) return driverInstance;
  if (driverFailure) throw driverFailure;
  try {
    const driver = CudaDriver.load();
    driver.init();
    driverInstance = driver;
    return driver;
  } catch (e) {
    driverFailure = e instanceof Error ? e : new Error(String(e));
    throw driverFailure;
  }
}
