// Choosing and opening a GPU. Properties are read once into a plain record with named fields, so that kernel
// generators derive sizes (registers, shared memory, SM count) from the device instead of per-GPU tables.

import { UserError } from "../../util/errors.js";
import { cut } from "../../util/text.js";
import { type CudaDriver, DeviceAttribute, getDriver, type Handle } from "../ffi/driver.js";
import { CudaLibraryNotFoundError } from "../ffi/find.js";

/** What `--device` asked for. `auto` means the first GPU when one works, else the CPU engine. */
export type DeviceSpec = { kind: "auto" } | { kind: "cpu" } | { kind: "cuda"; index: number };

/** Parses `auto`, `cpu`, `cuda` (= `cuda:0`) or `cuda:N`. */
export function parseDeviceSpec(spec: string): DeviceSpec {
  const s = spec.trim().toLowerCase();
  if (s === "auto") return { kind: "auto" };
  if (s === "cpu") return { kind: "cpu" };
  if (s === "cuda") return { kind: "cuda", index: 0 };
  const m = /^cuda:(\d{1,9})$/.exec(s);
  if (m) return { kind: "cuda", index: Number(m[1]) };
  throw new UserError(`device: expected "auto", "cpu", "cuda" or "cuda:N" (N = 0, 1, ...), got "${cut(spec)}"`);
}

/** A GPU's properties, in the units the kernel generators use. */
export interface DeviceProperties {
  index: number;
  name: string;
  ccMajor: number;
  ccMinor: number;
  /** NVRTC/SASS architecture name, `sm_90` for compute capability 9.0. */
  arch: string;
  smCount: number;
  warpSize: number;
  maxThreadsPerBlock: number;
  maxThreadsPerSm: number;
  maxBlocksPerSm: number;
  /** 32-bit registers per SM and the most one block may use. */
  regsPerSm: number;
  regsPerBlock: number;
  /** The ISA's per-thread limit (255 since compute capability 3.5; no driver attribute reports it). */
  maxRegsPerThread: number;
  /** Shared memory per SM, per block by default, and per block when a kernel opts in (cuFuncSetAttribute). */
  sharedPerSm: number;
  sharedPerBlock: number;
  sharedPerBlockOptin: number;
  /** Shared memory the driver reserves per block (counts against sharedPerSm). */
  reservedSharedPerBlock: number;
  l2CacheBytes: number;
  /** kHz; 0 when the driver no longer reports it. */
  clockKhz: number;
  memoryClockKhz: number;
  memoryBusWidthBits: number;
  totalMemory: number;
  cooperativeLaunch: boolean;
}

export const MAX_REGISTERS_PER_THREAD = 255;

/**
 * Builds the properties record from an attribute reader (the driver, or a fake in tests). `optional` attributes
 * (clock rates, deprecated in CUDA 13) read as 0 when the driver refuses them.
 */
export function readDeviceProperties(
  index: number,
  name: string,
  totalMemory: number,
  attribute: (attrib: number) => number,
): DeviceProperties {
  const optional = (attrib: number): number => {
    try {
      return attribute(attrib);
    } catch {
      return 0;
    }
  };
  const A = DeviceAttribute;
  const ccMajor = attribute(A.ComputeCapabilityMajor);
  const ccMinor = attribute(A.ComputeCapabilityMinor);
  return {
    index,
    name,
    ccMajor,
    ccMinor,
    arch: `sm_${ccMajor}${ccMinor}`,
    smCount: attribute(A.MultiprocessorCount),
    warpSize: attribute(A.WarpSize),
    maxThreadsPerBlock: attribute(A.MaxThreadsPerBlock),
    maxThreadsPerSm: attribute(A.MaxThreadsPerMultiprocessor),
    maxBlocksPerSm: attribute(A.MaxBlocksPerMultiprocessor),
    regsPerSm: attribute(A.MaxRegistersPerMultiprocessor),
    regsPerBlock: attribute(A.MaxRegistersPerBlock),
    maxRegsPerThread: MAX_REGISTERS_PER_THREAD,
    sharedPerSm: attribute(A.MaxSharedMemoryPerMultiprocessor),
    sharedPerBlock: attribute(A.MaxSharedMemoryPerBlock),
    sharedPerBlockOptin: attribute(A.MaxSharedMemoryPerBlockOptin),
    reservedSharedPerBlock: optional(A.ReservedSharedMemoryPerBlock),
    l2CacheBytes: attribute(A.L2CacheSize),
    clockKhz: optional(A.ClockRate),
    memoryClockKhz: optional(A.MemoryClockRate),
    memoryBusWidthBits: optional(A.GlobalMemoryBusWidth),
    totalMemory,
    cooperativeLaunch: optional(A.CooperativeLaunch) !== 0,
  };
}

/** Reads a device's properties without creating a context. */
export function queryDeviceProperties(driver: CudaDriver, index: number): DeviceProperties {
  const dev = driver.device(index);
  return readDeviceProperties(index, driver.deviceName(dev), driver.deviceTotalMemory(dev), (a) =>
    driver.deviceAttribute(a, dev),
  );
}

/** An opened GPU: its primary context retained and current on this thread. */
export class CudaDevice {
  private released = false;

  constructor(
    readonly driver: CudaDriver,
    /** The CUdevice handle (an int). */
    readonly device: number,
    readonly context: Handle,
    readonly props: DeviceProperties,
  ) {}

  get index(): number {
    return this.props.index;
  }

  /** Makes this device's context current again (after another device was used on this thread). */
  makeCurrent(): void {
    this.driver.setCurrentContext(this.context);
  }

  /** Waits for all work on the device; kernel faults surface here as CudaError. */
  synchronize(): void {
    this.driver.contextSynchronize();
  }

  memInfo(): { free: number; total: number } {
    return this.driver.memInfo();
  }

  /** Releases the primary context (its memory is freed when the last retain is released). */
  close(): void {
    if (this.released) return;
    this.released = true;
    this.driver.primaryContextRelease(this.device);
  }
}

/** Opens GPU `index`: loads and initialises the driver, retains the primary context and makes it current. */
export function openDevice(index = 0): CudaDevice {
  const driver = getDriver();
  const count = driver.deviceCount();
  if (!Number.isInteger(index) || index < 0 || index >= count) {
    const have = count === 0 ? "none" : count === 1 ? "cuda:0" : `cuda:0 to cuda:${count - 1}`;
    throw new UserError(
      `no CUDA device cuda:${index}: this machine has ${count} CUDA device(s) (${have}); choose one with --device`,
    );
  }
  const props = queryDeviceProperties(driver, index);
  const dev = driver.device(index);
  const context = driver.primaryContextRetain(dev);
  driver.setCurrentContext(context);
  return new CudaDevice(driver, dev, context, props);
}

/** Whether a GPU can be used, and if not, why (library not found, cuInit error, no device). Never throws. */
export function cudaAvailable(): { ok: true } | { ok: false; reason: string } {
  try {
    const driver = getDriver();
    const count = driver.deviceCount();
    if (count === 0) return { ok: false, reason: "the CUDA driver reports no devices" };
    return { ok: true };
  } catch (e) {
    if (e instanceof CudaLibraryNotFoundError) return { ok: false, reason: e.summary };
    return { ok: false, reason: e instanceof Error ? e.message : String(e) };
  }
}
