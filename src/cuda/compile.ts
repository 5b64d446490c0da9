// Compiling CUDA C++ with NVRTC, with an on-disk cubin cache so that the JIT cost is paid once per kernel version and
// machine, not once per run; and loading cubins into modules whose kernels can be launched with typed arguments.

import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, renameSync, unlinkSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import {
  type CudaDriver,
  type DevicePtr,
  type Dim3,
  FunctionAttribute,
  getDriver,
  type Handle,
  NULL_STREAM,
} from "./ffi/driver.js";
import { type KernelArg, KernelParams } from "./ffi/kernel-params.js";
import { getNvrtc, type Nvrtc, type NvrtcOutput, type NvrtcSource } from "./ffi/nvrtc.js";
import type { CudaStream } from "./stream.js";

/** Bump when the cache's layout or what a key covers changes, so old entries are ignored rather than misread. */
export const KERNEL_CACHE_FORMAT = 1;

export interface CompileRequest {
  /** Program name; NVRTC's log names it (`name(LINE): error`). */
  name: string;
  source: string;
  /** NVRTC options other than the architecture (e.g. `-lineinfo`, `--ptxas-options=-v`, `-default-device`). */
  options?: readonly string[];
  /** A real architecture, e.g. `sm_90` (CudaDevice.props.arch); the cubin only runs on that architecture. */
  arch: string;
  headers?: Readonly<Record<string, string>>;
  /** Cache folder; `null` disables the cache. Default: defaultCacheDir(). */
  cacheDir?: string | null;
}

export interface CompileResult {
  cubin: Uint8Array;
  /** NVRTC's log (warnings, and ptxas's register report when `--ptxas-options=-v` is given). */
  log: string;
  fromCache: boolean;
  /** Wall time of the compile or of the cache read. */
  ms: number;
  /** The cache key (sha256, hex). */
  key: string;
  /** Why the result could not be written to the cache (the compile itself succeeded). */
  cacheError?: string;
}

export interface CacheKeyInput {
  source: string;
  options: readonly string[];
  nvrtcVersion: string;
  arch: string;
  headers?: Readonly<Record<string, string>>;
}

