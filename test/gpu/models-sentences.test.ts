// TD-RNN, TD-LSTM and RvNN on a real GPU against the CPU engine: eager and the autobatch engine (depth and agenda,
// products by our kernels and by cuBLAS) node by node on small batches (a pyramid node read by two parents must get
// both gradients: two batched GEMM terms scatter into it concurrently), SST batches of up to 32 sentences (every
// parameter gradient), losses and updated weights over SGD and Adam steps; and VPPS, which runs these models
// unchanged: loss, gradients and SGD-updated weights per batch, and Adam over consecutive batches. Skipped, with the
// reason printed, without a GPU.

import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { cudaAvailable } from "../../src/cuda/index.js";
import { readTrees } from "../../src/data/sst.js";
import { syntheticTrees } from "../../src/data/synthetic.js";
import type { TreeNode } from "../../src/data/tree.js";
import { Vocabulary } from "../../src/data/vocab.js";
import { AutobatchGpuEngine } from "../../src/engines/autobatch/gpu-engine.js";
import type { BatchStrategy } from "../../src/engines/autobatch/plan.js";
import { CpuEngine } from "../../src/engines/cpu.js";
import { EagerEngine } from "../../src/engines/eager/engine.js";
import type { Engine } from "../../src/engines/engine.js";
import { Vpps } from "../../src/engines/vpps/vpps.js";
import { ComputationGraph } from "../../src/graph/graph.js";
import type { ParameterCollection } from "../../src/model/parameters.js";
import { RvnnModel } from "../../src/models/rvnn/model.js";
import { sentenceOf } from "../../src/models/shared/sst-data.js";
import { TdLstmModel } from "../../src/models/td-lstm/model.js";
import { TdRnnModel } from "../../src/models/td-rnn/model.js";
import { AdamTrainer, makeTrainer } from "../../src/optim/trainers.js";
import { compareWithCpu, scaleTolerance } from "../op-suite.js";
import { SENTENCE_MODELS, type SentenceCase } from "../sentence-cases.js";
import { compareAdamBatch, referenceAdamBatch, referenceSgdBatch, tensorDifference } from "../vpps-reference.js";
import { cacheDir, GPU_ENGINES } from "./engines.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const MiB = 1024 ** 2;
const STRATEGIES: readonly BatchStrategy[] = ["depth", "agenda"];

/** SST training trees beside the repository (or copied into .gpu-data on a GPU machine), else synthetic trees. */
const SST_FILE = [
  join(import.meta.dirname, "..", "..", "..", "shared", "data", "sst", "train.txt"),
  join(import.meta.dirname, "..", "..", ".gpu-data", "sst", "train.txt"),
].find((f) => existsSync(f));
const TREES: TreeNode[] = SST_FILE ? readTrees(SST_FILE, { maxTrees: 96 }) : syntheticTrees(96, 5, { maxWords: 30 });
const VOCAB = Vocabulary.fromTrees(TREES);
const SENTENCES = TREES.map(sentenceOf);
console.log(`sentence models on the GPU: ${SST_FILE ? `SST (${SST_FILE})` : "synthetic trees (SST not found)"}`);

/**
 * A model over TREES at hidden H (TD-RNN: embedding H; the others: embedding H/2 + 1, unlike H on purpose); its
 * `build` takes the batch's example indices.
 */
function realCase(name: string, H: number, seed: number): SentenceCase {
  const E = name === "td-rnn" ? H : H / 2 + 1;
  if (name === "rvnn") {
    const m = new RvnnModel({ vocabSize: VOCAB.size, hidden: H, embed: E, seed });
    return { params: m.params, build: (cg, b) => m.buildBatchLoss(cg, pick(TREES, b!), VOCAB) };
  }
  const m =
    name === "td-rnn"
      ? new TdRnnModel({ vocabSize: VOCAB.size, hidden: H, seed })
      : new TdLstmModel({ vocabSize: VOCAB.size, hidden: H, embed: E, seed });
  return { params: m.params, build: (cg, b) => m.buildBatchLoss(cg, pick(SENTENCES, b!), VOCAB) };
}

