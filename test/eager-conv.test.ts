// The eager engine's convolution (src/engines/eager/conv-node.ts on the conv layer of src/conv/) on an emulated
// device, against the CPU reference: device memory is a Float32Array, cuBLAS is the column-major SGEMM/SGEMV of the
// calls the runner makes, and the two kernels are transcribed line for line from their CUDA
// (src/codegen/image-kernels.ts). This checks the per-sample loop, every pointer offset, the GEMMs' shapes, transposes
// and leading dimensions, and the column buffer's growth without a GPU; test/gpu/conv.test.ts checks the CUDA itself
// on one.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { balancedPool, choosePools, neighbourPools, threadPool } from "../src/conv/glp.js";
import { oneLane, PRODUCT_SLOTS, poolLanes, type WeightSums, weightSumsFromEnv } from "../src/conv/lanes.js";
import { ConvRunner } from "../src/conv/runner.js";
import { convThreadsFor, JOB, readGeometry, readPointers, writeGeometry } from "../src/conv/threads.js";
import {
  type Cublas,
  type CudaDriver,
  type CudaKernel,
  type CudaStream,
  type KernelArg,
  type PoolBackend,
  type RowMajorGemm,
  type RowMajorGemv,
  rowMajorGemm,
  rowMajorGemv,
  StreamPool,
} from "../src/cuda/index.js";
import { CpuEngine } from "../src/engines/cpu.js";
import { convBackward, convForward } from "../src/engines/eager/conv-node.js";
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