/** sha256 over everything that determines the cubin. JSON keeps field boundaries unambiguous. */
export function kernelCacheKey(input: CacheKeyInput): string {
  const headers = Object.entries(input.headers ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const material = JSON.stringify([
    KERNEL_CACHE_FORMAT,
    input.nvrtcVersion,
    input.arch,
    input.options,
    input.source,
    headers,
  ]);
  return createHash("sha256").update(material).digest("hex");
}

/** `$VPPS_CACHE_DIR`, else `$XDG_CACHE_HOME/vpps/kernels`, else `~/.cache/vpps/kernels`. */
export function defaultCacheDir(
  env: Readonly<Record<string, string | undefined>> = process.env,
  home: string = homedir(),
): string {
  if (env.VPPS_CACHE_DIR) return env.VPPS_CACHE_DIR;
  if (env.XDG_CACHE_HOME) return join(env.XDG_CACHE_HOME, "vpps", "kernels");
  return join(home, ".cache", "vpps", "kernels");
}

/**
 * Writes a file so that readers see either the old content or the whole new content: write a uniquely named temp
 * file in the same folder, then rename over the target (atomic within one file system). Two processes compiling the
 * same kernel at once both succeed; the last rename wins with identical bytes.
 */
export function writeFileAtomic(path: string, data: Uint8Array | string): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`;
  try {
    writeFileSync(tmp, data);
    renameSync(tmp, path);
  } catch (e) {
    try {
      unlinkSync(tmp);
    } catch {
      // the temp file was never created
    }
    throw e;
  }
}

/** The cache's files for a key: the cubin (its presence marks a complete entry) and the compile log. */
export function cacheEntryPaths(cacheDir: string, key: string): { cubin: string; log: string } {
  return { cubin: join(cacheDir, `${key}.cubin`), log: join(cacheDir, `${key}.log`) };
}

export function readCacheEntry(cacheDir: string, key: string): { cubin: Uint8Array; log: string } | undefined {
  const paths = cacheEntryPaths(cacheDir, key);
  let cubin: Uint8Array;
  try {
    cubin = new Uint8Array(readFileSync(paths.cubin));
  } catch {
    return undefined;
  }
  let log = "";
  try {
    log = readFileSync(paths.log, "utf8");
  } catch {
    // an entry written without a log is still usable
  }
  return { cubin, log };
}

/** Log first, cubin last: a reader that finds the cubin finds the log too. */
export function writeCacheEntry(cacheDir: string, key: string, entry: { cubin: Uint8Array; log: string }): void {
  const paths = cacheEntryPaths(cacheDir, key);
  writeFileAtomic(paths.log, entry.log);
  writeFileAtomic(paths.cubin, entry.cubin);
}

/**
 * Compiles `source` for `arch` with NVRTC, or returns the cached cubin. Throws NvrtcCompileError (log, options,
 * numbered source) when the source does not compile, CudaLibraryNotFoundError when NVRTC is missing.
 */
export function compileCuda(req: CompileRequest): CompileResult {
  const job = prepareCompile(req);
  return job.hit ?? finishCompile(job, job.nvrtc.compile(job.source));
}

/**
 * `compileCuda` with NVRTC's work on a worker thread: several programs (e.g. the plan variants of one model)
 * compile at once, each taking one core, while the event loop stays free. Same cache, same errors.
 */
export async function compileCudaAsync(req: CompileRequest): Promise<CompileResult> {
  const job = prepareCompile(req);
  return job.hit ?? finishCompile(job, await job.nvrtc.compileAsync(job.source));
}

interface CompileJob {
  req: CompileRequest;
  start: number;
  nvrtc: Nvrtc;
  key: string;
  cacheDir: string | null;
  source: NvrtcSource;
  hit?: CompileResult;
}

/** Validates the request, computes its cache key and reads the cache. */
function prepareCompile(req: CompileRequest): CompileJob {
  if (!/^sm_\d+[a-z]?$/.test(req.arch)) {
    throw new Error(`compileCuda(${req.name}): arch must be a real architecture like "sm_90", got "${req.arch}"`);
  }
  const start = performance.now();
  const nvrtc = getNvrtc();
  const v = nvrtc.version();
  const userOptions = [...(req.options ?? [])];
  const key = kernelCacheKey({
    source: req.source,
    options: userOptions,
    nvrtcVersion: `${v.major}.${v.minor}`,
    arch: req.arch,
    headers: req.headers,
  });
  const cacheDir = req.cacheDir === undefined ? defaultCacheDir() : req.cacheDir;
  const source: NvrtcSource = {
    name: req.name,
    source: req.source,
    options: [`--gpu-architecture=${req.arch}`, ...userOptions],
    ...(req.headers !== undefined ? { headers: req.headers } : {}),
  };
  const job: CompileJob = { req, start, nvrtc, key, cacheDir, source };
  if (cacheDir !== null) {
    const hit = readCacheEntry(cacheDir, key);
    if (hit) job.hit = { ...hit, fromCache: true, ms: performance.now() - start, key };
  }
  return job;
}

/** Stores NVRTC's output in the cache (a failed write is reported in `cacheError`, not thrown). */
function finishCompile(job: CompileJob, out: NvrtcOutput): CompileResult {
  if (!out.cubin) throw new Error(`compileCuda(${job.req.name}): NVRTC produced no cubin for ${job.req.arch}`);
  const result: CompileResult = { cubin: out.cubin, log: out.log, fromCache: false, ms: 0, key: job.key };
  if (job.cacheDir !== null) {
    try {
      writeCacheEntry(job.cacheDir, job.key, { cubin: out.cubin, log: out.log });
    } catch (e) {
      result.cacheError = `could not write the kernel cache in ${job.cacheDir}: ${e instanceof Error ? e.message : e}`;
    }
  }
  result.ms = performance.now() - job.start;
  return result;
}

// --- modules and kernels ---

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
