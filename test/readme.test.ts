import assert from "node:assert/strict";
import { test } from "node:test";
import {
  AdamTrainer,
  affine,
  ComputationGraph,
  CpuEngine,
  conv2d,
  conv2dShape,
  flatten,
  input,
  lstmStep,
  maxPool2d,
  maxPool2dShape,
  ParameterCollection,
  PersistentRnn,
  pickNegLogSoftmax,
  pickRange,
  relu,
  sum,
} from "../src/index.js";

// The README's API example, verbatim in substance: it must run and learn.
test("the README's API example trains an LSTM through the public exports", () => {
  const pc = new ParameterCollection({ seed: 1 });
  const W = pc.addParameters([4 * 8, 3]);
  const b = pc.addParameters(4 * 8);
  const Wy = pc.addParameters([2, 8]);
  const by = pc.addParameters(2);
  const engine = new CpuEngine(pc);
  const trainer = new AdamTrainer({ learningRate: 0.01 });
  const cg = new ComputationGraph();
  const losses: number[] = [];
  for (let step = 0; step < 100; step++) {
    cg.renew();
    let c = input(cg, new Array(8).fill(0));
    let h = c;
    for (const x of [
      [1, 0, 0],
      [0, 1, 0],
      [0, 0, 1],
    ]) {
      const hc = lstmStep(affine([b, W, input(cg, x)]), c);
      h = pickRange(hc, 0, 8);
      c = pickRange(hc, 8, 16);
    }
    const loss = pickNegLogSoftmax(affine([by, Wy, h]), 1);
    losses.push(engine.forwardScalar(loss));
    engine.backward(loss);
    engine.update(trainer);
  }
  assert.ok(losses[99]! < losses[0]! / 10, `loss ${losses[0]} → ${losses[99]}`);
});

// The README's convolutional example: its shapes hold, and a few Adam steps on one batch lower the loss.
test("the README's convolutional layers example builds, runs on the CPU engine and learns one batch", () => {
  const pc = new ParameterCollection({ seed: 2 });
  const image = { channels: 1, height: 28, width: 28 };
  const conv = { kernel: 5 };
  const pool = { kernel: 2 };
  const c1 = conv2dShape(image, 20, conv);
  const p1 = maxPool2dShape(c1, pool);
  assert.deepEqual(
    [c1, p1],
    [
      { channels: 20, height: 24, width: 24 },
      { channels: 20, height: 12, width: 12 },
    ],
  );
  const D = p1.channels * p1.height * p1.width;
  const W1 = pc.addParameters([20, 1 * 5 * 5]);
  const b1 = pc.addParameters(20);
  const W2 = pc.addParameters([10, D]);
  const b2 = pc.addParameters(10);
  const N = 2;
  const pixels = Array.from({ length: N * 28 * 28 }, (_, k) => ((k * 7919) % 256) / 255);
  const labels = [3, 8];
  const engine = new CpuEngine(pc);
  const trainer = new AdamTrainer({ learningRate: 0.001 });
  const cg = new ComputationGraph();
  const losses: number[] = [];
  for (let step = 0; step < 4; step++) {
    cg.renew();
    const x = input(cg, pixels, [N, 28 * 28]);
    const h = flatten(maxPool2d(relu(conv2d(x, W1, b1, image, conv)), c1, pool));
    const loss = sum(
      labels.map((label, n) => pickNegLogSoftmax(affine([b2, W2, pickRange(h, n * D, (n + 1) * D)]), label)),
    );
    losses.push(engine.forwardScalar(loss));
    engine.backward(loss);
    engine.update(trainer);
  }
  assert.ok(losses[3]! < losses[0]!, `loss ${losses[0]} → ${losses[3]}`);
});

// The README's persistent recurrent layer example, as written there, plus what its comments promise.
test("the README's PersistentRnn example runs on the CPU: shapes, gradients, PyTorch names", () => {
  const rnn = new PersistentRnn({ cell: "lstm", inputSize: 3, hidden: 4, layers: 2, bidirectional: true, seed: 1 });
  const xs = [new Float32Array([1, 0, 0, 0, 1, 0]), new Float32Array([0, 0, 1, 1, 0, 0, 0, 1, 0])];
  const { y, hn, cn } = rnn.forward(xs);
  assert.deepEqual(
    y.map((yi) => yi.length),
    [2 * 8, 3 * 8],
  );
  assert.equal(hn.length, 4 * 2 * 4);
  assert.equal(cn!.length, 4 * 2 * 4);
  const dy = y.map((yi) => yi.map(() => 1));
  const { dx, dh0 } = rnn.backward(dy);
  assert.deepEqual(
    dx.map((d) => d.length),
    [6, 9],
  );
  assert.equal(dh0.length, 32);
  assert.equal(rnn.gradients().weight_hh_l0!.length, 16 * 4);
  assert.ok(rnn.gradients().weight_hh_l0!.some((g) => g !== 0));
  assert.ok(Object.keys(rnn.parameters()).includes("bias_hh_l1_reverse"));
  rnn.zeroGradients();
  assert.ok(rnn.gradients().weight_hh_l0!.every((g) => g === 0));
});
