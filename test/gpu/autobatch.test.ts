// The GPU autobatch engine on a real GPU against the CPU reference: both strategies on random graphs (every op,
// values and gradients of every node, parameter gradients, touched lookup rows), Tree-LSTM batches, batches wider
// than a block, the launches per batch the plan implies, and Tree-LSTM training steps with SGD and Adam (clipping,
// dropout). Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { cudaAvailable } from "../../src/cuda/index.js";
import { syntheticTrees } from "../../src/data/synthetic.js";
import { Vocabulary } from "../../src/data/vocab.js";
import { AutobatchGpuEngine, CudaAutobatchDevice, type GemmMode } from "../../src/engines/autobatch/gpu-engine.js";
import type { BatchStrategy } from "../../src/engines/autobatch/plan.js";
import { CpuEngine } from "../../src/engines/cpu.js";
import { createEngine } from "../../src/engines/index.js";
import { ComputationGraph, type Expression } from "../../src/graph/graph.js";
import type { ParameterCollection } from "../../src/model/parameters.js";
import { TreeLstmModel } from "../../src/models/treelstm/model.js";
import { makeTrainer } from "../../src/optim/trainers.js";
import { wideCase } from "../autobatch-emulator.js";
import { expectedLaunches } from "../autobatch-launches.js";
import { compareWithCpu, type EngineUnderTest, engineRun, scaleTolerance } from "../op-suite.js";
import { buildRandomGraph, buildTreeLstmBatch, randomModel, randomTrees, treeLstmModel } from "../random-graph.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const MiB = 1024 ** 2;
const STRATEGIES: readonly BatchStrategy[] = ["depth", "agenda"];

const gpuEngine = (params: ParameterCollection, strategy: BatchStrategy, gemm: GemmMode = "kernels") =>
  new AutobatchGpuEngine(params, { strategy, gemm, poolBytes: 256 * MiB });

/** |a − b| ≤ 1e-4 · max(|b|, largest |b| of the array, 1e-3): relative 1e-4 at the array's scale. */
function assertClose(actual: Float32Array, expected: Float32Array, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  const k = scaleTolerance(1e-4).values(actual, expected);
  if (k >= 0) assert.fail(`${what}: element ${k} is ${actual[k]}, expected ${expected[k]}`);
}

interface Case {
  params: ParameterCollection;
  build: (cg: ComputationGraph) => Expression;
}

/**
 * The case on the CPU engine and on the GPU (the op suite's comparison): loss, every node's value and gradient
 * (unless `everyNode` is false), parameter gradients, touched rows.
 */
async function compare(
  make: () => Case,
  strategy: BatchStrategy,
  what: string,
  everyNode = true,
  gemm: GemmMode = "kernels",
): Promise<void> {
  const engine: EngineUnderTest = {
    name: `autobatch GPU (${strategy}, ${gemm})`,
    tolerance: scaleTolerance(1e-4),
    run(params, cg, loss) {
      const e = gpuEngine(params, strategy, gemm);
      return engineRun(e, cg, loss, {
        parameterGradient: (i) => e.device.readGradient(i),
        touchedRows: (i) => e.device.touchedRows(i),
      });
    },
  };
  assert.equal(await compareWithCpu(make, engine, { everyNode }), "", what);
}

