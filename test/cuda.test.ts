// The CUDA layer without a GPU: library search, device specs, the pool's arena, the kernel cache, error formatting,
// the row-major ⇔ column-major BLAS mapping and kernel argument packing. Where NVRTC loads (the GPU machine, or a
// development machine with a full toolkit), real compiles are checked too.

import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import {
  defaultCacheDir,
  kernelCacheKey,
  readCacheEntry,
  writeCacheEntry,
  writeFileAtomic,
} from "../src/cuda/compile/cache.js";
import { compileCuda } from "../src/cuda/compile/compile.js";
import {
  CublasError,
  type GemmArgs,
  type GemvArgs,
  rowMajorGemm,
  rowMajorGemv,
  rowMajorStridedBatchedGemm,
} from "../src/cuda/ffi/cublas.js";
import {
  CUDA_RESULT_NAMES,
  CUDA_USER_FAILURES,
  CudaDeviceError,
  CudaError,
  cudaErrorMessage,
  cudaFailure,
  DeviceAttribute,
  floatBits,
  toDevicePtr,
} from "../src/cuda/ffi/driver.js";
import { CudaLibraryNotFoundError, candidatePaths, loadCudaLibrary, mappedFile } from "../src/cuda/ffi/find.js";
import { KernelParams, karg } from "../src/cuda/ffi/kernel-params.js";
import {
  firstErrorLine,
  formatCompileError,
  getNvrtc,
  type Nvrtc,
  NvrtcCompileError,
  numberSourceLines,
} from "../src/cuda/ffi/nvrtc.js";
import { type CudaInfo, formatCudaInfo, formatCudaVersion, getCudaInfo } from "../src/cuda/info.js";
import { cudaAvailable, parseDeviceSpec, readDeviceProperties } from "../src/cuda/runtime/device.js";
import { ArenaAllocator, DevicePoolOutOfMemory, MAX_POOL_FLOATS } from "../src/cuda/runtime/memory.js";
import { formatBytes } from "../src/cuda/units.js";
import { isUserError } from "../src/util/errors.js";

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

/** The error `fn` throws, checked to be an instance of `type`. */
function thrown<E extends Error>(fn: () => unknown, type: new (...args: never[]) => E): E {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof type, `expected ${type.name}, got ${String(e)}`);
    return e;
  }
  assert.fail(`expected ${type.name} to be thrown`);
}

function fakeDirs(tree: Record<string, string[]>): (dir: string) => readonly string[] | undefined {
  return (dir) => tree[dir];
}

