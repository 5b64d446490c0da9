// The CUDA layer on a real GPU: properties, memory, NVRTC compile + launch, cuBLAS against CPU loops (row-major),
// events, out-of-memory errors, compile errors and the kernel cache. Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { H100_SXM } from "../../src/cuda/hw/device-model.js";
import {
  type CudaDevice,
  CudaDeviceError,
  CudaError,
  CudaEvent,
  type CudaKernel,
  type CudaModule,
  CudaStream,
  compileCuda,
  compileCudaAsync,
  cudaAvailable,
  DevicePool,
  DevicePoolOutOfMemory,
  formatCudaInfo,
  getCublas,
  getCudaInfo,
  karg,
  loadModule,
  NvrtcCompileError,
  openDevice,
  PinnedBuffer,
} from "../../src/cuda/index.js";
import { generateKernelSource } from "../../src/engines/vpps/codegen/template.js";
import { enumeratePlans } from "../../src/engines/vpps/plan/plan.js";
import { onChipMatrices } from "../../src/model/parameters.js";
import { TreeLstmModel } from "../../src/models/treelstm/model.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const MiB = 1024 ** 2;

function thrown<E extends Error>(fn: () => unknown, type: new (...args: never[]) => E): E {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof type, `expected ${type.name}, got ${String(e)}`);
    return e;
  }
  assert.fail(`expected ${type.name} to be thrown`);
}

function random(n: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  let s = seed;
  for (let i = 0; i < n; i++) {
    s = (s * 1103515245 + 12345) % 2147483648;
    out[i] = (s / 2147483648) * 2 - 1;
  }
  return out;
}

function assertClose(actual: Float32Array, expected: Float32Array, tol: number, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < actual.length; i++) {
    const e = expected[i]!;
    if (!(Math.abs(actual[i]! - e) <= tol * (1 + Math.abs(e)))) {
      assert.fail(`${what}: element ${i} is ${actual[i]}, expected ${e}`);
    }
  }
}

const KERNELS = `
extern "C" __global__ void saxpy(float a, const float* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// Busy-waits for a number of clock cycles: gives events something of known length to time.
extern "C" __global__ void spin(unsigned long long cycles) {
  long long start = clock64();
  while ((unsigned long long)(clock64() - start) < cycles) {}
}
`;

