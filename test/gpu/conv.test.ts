// Convolution and max pooling on the eager engine (Caffe-style per-sample im2col + cuBLAS, src/conv/)
// against the CPU reference: layers of GLP4NN's Table 5 at a small batch, forward and backward; results identical bit
// for bit on one stream and on 2–4 streams of the pool (gradients accumulated sample after sample, in order); column
// buffers that grow between layers. The small cases of every image op are in the op × engine suite (test/gpu/op-engines.test.ts).
// Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ConvLayer, type ConvLayerShape, WEIGHT_SUMS } from "../../src/conv/index.js";
import { cudaAvailable, GpuContext } from "../../src/cuda/index.js";
import { CpuEngine } from "../../src/engines/cpu.js";
import { EagerEngine } from "../../src/engines/eager/engine.js";
import { ComputationGraph, type Expression } from "../../src/graph/graph.js";
import { ParameterCollection } from "../../src/model/parameters.js";
import {
  type Conv2dOptions,
  conv2d,
  conv2dShape,
  flatten,
  type ImageShape,
  input,
  matVec,
  maxPool2d,
  maxPool2dShape,
  tanh,
} from "../../src/ops/index.js";
import { randoms } from "../op-cases.js";
import { scaleTolerance } from "../op-suite.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const MiB = 1024 ** 2;
/** Sums of up to C·K·K = 3456 products in another order than the reference's: 1e-4 of the array's scale. */
const tolerance = scaleTolerance(1e-4);

function assertClose(actual: Float32Array, expected: Float32Array, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  const k = tolerance.values(actual, expected);
  if (k >= 0) assert.fail(`${what}: element ${k} of ${expected.length} is ${actual[k]}, expected ${expected[k]}`);
}

interface Layer {
  readonly name: string;
  readonly n: number;
  readonly image: ImageShape;
  readonly filters: number;
  readonly opts: Conv2dOptions;
}

/** Table 5's geometry (C_i, H/W, C_o, F, S, P) at batch n. */
function layer(name: string, n: number, c: number, hw: number, f: number, k: number, s: number, p: number): Layer {
  return {
    name,
    n,
    image: { channels: c, height: hw, width: hw },
    filters: f,
    opts: { kernel: k, stride: s, padding: p },
  };
}

const TABLE5_SAMPLE: readonly Layer[] = [
  layer("CIFAR10 conv1", 3, 3, 32, 32, 5, 1, 2),
  layer("CIFAR10 conv3", 2, 32, 8, 64, 5, 1, 2),
  layer("Siamese conv2", 3, 20, 12, 50, 5, 1, 0),
  layer("CaffeNet conv1", 2, 3, 227, 96, 11, 4, 0),
  layer("CaffeNet conv4", 2, 384, 13, 384, 3, 1, 1),
  layer("GoogLeNet conv_2", 4, 832, 7, 32, 1, 1, 0),
];

/** Parameters of a conv layer and the R that sums its output (seeded: the same values on every call). */
function layerParams(L: Layer) {
  const pc = new ParameterCollection({ seed: 19 });
  const { channels: c } = L.image;
  const out = conv2dShape(L.image, L.filters, L.opts);
  const W = pc.addParameters([L.filters, c * L.opts.kernel * L.opts.kernel], undefined, "W");
  const b = pc.addParameters(L.filters, { kind: "uniform", scale: 0.5 }, "b");
  const R = pc.addParameters([1, L.n * out.channels * out.height * out.width], undefined, "R");
  return { pc, W, b, R };
}

interface LayerRun {
  y: Float32Array;
  dx: Float32Array;
  dW: Float32Array;
  db: Float32Array;
  /** cuBLAS calls queued (eager). */
  cublas?: number;
}

