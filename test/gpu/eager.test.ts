// The eager engine on a real GPU against the CPU reference: incremental forward, Tree-LSTM training steps with SGD
// and Adam (clipping active), and the error paths. Every op (values and gradients of every node, every parameter's
// gradient, dropout masks bit for bit) is in the op × engine suite, test/gpu/op-engines.test.ts.
// Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { cudaAvailable, DevicePoolOutOfMemory, NvrtcCompileError } from "../../src/cuda/index.js";
import { syntheticTrees } from "../../src/data/synthetic.js";
import { Vocabulary } from "../../src/data/vocab.js";
import { CpuEngine } from "../../src/engines/cpu.js";
import { EagerEngine } from "../../src/engines/eager/engine.js";
import { createEngine } from "../../src/engines/index.js";
import { ComputationGraph } from "../../src/graph/graph.js";
import { ParameterCollection } from "../../src/model/parameters.js";
import { TreeLstmModel } from "../../src/models/treelstm/model.js";
import { input, logistic, lookup, matVec, pickNegLogSoftmax, pickRange, sum, tanh } from "../../src/ops/index.js";
import { makeTrainer } from "../../src/optim/trainers.js";
import { elementTolerance } from "../op-suite.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const MiB = 1024 ** 2;
/** |a − e| ≤ 1e-4 (1 + |e|) per element (the op suite's rule for this engine). */
function assertClose(actual: Float32Array, expected: Float32Array, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  const k = elementTolerance(1e-4).values(actual, expected);
  if (k >= 0) assert.fail(`${what}: element ${k} is ${actual[k]}, expected ${expected[k]}`);
}

describe("eager engine against the CPU engine: incremental forward", { skip }, () => {
  test("incremental forward: a second forward adds nodes to a graph already computed", () => {
    const pcC = new ParameterCollection({ seed: 2 });
    const pcG = new ParameterCollection({ seed: 2 });
    const mk = (pc: ParameterCollection) => ({ W: pc.addParameters([4, 4]), E: pc.addLookupParameters(5, 4) });
    const [pC, pG] = [mk(pcC), mk(pcG)];
    const cpu = new CpuEngine(pcC);
    const gpu = new EagerEngine(pcG, { poolBytes: 64 * MiB });
    try {
      const run = (cg: ComputationGraph, p: ReturnType<typeof mk>, engine: CpuEngine | EagerEngine) => {
        const a = tanh(matVec(p.W, lookup(cg, p.E, 1)));
        const first = engine.value(a);
        const b = sum([a, tanh(matVec(p.W, lookup(cg, p.E, 2))), input(cg, [1, 2, 3, 4])]);
        const loss = pickNegLogSoftmax(b, 2);
        const l = engine.forwardScalar(loss);
        engine.backward(loss);
        return { first, second: engine.value(b), l, grad: engine.gradient(a) };
      };
      const c = run(new ComputationGraph(), pC, cpu);
      const g = run(new ComputationGraph(), pG, gpu);
      assertClose(g.first, c.first, "first forward");
      assertClose(g.second, c.second, "second forward");
      assertClose(Float32Array.of(g.l), Float32Array.of(c.l), "loss");
      assertClose(g.grad, c.grad, "gradient of the first part");
      assertClose(gpu.device.readGradient(pG.E.index), pC.E.grad, "lookup gradient");
    } finally {
      gpu.dispose();
    }
  });
});