const pick = <E>(xs: readonly E[], batch: number[]) => batch.map((k) => xs[k]!);
const range = (start: number, n: number) => Array.from({ length: n }, (_, k) => start + k);

// the GPU engines as the op suite adapts them (test/gpu/engines.ts): eager, autobatch × strategy × GEMM, VPPS
const ENGINES = GPU_ENGINES;

describe("the sentence models on the GPU engines, against the CPU engine", { skip }, () => {
  for (const { name, make } of SENTENCE_MODELS) {
    for (const engine of ENGINES) {
      test(`${name}, small batch (1 to 6 words), every node: ${engine.name}`, async () => {
        assert.equal(await compareWithCpu(() => make(3, name === "td-rnn" ? 6 : 5, 4), engine), "");
      });
    }
    for (const engine of ENGINES) {
      test(`${name}, hidden 64, a batch of 32 SST sentences, parameter gradients: ${engine.name}`, async () => {
        const make32 = () => {
          const c = realCase(name, 64, 5);
          return { params: c.params, build: (cg: ComputationGraph) => c.build(cg, range(0, 32)) };
        };
        assert.equal(await compareWithCpu(make32, engine, { everyNode: false }), "");
      });
    }
  }
});

/**
 * First element of the SGD steps (new − old weight) off by more than 2e-4 of the largest step plus two fp32 ulps of
 * the weight itself (W − step rounds to the weight's precision), or "" (test/gpu/vpps.test.ts's rule).
 */
function stepDifference(what: string, expected: Float32Array, actual: Float32Array, base: Float32Array): string {
  let scale = 0;
  for (const v of expected) scale = Math.max(scale, Math.abs(v));
  for (let k = 0; k < expected.length; k++) {
    const tol = 1e-9 + 2e-4 * scale + 2.4e-7 * Math.abs(base[k]!);
    if (!(Math.abs(expected[k]! - actual[k]!) <= tol)) return `${what}[${k}]: CPU ${expected[k]}, VPPS ${actual[k]}`;
  }
  return "";
}

/** |a − e| ≤ 1e-4 · max(|e|, the tensor's largest |e|). */
function assertClose(actual: Float32Array, expected: Float32Array, what: string): void {
  const k = scaleTolerance(1e-4).values(actual, expected);
  if (k >= 0) assert.fail(`${what}: element ${k} is ${actual[k]}, expected ${expected[k]}`);
}

describe("training steps on eager and autobatch: losses and updated weights equal the CPU engine's", { skip }, () => {
  const engines: { name: string; make: (p: ParameterCollection) => Engine }[] = [
    { name: "eager", make: (p) => new EagerEngine(p, { poolBytes: 256 * MiB }) },
    ...STRATEGIES.map((s) => ({
      name: `autobatch (${s})`,
      make: (p: ParameterCollection) => new AutobatchGpuEngine(p, { strategy: s, poolBytes: 256 * MiB }),
    })),
  ];
  const batches = [range(0, 1), range(1, 8), range(9, 16)];
  for (const { name } of SENTENCE_MODELS) {
    for (const optimizer of ["sgd", "adam"] as const) {
      test(`${name}, hidden 32, ${optimizer}: batches of 1, 8 and 16 SST sentences`, () => {
        for (const engine of engines) {
          const ref = realCase(name, 32, 4);
          const got = realCase(name, 32, 4);
          const cpu = new CpuEngine(ref.params);
          const gpu = engine.make(got.params);
          const lr = optimizer === "adam" ? 0.001 : 0.01; // the training default for Adam
          const tR = makeTrainer(optimizer, { learningRate: lr, clipThreshold: 5 });
          const tG = makeTrainer(optimizer, { learningRate: lr, clipThreshold: 5 });
          try {
            for (const [k, batch] of batches.entries()) {
              const cgR = new ComputationGraph();
              const cgG = new ComputationGraph();
              const lR = ref.build(cgR, batch);
              const lG = got.build(cgG, batch);
              const b = cpu.forwardScalar(lR);
              const a = gpu.forwardScalar(lG);
              assert.ok(Math.abs(a - b) <= 1e-4 * Math.max(1, Math.abs(b)), `${engine.name} batch ${k}: ${a} vs ${b}`);
              cpu.backward(lR);
              gpu.backward(lG);
              cpu.update(tR);
              gpu.update(tG);
            }
            gpu.syncToHost();
            for (const p of ref.params.all) {
              assertClose(got.params.get(p.name).value, p.value, `${engine.name}, ${optimizer}: '${p.name}'`);
            }
          } finally {
            gpu.dispose();
          }
        }
      });
    }
  }
});