/** Forward and backward of R·flatten(conv2d(x)) on an engine (eager on `streams` streams): y, dx, dW, db. */
function runLayer(L: Layer, engine: "cpu" | "eager", streams = 1): LayerRun {
  const { pc, W, b, R } = layerParams(L);
  const per = L.image.channels * L.image.height * L.image.width;
  const cg = new ComputationGraph();
  const x = input(cg, randoms(L.n * per, 5), [L.n, per]);
  const y = conv2d(x, W, b, L.image, L.opts);
  const loss = matVec(R, flatten(y));
  if (engine === "cpu") {
    const e = new CpuEngine(pc);
    e.forward(loss);
    e.backward(loss);
    return { y: e.value(y), dx: e.gradient(x), dW: Float32Array.from(W.grad), db: Float32Array.from(b.grad) };
  }
  const e = new EagerEngine(pc, { poolBytes: 512 * MiB, streams });
  try {
    e.forward(loss);
    e.backward(loss);
    const out = {
      y: e.value(y),
      dx: e.gradient(x),
      dW: e.device.readGradient(W.index),
      db: e.device.readGradient(b.index),
    };
    return { ...out, cublas: e.launchCounts().cublas };
  } finally {
    e.dispose();
  }
}

describe("conv2d on the eager engine against the CPU engine: Table 5 layers at a small batch", { skip }, () => {
  for (const L of TABLE5_SAMPLE) {
    const out = conv2dShape(L.image, L.filters, L.opts);
    const { kernel: k, stride: s = 1, padding: p = 0 } = L.opts;
    test(`${L.name}: ${L.n}×${L.image.channels}×${L.image.height}² → ${L.filters}×${out.height}², ${k}×${k}/${s} pad ${p}`, () => {
      const cpu = runLayer(L, "cpu");
      const gpu = runLayer(L, "eager");
      assertClose(gpu.y, cpu.y, "y");
      assertClose(gpu.dW, cpu.dW, "dW");
      assertClose(gpu.db, cpu.db, "db");
      assertClose(gpu.dx, cpu.dx, "dx");
      // Caffe's launches per sample: forward im2col + 2 GEMMs; backward a GEMV, im2col, 2 GEMMs, col2im
      assert.ok((gpu.cublas ?? 0) >= 5 * L.n, `cuBLAS calls: ${gpu.cublas}`);
    });
  }
});

describe("conv2d's results do not depend on the streams: gradients accumulated in a fixed order", { skip }, () => {
  const bits = (a: Float32Array) => new Uint32Array(a.buffer, a.byteOffset, a.length);
  for (const L of [layer("CIFAR10 conv2", 8, 32, 16, 32, 5, 1, 2), layer("CaffeNet conv1", 5, 3, 227, 96, 11, 4, 0)]) {
    test(`${L.name}, ${L.n} samples: one stream twice, then 2, 3 and 4 streams, give y, dW, db and dx bit for bit`, () => {
      const one = runLayer(L, "eager");
      for (const streams of [1, 2, 3, 4]) {
        const other = runLayer(L, "eager", streams);
        for (const key of ["y", "dW", "db", "dx"] as const) {
          assert.deepEqual(bits(other[key]), bits(one[key]), `${key} on ${streams} stream(s) differs from one stream`);
        }
      }
    });
  }
});