describe("eager engine: pickRange of an input made in the same forward call", { skip }, () => {
  test("the slice reads the uploaded input (fresh, after a first call, and a slice of a slice), and its gradient", () => {
    const pcC = new ParameterCollection({ seed: 5 });
    const pcG = new ParameterCollection({ seed: 5 });
    const mk = (pc: ParameterCollection) => ({ W: pc.addParameters([3, 3]) });
    const [pC, pG] = [mk(pcC), mk(pcG)];
    const cpu = new CpuEngine(pcC);
    const gpu = new EagerEngine(pcG, { poolBytes: 64 * MiB });
    try {
      const run = (cg: ComputationGraph, p: ReturnType<typeof mk>, engine: CpuEngine | EagerEngine) => {
        const x = input(cg, [0.5, -1, 2, 0.25, 3, -0.75]);
        const a = pickRange(x, 1, 4); // the input's values 1…3, in the call that makes the input
        const first = engine.value(a);
        const y = input(cg, [7, 8, 9, 10, 11]);
        const b = pickRange(pickRange(y, 1, 5), 1, 4); // a slice of a slice of a new input, in a second call
        const h = tanh(matVec(p.W, b));
        const loss = pickNegLogSoftmax(sum([h, a, tanh(pickRange(x, 3, 6))]), 1);
        const l = engine.forwardScalar(loss);
        engine.backward(loss);
        return { first, b: engine.value(b), l, grad: engine.gradient(a) };
      };
      const c = run(new ComputationGraph(), pC, cpu);
      const g = run(new ComputationGraph(), pG, gpu);
      assert.deepEqual([...g.first], [-1, 2, 0.25], "the slice is the input's values, exactly");
      assert.deepEqual([...g.b], [9, 10, 11], "a slice of a slice, exactly");
      assertClose(Float32Array.of(g.l), Float32Array.of(c.l), "loss");
      assertClose(g.grad, c.grad, "the slice's gradient");
      assertClose(gpu.device.readGradient(pG.W.index), pC.W.grad, "W's gradient");
    } finally {
      gpu.dispose();
    }
  });
});

describe("Tree-LSTM training steps on the eager engine against the CPU engine", { skip }, () => {
  const trees = syntheticTrees(8, 11, { minWords: 3, maxWords: 9 });
  const vocab = Vocabulary.fromTrees(trees);
  const cases = [
    { optimizer: "sgd", cell: "fused", dropout: 0, lr: 0.1 },
    { optimizer: "adam", cell: "fused", dropout: 0.2, lr: 0.01 },
    { optimizer: "adam", cell: "ops", dropout: 0, lr: 0.01 },
  ] as const;
  for (const c of cases) {
    test(`${c.optimizer}, ${c.cell} cell, dropout ${c.dropout}, clipping at 1: losses, then the weights`, () => {
      const make = () =>
        new TreeLstmModel({ vocabSize: vocab.size, embed: 12, hidden: 10, cell: c.cell, dropout: c.dropout, seed: 5 });
      const mC = make();
      const mG = make();
      const cpu = new CpuEngine(mC.params);
      const gpu = new EagerEngine(mG.params, { poolBytes: 256 * MiB });
      const tC = makeTrainer(c.optimizer, { learningRate: c.lr, clipThreshold: 1 });
      const tG = makeTrainer(c.optimizer, { learningRate: c.lr, clipThreshold: 1 });
      const cgC = new ComputationGraph();
      const cgG = new ComputationGraph();
      let clipped = 0;
      try {
        for (let step = 0; step < 4; step++) {
          const batch = trees.slice(2 * step, 2 * step + 2);
          for (const cg of [cgC, cgG]) {
            cg.renew();
            cg.dropoutKey = 1000 + step;
          }
          const lossC = mC.buildBatchLoss(cgC, batch, vocab);
          const lossG = mG.buildBatchLoss(cgG, batch, vocab);
          const lc = cpu.forwardScalar(lossC);
          const lg = gpu.forwardScalar(lossG);
          assertClose(Float32Array.of(lg), Float32Array.of(lc), `loss at step ${step}`);
          cpu.backward(lossC);
          gpu.backward(lossG);
          if (tC.clipScale(mC.params) < 1) clipped++;
          cpu.update(tC);
          gpu.update(tG);
        }
        assert.equal(tG.updates, tC.updates);
        assert.ok(clipped > 0, "clipping was active in at least one step");
        gpu.syncToHost();
        for (const p of mC.params.all) {
          const q = mG.params.get(p.name);
          assertClose(q.value, p.value, `'${p.name}' after 4 updates`);
        }
        // gradients were zeroed by the update
        for (const p of mG.params.all)
          assert.ok(
            gpu.device.readGradient(p.index).every((x) => x === 0),
            p.name,
          );
        console.log(`${c.optimizer}/${c.cell}: ${cgG.size} nodes in the last batch, clipped in ${clipped} of 4 steps`);
      } finally {
        gpu.dispose();
      }
    });
  }
});