describe("CUDA on the GPU", { skip }, () => {
  let dev: CudaDevice;
  let pool: DevicePool;
  let module: CudaModule;
  let saxpy: CudaKernel;
  let spin: CudaKernel;
  const cacheDir = mkdtempSync(join(tmpdir(), "vpps-gpu-cache-"));

  before(() => {
    dev = openDevice(0);
    pool = DevicePool.create(256 * MiB);
  });

  after(() => {
    module?.unload();
    pool?.free();
    dev?.close();
    rmSync(cacheDir, { recursive: true, force: true });
  });

  test("device properties", () => {
    const p = dev.props;
    console.log(JSON.stringify(p));
    assert.ok(p.name.length > 0);
    assert.ok(p.ccMajor >= 7, `compute capability ${p.ccMajor}.${p.ccMinor}`);
    assert.equal(p.arch, `sm_${p.ccMajor}${p.ccMinor}`);
    assert.ok(p.smCount > 0);
    assert.equal(p.warpSize, 32);
    assert.equal(p.regsPerSm, 65536);
    assert.ok(p.regsPerBlock >= 65536);
    assert.equal(p.maxRegsPerThread, 255);
    assert.ok(p.sharedPerBlockOptin >= p.sharedPerBlock && p.sharedPerSm >= p.sharedPerBlockOptin);
    assert.ok(p.totalMemory > 4 * 1024 * MiB);
    const { free, total } = dev.memInfo();
    assert.ok(free > 0 && free <= total);
  });

  test("vpps info lists the GPU", () => {
    const info = getCudaInfo();
    const text = formatCudaInfo(info);
    console.log(text);
    assert.equal(info.available, true);
    assert.match(text, new RegExp(`GPU 0: ${dev.props.name.replace(/[()]/g, ".")}`));
  });

  test("memory round trip through the pool: upload, download, fill; ints too", () => {
    const weights = pool.alloc(1000, "weights");
    pool.mark();
    const a = pool.alloc(100_003, "a");
    const data = random(100_003, 1);
    pool.upload(a, data);
    const back = new Float32Array(100_003);
    pool.download(a, back);
    assert.deepEqual(back, data);
    pool.fill(a + 3, 10, 1.5);
    pool.download(a, back);
    assert.deepEqual([...back.subarray(2, 14)], [data[2], ...Array(10).fill(1.5), data[13]]);
    const ints = pool.alloc(5, "ints");
    pool.upload(ints, new Int32Array([-1, 2, -3, 4, 2 ** 31 - 1]));
    const intsBack = new Int32Array(5);
    pool.download(ints, intsBack);
    assert.deepEqual([...intsBack], [-1, 2, -3, 4, 2 ** 31 - 1]);
    assert.equal(pool.ptr(a) % 256, 0, "256-byte aligned");
    pool.reset();
    assert.equal(pool.stats().usedBytes, 4000);
    assert.equal(weights, 0);
  });

  test("pinned buffers: typed views share memory; async copies on a stream", () => {
    const n = 1 << 16;
    const src = PinnedBuffer.alloc(n * 4);
    const dst = PinnedBuffer.alloc(n * 4);
    src.f32[0] = 1;
    assert.equal(src.i32[0], 0x3f80_0000, "the f32 and i32 views alias the same bytes");
    src.f32.set(random(n, 2));
    const stream = CudaStream.create({ nonBlocking: true });
    const off = pool.alloc(n, "pinned round trip");
    pool.upload(off, src.f32, stream.handle);
    pool.download(off, dst.f32, stream.handle);
    stream.synchronize();
    assert.deepEqual(dst.f32, src.f32);
    stream.destroy();
    src.free();
    dst.free();
    assert.throws(() => src.f32, /used after free/);
    pool.reset();
  });

  test("NVRTC-compiled saxpy runs and matches the CPU", () => {
    const compiled = compileCuda({ name: "test_kernels.cu", source: KERNELS, arch: dev.props.arch, cacheDir });
    assert.equal(compiled.fromCache, false);
    console.log(`compiled in ${compiled.ms.toFixed(1)} ms`);
    module = loadModule(compiled.cubin, "test_kernels.cu");
    saxpy = module.getFunction("saxpy");
    spin = module.getFunction("spin");
    const attrs = saxpy.attributes();
    console.log(`saxpy: ${JSON.stringify(attrs)}`);
    assert.ok(attrs.numRegs > 0 && attrs.numRegs <= 255);
    assert.equal(attrs.localBytes, 0, "no spills");
    assert.ok(saxpy.maxActiveBlocksPerSm(256) >= 1);

    const n = 1_000_003;
    const x = random(n, 3);
    const y = random(n, 4);
    const xo = pool.alloc(n, "x");
    const yo = pool.alloc(n, "y");
    pool.upload(xo, x);
    pool.upload(yo, y);
    const block = 256;
    saxpy.launch({ grid: Math.ceil(n / block), block }, [
      karg.f32(2.5),
      karg.ptr(pool.ptr(xo)),
      karg.ptr(pool.ptr(yo)),
      karg.i32(n),
    ]);
    const out = new Float32Array(n);
    pool.download(yo, out);
    const expected = new Float32Array(n);
    for (let i = 0; i < n; i++) expected[i] = Math.fround(2.5 * x[i]!) + y[i]!;
    assertClose(out, expected, 1e-6, "saxpy");
    pool.reset();
  });

  test("the second compile of the same source is a cache hit", () => {
    const again = compileCuda({ name: "test_kernels.cu", source: KERNELS, arch: dev.props.arch, cacheDir });
    assert.equal(again.fromCache, true);
    const m2 = loadModule(again.cubin);
    assert.ok(m2.getFunction("saxpy").attributes().numRegs > 0);
    m2.unload();
    console.log(`cache hit in ${again.ms.toFixed(2)} ms`);
  });

  test("a kernel that does not compile throws NvrtcCompileError with log and source", () => {
    const bad = KERNELS.replace("a * x[i] + y[i]", "a * x[i] + z[i]");
    const err = thrown(
      () => compileCuda({ name: "bad.cu", source: bad, arch: dev.props.arch, cacheDir: null }),
      NvrtcCompileError,
    );
    assert.equal(err.line, 4);
    assert.match(err.log, /bad\.cu\(4\): error: identifier "z" is undefined/);
    assert.match(err.message, /> 4 \| {3}if \(i < n\) y\[i\] = a \* x\[i\] \+ z\[i\];/);
  });

  test("compileCudaAsync: programs compile concurrently, equal the synchronous cubin, and report compile errors", async () => {
    // Two generated VPPS kernels (seconds of NVRTC work each, unlike saxpy's fixed costs). Each gets a distinct
    // device variable per compile: NVRTC caches programs whose preprocessed text it has seen (comments do not count).
    const model = new TreeLstmModel({ vocabSize: 100, embed: 128, hidden: 128 });
    const matrices = onChipMatrices(model.params);
    const plans = enumeratePlans(matrices, H100_SXM, "auto").slice(0, 2);
    assert.equal(plans.length, 2);
    const stamp = Date.now();
    const source = (k: number, run: string) =>
      `__device__ int probe_${run}_${stamp}_${k} = ${k};\n${generateKernelSource(plans[k]!, { model: `p${k}` })}`;
    const compile = (k: number, run: string) => ({ name: `p${k}.cu`, source: source(k, run), arch: dev.props.arch });
    const t0 = performance.now();
    const serial = [0, 1].map((k) => compileCuda({ ...compile(k, "a"), cacheDir: null }));
    const serialMs = performance.now() - t0;
    const t1 = performance.now();
    const both = await Promise.all([0, 1].map((k) => compileCudaAsync({ ...compile(k, "b"), cacheDir: null })));
    const parallelMs = performance.now() - t1;
    console.log(`two VPPS kernels: one after the other ${serialMs.toFixed(0)} ms, at once ${parallelMs.toFixed(0)} ms`);
    for (const r of [...serial, ...both]) assert.ok(r.cubin.length > 0 && !r.fromCache);
    assert.ok(
      parallelMs < 0.8 * serialMs,
      `two concurrent compiles took ${parallelMs} ms, one after the other ${serialMs} ms`,
    );
    const same = await compileCudaAsync({ ...compile(0, "a"), cacheDir: null });
    assert.deepEqual(same.cubin, serial[0]!.cubin, "the async compile differs from the synchronous one");
    const bad = KERNELS.replace("a * x[i] + y[i]", "a * x[i] + z[i]");
    await assert.rejects(
      compileCudaAsync({ name: "bad.cu", source: bad, arch: dev.props.arch, cacheDir: null }),
      (e: unknown) => e instanceof NvrtcCompileError && /identifier "z" is undefined/.test(e.log),
    );
  });

  test("a bad launch configuration is a CudaError naming the kernel", () => {
    const err = thrown(
      () =>
        saxpy.launch({ grid: 1, block: 4096 }, [
          karg.f32(0),
          karg.ptr(pool.ptr(0)),
          karg.ptr(pool.ptr(0)),
          karg.i32(0),
        ]),
      CudaError,
    );
    assert.equal(err.call, "cuLaunchKernel");
    assert.match(err.message, /^cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE \(1\)/);
    assert.match(err.message, /kernel saxpy, grid \[1\], block \[4096\]/);
  });

  test("events time a kernel of known length", () => {
    const stream = CudaStream.create();
    const start = CudaEvent.create();
    const end = CudaEvent.create();
    spin.launch({ grid: 1, block: 1, stream }, [karg.u64(1)]); // warm-up
    const cycles = 2_000_000; // about 1 ms at 2 GHz
    start.record(stream);
    spin.launch({ grid: 1, block: 1, stream }, [karg.u64(cycles)]);
    end.record(stream);
    const ms = CudaEvent.elapsedMs(start, end);
    const expectedMs = dev.props.clockKhz ? cycles / dev.props.clockKhz : undefined;
    console.log(`spin(${cycles} cycles): ${ms.toFixed(3)} ms (at the nominal clock: ${expectedMs?.toFixed(3)} ms)`);
    assert.ok(ms > 0.2 && ms < 100, `elapsed ${ms} ms`);
    assert.equal(end.query(), true);
    start.destroy();
    end.destroy();
    stream.destroy();
  });

  test("cuBLAS row-major sgemm, all transposes, against a CPU loop", () => {
    const cublas = getCublas();
    const handle = cublas.create();
    const [m, n, k] = [37, 29, 41];
    for (const transA of [false, true]) {
      for (const transB of [false, true]) {
        const A = random(m * k, 5);
        const B = random(k * n, 6);
        const C = random(m * n, 7);
        const ao = pool.alloc(m * k);
        const bo = pool.alloc(k * n);
        const co = pool.alloc(m * n);
        pool.upload(ao, A);
        pool.upload(bo, B);
        pool.upload(co, C);
        cublas.sgemmRowMajor(handle, {
          transA,
          transB,
          m,
          n,
          k,
          alpha: 0.5,
          A: pool.ptr(ao),
          B: pool.ptr(bo),
          beta: 2,
          C: pool.ptr(co),
        });
        const out = new Float32Array(m * n);
        pool.download(co, out);
        const expected = new Float32Array(m * n);
        for (let i = 0; i < m; i++) {
          for (let j = 0; j < n; j++) {
            let s = 0;
            for (let l = 0; l < k; l++) {
              s += (transA ? A[l * m + i]! : A[i * k + l]!) * (transB ? B[j * k + l]! : B[l * n + j]!);
            }
            expected[i * n + j] = 0.5 * s + 2 * C[i * n + j]!;
          }
        }
        assertClose(out, expected, 1e-4, `sgemm transA=${transA} transB=${transB}`);
        pool.reset();
      }
    }
    cublas.destroy(handle);
  });

  test("cuBLAS row-major sgemv, both transposes, and strided-batched sgemm", () => {
    const cublas = getCublas();
    const handle = cublas.create();
    const stream = CudaStream.create();
    cublas.setStream(handle, stream.handle);
    const [rows, cols] = [53, 71];
    const A = random(rows * cols, 8);
    const ao = pool.alloc(rows * cols);
    pool.upload(ao, A);
    for (const trans of [false, true]) {
      const xLen = trans ? rows : cols;
      const yLen = trans ? cols : rows;
      const x = random(xLen, 9);
      const y = random(yLen, 10);
      const xo = pool.alloc(xLen);
      const yo = pool.alloc(yLen);
      pool.upload(xo, x);
      pool.upload(yo, y);
      cublas.sgemvRowMajor(handle, {
        trans,
        rows,
        cols,
        alpha: 1.5,
        A: pool.ptr(ao),
        x: pool.ptr(xo),
        beta: -1,
        y: pool.ptr(yo),
      });
      stream.synchronize();
      const out = new Float32Array(yLen);
      pool.download(yo, out);
      const expected = new Float32Array(yLen);
      for (let i = 0; i < yLen; i++) {
        let s = 0;
        for (let l = 0; l < xLen; l++) s += (trans ? A[l * cols + i]! : A[i * cols + l]!) * x[l]!;
        expected[i] = 1.5 * s - y[i]!;
      }
      assertClose(out, expected, 1e-4, `sgemv trans=${trans}`);
    }

    const [m, n, k, batch] = [8, 6, 10, 5];
    const As = random(batch * m * k, 11);
    const Bs = random(batch * k * n, 12);
    const Ao = pool.alloc(batch * m * k);
    const Bo = pool.alloc(batch * k * n);
    const Co = pool.alloc(batch * m * n);
    pool.upload(Ao, As);
    pool.upload(Bo, Bs);
    cublas.sgemmStridedBatchedRowMajor(handle, {
      m,
      n,
      k,
      A: pool.ptr(Ao),
      B: pool.ptr(Bo),
      C: pool.ptr(Co),
      strideA: m * k,
      strideB: k * n,
      strideC: m * n,
      batchCount: batch,
    });
    stream.synchronize();
    const out = new Float32Array(batch * m * n);
    pool.download(Co, out);
    const expected = new Float32Array(batch * m * n);
    for (let b = 0; b < batch; b++) {
      for (let i = 0; i < m; i++) {
        for (let j = 0; j < n; j++) {
          let s = 0;
          for (let l = 0; l < k; l++) s += As[b * m * k + i * k + l]! * Bs[b * k * n + l * n + j]!;
          expected[b * m * n + i * n + j] = s;
        }
      }
    }
    assertClose(out, expected, 1e-4, "strided batched sgemm");
    cublas.destroy(handle);
    stream.destroy();
    pool.reset();
  });

  test("out of memory: from the pool, and from cuMemAlloc beyond the device's memory", () => {
    const small = DevicePool.create(1 * MiB);
    try {
      small.alloc(1000, "weights");
      small.mark();
      const err = thrown(() => small.alloc((2 * MiB) / 4, "activations"), DevicePoolOutOfMemory);
      assert.match(
        String(err),
        /^DevicePoolOutOfMemory: asked for 2\.0 MiB for activations at offset 1024, pool 1\.0 MiB/,
      );
    } finally {
      small.free();
    }
    const err = thrown(() => dev.driver.memAlloc(dev.props.totalMemory * 2), CudaDeviceError);
    console.log(err.message);
    assert.equal(err.code, 2);
    assert.match(
      err.message,
      /^the GPU is out of memory: use a smaller --batch or --hidden, .* \[cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY \(2\), asked for .* GiB; device has .* free of .* GiB\]$/,
    );
    // the context is still usable afterwards
    const p = dev.driver.memAlloc(1024);
    dev.driver.memFree(p);
    dev.synchronize();
  });
});