describe("VPPS trains the sentence models: loss, gradients and updated weights of the CPU engine", { skip }, () => {
  for (const { name } of SENTENCE_MODELS) {
    test(`${name}, hidden 128: SGD batches of 1, 8 and 32 SST sentences`, async () => {
      const c = realCase(name, 128, 6);
      const pc = c.params;
      const v = await Vpps.create(pc, {
        cacheDir,
        exportGradients: true,
        name: "sentences",
        training: { learningRate: 0.05, clip: 5 },
        variants: { rowsPerWarp: 1 },
      });
      try {
        for (const batch of [range(0, 1), range(1, 8), range(9, 32)]) {
          const cg = new ComputationGraph();
          const loss = c.build(cg, batch);
          const ref = referenceSgdBatch(pc, loss, 0.05, 5);
          const before = pc.all.map((p) => Float32Array.from(p.value));
          v.fb(cg, loss);
          const got = await v.syncLatestLoss();
          const grads = v.gradients();
          v.syncToHost();
          assert.ok(Math.abs(got - ref.loss) <= 1e-4 * Math.max(1, ref.loss), `batch of ${batch.length}: loss ${got}`);
          for (const [i, p] of pc.all.entries()) {
            const step = (x: Float32Array) => Float32Array.from(x, (y, k) => y - before[i]![k]!);
            const d =
              tensorDifference(`gradient of ${p.name}`, ref.gradients[i]!, grads[i]!) ||
              stepDifference(`update of ${p.name}`, step(ref.values[i]!), step(p.value), before[i]!);
            assert.equal(d, "", `batch of ${batch.length}`);
          }
        }
      } finally {
        v.dispose();
      }
    });

    test(`${name}, hidden 64: 3 Adam batches (moments and steps against the AdamTrainer)`, async () => {
      const c = realCase(name, 64, 8);
      const ref = realCase(name, 64, 8); // same seed: the same initial weights
      const trainer = new AdamTrainer({ learningRate: 0.01, clipThreshold: 1 });
      const v = await Vpps.create(c.params, {
        cacheDir,
        exportGradients: true,
        name: "sentences",
        training: { learningRate: 0.01, clip: 1, optimizer: "adam" },
        variants: { rowsPerWarp: 1 },
      });
      const loose = { count: 0, total: 0 };
      try {
        for (const [k, batch] of [range(0, 4), range(4, 8), range(12, 16)].entries()) {
          // the reference starts each batch from VPPS's weights (its moments stay its own): otherwise fp32 differences
          // of the earlier steps, which Adam's per-element division amplifies, move the later batches' gradients
          // (td-lstm on the synthetic trees: 2.4e-4 of the scale at batch 3)
          for (const [i, p] of ref.params.all.entries()) p.value.set(c.params.all[i]!.value);
          const cgR = new ComputationGraph();
          const expected = referenceAdamBatch(ref.params, trainer, ref.build(cgR, batch));
          const cg = new ComputationGraph();
          const loss = c.build(cg, batch);
          const before = c.params.all.map((p) => Float32Array.from(p.value));
          v.fb(cg, loss);
          const value = await v.syncLatestLoss();
          const gradients = v.gradients();
          v.syncToHost();
          const moments = v.adamMoments();
          assert.ok(moments);
          const after = c.params.all.map((p) => Float32Array.from(p.value));
          const got = { loss: value, gradients, before, after, moments };
          assert.equal(compareAdamBatch(c.params.all, expected, got, 0.01, k + 1, loose, 1e-4), "", `batch ${k + 1}`);
        }
        assert.ok(loose.count <= 0.01 * loose.total, `${loose.count} of ${loose.total} steps compared loosely`);
      } finally {
        v.dispose();
      }
    });
  }
});
