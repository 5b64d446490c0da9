// The eager engine on a real GPU against the CPU reference: every op (values and gradients of every node, every
// parameter's gradient), dropout masks bit for bit, repeated lookup rows, reused nodes, lstmCell with k = 0, 1, 2,
// incremental forward, Tree-LSTM training steps with SGD and Adam (clipping active), and the error paths.
// Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { cudaAvailable, DevicePoolOutOfMemory, NvrtcCompileError } from "../../src/cuda/index.js";
import { syntheticTrees } from "../../src/data/synthetic.js";
import { Vocabulary } from "../../src/data/vocab.js";
import { CpuEngine } from "../../src/engines/cpu.js";
import { EagerEngine } from "../../src/engines/eager/engine.js";
import { createEngine } from "../../src/engines/index.js";
import { ComputationGraph, type Expression } from "../../src/graph/graph.js";
import { ParameterCollection } from "../../src/model/parameters.js";
import { TreeLstmModel } from "../../src/models/treelstm/model.js";
import {
  add,
  affine,
  cmul,
  concat,
  dropout,
  input,
  logistic,
  lookup,
  lstmCell,
  matVec,
  parameter,
  pickNegLogSoftmax,
  pickRange,
  relu,
  sub,
  sum,
  tanh,
} from "../../src/ops/index.js";
import { makeTrainer } from "../../src/train/trainers.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const MiB = 1024 ** 2;
const TOL = 1e-4;

function randoms(n: number, seed: number): number[] {
  const out: number[] = [];
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    out.push((s / 2 ** 32) * 2 - 1);
  }
  return out;
}

/** Index of the first element outside |a − e| ≤ TOL·(1 + |e|), or −1. */
function firstMismatch(actual: Float32Array, expected: Float32Array): number {
  if (actual.length !== expected.length) return 0;
  for (let i = 0; i < actual.length; i++) {
    const e = expected[i]!;
    if (!(Math.abs(actual[i]! - e) <= TOL * (1 + Math.abs(e)))) return i;
  }
  return -1;
}

function assertClose(actual: Float32Array, expected: Float32Array, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  const k = firstMismatch(actual, expected);
  if (k >= 0) assert.fail(`${what}: element ${k} is ${actual[k]}, expected ${expected[k]}`);
}

/** The parameters a case builds, made twice from the same seed: one set per engine. */
type Setup<P> = (pc: ParameterCollection) => P;
type Build<P> = (cg: ComputationGraph, p: P) => Expression;

/** A scalar from a vector: R·y with a [1, n] parameter R, so that every element of y gets its own gradient. */
function dot(pc: ParameterCollection, n: number, name = "R") {
  return pc.addParameters([1, n], { kind: "uniform", scale: 1 }, name);
}

/**
 * Runs `build` on both engines: the loss, every node's value and gradient, every parameter's gradient and the
 * touched lookup rows must agree. Returns the two engines' values of every node for extra checks.
 */
function compareWithCpu<P>(
  setup: Setup<P>,
  build: Build<P>,
  dropoutKey = 0,
): { cpu: Float32Array[]; gpu: Float32Array[] } {
  const pcC = new ParameterCollection({ seed: 7 });
  const pC = setup(pcC);
  const pcG = new ParameterCollection({ seed: 7 });
  const pG = setup(pcG);
  const cpu = new CpuEngine(pcC);
  const gpu = new EagerEngine(pcG, { poolBytes: 256 * MiB });
  try {
    const cgC = new ComputationGraph();
    const cgG = new ComputationGraph();
    cgC.dropoutKey = dropoutKey;
    cgG.dropoutKey = dropoutKey;
    const lossC = build(cgC, pC);
    const lossG = build(cgG, pG);
    assert.equal(cgG.size, cgC.size);
    const lc = cpu.forwardScalar(lossC);
    const lg = gpu.forwardScalar(lossG);
    assertClose(Float32Array.of(lg), Float32Array.of(lc), "loss");
    cpu.backward(lossC);
    gpu.backward(lossG);
    const values = { cpu: [] as Float32Array[], gpu: [] as Float32Array[] };
    for (let i = 0; i <= lossC.id; i++) {
      const vc = cpu.value(cgC.expression(i));
      const vg = gpu.value(cgG.expression(i));
      values.cpu.push(vc);
      values.gpu.push(vg);
      assertClose(vg, vc, `value of node ${cgC.describe(i)}`);
      assertClose(gpu.gradient(cgG.expression(i)), cpu.gradient(cgC.expression(i)), `gradient of ${cgC.describe(i)}`);
    }
    for (const p of pcC.all) {
      assertClose(gpu.device.readGradient(p.index), p.grad, `gradient of parameter '${p.name}'`);
      if (p.kind === "lookup")
        assert.deepEqual(gpu.device.touchedRows(p.index), p.touchedRows, `touched rows of '${p.name}'`);
    }
    return values;
  } finally {
    gpu.dispose();
  }
}