describe("a small CNN on the eager engine", { skip }, () => {
  test("conv, tanh, pool (Caffe's rounding), conv with a larger column buffer, pool, conv: values and gradients", () => {
    const N = 4;
    const image: ImageShape = { channels: 3, height: 32, width: 32 };
    const conv1 = { kernel: 5, padding: 2 } as const;
    const pool = { kernel: 3, stride: 2 } as const;
    const build = (pc: ParameterCollection) => {
      const s1 = conv2dShape(image, 16, conv1);
      const p1 = maxPool2dShape(s1, pool); // 16×16: Caffe's ⌈(32 − 3)/2⌉ + 1
      const s2 = conv2dShape(p1, 32, conv1);
      const p2 = maxPool2dShape(s2, pool);
      const s3 = conv2dShape(p2, 8, { kernel: 3 });
      return {
        shapes: { p1, s2, p2 },
        W1: pc.addParameters([16, 3 * 25], undefined, "W1"),
        b1: pc.addParameters(16, { kind: "uniform", scale: 0.1 }, "b1"),
        W2: pc.addParameters([32, 16 * 25], undefined, "W2"),
        b2: pc.addParameters(32, { kind: "uniform", scale: 0.1 }, "b2"),
        W3: pc.addParameters([8, 32 * 9], undefined, "W3"),
        b3: pc.addParameters(8, { kind: "uniform", scale: 0.1 }, "b3"),
        R: pc.addParameters([1, N * 8 * s3.height * s3.width], undefined, "R"),
      };
    };
    const run = (engine: "cpu" | "eager", streams = 1) => {
      const pc = new ParameterCollection({ seed: 23 });
      const p = build(pc);
      assert.equal(p.shapes.p1.height, 16, "Caffe's pooling rounding");
      const cg = new ComputationGraph();
      const x = input(cg, randoms(N * 3 * 1024, 9), [N, 3 * 1024]);
      const h1 = maxPool2d(tanh(conv2d(x, p.W1, p.b1, image, conv1)), conv2dShape(image, 16, conv1), pool);
      const h2 = maxPool2d(tanh(conv2d(h1, p.W2, p.b2, p.shapes.p1, conv1)), p.shapes.s2, pool);
      const y = conv2d(h2, p.W3, p.b3, p.shapes.p2, { kernel: 3 });
      const loss: Expression = matVec(p.R, flatten(y));
      const e = engine === "cpu" ? new CpuEngine(pc) : new EagerEngine(pc, { poolBytes: 256 * MiB, streams });
      try {
        const l = e.forwardScalar(loss);
        e.backward(loss);
        const grad = (q: { index: number; grad: Float32Array }) =>
          e instanceof EagerEngine ? e.device.readGradient(q.index) : Float32Array.from(q.grad);
        return { l, h1: e.value(h1), dx: e.gradient(x), dW1: grad(p.W1), dW2: grad(p.W2), dW3: grad(p.W3) };
      } finally {
        e.dispose();
      }
    };
    const c = run("cpu");
    for (const streams of [1, 4]) {
      const g = run("eager", streams);
      assertClose(Float32Array.of(g.l), Float32Array.of(c.l), `loss on ${streams} stream(s)`);
      for (const key of ["h1", "dx", "dW1", "dW2", "dW3"] as const)
        assertClose(g[key], c[key], `${key} on ${streams} stream(s)`);
    }
  });
});

describe("a pool's work issued from several host threads (src/conv/threads.ts): one thread's results bit for bit", {
  skip,
}, () => {
  const bits = (a: Float32Array) => new Uint32Array(a.buffer, a.byteOffset, a.length);
  const shapes: ConvLayerShape[] = [
    { name: "CIFAR10 conv2, 19 samples", n: 19, c: 32, hw: 16, f: 32, k: 5, s: 1, p: 2 },
    { name: "GoogLeNet conv_3 (1×1), 13 samples", n: 13, c: 96, hw: 7, f: 48, k: 1, s: 1, p: 0 },
  ];
  for (const shape of shapes) {
    test(`${shape.name}: 4 lanes from 1 and 2 threads, 8 lanes from 4, twice each, both weight sums, equal one stream`, () => {
      const ctx = GpuContext.open({ poolBytes: 64 * MiB });
      const layer = ConvLayer.open(shape, ctx);
      try {
        const one = layer.runner(1);
        layer.iteration(one);
        const reference = layer.results();
        one.dispose();
        for (const weightSums of WEIGHT_SUMS) {
          for (const [lanes, threads] of [
            [4, 1],
            [4, 2],
            [8, 4],
          ] as const) {
            const r = layer.runner(lanes, { threads, weightSums });
            for (let round = 0; round < 2; round++) {
              layer.iteration(r);
              const got = layer.results();
              for (const key of ["y", "dW", "db", "dx"]) {
                const what = `${key}: ${lanes} lanes, ${threads} thread(s), weights summed by ${weightSums}`;
                assert.deepEqual(bits(got[key]!), bits(reference[key]!), what);
              }
            }
            r.dispose();
          }
        }
      } finally {
        layer.dispose();
        ctx.dispose();
      }
    });
  }
});