/** cuBLAS's column-major SGEMM and SGEMV, run on the emulated memory; `seen` hears of every call. */
function fakeCublas(mem: EmulatedMemory, seen: (h: bigint, call: string, C: number) => void = () => {}): Cublas {
  return {
    sgemmRowMajor(h: bigint, g: RowMajorGemm<number>) {
      seen(h, "gemm", g.C);
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
          // the product rounded to fp32 before the epilogue, as cuBLAS's fp32 accumulator has it
          P[at] = Math.fround(c.alpha * s) + (c.beta === 0 ? 0 : c.beta * P[at]!);
        }
      }
    },
    sgemvRowMajor(h: bigint, g: RowMajorGemv<number>) {
      seen(h, "gemv", g.y);
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

/** The kernels of image-kernels.ts, transcribed: one call per thread index i < n. */
function runKernel(mem: EmulatedMemory, name: string, n: number, args: readonly KernelArg[]): void {
  const P = mem.f;
  const v = args.map((a) => a.value);
  if (name === "vp_add_clear") {
    // y[i] += x[i], x[i] = 0 (a product slot added into dW and cleared)
    const [y, x, count] = [v[0]! / 4, v[1]! / 4, v[2]!];
    assert.equal(n, count);
    for (let i = 0; i < n; i++) {
      P[y + i] = P[y + i]! + P[x + i]!;
      P[x + i] = 0;
    }
    return;
  }
  if (name === "vp_conv_bias_add") {
    // y[i] += b[(i / plane) mod F] (a pool's bias, every sample at once)
    const [y, b, F, plane, count] = [v[0]! / 4, v[1]! / 4, v[2]!, v[3]!, v[4]!];
    assert.equal(n, count);
    for (let i = 0; i < n; i++) P[y + i] = P[y + i]! + P[b + (Math.trunc(i / plane) % F)]!;
    return;
  }
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

/** A conv layer in emulated memory with the CPU engine's values and gradients to compare with. */
function layerOn(mem: EmulatedMemory, c: Case) {
  const out = conv2dShape(c.image, c.filters, c.opts);
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
  return {
    cg,
    y: y.id,
    dW: gradPtr[cg.arg(y.id, 1)]!,
    /** The node kernels the runner sees, launching through `launch`. */
    nodes(launch: (name: string, n: number, args: KernelArg[], stream: CudaStream) => void): EagerNodeKernels {
      const kernel = (name: string) => ({ name }) as unknown as CudaKernel;
      return {
        valPtr,
        gradPtr,
        counts: { kernels: 0, cublas: 0, copies: 0 },
        k: {
          vp_im2col: kernel("vp_im2col"),
          vp_col2im_add: kernel("vp_col2im_add"),
          vp_add_clear: kernel("vp_add_clear"),
          vp_conv_bias_add: kernel("vp_conv_bias_add"),
        },
        launch: (k: CudaKernel, n: number, args: KernelArg[], s: CudaStream) => launch(k.name, n, args, s),
      } as unknown as EagerNodeKernels;
    },
    /** Runs forward, then backward from the CPU's dy, and compares y, dx, dW and db with the CPU's. */
    check(runner: ConvRunner, nodes: EagerNodeKernels): void {
      convForward(runner, nodes, cg, y.id);
      assertClose(get(valPtr[y.id]!, y.size), cpu.value(y), "y");
      put(gradPtr[y.id]!, cpu.gradient(y));
      convBackward(runner, nodes, cg, y.id);
      assertClose(get(gradPtr[x.id]!, x.size), cpu.gradient(x), "dx");
      assertClose(get(gradPtr[cg.arg(y.id, 1)]!, W.value.length), W.grad, "dW");
      assertClose(get(gradPtr[cg.arg(y.id, 2)]!, c.filters), b.grad, "db");
    },
  };
}

const title = (c: Case) => {
  const out = conv2dShape(c.image, c.filters, c.opts);
  const { channels, height, width } = c.image;
  return `${c.n}×${channels}×${height}×${width}, ${c.filters} filters ${JSON.stringify(c.opts)} → ${out.height}×${out.width}`;
};

describe("conv2d on the eager engine's runner, one lane, on an emulated device, against the CPU engine", () => {
  const mem = new EmulatedMemory();
  const log: string[] = [];
  const stream = { handle: 0n, synchronize: () => log.push("synchronize") } as unknown as CudaStream;
  const runner = new ConvRunner(fakeDriver(mem, log), fakeCublas(mem), oneLane(stream, 1n));

  for (const c of CASES) {
    test(title(c), () => {
      const layer = layerOn(mem, c);
      const launched: string[] = [];
      const nodes = layer.nodes((name, n, args, s) => {
        assert.equal(s, stream, "launched on the lane's stream");
        launched.push(name);
        runKernel(mem, name, n, args);
      });
      layer.check(runner, nodes);
      // Caffe's is_1x1_: a 1×1 convolution of stride 1 without padding reads its input as the column buffer
      const oneByOne = c.opts.kernel === 1 && (c.opts.stride ?? 1) === 1 && (c.opts.padding ?? 0) === 0;
      const im2col = launched.filter((k) => k === "vp_im2col").length;
      assert.equal(im2col, oneByOne ? 0 : 2 * c.n, "im2col per sample forward and backward, none for 1×1");
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

/**
 * Work on streams as a dependency graph: each operation depends on its stream's frontier (the previous operation
 * and the events waited for since), an event captures its stream's frontier when recorded.
 */
class Dag {
  readonly deps: Set<number>[] = [];
  readonly labels: string[] = [];
  op(stream: DagStream, label: string): number {
    const id = this.deps.length;
    this.deps.push(new Set(stream.frontier));
    this.labels.push(label);
    stream.frontier = new Set([id]);
    return id;
  }
  /** Whether operation a is ordered before b (b depends on a, directly or not). */
  before(a: number, b: number): boolean {
    const seen = new Set<number>();
    const todo = [...this.deps[b]!];
    while (todo.length > 0) {
      const d = todo.pop()!;
      if (d === a) return true;
      if (seen.has(d)) continue;
      seen.add(d);
      todo.push(...this.deps[d]!);
    }
    return false;
  }
}

class DagStream {
  frontier = new Set<number>();
  synchronize(): void {}
}

/** A conv layer run on four lanes of a stream pool whose streams are Dag streams: every op and who waits for whom. */
function pooledRun(c: Case, weightSums: WeightSums) {
  const mem = new EmulatedMemory();
  const dag = new Dag();
  const streamOf = new Map<bigint, DagStream>();
  let nextHandle = 10n;
  const backend: PoolBackend<DagStream, { captured: Set<number> }, bigint> = {
    stream: () => new DagStream(),
    event: () => ({ captured: new Set() }),
    blas(s) {
      streamOf.set(nextHandle, s);
      return nextHandle++;
    },
    record: (e, s) => {
      e.captured = new Set(s.frontier);
    },
    wait: (s, e) => {
      for (const id of e.captured) s.frontier.add(id);
    },
    destroyEvent: () => {},
    destroyLane: () => {},
  };
  const pool = new StreamPool(backend, 4);
  const origin = new DagStream();
  const layer = layerOn(mem, c);
  const gemms: { op: number; C: number }[] = [];
  const gemvs: number[] = [];
  const cublas = fakeCublas(mem, (h, call, C) => {
    const op = dag.op(streamOf.get(h)!, call);
    if (call === "gemm") gemms.push({ op, C });
    else gemvs.push(op);
  });
  const ops = {
    vp_im2col: [] as number[],
    vp_col2im_add: [] as number[],
    vp_add_clear: [] as number[],
    vp_conv_bias_add: [] as number[],
  };
  const nodes = layer.nodes((name, n, args, s) => {
    const op = dag.op(s as unknown as DagStream, name);
    ops[name as keyof typeof ops].push(op);
    runKernel(mem, name, n, args);
  });
  const before = dag.op(origin, "the layer's inputs");
  const lanes = poolLanes(
    pool as unknown as StreamPool<CudaStream, unknown, bigint>,
    origin as unknown as CudaStream,
    4,
  );
  const runner = new ConvRunner(fakeDriver(mem, []), cublas, lanes, { weightSums });
  layer.check(runner, nodes);
  const after = dag.op(origin, "after the layer");
  const dW = new Float32Array(
    mem.f.slice(layer.dW / 4, layer.dW / 4 + c.filters * c.image.channels * c.opts.kernel ** 2),
  );
  const slots = runner.buffers().slots;
  const slotsZero = slots.every((ptr) => {
    const floats = c.filters * c.image.channels * c.opts.kernel ** 2;
    return mem.f.subarray(ptr / 4, ptr / 4 + floats).every((v) => v === 0);
  });
  runner.dispose();
  return {
    slots,
    slotsZero,
    dag,
    pool,
    layer,
    gemms,
    gemvs,
    im2col: ops.vp_im2col,
    col2im: ops.vp_col2im_add,
    adds: ops.vp_add_clear,
    biases: ops.vp_conv_bias_add,
    before,
    after,
    dW,
    /** Every op of the run is ordered before the engine's stream's op after the layer. */
    assertJoined(): void {
      for (let op = 0; op < after; op++) {
        if (op !== before) assert.ok(dag.before(op, after), `${dag.labels[op]} (#${op}) before the join`);
      }
    },
  };
}

describe("conv2d on four lanes of a stream pool, on an emulated device with stream-order dependencies", () => {
  const c: Case = { n: 7, image: { channels: 2, height: 6, width: 6 }, filters: 3, opts: { kernel: 3, padding: 1 } };
  test(`${title(c)}: the CPU's results; dW in sample order; the lanes overlap; the engine's stream joins them`, () => {
    const { dag, pool, layer, gemms, gemvs, im2col, col2im, before, assertJoined } = pooledRun(c, "chain");
    // forward: im2col of samples 0 … 6, then backward's im2col again; every lane waited for the inputs
    assert.equal(im2col.length, 2 * c.n);
    for (const op of im2col) assert.ok(dag.before(before, op), `${dag.labels[op]} after the layer's inputs`);
    // the lanes overlap: sample 1's im2col does not wait for anything of sample 0
    assert.ok(!dag.before(im2col[0]!, im2col[1]!), "samples 0 and 1 are on different lanes, unordered");
    // the weight gradient's GEMMs (C = dW), one per sample, each after the previous, and after nothing else of it
    const dW = gemms.filter((g) => g.C === layer.dW).map((g) => g.op);
    assert.equal(dW.length, c.n);
    for (let n = 1; n < c.n; n++) {
      assert.ok(dag.before(dW[n - 1]!, dW[n]!), `dW GEMM ${n} after ${n - 1}`);
      assert.ok(!dag.before(col2im[n - 1]!, dW[n]!), `dW GEMM ${n} does not wait for sample ${n - 1}'s col2im`);
    }
    // the bias gradient's GEMVs, one per sample, in sample order on the side lane: beside the weight gradient's
    // chain and the samples' work, not ahead of them
    assert.equal(gemvs.length, c.n);
    for (let n = 1; n < c.n; n++) assert.ok(dag.before(gemvs[n - 1]!, gemvs[n]!), `db GEMV ${n} after ${n - 1}`);
    assert.ok(!dag.before(gemvs[c.n - 1]!, dW[0]!), "the first dW GEMM does not wait for the bias chain");
    assert.ok(!dag.before(gemvs[0]!, im2col[c.n]!), "the backward's first im2col does not wait for the bias chain");
    assert.equal(pool.size, 4, "the side and chain lanes are extra lanes, not the samples'");
    // the weight chain reads sample n's columns after its im2col; the lane's im2col into that buffer L = 4 samples
    // later waits for that read; the lanes' input gradients never wait for the chain
    const L = 4;
    for (let n = 0; n < c.n; n++) {
      assert.ok(dag.before(im2col[c.n + n]!, dW[n]!), `dW GEMM ${n} after sample ${n}'s im2col`);
      if (n + L < c.n) assert.ok(dag.before(dW[n]!, im2col[c.n + n + L]!), `im2col ${n + L} after dW GEMM ${n}`);
      assert.ok(!dag.before(dW[n]!, col2im[n]!), `sample ${n}'s col2im does not wait for its dW GEMM`);
    }
    // the engine's stream joins every lane
    assertJoined();
  });

  const many: Case = { ...c, n: 13 };
  test(`${title(many)}, weights summed by products: dW bit for bit the chain's; products on the lanes, sums in order`, () => {
    const chain = pooledRun(many, "chain");
    const r = pooledRun(many, "products");
    const { dag, layer, gemms, im2col, col2im, adds } = r;
    const N = many.n;
    assert.deepEqual(r.dW, chain.dW, "dW bit for bit the chain's (the same fp32 products added in the same order)");
    // one product GEMM per sample, into a slot of its lane (not dW); one addition into dW per sample, in sample order
    const L = 4;
    assert.equal(r.slots.length, PRODUCT_SLOTS * L, "PRODUCT_SLOTS slots per lane");
    const products = gemms.filter((g) => r.slots.includes(g.C));
    assert.equal(gemms.filter((g) => g.C === layer.dW).length, 0, "no GEMM writes dW");
    assert.equal(products.length, N, "a product per sample");
    assert.equal(adds.length, N);
    const D = PRODUCT_SLOTS * L;
    for (let n = 0; n < N; n++) {
      assert.equal(products[n]!.C, r.slots[(Math.floor(n / L) % PRODUCT_SLOTS) * L + (n % L)], `sample ${n}'s slot`);
      if (n > 0) assert.ok(dag.before(adds[n - 1]!, adds[n]!), `addition ${n} after ${n - 1}`);
      assert.ok(dag.before(products[n]!.op, adds[n]!), `addition ${n} after product ${n}`);
      assert.ok(dag.before(im2col[N + n]!, products[n]!.op), `product ${n} after its im2col`);
      if (n + D < N)
        assert.ok(dag.before(adds[n]!, products[n + D]!.op), `product ${n + D} (same slot) after sum ${n}`);
      if (n + L < N) {
        assert.ok(
          !dag.before(adds[n]!, products[n + L]!.op),
          `product ${n + L} (the lane's other slot) not after sum ${n}`,
        );
      }
      assert.ok(!dag.before(adds[n]!, col2im[n]!), `sample ${n}'s col2im does not wait for its addition`);
    }
    // the forward's bias, once for every sample, after each sample's columns (and so its GEMM, on the same lane)
    assert.equal(r.biases.length, 1, "one bias launch for the batch");
    for (let n = 0; n < N; n++) assert.ok(dag.before(im2col[n]!, r.biases[0]!), `the bias after sample ${n}'s forward`);
    // every slot is zero again after the backward (each addition cleared its slot)
    assert.ok(r.slotsZero, "the product slots are left zeroed");
    // the products overlap: the lanes' GEMMs of samples 0 … 3 are not ordered among themselves
    for (let n = 1; n < L; n++) assert.ok(!dag.before(products[0]!.op, products[n]!.op), `products 0 and ${n} overlap`);
    r.assertJoined();
  });
});

describe("dispatch threads for a pooled convolution (src/conv/threads.ts)", () => {
  test("convThreadsFor: VPPS_CONV_THREADS (0 … 8, at most the lanes), else min(lanes, 8, cores − 3)", () => {
    assert.equal(convThreadsFor(4, { VPPS_CONV_THREADS: "2" }), 2);
    assert.equal(convThreadsFor(3, { VPPS_CONV_THREADS: "8" }), 3);
    assert.equal(convThreadsFor(16, { VPPS_CONV_THREADS: "0" }), 0);
    const auto = convThreadsFor(32, {});
    assert.ok(auto >= 1 && auto <= 8, `default ${auto}`);
    assert.ok(convThreadsFor(2, {}) <= 2);
    for (const bad of ["9", "-1", "2.5", "many"]) {
      assert.throws(
        () => convThreadsFor(4, { VPPS_CONV_THREADS: bad }),
        /VPPS_CONV_THREADS is '.*'; expected an integer 0 … 8/,
      );
    }
  });
});

describe("a dispatch job's words (src/conv/threads.ts)", () => {
  test("geometry and pointers written by the main thread read back the same on a thread", () => {
    const job = new Float64Array(JOB.COLS + 8);
    const G = { n: 7, c: 3, h: 227, w: 225, f: 96, ho: 55, wo: 54, kernel: 11, stride: 4, padding: 1 };
    writeGeometry(job, G);
    assert.deepEqual(readGeometry(job), G);
    // device pointers above 2^32 survive (Float64 holds integers below 2^53 exactly)
    const p = { x: 2 ** 40 + 16, W: 2 ** 33, b: 4096, y: 2 ** 47 - 256, dx: 1, dW: 2, db: 3, dy: 2 ** 52 };
    ["x", "W", "b", "y", "dx", "dW", "db", "dy"].forEach((k, i) => {
      job[JOB.POINTERS + i] = p[k as keyof typeof p];
    });
    assert.deepEqual(readPointers(job), p);
  });
});

describe("balancedPool: the smallest pool that deals the samples in as many rounds", () => {
  test("hand-worked: 32 samples on 22 or 23 lanes take 2 rounds, as on 16; 100 on 32 take 4, as on 25", () => {
    assert.equal(balancedPool(22, 32), 16);
    assert.equal(balancedPool(23, 32), 16);
    assert.equal(balancedPool(16, 32), 16);
    assert.equal(balancedPool(32, 32), 32);
    assert.equal(balancedPool(9, 32), 8);
    assert.equal(balancedPool(32, 100), 25);
    assert.equal(balancedPool(29, 256), 29);
    assert.equal(balancedPool(4, 100), 4);
    assert.equal(balancedPool(1, 100), 1);
    assert.equal(balancedPool(40, 32), 32, "no more lanes than samples");
    assert.throws(() => balancedPool(0, 8), /lanes must be an integer ≥ 1; got 0/);
  });
});

describe("neighbourPools: the pools a timed confirmation tries around the analyser's", () => {
  test("hand-worked: ×¼, ×½, itself, ×2 and ×4, rounded as the analysis rounds, at most 32, no repeats", () => {
    // on 4 host threads a quarter and half of 4 round up to 4 lanes (a lane per thread)
    assert.deepEqual(neighbourPools(4, 256, 4), [4, 8, 16]);
    // 29 lanes for 256 samples: 8, 15 (18 rounds, as on 15), 29, and 58 and 116 capped at 32
    assert.deepEqual(neighbourPools(29, 256, 1), [8, 15, 29, 32]);
    // 100 samples: 7 (15 rounds), 13 (8 rounds); 50 and 100 → 32 lanes take 4 rounds, as 25 do
    assert.deepEqual(neighbourPools(25, 100, 1), [7, 13, 25]);
    assert.deepEqual(neighbourPools(1, 64, 1), [1, 2, 4]);
    assert.deepEqual(neighbourPools(8, 32, 4), [4, 8, 16, 32]);
  });
});

describe("weightSumsFromEnv: how pools sum the weight gradient", () => {
  test("products by default, chain or products from VPPS_CONV_WEIGHT_SUMS, anything else one line", () => {
    assert.equal(weightSumsFromEnv({}), "products");
    assert.equal(weightSumsFromEnv({ VPPS_CONV_WEIGHT_SUMS: " chain " }), "chain");
    assert.equal(weightSumsFromEnv({ VPPS_CONV_WEIGHT_SUMS: "products" }), "products");
    assert.throws(
      () => weightSumsFromEnv({ VPPS_CONV_WEIGHT_SUMS: "gemm" }),
      /^UserError: VPPS_CONV_WEIGHT_SUMS is 'gemm'; expected chain or products/,
    );
  });
  test("a slot allocation that fails names the layer, the slots' size and what to do", () => {
    const mem = new EmulatedMemory();
    const driver = {
      ...fakeDriver(mem, []),
      memAlloc: (bytes: number) => {
        if (bytes > 100_000) throw new Error("cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY");
        return mem.alloc(bytes);
      },
    } as unknown as CudaDriver;
    const stream = { handle: 0n, synchronize: () => {} } as unknown as CudaStream;
    const pool = new StreamPool(
      {
        stream: () => stream,
        event: () => ({}),
        blas: () => 1n,
        record: () => {},
        wait: () => {},
        destroyEvent: () => {},
        destroyLane: () => {},
      },
      4,
    );
    const lanes = poolLanes(pool as unknown as StreamPool<CudaStream, unknown, bigint>, stream, 4);
    const runner = new ConvRunner(driver, fakeCublas(mem), lanes, { weightSums: "products" });
    const G = { n: 8, c: 64, h: 4, w: 4, f: 64, ho: 4, wo: 4, kernel: 3, stride: 1, padding: 1 };
    assert.throws(
      () => runner.prepare(G, () => "conv2d #7"),
      /conv2d #7 on 4 streams needs 8 weight-product slots of 64·64·3·3 floats \(1 MiB\).*CUDA_ERROR_OUT_OF_MEMORY.*VPPS_CONV_WEIGHT_SUMS=chain/,
    );
  });
});

describe("choosePools: the timed confirmation's choice (src/conv/glp.ts), with made-up timings", () => {
  test("every pairing of the forward's and the backward's neighbours, in interleaved rounds; 2% margin", () => {
    // ms = forward cost + backward cost; the forward is best at 8 lanes, the backward at 2 (by 0.4%)
    const fwd: Record<number, number> = { 1: 8, 2: 5, 4: 4, 8: 3.5, 16: 3.6 };
    const bwd: Record<number, number> = { 1: 9, 2: 5.96, 4: 6, 8: 7, 16: 8 };
    const calls: string[] = [];
    const c = choosePools({ forwardPool: 4, backwardPool: 4, hostThreads: 1 }, 64, (f, b, n, warm) => {
      calls.push(`${f}/${b}×${n}+${warm}`);
      return Array.from({ length: n }, () => fwd[f]! + bwd[b]!);
    });
    assert.equal(c.forwardPool, 8, "8 forward lanes with 2 backward: 9.46 against 10 ms");
    assert.equal(c.backwardPool, 2, "the fastest pair is taken whole");
    // the probe (3 iterations after 3 warm) sizes the trials: 30 ms / 10 ms → 3, raised to the least, 5 → 2 rounds
    assert.equal(calls[0], "4/4×3+3");
    const grid = [1, 2, 4, 8, 16].flatMap((f) => [1, 2, 4, 8, 16].map((b) => `${f}/${b}`));
    assert.deepEqual(calls.slice(1), [
      // round 0: every pair after 3 warm iterations; round 1 rotated by one, a lead iteration each
      ...grid.map((g) => `${g}×3+3`),
      ...[...grid.slice(1), grid[0]].map((g) => `${g}×3+1`),
    ]);
    assert.deepEqual(
      c.trials.map((t) => `${t.forward}/${t.backward}`),
      grid,
    );
    assert.match(c.text, /4\/4 10\.000 ms, .* → forward 8, backward 2 \(the analyser: 4\/4\)/);
  });
  test("the fastest pair is taken only when 2% faster than the analyser's", () => {
    const c = choosePools(
      { forwardPool: 4, backwardPool: 4, hostThreads: 1 },
      64,
      (f, b, n) => Array.from({ length: n }, () => (f === 8 && b === 8 ? 9.9 : 10)),
      6,
    );
    assert.equal(c.forwardPool, 4, "8/8 is 1% faster: under the margin");
    assert.equal(c.backwardPool, 4);
  });
  test("the directions' pools are chosen together: a pair better only jointly is found", () => {
    // CaffeNet conv5, direct launches: 8 backward lanes pay after an 8-lane forward, hardly after 4
    const ms: Record<string, number> = { "4/4": 10.57, "8/4": 10.8, "4/8": 10.15, "8/8": 9.47 };
    const c = choosePools(
      { forwardPool: 4, backwardPool: 4, hostThreads: 4 },
      256,
      (f, b, n) => Array.from({ length: n }, () => ms[`${f}/${b}`]!),
      6,
    );
    assert.deepEqual([c.forwardPool, c.backwardPool], [8, 8]);
  });
  test("a candidate slow on its first calls (cold) is not beaten by one timed after it: medians over rounds", () => {
    // Siamese conv1 with direct launches: timed one after the other, the analysed 4/4 measured 3.2 ms and
    // 8/8 2.0 ms; the benchmark's interleaved rounds then measured 4/4 at 1.6 ms and 8/8 at 1.8 ms
    const seen = new Map<string, number>();
    const c = choosePools(
      { forwardPool: 4, backwardPool: 4, hostThreads: 1 },
      64,
      (f, b, n) => {
        const key = `${f}/${b}`;
        const k = seen.get(key) ?? 0;
        seen.set(key, k + 1);
        const steady = f === 4 && b === 4 ? 1.6 : 1.8;
        // 4/4's first round runs cold (iterations given: no probe)
        return Array.from({ length: n }, () => (f === 4 && b === 4 && k === 0 ? 3.2 : steady));
      },
      12,
    );
    assert.deepEqual([c.forwardPool, c.backwardPool], [4, 4]);
    const t44 = c.trials.find((t) => t.forward === 4 && t.backward === 4)!;
    assert.equal(t44.ms, 1.6, "3 cold iterations of 12 do not move the median");
  });
  test("short iterations are timed more often (at most 50); a given count is kept", () => {
    const counts: number[] = [];
    choosePools({ forwardPool: 1, backwardPool: 1, hostThreads: 1 }, 8, (_f, _b, n) => {
      counts.push(n);
      return Array.from({ length: n }, () => 0.2);
    });
    // 30 ms / 0.2 ms = 150, capped at 50 → 17 rounds of 3 for each of the 9 pairs of 1, 2 and 4 lanes
    assert.equal(counts.length, 1 + 9 * 17);
    assert.ok(counts.every((n) => n === 3));
    const fixed: number[] = [];
    choosePools(
      { forwardPool: 4, backwardPool: 4, hostThreads: 4 },
      32,
      (_f, _b, n) => {
        fixed.push(n);
        return Array.from({ length: n }, () => 1);
      },
      7,
    );
    // 7 iterations: no probe; 3 rounds for each of the 9 pairs of [4, 8, 16] (on 4 host threads)
    assert.equal(fixed.length, 9 * 3);
  });
});

describe("threadPool: a direct-mode pool rounded to whole lanes per host thread", () => {
  test("hand-worked: on 4 threads 5 lanes are 4, 6 and 7 are 8; one thread keeps any pool; at most 32", () => {
    assert.equal(threadPool(5, 4), 4);
    assert.equal(threadPool(6, 4), 8, "ties round up");
    assert.equal(threadPool(7, 4), 8);
    assert.equal(threadPool(8, 4), 8);
    assert.equal(threadPool(1, 4), 4, "a pool has a lane for each thread");
    assert.equal(threadPool(4, 4), 4);
    assert.equal(threadPool(29, 4), 28);
    assert.equal(threadPool(31, 4), 32);
    assert.equal(threadPool(31, 3), 30, "capped at the largest multiple of the threads within 32 lanes");
    assert.equal(threadPool(5, 1), 5);
    assert.equal(threadPool(1, 1), 1);
    assert.throws(() => threadPool(0, 4), /lanes must be an integer ≥ 1; got 0/);
    assert.throws(() => threadPool(4, 0), /threads must be an integer ≥ 1; got 0/);
  });
});