describe("eager engine against the CPU engine", { skip }, () => {
  test("matVec (also with a computed matrix), affine with two pairs, tanh", () => {
    compareWithCpu(
      (pc) => ({
        W1: pc.addParameters([6, 5]),
        W2: pc.addParameters([6, 4]),
        b: pc.addParameters(6, { kind: "uniform", scale: 0.5 }),
        P: pc.addParameters([3, 6]),
        Q: pc.addParameters([3, 6]),
        R: dot(pc, 3),
      }),
      (cg, p) => {
        const y = tanh(affine([p.b, p.W1, input(cg, randoms(5, 1)), p.W2, input(cg, randoms(4, 2))]));
        const M = sum([parameter(cg, p.P), parameter(cg, p.Q)]); // a [3, 6] node that is not a parameter
        return matVec(p.R, add(matVec(M, y), matVec(p.P, y)));
      },
    );
  });

  test("add, sub, cmul (also of a node with itself), logistic, relu", () => {
    compareWithCpu(
      (pc) => ({ W: pc.addParameters([7, 3]), b: pc.addParameters(7, { kind: "uniform", scale: 1 }), R: dot(pc, 7) }),
      (cg, p) => {
        const a = affine([p.b, p.W, input(cg, randoms(3, 3))]);
        const b = tanh(input(cg, randoms(7, 4)));
        const y = add(cmul(a, a), sub(logistic(a), relu(cmul(a, b))));
        return matVec(p.R, sub(y, relu(b)));
      },
    );
  });

  test("concat of six arguments (two launches, one argument twice), pickRange, sum with a repeated argument", () => {
    compareWithCpu(
      (pc) => ({ W: pc.addParameters([4, 4]), R: dot(pc, 23), S: dot(pc, 5, "S") }),
      (cg, p) => {
        const x = tanh(matVec(p.W, input(cg, randoms(4, 5))));
        const z = input(cg, randoms(5, 6));
        const c = concat([x, z, x, logistic(z), tanh(x), input(cg, randoms(1, 7))]); // 23 values
        const r = pickRange(c, 4, 9);
        const s = sum([r, z, r, tanh(r)]);
        return add(matVec(p.R, c), matVec(p.S, s));
      },
    );
  });

  test("dropout: the masks are bit-identical, values and gradients agree", () => {
    const n = 20_000;
    const p = 0.3;
    const { cpu, gpu } = compareWithCpu(
      (pc) => ({ W: pc.addParameters([n, 2]), b: pc.addParameters(n, { kind: "uniform", scale: 1 }), R: dot(pc, n) }),
      (cg, q) => matVec(q.R, dropout(affine([q.b, q.W, input(cg, [0.5, -0.25])]), p)),
      0x9e37_79b9 | 0,
    );
    const node = cpu.findIndex((v) => v.length === n && v.some((x) => x === 0));
    assert.ok(node > 0, "the dropout node is found");
    let dropped = 0;
    for (let i = 0; i < n; i++) {
      assert.equal(gpu[node]![i] === 0, cpu[node]![i] === 0, `mask element ${i}`);
      if (cpu[node]![i] === 0) dropped++;
    }
    console.log(`dropout p = ${p}: ${dropped} of ${n} dropped`);
    assert.ok(Math.abs(dropped / n - p) < 0.02, `dropped fraction ${dropped / n}`);
  });

  test("lookup with repeated rows (and an unreached lookup, which must not be touched)", () => {
    compareWithCpu(
      (pc) => ({
        E: pc.addLookupParameters(10, 6),
        W: pc.addParameters([6, 6]),
        b: pc.addParameters(6, { kind: "uniform", scale: 0.1 }),
        R: dot(pc, 6),
      }),
      (cg, p) => {
        const hs = [3, 5, 3, 3, 9].map((row) => tanh(affine([p.b, p.W, lookup(cg, p.E, row)])));
        lookup(cg, p.E, 7); // not on the loss's path
        const e3 = lookup(cg, p.E, 3);
        return matVec(p.R, sum([...hs, cmul(e3, e3)]));
      },
    );
  });

  test("pickNegLogSoftmax over several labels", () => {
    compareWithCpu(
      (pc) => ({ W: pc.addParameters([5, 8]), b: pc.addParameters(5, { kind: "uniform", scale: 1 }) }),
      (cg, p) => {
        const losses = [0, 3, 4, 1].map((label, k) =>
          pickNegLogSoftmax(affine([p.b, p.W, input(cg, randoms(8, 10 + k))]), label),
        );
        return sum(losses);
      },
    );
  });

  for (const k of [0, 1, 2]) {
    test(`lstmCell with k = ${k} children${k === 2 ? " (the same child twice, then two different)" : ""}`, () => {
      const H = 9;
      compareWithCpu(
        (pc) => ({
          W: pc.addParameters([(3 + k) * H, 5]),
          b: pc.addParameters((3 + k) * H, { kind: "uniform", scale: 0.5 }),
          R: dot(pc, 2 * H),
        }),
        (cg, p) => {
          const gates = affine([p.b, p.W, input(cg, randoms(5, 20))]);
          const c1 = tanh(input(cg, randoms(H, 21)));
          const c2 = tanh(input(cg, randoms(H, 22)));
          const cs = k === 0 ? [] : k === 1 ? [c1] : [c1, c1];
          const hc = lstmCell(gates, cs);
          let loss = matVec(p.R, hc);
          if (k === 2) loss = add(loss, matVec(p.R, lstmCell(gates, [c1, c2])));
          return loss;
        },
      );
    });
  }

  test("a node reused by many consumers, and a deeper chain", () => {
    compareWithCpu(
      (pc) => ({ W: pc.addParameters([8, 8]), b: pc.addParameters(8), R: dot(pc, 8) }),
      (cg, p) => {
        let h = tanh(input(cg, randoms(8, 30)));
        for (let step = 0; step < 5; step++) {
          const a = affine([p.b, p.W, h]);
          h = add(tanh(a), cmul(logistic(a), h));
        }
        return matVec(p.R, sum([h, tanh(h), relu(h)]));
      },
    );
  });

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
