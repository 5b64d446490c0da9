// Compiling CUDA C++ with NVRTC, through the cubin cache (cache.ts): a cache hit skips NVRTC; a compile's result is
// stored for the next run. The compile itself can run on a worker thread, so that several programs compile at once.

import { getNvrtc, type Nvrtc, type NvrtcOutput, type NvrtcSource } from "../ffi/nvrtc.js";
import { defaultCacheDir, kernelCacheKey, readCacheEntry, writeCacheEntry } from "./cache.js";

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
