// The GPU engines refuse a graph that reads another ParameterCollection than their own, naming the parameter and both
// collections, before anything runs on the device: the engine's weights stay as they were, and the engine still
// trains its own collection afterwards (the CPU engines are in test/collections.test.ts).
// Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { cudaAvailable } from "../../src/cuda/index.js";
import { syntheticTrees } from "../../src/data/synthetic.js";
import { Vocabulary } from "../../src/data/vocab.js";
import { AutobatchGpuEngine } from "../../src/engines/autobatch/gpu-engine.js";
import { EagerEngine } from "../../src/engines/eager/engine.js";
import type { Engine } from "../../src/engines/engine.js";
import { VppsEngine } from "../../src/engines/vpps/engine.js";
import { Vpps } from "../../src/engines/vpps/vpps.js";
import { CollectionMismatchError, ComputationGraph } from "../../src/graph/graph.js";
import type { ParameterCollection } from "../../src/model/parameters.js";
import { TreeLstmModel } from "../../src/models/treelstm/model.js";
import { SimpleSGDTrainer } from "../../src/optim/trainers.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const MiB = 1024 ** 2;
const cacheDir = process.env["VPPS_TEST_CACHE"] ?? join(tmpdir(), "vpps-test-kernels");
const trees = syntheticTrees(4, 5);
const vocab = Vocabulary.fromTrees(trees);
/** Two models of one shape and seed: equal weights, equal parameter indices; only the collection differs. */
const makeModel = () => new TreeLstmModel({ vocabSize: vocab.size, embed: 32, hidden: 32, seed: 3 });

/** The message names the engine, the first parameter of the graph, the graph's collection and the engine's. */
function foreign(engine: string, graphPc: ParameterCollection, enginePc: ParameterCollection) {
  return (e: unknown) => {
    assert.ok(e instanceof CollectionMismatchError, `a CollectionMismatchError, got ${String(e)}`);
    assert.match(
      e.message,
      new RegExp(
        `^${engine} engine: the graph reads parameter 'E' of ParameterCollection #${graphPc.id}, but this engine ` +
          `was made for ParameterCollection #${enginePc.id} \\('E', 'W_iou', 'U_iou', …\\)`,
      ),
    );
    return true;
  };
}

const hostWeights = (pc: ParameterCollection) => pc.all.map((p) => Float32Array.from(p.value));

/** The engine refuses model b's graph at every entry point, keeps its weights, then trains its own model a. */
function refusesThenTrains(engine: Engine, a: TreeLstmModel, b: TreeLstmModel): void {
  const before = hostWeights(a.params);
  const cg = new ComputationGraph();
  const loss = b.buildBatchLoss(cg, trees, vocab);
  const name = engine.name;
  if (engine.capabilities.forwardOnly) {
    assert.throws(() => engine.forward(loss), foreign(name, b.params, a.params));
    assert.throws(() => engine.value(loss), foreign(name, b.params, a.params));
  }
  assert.throws(() => engine.forwardScalar(loss), foreign(name, b.params, a.params));
  assert.throws(() => engine.backward(loss), foreign(name, b.params, a.params));
  const trainer = new SimpleSGDTrainer({ learningRate: 0.5 });
  engine.update(trainer);
  engine.syncToHost();
  for (const [k, p] of a.params.all.entries()) assert.deepEqual(p.value, before[k], `${p.name}: unchanged`);

  cg.renew();
  const own = a.buildBatchLoss(cg, trees, vocab);
  assert.ok(Number.isFinite(engine.forwardScalar(own)));
  engine.backward(own);
  engine.update(trainer);
  engine.syncToHost();
  assert.notDeepEqual(a.params.all[1]!.value, before[1], "W_iou trained");
}

describe("GPU engines refuse a graph of another ParameterCollection", { skip }, () => {
  test("eager", () => {
    const [a, b] = [makeModel(), makeModel()];
    const engine = new EagerEngine(a.params, { poolBytes: 64 * MiB });
    try {
      refusesThenTrains(engine, a, b);
    } finally {
      engine.dispose();
    }
  });

  for (const strategy of ["depth", "agenda"] as const) {
    test(`autobatch (${strategy})`, () => {
      const [a, b] = [makeModel(), makeModel()];
      const engine = new AutobatchGpuEngine(a.params, { strategy, poolBytes: 64 * MiB });
      try {
        refusesThenTrains(engine, a, b);
      } finally {
        engine.dispose();
      }
    });
  }

  test("vpps engine: the synchronous path and trainStep", () => {
    const [a, b] = [makeModel(), makeModel()];
    const engine = new VppsEngine(a.params, { cacheDir, variants: { rowsPerWarp: 1 }, name: "collections" });
    try {
      refusesThenTrains(engine, a, b);
      const before = hostWeights(a.params);
      const cg = new ComputationGraph();
      assert.throws(
        () => engine.trainStep(b.buildBatchLoss(cg, trees, vocab), new SimpleSGDTrainer({ learningRate: 0.5 })),
        foreign("vpps", b.params, a.params),
      );
      // the entry points refuse what is not a scalar expression (test/engine-arguments.test.ts, the CPU engines)
      // biome-ignore lint/suspicious/noExplicitAny: a JavaScript caller's argument
      const none: any = undefined;
      const trainer = new SimpleSGDTrainer({ learningRate: 0.5 });
      assert.throws(() => engine.trainStep(none, trainer), {
        message: "trainStep: argument 'loss' must be an Expression; got undefined",
      });
      cg.renew();
      const scores = b.buildTree(cg, trees[0]!, vocab, false).rootScores;
      assert.throws(() => engine.forwardScalar(scores), { message: /^forwardScalar: argument 'e' has shape \[5\]/ });
      assert.deepEqual(engine.takeLosses(true), [], "nothing was queued");
      engine.syncToHost();
      for (const [k, p] of a.params.all.entries()) assert.deepEqual(p.value, before[k], `${p.name}: unchanged`);
    } finally {
      engine.dispose();
    }
  });

  test("Vpps.fb", async () => {
    const [a, b] = [makeModel(), makeModel()];
    const v = await Vpps.create(a.params, {
      cacheDir,
      name: "collections",
      training: { learningRate: 0.5 },
      variants: { rowsPerWarp: 1, ctasPerSm: 1, transposed: false },
      host: { scheduleWorkers: 1 },
    });
    try {
      const before = hostWeights(a.params);
      const cg = new ComputationGraph();
      const loss = b.buildBatchLoss(cg, trees, vocab);
      assert.throws(() => v.fb(cg, loss), foreign("vpps", b.params, a.params));
      // biome-ignore lint/suspicious/noExplicitAny: a JavaScript caller's argument
      const none: any = undefined;
      assert.throws(() => v.fb(none, loss), {
        message: "Vpps.fb: argument 'graph' must be a ComputationGraph; got undefined",
      });
      assert.throws(() => v.fb(cg, none), { message: "Vpps.fb: argument 'loss' must be an Expression; got undefined" });
      assert.ok(Number.isNaN(await v.syncLatestLoss()), "no batch ran");
      v.syncToHost();
      for (const [k, p] of a.params.all.entries()) assert.deepEqual(p.value, before[k], `${p.name}: unchanged`);
      cg.renew();
      v.fb(cg, a.buildBatchLoss(cg, trees, vocab));
      assert.ok(Number.isFinite(await v.syncLatestLoss()), "its own model's batch ran");
    } finally {
      v.dispose();
    }
  });
});
