// The eager engine's convolution (src/engines/eager/conv.ts) on an emulated device, against the CPU reference: device
// memory is a Float32Array, cuBLAS is the column-major SGEMM/SGEMV of the calls the runner makes, and the two
// kernels are transcribed line for line from their CUDA (src/engines/eager/conv-kernels.ts). This checks the
// per-sample loop, every pointer offset, the GEMMs' shapes, transposes and leading dimensions, and the column
// buffer's growth without a GPU; test/gpu/conv.test.ts checks the CUDA itself on one.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  type Cublas,
  type CudaDriver,
  type CudaKernel,
  type CudaStream,
  type KernelArg,
  type RowMajorGemm,
  type RowMajorGemv,
  rowMajorGemm,
  rowMajorGemv,
} from "../src/cuda/index.js";
import { CpuEngine } from "../src/engines/cpu.js";
import { ConvRunner } from "../src/engines/eager/conv.js";
import type { EagerNodeKernels } from "../src/engines/eager/node-kernels.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { ParameterCollection } from "../src/model/parameters.js";
import { type Conv2dOptions, conv2d, conv2dShape, flatten, type ImageShape, input, matVec } from "../src/ops/index.js";
import { randoms } from "./op-cases.js";
import { scaleTolerance } from "./op-suite.js";

/** Device memory: byte addresses, floats at address / 4; allocations bump upward and are never reused. */
class EmulatedMemory {
  f = new Float32Array(1 << 20);
  private top = 256;
  readonly live = new Set<number>();
  alloc(bytes: number): number {
    const at = this.top;
    this.top += Math.ceil(bytes / 256) * 256;
    if (this.top / 4 > this.f.length) {
      const grown = new Float32Array(Math.max(this.top / 4, 2 * this.f.length));
      grown.set(this.f);
      this.f = grown;
    }
    this.live.add(at);
    return at;
  }
}

const floatOfBits = (bits: number) => new Float32Array(new Uint32Array([bits]).buffer)[0]!;

function fakeDriver(mem: EmulatedMemory, log: string[]): CudaDriver {
  return {
    memAlloc: (bytes: number) => mem.alloc(bytes),
    memFree: (ptr: number) => {
      assert.ok(mem.live.delete(ptr), `memFree of ${ptr}, which is not allocated`);
    },
    memsetD32Async: (ptr: number, value: number, count: number) => {
      mem.f.fill(floatOfBits(value), ptr / 4, ptr / 4 + count);
      log.push(`memset ${count}`);
    },
  } as unknown as CudaDriver;
}

/** cuBLAS's column-major SGEMM and SGEMV, run on the emulated memory. */
function fakeCublas(mem: EmulatedMemory): Cublas {
  return {
    sgemmRowMajor(_h: bigint, g: RowMajorGemm<number>) {
      const c = rowMajorGemm(g);
      const P = mem.f;
      const [A, B, C] = [c.A / 4, c.B / 4, c.C / 4];
      for (let j = 0; j < c.n; j++) {
        for (let i = 0; i < c.m; i++) {
          let s = 0;
          for (let l = 0; l < c.k; l++) {
            const x = c.transa === 0 ? P[A + i + l * c.lda]! : P[A + l + i * c.lda]!;
            const y = c.transb === 0 ? P[B + l + j * c.ldb]! : P[B + j + l * c.ldb]!;
            s += x * y;
          }
          const at = C + i + j * c.ldc;
          P[at] = c.alpha * s + (c.beta === 0 ? 0 : c.beta * P[at]!);
        }
      }
    },
    sgemvRowMajor(_h: bigint, g: RowMajorGemv<number>) {
      const c = rowMajorGemv(g);
      const P = mem.f;
      const [A, x, y] = [c.A / 4, c.x / 4, c.y / 4];
      const out = c.trans === 0 ? c.m : c.n;
      const len = c.trans === 0 ? c.n : c.m;
      for (let r = 0; r < out; r++) {
        let s = 0;
        for (let k = 0; k < len; k++) s += (c.trans === 0 ? P[A + r + k * c.lda]! : P[A + k + r * c.lda]!) * P[x + k]!;
        P[y + r] = c.alpha * s + (c.beta === 0 ? 0 : c.beta * P[y + r]!);
      }
    },
  } as unknown as Cublas;
}

