import assert from "node:assert/strict";
import { test } from "node:test";
import {
  AdamTrainer,
  affine,
  ComputationGraph,
  CpuEngine,
  input,
  lstmStep,
  ParameterCollection,
  pickNegLogSoftmax,
  pickRange,
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