describe("eager engine errors and plumbing", { skip }, () => {
  test("createEngine('eager') makes the eager engine on the GPU", () => {
    const pc = new ParameterCollection();
    pc.addParameters([2, 2]);
    const e = createEngine("eager", pc, { device: "cuda:0" });
    try {
      assert.equal(e.name, "eager");
      assert.ok(e instanceof EagerEngine);
      console.log(`device: ${e.ctx.deviceName}; pool ${e.ctx.pool.stats().capacityBytes / MiB} MiB`);
    } finally {
      e.dispose();
    }
  });

  test("a kernel that does not compile throws NvrtcCompileError carrying the log", () => {
    const pc = new ParameterCollection();
    pc.addParameters([2, 2]);
    const e = new EagerEngine(pc, { poolBytes: 16 * MiB, cacheDir: null });
    try {
      const bad = 'extern "C" __global__ void broken(float* y) { y[0] = undefined_name; }\n';
      assert.throws(
        () => e.ctx.kernels("broken.cu", bad, ["broken"]),
        (err: unknown) => {
          assert.ok(err instanceof NvrtcCompileError, `got ${String(err)}`);
          assert.match(err.log, /broken\.cu\(1\): error: identifier "undefined_name" is undefined/);
          assert.equal(err.line, 1);
          return true;
        },
      );
    } finally {
      e.dispose();
    }
  });

  test("a graph larger than the pool is DevicePoolOutOfMemory with the pool's state; the engine stays usable", () => {
    const pc = new ParameterCollection();
    const W = pc.addParameters([4, 4]);
    const e = new EagerEngine(pc, { poolBytes: 1 * MiB });
    try {
      const cg = new ComputationGraph();
      const big = tanh(input(cg, new Float32Array(400_000).fill(0.5)));
      assert.throws(
        () => e.forward(big),
        (err: unknown) => {
          assert.ok(err instanceof DevicePoolOutOfMemory, `got ${String(err)}`);
          assert.match(err.message, /^asked for .* for node values at offset \d+, pool 1\.0 MiB, .* in use/);
          console.log(err.message);
          return true;
        },
      );
      cg.renew();
      const y = tanh(matVec(W, input(cg, [1, 2, 3, 4])));
      const cpu = new CpuEngine(pc);
      const cg2 = new ComputationGraph();
      const y2 = tanh(matVec(W, input(cg2, [1, 2, 3, 4])));
      assertClose(e.value(y), cpu.value(y2), "after the failure");
    } finally {
      e.dispose();
    }
  });

  test("launch counts: one kernel per elementwise node, none for inputs, parameters and pickRange", () => {
    const pc = new ParameterCollection();
    const e = new EagerEngine(pc, { poolBytes: 16 * MiB });
    try {
      const cg = new ComputationGraph();
      const x = input(cg, [1, 2, 3, 4]);
      e.forward(x);
      const before = e.launchCounts();
      const y = tanh(logistic(pickRange(tanh(x), 1, 3)));
      e.forward(y);
      const after = e.launchCounts();
      assert.equal(after.kernels - before.kernels, 3);
      assert.equal(after.cublas - before.cublas, 0);
      assert.equal(after.copies - before.copies, 0, "no upload: the chunk is empty");
    } finally {
      e.dispose();
    }
  });
});