/** The kernels of conv-kernels.ts, transcribed: one call per thread index i < n. */
function runKernel(mem: EmulatedMemory, name: string, n: number, args: readonly KernelArg[]): void {
  const P = mem.f;
  const v = args.map((a) => a.value);
  const [out, src, C, H, W, K, S, Pad, Ho, Wo] = [v[0]! / 4, v[1]! / 4, ...v.slice(2)] as number[] as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const plane = Ho * Wo;
  const div = (a: number, b: number) => Math.trunc(a / b);
  if (name === "vp_im2col") {
    assert.equal(n, C * plane);
    for (let i = 0; i < n; i++) {
      const ox = i % Wo;
      const oy = div(i, Wo) % Ho;
      const c = div(i, plane);
      const y0 = oy * S - Pad;
      const x0 = ox * S - Pad;
      let dst = out + c * K * K * plane + oy * Wo + ox;
      const x = src + c * H * W;
      for (let ky = 0; ky < K; ky++) {
        const iy = y0 + ky;
        for (let kx = 0; kx < K; kx++) {
          const ix = x0 + kx;
          P[dst] = iy >= 0 && iy < H && ix >= 0 && ix < W ? P[x + iy * W + ix]! : 0;
          dst += plane;
        }
      }
    }
  } else if (name === "vp_col2im_add") {
    assert.equal(n, C * H * W);
    for (let i = 0; i < n; i++) {
      const px = (i % W) + Pad;
      const py = (div(i, W) % H) + Pad;
      const c = div(i, H * W);
      const ox0 = px < K ? 0 : div(px - K, S) + 1;
      const ox1 = Math.min(div(px, S) + 1, Wo);
      const oy0 = py < K ? 0 : div(py - K, S) + 1;
      const oy1 = Math.min(div(py, S) + 1, Ho);
      let s = 0;
      for (let oy = oy0; oy < oy1; oy++) {
        for (let ox = ox0; ox < ox1; ox++) {
          const ky = py - oy * S;
          const kx = px - ox * S;
          s += P[src + ((c * K + ky) * K + kx) * plane + oy * Wo + ox]!;
        }
      }
      P[out + i] = P[out + i]! + s;
    }
  } else {
    throw new Error(`emulator: unknown kernel ${name}`);
  }
}

const tolerance = scaleTolerance(1e-5);
function assertClose(actual: Float32Array, expected: Float32Array, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  const k = tolerance.values(actual, expected);
  if (k >= 0) assert.fail(`${what}: element ${k} of ${expected.length} is ${actual[k]}, expected ${expected[k]}`);
}

interface Case {
  readonly n: number;
  readonly image: ImageShape;
  readonly filters: number;
  readonly opts: Conv2dOptions;
}

const CASES: readonly Case[] = [
  { n: 2, image: { channels: 2, height: 5, width: 5 }, filters: 3, opts: { kernel: 3, padding: 1 } },
  { n: 3, image: { channels: 1, height: 4, width: 7 }, filters: 2, opts: { kernel: 5, stride: 2, padding: 2 } },
  { n: 2, image: { channels: 3, height: 15, width: 15 }, filters: 4, opts: { kernel: 11, stride: 4 } },
  { n: 4, image: { channels: 6, height: 3, width: 3 }, filters: 5, opts: { kernel: 1 } },
];

