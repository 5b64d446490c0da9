// Loaded cubins and their kernels: a module per compiled program, kernels looked up by name, their attributes
// (registers, local memory, occupancy) and launches with typed arguments.

import {
  type CudaDriver,
  type DevicePtr,
  type Dim3,
  FunctionAttribute,
  getDriver,
  type Handle,
  NULL_STREAM,
} from "../ffi/driver.js";
import { type KernelArg, KernelParams } from "../ffi/kernel-params.js";
import type { CudaStream } from "./stream.js";

/** What a compiled kernel uses, from cuFuncGetAttribute. `localBytes` > 0 means spills or stack arrays. */
export interface KernelAttributes {
  numRegs: number;
  localBytes: number;
  sharedBytes: number;
  constBytes: number;
  maxThreadsPerBlock: number;
  maxDynamicSharedBytes: number;
  ptxVersion: number;
  binaryVersion: number;
}

export interface LaunchConfig {
  grid: Dim3 | number;
  block: Dim3 | number;
  /** Dynamic shared memory, bytes. */
  sharedBytes?: number;
  /** Default: the legacy default stream. */
  stream?: CudaStream;
}

// One argument buffer for every launch: cuLaunchKernel copies the values before it returns.
let launchParams: KernelParams | undefined;

/** A kernel in a loaded module. */
export class CudaKernel {
  constructor(
    readonly driver: CudaDriver,
    readonly name: string,
    readonly handle: Handle,
  ) {}

  attributes(): KernelAttributes {
    const get = (a: number) => this.driver.funcGetAttribute(a, this.handle);
    const F = FunctionAttribute;
    return {
      numRegs: get(F.NumRegs),
      localBytes: get(F.LocalSizeBytes),
      sharedBytes: get(F.SharedSizeBytes),
      constBytes: get(F.ConstSizeBytes),
      maxThreadsPerBlock: get(F.MaxThreadsPerBlock),
      maxDynamicSharedBytes: get(F.MaxDynamicSharedSizeBytes),
      ptxVersion: get(F.PtxVersion),
      binaryVersion: get(F.BinaryVersion),
    };
  }

  /** Allows more than 48 KiB of dynamic shared memory (up to the device's sharedPerBlockOptin). */
  setMaxDynamicSharedBytes(bytes: number): void {
    this.driver.funcSetAttribute(this.handle, FunctionAttribute.MaxDynamicSharedSizeBytes, bytes);
  }

  /** Blocks of `blockSize` threads resident per SM at once (for sizing persistent grids). */
  maxActiveBlocksPerSm(blockSize: number, dynamicSharedBytes = 0): number {
    return this.driver.occupancyMaxActiveBlocksPerSm(this.handle, blockSize, dynamicSharedBytes);
  }

  /**
   * Clusters (of a kernel compiled with `__cluster_dims__`) resident at once for a 1-D launch of `grid` blocks;
   * undefined where the driver cannot say.
   */
  maxActiveClusters(grid: number, blockSize: number, dynamicSharedBytes = 0): number | undefined {
    return this.driver.occupancyMaxActiveClusters(this.handle, grid, blockSize, dynamicSharedBytes);
  }

  /** Queues the kernel. Errors inside the kernel surface at the next synchronisation. */
  launch(config: LaunchConfig, args: readonly KernelArg[]): void {
    launchParams ??= new KernelParams(256);
    const grid: Dim3 = typeof config.grid === "number" ? [config.grid] : config.grid;
    const block: Dim3 = typeof config.block === "number" ? [config.block] : config.block;
    this.driver.launchKernel(
      this.handle,
      grid,
      block,
      config.sharedBytes ?? 0,
      config.stream ? config.stream.handle : NULL_STREAM,
      launchParams.pack(args),
      () => `kernel ${this.name}`,
    );
  }
}

/** A loaded cubin. Kernels must be `extern "C"` to be found by their source name (or use NVRTC's lowered names). */
export class CudaModule {
  private unloaded = false;

  constructor(
    readonly driver: CudaDriver,
    readonly handle: Handle,
    readonly name: string,
  ) {}

  getFunction(name: string): CudaKernel {
    return new CudaKernel(this.driver, name, this.driver.moduleGetFunction(this.handle, name));
  }

  /** Address and size of a `__device__` variable. */
  getGlobal(name: string): { ptr: DevicePtr; bytes: number } {
    return this.driver.moduleGetGlobal(this.handle, name);
  }

  unload(): void {
    if (this.unloaded) return;
    this.unloaded = true;
    this.driver.moduleUnload(this.handle);
  }
}

/** Loads a cubin into the current context (openDevice first). */
export function loadModule(cubin: Uint8Array, name = "module", driver: CudaDriver = getDriver()): CudaModule {
  return new CudaModule(driver, driver.moduleLoadData(cubin, name), name);
}

/** Shorthand for `loadModule(cubin).getFunction(name)`. */
export function getFunction(module: CudaModule, name: string): CudaKernel {
  return module.getFunction(name);
}