describe("GPU autobatch engine against the CPU engine", { skip }, () => {
  test("random graphs (every op, unreached nodes, computed weights and biases, dropout), both strategies", async () => {
    for (let seed = 1; seed <= 8; seed++) {
      for (const strategy of STRATEGIES) {
        await compare(
          () => {
            const m = randomModel(seed);
            return { params: m.params, build: (cg) => buildRandomGraph(cg, m, { seed, steps: 28 }) };
          },
          strategy,
          `seed ${seed} ${strategy}`,
        );
      }
    }
  });

  test("Tree-LSTM batches (small, and 24 trees at hidden 64), both strategies", async () => {
    for (const [seed, count, hidden, embed] of [
      [1, 5, 3, 4],
      [2, 24, 64, 32],
    ] as const) {
      const trees = randomTrees(seed, count, { minWords: 1, maxWords: 20, vocab: 40 });
      for (const strategy of STRATEGIES) {
        await compare(
          () => {
            const m = treeLstmModel(seed, { hidden, embed, vocab: 40 });
            return { params: m.params, build: (cg) => buildTreeLstmBatch(cg, m, trees) };
          },
          strategy,
          `${count} trees, hidden ${hidden}, ${strategy}`,
          count < 10,
        );
      }
    }
  });

  test("batches wider than a block: 300-row products, 300-class softmax, H = 150 cells, a sum of 220", async () => {
    for (const strategy of STRATEGIES) await compare(() => wideCase(5), strategy, `wide ${strategy}`);
  });

  test("products through cuBLAS (gemm: 'cublas'): random graphs, Tree-LSTM, wide batches", async () => {
    for (const strategy of STRATEGIES) {
      for (let seed = 1; seed <= 3; seed++) {
        const make = () => {
          const m = randomModel(seed);
          return { params: m.params, build: (cg: ComputationGraph) => buildRandomGraph(cg, m, { seed, steps: 28 }) };
        };
        await compare(make, strategy, `cuBLAS seed ${seed} ${strategy}`, true, "cublas");
      }
      const trees = randomTrees(2, 24, { minWords: 1, maxWords: 20, vocab: 40 });
      const make = () => {
        const m = treeLstmModel(2, { hidden: 64, embed: 32, vocab: 40 });
        return { params: m.params, build: (cg: ComputationGraph) => buildTreeLstmBatch(cg, m, trees) };
      };
      await compare(make, strategy, `cuBLAS trees ${strategy}`, false, "cublas");
      await compare(() => wideCase(5), strategy, `cuBLAS wide ${strategy}`, true, "cublas");
    }
  });

  for (const gemm of ["kernels", "cublas"] as const) {
    test(`launches per batch (${gemm}): what the plan implies (products T + 2 forward, 2T + 2 backward, per-weight dW; views none)`, () => {
      const trees = randomTrees(4, 6, { minWords: 2, maxWords: 12, vocab: 20 });
      for (const strategy of STRATEGIES) {
        const m = treeLstmModel(4, { hidden: 16, embed: 8, vocab: 20 });
        const gpu = gpuEngine(m.params, strategy, gemm);
        // our GEMM kernels count as kernels
        const split = (e: { kernels: number; cublas: number }) =>
          gemm === "kernels" ? { kernels: e.kernels + e.cublas, cublas: 0 } : e;
        try {
          const cg = new ComputationGraph();
          const loss = buildTreeLstmBatch(cg, m, trees);
          const before = gpu.launchCounts();
          gpu.forward(loss);
          const fwd = gpu.launchCounts();
          const plan = gpu.lastForwardPlan!;
          const expectF = split(expectedLaunches(cg, plan, "forward"));
          assert.equal(fwd.kernels - before.kernels, expectF.kernels, `${strategy} forward kernels`);
          assert.equal(fwd.cublas - before.cublas, expectF.cublas, `${strategy} forward GEMMs`);
          assert.equal(fwd.copies - before.copies, 1, "one table upload");
          gpu.backward(loss);
          const bwd = gpu.launchCounts();
          const expectB = split(expectedLaunches(cg, plan, "backward", loss.id));
          assert.equal(bwd.kernels - fwd.kernels, expectB.kernels, `${strategy} backward kernels`);
          assert.equal(bwd.cublas - fwd.cublas, expectB.cublas, `${strategy} backward GEMMs`);
          assert.equal(bwd.copies - fwd.copies, 3, "two memsets (zero, seed) and one table upload");
          console.log(
            `${gemm} ${strategy}: ${cg.size} nodes, ${plan.batchCount} batches; forward ${expectF.kernels} kernels + ` +
              `${expectF.cublas} cuBLAS, backward ${expectB.kernels} + ${expectB.cublas}`,
          );
        } finally {
          gpu.dispose();
        }
      }
    });
  }
});

describe("Tree-LSTM training steps on the GPU autobatch engine against the CPU engine", { skip }, () => {
  const trees = syntheticTrees(8, 11, { minWords: 3, maxWords: 9 });
  const vocab = Vocabulary.fromTrees(trees);
  const cases = [
    { optimizer: "sgd", strategy: "depth", dropout: 0, lr: 0.1, gemm: "kernels" },
    { optimizer: "sgd", strategy: "agenda", dropout: 0, lr: 0.1, gemm: "cublas" },
    { optimizer: "adam", strategy: "agenda", dropout: 0.2, lr: 0.01, gemm: "kernels" },
  ] as const;
  for (const c of cases) {
    test(`${c.optimizer}, ${c.strategy}, ${c.gemm}, dropout ${c.dropout}, clipping at 1: losses, then the weights`, () => {
      const make = () =>
        new TreeLstmModel({ vocabSize: vocab.size, embed: 12, hidden: 10, dropout: c.dropout, seed: 5 });
      const mC = make();
      const mG = make();
      const cpu = new CpuEngine(mC.params);
      const gpu = gpuEngine(mG.params, c.strategy, c.gemm);
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
          assert.ok(Math.abs(lg - lc) <= 1e-4 * Math.max(1, Math.abs(lc)), `loss at step ${step}: ${lg} vs ${lc}`);
          cpu.backward(lossC);
          gpu.backward(lossG);
          if (tC.clipScale(mC.params) < 1) clipped++;
          cpu.update(tC);
          gpu.update(tG);
        }
        assert.ok(clipped > 0, "clipping was active in at least one step");
        gpu.syncToHost();
        for (const p of mC.params.all) assertClose(mG.params.get(p.name).value, p.value, `'${p.name}' after 4 updates`);
        for (const p of mG.params.all) {
          assert.ok(
            gpu.device.readGradient(p.index).every((x) => x === 0),
            `${p.name}: gradients zeroed by the update`,
          );
        }
      } finally {
        gpu.dispose();
      }
    });
  }

  test("createEngine('autobatch') makes the GPU engine with the chosen strategy", () => {
    const m = treeLstmModel(1);
    const e = createEngine("autobatch", m.params, { device: "cuda:0", batching: "depth" });
    try {
      assert.ok(e instanceof AutobatchGpuEngine);
      assert.equal(e.strategy, "depth");
      assert.ok(e.device instanceof CudaAutobatchDevice);
      console.log(`device: ${e.device.name}`);
    } finally {
      e.dispose();
    }
  });
});