describe("conv2d on the eager engine's runner, on an emulated device, against the CPU engine", () => {
  const mem = new EmulatedMemory();
  const log: string[] = [];
  const stream = { handle: 0n, synchronize: () => log.push("synchronize") } as unknown as CudaStream;
  const runner = new ConvRunner(fakeDriver(mem, log), fakeCublas(mem), [{ stream, cublasHandle: 1n }]);
  const counts = { kernels: 0, cublas: 0, copies: 0 };
  const kernel = (name: string) => ({ name }) as unknown as CudaKernel;

  for (const c of CASES) {
    const out = conv2dShape(c.image, c.filters, c.opts);
    test(`${c.n}×${c.image.channels}×${c.image.height}×${c.image.width}, ${c.filters} filters ${JSON.stringify(c.opts)} → ${out.height}×${out.width}`, () => {
      const pc = new ParameterCollection({ seed: 29 });
      const per = c.image.channels * c.image.height * c.image.width;
      const W = pc.addParameters([c.filters, c.image.channels * c.opts.kernel ** 2], undefined, "W");
      const b = pc.addParameters(c.filters, { kind: "uniform", scale: 0.5 }, "b");
      const R = pc.addParameters([1, c.n * out.channels * out.height * out.width], undefined, "R");
      const cg = new ComputationGraph();
      const x = input(cg, randoms(c.n * per, 17), [c.n, per]);
      const y = conv2d(x, W, b, c.image, c.opts);
      const loss = matVec(R, flatten(y));
      const cpu = new CpuEngine(pc);
      cpu.forward(loss);
      cpu.backward(loss);

      // every node's value and gradient in emulated memory, at the graph's offsets
      const values = mem.alloc(4 * cg.valueSize);
      const grads = mem.alloc(4 * cg.valueSize);
      const valPtr = new Float64Array(cg.size);
      const gradPtr = new Float64Array(cg.size);
      for (let i = 0; i < cg.size; i++) {
        valPtr[i] = values + 4 * cg.valueOffset[i]!;
        gradPtr[i] = grads + 4 * cg.valueOffset[i]!;
      }
      const put = (ptr: number, data: Float32Array) => mem.f.set(data, ptr / 4);
      const get = (ptr: number, len: number) => mem.f.slice(ptr / 4, ptr / 4 + len);
      put(valPtr[x.id]!, cpu.value(x));
      put(valPtr[cg.arg(y.id, 1)]!, W.value);
      put(valPtr[cg.arg(y.id, 2)]!, b.value);
      const l = {
        valPtr,
        gradPtr,
        counts,
        k: { vp_im2col: kernel("vp_im2col"), vp_col2im_add: kernel("vp_col2im_add") },
      };
      (l as unknown as { launch: unknown }).launch = (k: CudaKernel, n: number, args: KernelArg[], s: CudaStream) => {
        assert.equal(s, stream, "launched on the lane's stream");
        runKernel(mem, k.name, n, args);
      };
      const nodes = l as unknown as EagerNodeKernels;

      runner.forward(nodes, cg, y.id);
      assertClose(get(valPtr[y.id]!, y.size), cpu.value(y), "y");

      // backward from the CPU's dy, into zeroed gradients
      put(gradPtr[y.id]!, cpu.gradient(y));
      runner.backward(nodes, cg, y.id);
      assertClose(get(gradPtr[x.id]!, x.size), cpu.gradient(x), "dx");
      assertClose(get(gradPtr[cg.arg(y.id, 1)]!, W.value.length), W.grad, "dW");
      assertClose(get(gradPtr[cg.arg(y.id, 2)]!, c.filters), b.grad, "db");
    });
  }

  test("the column buffers grew to the largest layer, waiting for the lane first; dispose frees them", () => {
    // each case above allocated its values and gradients; the runner holds its lane's columns and the ones
    assert.equal(mem.live.size, 2 * CASES.length + 2, "older column buffers were freed on growth");
    assert.ok(log.includes("synchronize"), "the lane was waited for before a buffer was freed");
    runner.dispose();
    assert.equal(mem.live.size, 2 * CASES.length, "dispose freed both");
  });
});