describe("library search", () => {
  test("NVRTC: standard names, then CUDA_HOME, CUDA_PATH, /usr/local/cuda; versioned files newest first", () => {
    const listDir = fakeDirs({
      "/opt/cuda-13/lib64": [
        "libnvrtc.so.12",
        "libnvrtc-builtins.so.13.0",
        "libnvrtc.so.13",
        "libnvrtc.so",
        "libnvrtc.so.13.0.88",
        "libcublas.so.13",
        "libnvrtc_static.a",
        "stubs",
      ],
      "/opt/cuda-alt/lib": ["libnvrtc.so.12.4.127"],
      "/usr/local/cuda/targets/x86_64-linux/lib": ["libnvrtc.so.13.0.88", "libnvrtc.so.13"],
    });
    const paths = candidatePaths("nvrtc", { CUDA_HOME: "/opt/cuda-13", CUDA_PATH: "/opt/cuda-alt" }, listDir, "x64");
    assert.deepEqual(paths, [
      "libnvrtc.so",
      "libnvrtc.so.13",
      "libnvrtc.so.12",
      "libnvrtc.so.11.2",
      "libnvrtc.so.11.1",
      "/opt/cuda-13/lib64/libnvrtc.so",
      "/opt/cuda-13/lib64/libnvrtc.so.13.0.88",
      "/opt/cuda-13/lib64/libnvrtc.so.13",
      "/opt/cuda-13/lib64/libnvrtc.so.12",
      "/opt/cuda-alt/lib/libnvrtc.so.12.4.127",
      "/usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.13.0.88",
      "/usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.13",
    ]);
  });

  test("cuBLAS does not pick up cublasLt, and ARM64 looks in sbsa-linux", () => {
    const listDir = fakeDirs({
      "/usr/local/cuda/targets/sbsa-linux/lib": ["libcublasLt.so.13", "libcublas.so.13", "libcublas.so.13.0.2.14"],
    });
    const paths = candidatePaths("cublas", {}, listDir, "arm64");
    assert.deepEqual(paths.slice(4), [
      "/usr/local/cuda/targets/sbsa-linux/lib/libcublas.so.13.0.2.14",
      "/usr/local/cuda/targets/sbsa-linux/lib/libcublas.so.13",
    ]);
    assert.equal(paths[0], "libcublas.so");
  });

  test("the driver: libcuda.so.1 first, system folders searched, never the toolkit's stub", () => {
    const listDir = fakeDirs({
      "/usr/local/cuda/lib64": ["libcudart.so.13", "stubs"],
      "/usr/local/cuda/lib64/stubs": ["libcuda.so"],
      "/usr/lib/x86_64-linux-gnu": ["libcuda.so.1", "libcuda.so.580.65.06", "libcudadebugger.so.1"],
    });
    const paths = candidatePaths("cuda", {}, listDir, "x64");
    assert.equal(paths[0], "libcuda.so.1");
    assert.ok(paths.includes("/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06"));
    assert.ok(paths.includes("/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
    assert.ok(!paths.some((p) => p.includes("stubs")), paths.join(","));
    assert.ok(!paths.some((p) => p.includes("libcudadebugger")));
  });

  test("no library loads: the error names every path tried and says to set CUDA_HOME", () => {
    const listDir = fakeDirs({ "/opt/cuda/lib64": ["libnvrtc.so.13"] });
    const err = thrown(
      () =>
        loadCudaLibrary("nvrtc", {
          env: { CUDA_HOME: "/opt/cuda" },
          listDir,
          load: (p) => {
            throw new Error(`cannot open ${p}`);
          },
        }),
      CudaLibraryNotFoundError,
    );
    assert.equal(err.library, "nvrtc");
    assert.equal(err.tried.length, 6);
    assert.match(err.message, /NVRTC library \(libnvrtc\.so\*\) not found; tried:/);
    assert.match(err.message, /\/opt\/cuda\/lib64\/libnvrtc\.so\.13: cannot open \/opt\/cuda\/lib64\/libnvrtc\.so\.13/);
    assert.match(err.message, /Set CUDA_HOME/);
  });

  test("the first path that loads wins", () => {
    const listDir = fakeDirs({ "/opt/cuda/lib64": ["libcublas.so.13"] });
    const seen: string[] = [];
    const loaded = loadCudaLibrary("cublas", {
      env: { CUDA_HOME: "/opt/cuda" },
      listDir,
      load: (p) => {
        seen.push(p);
        if (p !== "/opt/cuda/lib64/libcublas.so.13") throw new Error("no");
        return {} as never;
      },
    });
    assert.equal(loaded.path, "/opt/cuda/lib64/libcublas.so.13");
    assert.deepEqual(seen, ["libcublas.so", "libcublas.so.13", "libcublas.so.12", "libcublas.so.11", loaded.path]);
  });

  test("a library loaded by bare name is reported with the file the loader mapped", () => {
    const maps = [
      "7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libcudart.so.13.0.48",
      "7f02-7f03 r-xp 00000000 08:01 2 /usr/local/cuda-13.0/lib64/libcublasLt.so.13.0.2",
      "7f04-7f05 r-xp 00000000 08:01 3 /usr/local/cuda-13.0/lib64/libcublas.so.13.0.2",
      "7f06-7f07 r-xp 00000000 08:01 4 /usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06",
    ].join("\n");
    assert.equal(
      mappedFile("cublas", "libcublas.so.13", () => maps),
      "/usr/local/cuda-13.0/lib64/libcublas.so.13.0.2",
    );
    assert.equal(
      mappedFile("cuda", "libcuda.so.1", () => maps),
      "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06",
    );
    assert.equal(
      mappedFile("nvrtc", "libnvrtc.so", () => maps),
      undefined,
    );
    assert.equal(
      mappedFile("nvrtc", "/opt/x/libnvrtc.so.13", () => maps),
      "/opt/x/libnvrtc.so.13",
    );
  });

  test("the driver's not-found message points at the NVIDIA driver", () => {
    const err = new CudaLibraryNotFoundError("cuda", [{ path: "libcuda.so.1", error: "no such file" }]);
    assert.match(err.message, /CUDA driver library \(libcuda\.so\*\) not found/);
    assert.match(err.message, /comes with the NVIDIA driver/);
    assert.equal(err.summary, "CUDA driver library (libcuda.so*) not found (tried 1 paths: libcuda.so.1)");
  });
});

describe("device specs and properties", () => {
  test("parseDeviceSpec accepts auto, cpu, cuda and cuda:N", () => {
    assert.deepEqual(parseDeviceSpec("auto"), { kind: "auto" });
    assert.deepEqual(parseDeviceSpec("cpu"), { kind: "cpu" });
    assert.deepEqual(parseDeviceSpec("cuda"), { kind: "cuda", index: 0 });
    assert.deepEqual(parseDeviceSpec("cuda:3"), { kind: "cuda", index: 3 });
    assert.deepEqual(parseDeviceSpec(" CUDA:1 "), { kind: "cuda", index: 1 });
  });

  test("parseDeviceSpec names what it expected and what it got", () => {
    for (const bad of ["gpu", "cuda:-1", "cuda:x", "", "cuda:1:2", "cpu0"]) {
      assert.throws(
        () => parseDeviceSpec(bad),
        (e: Error) =>
          e.message.includes('expected "auto", "cpu", "cuda" or "cuda:N"') && e.message.includes(`"${bad}"`),
      );
    }
  });

  test("properties come from named attributes; deprecated clock attributes may fail", () => {
    const A = DeviceAttribute;
    const values: Record<number, number> = {
      [A.ComputeCapabilityMajor]: 9,
      [A.ComputeCapabilityMinor]: 0,
      [A.MultiprocessorCount]: 132,
      [A.WarpSize]: 32,
      [A.MaxThreadsPerBlock]: 1024,
      [A.MaxThreadsPerMultiprocessor]: 2048,
      [A.MaxBlocksPerMultiprocessor]: 32,
      [A.MaxRegistersPerMultiprocessor]: 65536,
      [A.MaxRegistersPerBlock]: 65536,
      [A.MaxSharedMemoryPerMultiprocessor]: 233472,
      [A.MaxSharedMemoryPerBlock]: 49152,
      [A.MaxSharedMemoryPerBlockOptin]: 232448,
      [A.L2CacheSize]: 52428800,
      [A.ReservedSharedMemoryPerBlock]: 1024,
    };
    const props = readDeviceProperties(0, "NVIDIA H100 80GB HBM3", 80 * GiB, (a) => {
      const v = values[a];
      if (v === undefined) throw new Error(`attribute ${a} not supported`);
      return v;
    });
    assert.equal(props.arch, "sm_90");
    assert.equal(props.smCount, 132);
    assert.equal(props.regsPerSm, 65536);
    assert.equal(props.maxRegsPerThread, 255);
    assert.equal(props.sharedPerBlockOptin, 232448);
    assert.equal(props.reservedSharedPerBlock, 1024);
    assert.equal(props.clockKhz, 0);
    assert.equal(props.cooperativeLaunch, false);
    assert.equal(props.totalMemory, 80 * GiB);
  });

  test("cudaAvailable never throws and gives a reason when it says no", () => {
    const a = cudaAvailable();
    if (!a.ok) assert.ok(a.reason.length > 0);
    else assert.equal(a.ok, true);
  });
});

describe("device pool arena", () => {
  test("allocations are 256-byte aligned float offsets", () => {
    const arena = new ArenaAllocator(4096);
    assert.equal(arena.alloc(1), 0);
    assert.equal(arena.alloc(10), 64);
    assert.equal(arena.alloc(64), 128);
    assert.equal(arena.alloc(0), 192);
    assert.equal(arena.alloc(3), 192);
    assert.equal(arena.usedFloats, 195);
  });

  test("reset drops the batch and keeps what was allocated before mark()", () => {
    const arena = new ArenaAllocator(1 << 20);
    const weights = arena.alloc(1000, "weights");
    arena.mark();
    const a = arena.alloc(5000);
    arena.alloc(7000);
    const peak = arena.stats().usedBytes;
    arena.reset();
    assert.equal(weights, 0);
    assert.equal(arena.usedFloats, 1000);
    assert.equal(arena.alloc(5000), a, "the next batch reuses the same offsets");
    const s = arena.stats();
    assert.equal(s.persistentBytes, 4000);
    assert.equal(s.peakBytes, peak);
    assert.equal(s.capacityBytes, 4 << 20);
  });

  test("out of memory names the request, the offset and the pool's state", () => {
    const arena = new ArenaAllocator(GiB / 4);
    arena.alloc((512 * MiB) / 4, "weights");
    arena.mark();
    arena.alloc((500 * MiB) / 4);
    const err = thrown(() => arena.alloc((13 * MiB) / 4, "activations"), DevicePoolOutOfMemory);
    assert.equal(err.name, "DevicePoolOutOfMemory");
    assert.equal(err.requestedBytes, 13 * MiB);
    assert.equal(err.offset, (1012 * MiB) / 4);
    assert.equal(
      String(err),
      "DevicePoolOutOfMemory: asked for 13.0 MiB for activations at offset 265289728, pool 1.0 GiB, " +
        "1012.0 MiB in use (512.0 MiB persistent), peak 1012.0 MiB: the batch or model does not fit the GPU's " +
        "memory pool; use a smaller --batch or --hidden",
    );
    assert.equal(arena.usedFloats, (1012 * MiB) / 4, "a failed allocation changes nothing");
  });

  test("capacity is limited to 2^32 floats (16 GiB) and sizes must be whole floats", () => {
    assert.equal(new ArenaAllocator(MAX_POOL_FLOATS).stats().capacityBytes, 16 * GiB);
    assert.throws(() => new ArenaAllocator(MAX_POOL_FLOATS + 1), /\[0, 2\^32\]/);
    assert.throws(() => new ArenaAllocator(100).alloc(1.5, "x"), /pool alloc \(x\): size must be a whole number/);
    assert.throws(() => new ArenaAllocator(100).alloc(-1), /got -1/);
  });

  test("formatBytes", () => {
    assert.equal(formatBytes(512), "512 B");
    assert.equal(formatBytes(1536), "1.5 KiB");
    assert.equal(formatBytes(12 * MiB), "12.0 MiB");
    assert.equal(formatBytes(GiB), "1.0 GiB");
  });
});

describe("kernel cache", () => {
  const base = { source: "__global__ void k() {}", options: ["-lineinfo"], nvrtcVersion: "13.0", arch: "sm_90" };
  const dirs: string[] = [];
  const tempDir = () => {
    const d = mkdtempSync(join(tmpdir(), "vpps-cache-test-"));
    dirs.push(d);
    return d;
  };
  after(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  test("the key is a sha256 of source, options, NVRTC version, arch and headers", () => {
    const key = kernelCacheKey(base);
    assert.match(key, /^[0-9a-f]{64}$/);
    assert.equal(kernelCacheKey({ ...base, options: ["-lineinfo"] }), key, "deterministic");
    const variants = [
      { ...base, source: `${base.source} ` },
      { ...base, options: [] },
      { ...base, options: ["-lineinfo", "-G"] },
      { ...base, nvrtcVersion: "13.1" },
      { ...base, arch: "sm_80" },
      { ...base, headers: { "a.h": "#define X 1" } },
      // field boundaries matter: moving text between fields changes the key
      { ...base, source: `-lineinfo${base.source}`, options: [] },
    ];
    const keys = new Set([key, ...variants.map(kernelCacheKey)]);
    assert.equal(keys.size, variants.length + 1);
    assert.equal(
      kernelCacheKey({ ...base, headers: { "a.h": "1", "b.h": "2" } }),
      kernelCacheKey({ ...base, headers: { "b.h": "2", "a.h": "1" } }),
      "header order does not matter",
    );
  });

  test("default folder: $VPPS_CACHE_DIR, then $XDG_CACHE_HOME/vpps/kernels, then ~/.cache/vpps/kernels", () => {
    assert.equal(defaultCacheDir({ VPPS_CACHE_DIR: "/c", XDG_CACHE_HOME: "/x" }, "/home/u"), "/c");
    assert.equal(defaultCacheDir({ XDG_CACHE_HOME: "/x" }, "/home/u"), "/x/vpps/kernels");
    assert.equal(defaultCacheDir({}, "/home/u"), "/home/u/.cache/vpps/kernels");
  });

  test("writeFileAtomic creates folders, replaces content and leaves no temp files", () => {
    const dir = tempDir();
    const path = join(dir, "a", "b", "k.cubin");
    writeFileAtomic(path, new Uint8Array([1, 2, 3]));
    writeFileAtomic(path, new Uint8Array([4, 5]));
    assert.deepEqual([...readFileSync(path)], [4, 5]);
    assert.deepEqual(readdirSync(join(dir, "a", "b")), ["k.cubin"]);
  });

  test("a failed atomic write throws and leaves no temp file behind", () => {
    const dir = tempDir();
    const target = join(dir, "occupied");
    writeFileAtomic(join(target, "inner"), "x"); // `occupied` is now a folder: renaming a file over it fails
    assert.throws(() => writeFileAtomic(target, "data"));
    assert.deepEqual(readdirSync(dir), ["occupied"]);
  });

  test("cache entries round-trip; a missing entry reads as undefined", () => {
    const dir = tempDir();
    assert.equal(readCacheEntry(dir, "0".repeat(64)), undefined);
    const cubin = new Uint8Array([0x7f, 0x45, 0x4c, 0x46, 9]);
    writeCacheEntry(dir, "ab".repeat(32), { cubin, log: "ptxas info: Used 12 registers" });
    const hit = readCacheEntry(dir, "ab".repeat(32));
    assert.deepEqual(hit, { cubin, log: "ptxas info: Used 12 registers" });
    writeFileSync(join(dir, `${"cd".repeat(32)}.cubin`), cubin);
    assert.deepEqual(readCacheEntry(dir, "cd".repeat(32)), { cubin, log: "" }, "an entry without a log is usable");
  });
});

describe("error messages", () => {
  const source = [
    '#include "defs.h"',
    'extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {',
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;",
    "  if (i < n)",
    "    y[i] = a * x[i] + yy[i];",
    "}",
  ].join("\n");
  const log =
    'saxpy.cu(5): error: identifier "yy" is undefined\n      y[i] = a * x[i] + yy[i];\n' +
    '                        ^\n\n1 error detected in the compilation of "saxpy.cu".\n';

  test("an NVRTC compile error carries the log, the options and the source around the first error", () => {
    const err = new NvrtcCompileError({ programName: "saxpy.cu", log, options: ["--gpu-architecture=sm_90"], source });
    assert.equal(err.name, "NvrtcCompileError");
    assert.equal(err.line, 5);
    assert.equal(err.log, log);
    assert.deepEqual(err.options, ["--gpu-architecture=sm_90"]);
    assert.match(err.message, /^NVRTC could not compile saxpy\.cu \(options: --gpu-architecture=sm_90\):/);
    assert.match(err.message, /identifier "yy" is undefined/);
    assert.match(err.message, /saxpy\.cu around line 5:/);
    assert.match(err.message, /> 5 \| {5}y\[i\] = a \* x\[i\] \+ yy\[i\];/);
    assert.match(err.message, / {2}1 \| #include "defs.h"/);
    assert.equal(err.numberedSource.split("\n").length, 6);
    assert.match(err.numberedSource, /^ {2}6 \| \}$/m);
  });

  test("errors in headers are reported only when the program itself has none; no error line, no excerpt", () => {
    assert.equal(firstErrorLine("defs.h(2): error: x\nk.cu(7): catastrophic error: y", "k.cu"), 7);
    assert.equal(firstErrorLine("defs.h(2): error: x", "k.cu"), 2);
    assert.equal(firstErrorLine("k.cu(3): warning: unused", "k.cu"), undefined);
    const msg = formatCompileError({ programName: "k.cu", log: "nvrtc: error: invalid option", options: [], source });
    assert.match(msg, /options: none/);
    assert.doesNotMatch(msg, /around line/);
  });

  test("numberSourceLines pads numbers and marks a line", () => {
    const text = Array.from({ length: 12 }, (_, i) => `l${i + 1}`).join("\n");
    assert.equal(numberSourceLines(text, 9, 10, 10), "   9 | l9\n> 10 | l10");
  });

  test("a long log is cut in the message but kept whole in .log", () => {
    const long = `k.cu(1): error: first\n${Array.from({ length: 100 }, (_, i) => `note ${i}`).join("\n")}`;
    const err = new NvrtcCompileError({ programName: "k.cu", log: long, options: [], source: "x" });
    assert.match(err.message, /\.\.\. \(61 more log lines\)/);
    assert.equal(err.log, long);
  });

  test("driver and cuBLAS errors name the call, the result's name and number", () => {
    const e = new CudaError("cuMemAlloc_v2", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", "asked for 100.0 GiB");
    assert.equal(e.message, "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory — asked for 100.0 GiB");
    assert.equal(cudaErrorMessage("cuInit", 100, "CUDA_ERROR_NO_DEVICE"), "cuInit failed: CUDA_ERROR_NO_DEVICE (100)");
    assert.equal(
      new CublasError("cublasSgemm_v2", 7, "m=0").message,
      "cublasSgemm_v2 failed: CUBLAS_STATUS_INVALID_VALUE (7) — m=0",
    );
  });

  test("CUDA failures a user can cause are CudaDeviceError, one line: what happened, what to do, the call and code", () => {
    // the codes: out of memory, no device, a busy device, a failed launch, a driver too old, among others
    for (const code of [2, 35, 46, 100, 101, 216, 701, 702, 719, 720]) {
      assert.ok(CUDA_USER_FAILURES[code] !== undefined, `CUresult ${code} is a user's failure`);
    }
    for (const [key, advice] of Object.entries(CUDA_USER_FAILURES)) {
      const code = Number(key);
      const name = CUDA_RESULT_NAMES[code];
      assert.ok(name?.startsWith("CUDA_ERROR_"), `CUresult ${code} has its name in CUDA_RESULT_NAMES`);
      assert.match(advice, /^[a-z][^\n]*: [^\n]+$/, `${name}: what happened, then what to do, on one line`);
      assert.match(advice, /nvidia-smi|--batch|--hidden|--device|driver|rerun|MPS|cache/, `${name}: says what to do`);
      const e = cudaFailure("cuCall", code, name!, "the driver's words", "detail\nsecond line");
      assert.ok(e instanceof CudaDeviceError && isUserError(e), name);
      assert.equal(e.message, `${advice} [cuCall: ${name} (${code}), detail second line]`);
      assert.equal(e.name, "CudaDeviceError");
      assert.deepEqual([e.call, e.code, e.codeName], ["cuCall", code, name]);
    }
    const oom = cudaFailure("cuMemAlloc_v2", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", "asked for 90.0 GiB");
    assert.equal(
      oom.message,
      "the GPU is out of memory: use a smaller --batch or --hidden, or free the GPU (nvidia-smi lists the processes " +
        "on it) [cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2), asked for 90.0 GiB]",
    );
    // the rest are bugs in vpps: a CudaError, printed with its trace
    for (const code of [1, 200, 201, 400, 700, 716, 999]) {
      const e = cudaFailure("cuCall", code, CUDA_RESULT_NAMES[code]!);
      assert.ok(e instanceof CudaError && !isUserError(e), `CUresult ${code} is a bug`);
    }
  });

  test("device addresses must be exact as numbers", () => {
    assert.equal(toDevicePtr(0x7f12_3456_7800n, "test"), 0x7f12_3456_7800);
    assert.throws(() => toDevicePtr(2n ** 60n, "cuMemAlloc_v2"), /cuMemAlloc_v2: device address .* not exactly/);
  });
});

/** Column-major SGEMM reference over flat arrays: pointers are element offsets into `mem`. */
function refGemmColumnMajor(mem: Float32Array, a: GemmArgs<number>): void {
  const at = (p: number, ld: number, trans: number, i: number, j: number) =>
    trans === 0 ? mem[p + i + j * ld]! : mem[p + j + i * ld]!;
  for (let i = 0; i < a.m; i++) {
    for (let j = 0; j < a.n; j++) {
      let s = 0;
      for (let l = 0; l < a.k; l++) s += at(a.A, a.lda, a.transa, i, l) * at(a.B, a.ldb, a.transb, l, j);
      const c = a.C + i + j * a.ldc;
      mem[c] = a.alpha * s + a.beta * mem[c]!;
    }
  }
}

function refGemvColumnMajor(mem: Float32Array, a: GemvArgs<number>): void {
  const rows = a.trans === 0 ? a.m : a.n;
  const inner = a.trans === 0 ? a.n : a.m;
  for (let i = 0; i < rows; i++) {
    let s = 0;
    for (let l = 0; l < inner; l++) {
      const aij = a.trans === 0 ? mem[a.A + i + l * a.lda]! : mem[a.A + l + i * a.lda]!;
      s += aij * mem[a.x + l * a.incx]!;
    }
    const y = a.y + i * a.incy;
    mem[y] = a.alpha * s + a.beta * mem[y]!;
  }
}

function randomArray(n: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  let s = seed;
  for (let i = 0; i < n; i++) {
    s = (s * 1103515245 + 12345) % 2147483648;
    out[i] = (s / 2147483648) * 2 - 1;
  }
  return out;
}

describe("row-major BLAS mapping (checked against a column-major reference)", () => {
  const m = 3;
  const n = 4;
  const k = 5;
  for (const transA of [false, true]) {
    for (const transB of [false, true]) {
      test(`gemm transA=${transA} transB=${transB}`, () => {
        // memory: A at 0 (15), B at 16 (20), C at 40 (12)
        const mem = randomArray(64, 7);
        const A = mem.slice(0, 15);
        const B = mem.slice(16, 36);
        const C0 = mem.slice(40, 52);
        const opA = (i: number, l: number) => (transA ? A[l * m + i]! : A[i * k + l]!);
        const opB = (l: number, j: number) => (transB ? B[j * k + l]! : B[l * n + j]!);
        refGemmColumnMajor(mem, rowMajorGemm({ transA, transB, m, n, k, alpha: 0.5, A: 0, B: 16, beta: 2, C: 40 }));
        for (let i = 0; i < m; i++) {
          for (let j = 0; j < n; j++) {
            let s = 0;
            for (let l = 0; l < k; l++) s += opA(i, l) * opB(l, j);
            assert.ok(Math.abs(mem[40 + i * n + j]! - (0.5 * s + 2 * C0[i * n + j]!)) < 1e-5, `C[${i},${j}]`);
          }
        }
      });
    }
  }

  test("strided batched gemm swaps the strides with the operands", () => {
    const g = rowMajorStridedBatchedGemm({
      m,
      n,
      k,
      A: 0,
      B: 100,
      C: 200,
      strideA: 15,
      strideB: 20,
      strideC: 12,
      batchCount: 3,
    });
    assert.equal(g.A, 100);
    assert.equal(g.strideA, 20);
    assert.equal(g.B, 0);
    assert.equal(g.strideB, 15);
    assert.equal(g.strideC, 12);
    assert.equal(g.batchCount, 3);
    assert.deepEqual([g.m, g.n, g.k, g.lda, g.ldb, g.ldc], [n, m, k, n, k, n]);
  });

  for (const trans of [false, true]) {
    test(`gemv trans=${trans}`, () => {
      const rows = 3;
      const cols = 5;
      const mem = randomArray(40, 11);
      const A = mem.slice(0, 15);
      const xLen = trans ? rows : cols;
      const yLen = trans ? cols : rows;
      const x = mem.slice(16, 16 + xLen);
      const y0 = mem.slice(24, 24 + yLen);
      refGemvColumnMajor(mem, rowMajorGemv({ trans, rows, cols, alpha: 1.5, A: 0, x: 16, beta: -1, y: 24 }));
      for (let i = 0; i < yLen; i++) {
        let s = 0;
        for (let l = 0; l < xLen; l++) s += (trans ? A[l * cols + i]! : A[i * cols + l]!) * x[l]!;
        assert.ok(Math.abs(mem[24 + i]! - (1.5 * s - y0[i]!)) < 1e-5, `y[${i}]`);
      }
    });
  }
});

describe("kernel arguments", () => {
  test("pack writes each value into its own 8-byte slot", () => {
    const params = new KernelParams(8);
    const ptrs = params.pack([karg.ptr(0x7f12_3456_7800), karg.i32(-5), karg.f32(2.5), karg.u32(0xffff_ffff)]);
    assert.equal(ptrs.length, 8);
    assert.equal(ptrs[1]! - ptrs[0]!, 8n);
    assert.deepEqual(params.slot(0), { u32lo: 0x3456_7800, u32hi: 0x7f12, f32: params.slot(0).f32, i32: 0x3456_7800 });
    assert.equal(params.slot(1).i32, -5);
    assert.equal(params.slot(2).f32, 2.5);
    assert.equal(params.slot(3).u32lo, 0xffff_ffff);
  });

  test("values that do not fit their type are refused with the argument's index", () => {
    const params = new KernelParams(2);
    assert.throws(() => params.pack([karg.u64(-1)]), /kernel argument 0 \(u64\): expected a non-negative safe integer/);
    assert.throws(() => params.pack([karg.f32(1), karg.i32(2 ** 31)]), /kernel argument 1 \(i32\)/);
    assert.throws(() => params.pack([karg.u32(1.5)]), /kernel argument 0 \(u32\)/);
    assert.throws(() => params.pack([karg.f32(1), karg.f32(2), karg.f32(3)]), /3 given, .* at most 2/);
  });

  test("floatBits gives the IEEE-754 pattern for memsetD32", () => {
    assert.equal(floatBits(1), 0x3f80_0000);
    assert.equal(floatBits(0), 0);
    assert.equal(floatBits(-2), 0xc000_0000);
  });
});

describe("vpps info", () => {
  test("formatCudaVersion", () => {
    assert.equal(formatCudaVersion(13000), "13.0");
    assert.equal(formatCudaVersion(12040), "12.4");
  });

  test("getCudaInfo describes this machine without throwing", () => {
    const info = getCudaInfo();
    const text = formatCudaInfo(info);
    console.log(text);
    // the driver, NVRTC, cuBLAS, cuSPARSE and NCCL, each found or not
    assert.deepEqual(
      info.libraries.map((l) => l.library),
      ["cuda", "nvrtc", "cublas", "cusparse", "nccl"],
    );
    assert.match(text, /NCCL {9}/);
    if (info.available) {
      assert.ok(info.devices.length > 0);
      assert.match(text, /GPU 0: /);
    } else {
      assert.match(text, /^CUDA: not available: /);
      assert.match(text, /The CPU engine will be used/);
    }
  });

  test("without the driver it says which library was not found and that the CPU engine is used", () => {
    const info: CudaInfo = {
      available: false,
      reason: "the CUDA driver library (libcuda.so.1) was not found",
      libraries: [
        { library: "cuda", error: "not found", tried: ["libcuda.so.1", "libcuda.so"] },
        { library: "nvrtc", path: "/usr/local/cuda/lib64/libnvrtc.so.13", version: "13.0" },
        { library: "cublas", error: "not found", tried: ["libcublas.so"] },
        { library: "cusparse", error: "not found", tried: [] },
        { library: "nccl", error: "not found", tried: ["libnccl.so.2", "libnccl.so"] },
      ],
    };
    const text = formatCudaInfo(info);
    assert.match(text, /NCCL {9}not found \(tried libnccl\.so\.2, libnccl\.so\)/);
    assert.match(text, /CUDA: not available: the CUDA driver library \(libcuda\.so\.1\) was not found/);
    assert.match(text, /CUDA driver {2}not found \(tried libcuda\.so\.1, libcuda\.so\)/);
    assert.match(text, /NVRTC {8}13\.0 \(\/usr\/local\/cuda\/lib64\/libnvrtc\.so\.13\)/);
    assert.match(text, /The CPU engine will be used/);
  });

  test("with a GPU it lists the properties kernel generation depends on", () => {
    const props = readDeviceProperties(0, "NVIDIA H100 80GB HBM3", 85 * 10 ** 9, (a) =>
      a === DeviceAttribute.ComputeCapabilityMajor ? 9 : a === DeviceAttribute.ComputeCapabilityMinor ? 0 : 132,
    );
    const text = formatCudaInfo({ available: true, driverVersion: "13.0", devices: [props], libraries: [] });
    assert.match(text, /CUDA: available, driver 13\.0, 1 device\(s\)/);
    assert.match(text, /GPU 0: NVIDIA H100 80GB HBM3/);
    assert.match(text, /compute capability 9\.0 \(sm_90\), 132 SMs/);
    assert.match(text, /registers: 132 per SM, 132 per block, 255 per thread/);
  });
});

// --- real NVRTC, where it loads ---

function tryNvrtc(): { nvrtc: Nvrtc } | { reason: string } {
  try {
    return { nvrtc: getNvrtc() };
  } catch (e) {
    if (e instanceof CudaLibraryNotFoundError) {
      return { reason: `NVRTC is not installed here (${e.tried.length} paths tried; set CUDA_HOME to enable)` };
    }
    return { reason: `NVRTC does not load here: ${(e as Error).message}` };
  }
}

const probe = tryNvrtc();
const nvrtcSkip = "reason" in probe ? probe.reason : false;
if (nvrtcSkip) console.log(`skipping real NVRTC compiles: ${nvrtcSkip}`);

describe("NVRTC (real compiles)", { skip: nvrtcSkip }, () => {
  const nvrtc = "nvrtc" in probe ? probe.nvrtc : undefined;
  const cacheDir = mkdtempSync(join(tmpdir(), "vpps-nvrtc-test-"));
  after(() => rmSync(cacheDir, { recursive: true, force: true }));
  const arch = () => {
    const archs = nvrtc!.supportedArchs();
    return `sm_${archs.includes(80) ? 80 : archs[archs.length - 1]}`;
  };
  const kernel =
    'extern "C" __global__ void scale(float* x, float a, int n) {\n' +
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) x[i] *= a;\n}\n";

  test("compiles a tiny kernel to a cubin (ELF) and caches it", () => {
    const v = nvrtc!.version();
    console.log(`NVRTC ${v.major}.${v.minor} at ${nvrtc!.path}; archs ${nvrtc!.supportedArchs().join(",")}`);
    const first = compileCuda({ name: "scale.cu", source: kernel, arch: arch(), cacheDir });
    assert.equal(first.fromCache, false);
    assert.deepEqual([...first.cubin.subarray(0, 4)], [0x7f, 0x45, 0x4c, 0x46]);
    const second = compileCuda({ name: "scale.cu", source: kernel, arch: arch(), cacheDir });
    assert.equal(second.fromCache, true);
    assert.deepEqual(second.cubin, first.cubin);
    assert.equal(second.key, first.key);
    console.log(`compile ${first.ms.toFixed(1)} ms, cache hit ${second.ms.toFixed(2)} ms`);
  });

  test("a kernel that does not compile throws with the log and the line-numbered source", () => {
    const bad = kernel.replace("x[i] *= a;", "x[i] *= b;");
    const err = thrown(
      () => compileCuda({ name: "bad.cu", source: bad, arch: arch(), cacheDir: null }),
      NvrtcCompileError,
    );
    assert.equal(err.line, 3);
    assert.match(err.log, /bad\.cu\(3\): error: identifier "b" is undefined/);
    assert.match(err.message, /> 3 \| {3}if \(i < n\) x\[i\] \*= b;/);
    assert.ok(err.options.includes(`--gpu-architecture=${arch()}`));
  });
});
