// VppsEngine's pipelined path (trainStep / takeLosses, what `vpps train --engine vpps` uses) on a real GPU against
// the same engine class driven synchronously (forwardScalar → backward → update) from the same initial weights: the
// per-batch losses in order, the weights after syncToHost, the trainer's step count, synchronous batches mixed in
// between queued ones (their losses kept apart), and profiling batches reporting their losses too. Skipped, with the
// reason printed, without a GPU.

import assert from "node:assert/strict";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { cudaAvailable } from "../../src/cuda/index.js";
import { syntheticTrees } from "../../src/data/synthetic.js";
import { Vocabulary } from "../../src/data/vocab.js";
import { isPipelined } from "../../src/engines/engine.js";
import { ForwardPasses } from "../../src/engines/registry.js";
import { VppsEngine } from "../../src/engines/vpps/engine.js";
import type { VppsOptions } from "../../src/engines/vpps/vpps.js";
import { ComputationGraph } from "../../src/graph/graph.js";
import { treeLstmBuilderSpec } from "../../src/models/treelstm/graph-builder.js";
import { TreeLstmModel } from "../../src/models/treelstm/model.js";
import { AdamTrainer, SimpleSGDTrainer, type Trainer } from "../../src/optim/trainers.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const cacheDir = process.env["VPPS_TEST_CACHE"] ?? join(tmpdir(), "vpps-test-kernels");
const H = 128;
const BATCH = 8;
const BATCHES = 12;
const LR = 0.05;
const CLIP = 5;
/** One variant for both engines (no timing-dependent choice), so that both run the same kernel. */
const FIXED: VppsOptions = { cacheDir, variants: { rowsPerWarp: 1 }, name: "pipelined" };

const trees = syntheticTrees(BATCH * BATCHES, 7);
const vocab = Vocabulary.fromTrees(trees);

/** A fresh model: every call has the same initial weights (same seed). */
const makeModel = () => new TreeLstmModel({ vocabSize: vocab.size, embed: H, hidden: H, seed: 3, dropout: 0.1 });

/** Batch k's loss in a fresh graph (dropout on, with a key per batch, as the training loop sets it). */
function batchLoss(model: TreeLstmModel, k: number) {
  const cg = new ComputationGraph();
  cg.training = true;
  cg.dropoutKey = 1000 + k;
  return model.buildBatchLoss(cg, trees.slice(BATCH * k, BATCH * (k + 1)), vocab);
}

/** The test's tolerance for losses: 1e-4 relative. */
function lossDifference(what: string, expected: readonly number[], actual: readonly number[]): string {
  if (expected.length !== actual.length) return `${what}: ${expected.length} losses expected, got ${actual.length}`;
  for (let k = 0; k < expected.length; k++) {
    const e = expected[k]!;
    const a = actual[k]!;
    if (!(Math.abs(e - a) <= 1e-4 * Math.max(1, Math.abs(e)))) return `${what}[${k}]: synchronous ${e}, pipelined ${a}`;
  }
  return "";
}

/**
 * First element off by more than 2e-4 of the tensor's largest magnitude plus two fp32 ulps of the weight (as in
 * test/gpu/vpps.test.ts: fp32 sums in another order), or "".
 */
function weightDifference(what: string, expected: Float32Array, actual: Float32Array): string {
  let scale = 0;
  for (const v of expected) scale = Math.max(scale, Math.abs(v));
  for (let k = 0; k < expected.length; k++) {
    const tol = 1e-9 + 2e-4 * scale + 2.4e-7 * Math.abs(expected[k]!);
    const d = Math.abs(expected[k]! - actual[k]!);
    if (!(d <= tol))
      return `${what}[${k}]: synchronous ${expected[k]}, pipelined ${actual[k]} (tol ${tol.toExponential(1)})`;
  }
  return "";
}

/** Batches [from, to) through forwardScalar → backward → update; their losses. */
function runSync(engine: VppsEngine, model: TreeLstmModel, trainer: Trainer, from: number, to: number): number[] {
  const losses: number[] = [];
  for (let k = from; k < to; k++) {
    const loss = batchLoss(model, k);
    losses.push(engine.forwardScalar(loss));
    engine.backward(loss);
    engine.update(trainer);
  }
  return losses;
}

/** Batches [from, to) through trainStep, taking the losses that arrive after each (none waited for). */
function runQueued(engine: VppsEngine, model: TreeLstmModel, trainer: Trainer, from: number, to: number): number[] {
  const losses: number[] = [];
  for (let k = from; k < to; k++) {
    engine.trainStep(batchLoss(model, k), trainer);
    losses.push(...engine.takeLosses(false));
    assert.ok(losses.length <= k + 1 - from, `batch ${k}: more losses than batches queued`);
  }
  return losses;
}

/** The weights of `model` after syncing `engine`. */
function weights(engine: VppsEngine, model: TreeLstmModel): Float32Array[] {
  engine.syncToHost();
  return model.params.all.map((p) => Float32Array.from(p.value));
}

function compareWeights(model: TreeLstmModel, expected: Float32Array[], actual: Float32Array[]): string {
  let d = "";
  model.params.all.forEach((p, i) => {
    d ||= weightDifference(p.name, expected[i]!, actual[i]!);
  });
  return d;
}

/**
 * Hands the side's engine the Tree-LSTM's graph builder and waits (at most a minute) until its schedule workers build
 * (they load the builder in the background; one variant: nothing to profile). False without schedule workers.
 */
function startWorkerBuilds(side: { readonly model: TreeLstmModel; readonly engine: VppsEngine }): boolean {
  if (side.engine.vpps.scheduleWorkers === 0) return false;
  assert.equal(side.engine.setGraphBuilder(treeLstmBuilderSpec(side.model, vocab, trees)), true);
  const t0 = Date.now();
  while (!side.engine.buildsInWorkers) {
    assert.ok(Date.now() - t0 < 60_000, "the schedule workers loaded the graph builder within a minute");
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
  }
  return true;
}

/** One engine over a fresh model, with its own SGD trainer. */
interface Side {
  readonly model: TreeLstmModel;
  readonly trainer: SimpleSGDTrainer;
  readonly engine: VppsEngine;
}

/** Runs `body` with a synchronous and a pipelined side from the same initial weights, disposing both after. */
function withTwoEngines(body: (sync: Side, piped: Side) => void): void {
  const side = (): Side => {
    const model = makeModel();
    const trainer = new SimpleSGDTrainer({ learningRate: LR, clipThreshold: CLIP });
    return { model, trainer, engine: new VppsEngine(model.params, FIXED) };
  };
  const sync = side();
  try {
    const piped = side();
    try {
      body(sync, piped);
    } finally {
      piped.engine.dispose();
    }
  } finally {
    sync.engine.dispose();
  }
}

describe("VppsEngine.trainStep (pipelined) against the same engine driven synchronously", { skip }, () => {
  test(`${BATCHES} SGD batches of ${BATCH} trees, hidden ${H}: the same losses in order and the same weights`, () => {
    withTwoEngines((sync, piped) => {
      assert.ok(isPipelined(piped.engine));
      if (availableParallelism() > 1) assert.ok(piped.engine.vpps.scheduleWorkers > 0, "schedule workers by default");
      const expected = runSync(sync.engine, sync.model, sync.trainer, 0, BATCHES);
      const early = runQueued(piped.engine, piped.model, piped.trainer, 0, BATCHES);
      const rest = piped.engine.takeLosses(true);
      console.log(`  ${early.length} losses arrived while queuing, ${rest.length} at the wait`);
      assert.equal(piped.engine.takeLosses(true).length, 0, "every loss is handed back once");
      const got = [...early, ...rest];
      console.log(`  losses synchronous ${expected.map((x) => x.toFixed(4)).join(", ")}`);
      console.log(`  losses pipelined   ${got.map((x) => x.toFixed(4)).join(", ")}`);
      assert.equal(lossDifference("loss", expected, got), "");
      assert.equal(piped.trainer.updates, BATCHES);
      assert.equal(sync.trainer.updates, BATCHES);
      assert.equal(piped.engine.vpps.updates, BATCHES);
      const initial = makeModel().params.all.map((p) => Float32Array.from(p.value));
      const w = weights(piped.engine, piped.model);
      assert.equal(compareWeights(piped.model, weights(sync.engine, sync.model), w), "");
      assert.notDeepEqual(w, initial, "training changed the weights");
    });
  });

  test("trainStepBuilt: batches the schedule workers build from indices train as graphs built here", () => {
    withTwoEngines((sync, piped) => {
      if (!startWorkerBuilds(piped)) return; // one core: no workers to build on
      const expected = runSync(sync.engine, sync.model, sync.trainer, 0, BATCHES);
      const got: number[] = [];
      for (let k = 0; k < BATCHES; k++) {
        const examples = Int32Array.from({ length: BATCH }, (_, i) => BATCH * k + i);
        piped.engine.trainStepBuilt({ examples, training: true, dropoutKey: 1000 + k }, piped.trainer);
        got.push(...piped.engine.takeLosses(false));
      }
      got.push(...piped.engine.takeLosses(true));
      assert.equal(lossDifference("loss", expected, got), "");
      assert.equal(piped.trainer.updates, BATCHES);
      const w = weights(piped.engine, piped.model);
      assert.equal(compareWeights(piped.model, weights(sync.engine, sync.model), w), "");
    });
  });

  test("recurring batches (fixed batches): later passes launch kept scripts (of worker and main-thread builds)", () => {
    withTwoEngines((sync, piped) => {
      if (!startWorkerBuilds(piped)) return; // one core: no workers to build on
      const PASSES = 3;
      const B = 6;
      const expected: number[] = [];
      for (let pass = 0; pass < PASSES; pass++) expected.push(...runSync(sync.engine, sync.model, sync.trainer, 0, B));
      const got: number[] = [];
      const request = (k: number, dropoutKey: number) => ({
        examples: Int32Array.from({ length: BATCH }, (_, i) => BATCH * k + i),
        training: true,
        dropoutKey,
        recurring: true,
      });
      for (let pass = 0; pass < PASSES; pass++) {
        for (let k = 0; k < B; k++) {
          // the first pass builds the odd batches here (their scripts kept under the workers' names), as the loop does
          // while no worker has the builder yet
          if (pass === 0 && k % 2 === 1) {
            piped.engine.trainStep(batchLoss(piped.model, k), piped.trainer, request(k, 1000 + k));
          } else piped.engine.trainStepBuilt(request(k, 1000 + k), piped.trainer);
          got.push(...piped.engine.takeLosses(false));
        }
        // the end of an epoch in the training loop: every batch launched (a batch's script is kept when it is taken
        // from the workers, so one still on a worker when its next pass asks for it is scheduled again)
        got.push(...piped.engine.takeLosses(true));
      }
      assert.equal(lossDifference("loss", expected, got), "");
      const stats = piped.engine.vpps.stats;
      assert.equal(stats.keptBatches, (PASSES - 1) * B, "every batch after the first pass from its kept script");
      assert.equal(
        compareWeights(piped.model, weights(sync.engine, sync.model), weights(piped.engine, piped.model)),
        "",
      );
      // the model has dropout: a batch with another dropout key is scheduled again, not taken from the cache
      piped.engine.trainStepBuilt(request(0, 5000), piped.trainer);
      assert.equal(piped.engine.takeLosses(true).length, 1);
      assert.equal(piped.engine.vpps.stats.keptBatches, (PASSES - 1) * B);
    });
  });

  test("forwardScalar/backward/update between queued steps: queued batches finish first, losses kept apart", () => {
    withTwoEngines((sync, piped) => {
      const expected = runSync(sync.engine, sync.model, sync.trainer, 0, BATCHES);
      const half = BATCHES / 2;
      const queued = runQueued(piped.engine, piped.model, piped.trainer, 0, half);
      // a synchronous batch right after queued ones: its loss is its own, not one of the queued batches'
      const mixed = runSync(piped.engine, piped.model, piped.trainer, half, half + 1);
      queued.push(...piped.engine.takeLosses(false));
      assert.equal(queued.length, half, "the queued batches' losses, all arrived, and not the synchronous one's");
      assert.equal(lossDifference("queued loss", expected.slice(0, half), queued), "");
      assert.equal(lossDifference("synchronous loss", expected.slice(half, half + 1), mixed), "");
      const after = [
        ...runQueued(piped.engine, piped.model, piped.trainer, half + 1, BATCHES),
        ...piped.engine.takeLosses(true),
      ];
      assert.equal(lossDifference("loss after", expected.slice(half + 1), after), "");
      assert.equal(piped.trainer.updates, BATCHES);
      const w = weights(piped.engine, piped.model);
      assert.equal(compareWeights(piped.model, weights(sync.engine, sync.model), w), "");
    });
  });

  test("Adam while the plan variants are profiled: one finite loss per queued batch, the trainer's steps", () => {
    const model = makeModel();
    const trainer = new AdamTrainer({ learningRate: 0.01, clipThreshold: 1 });
    const engine = new VppsEngine(model.params, { cacheDir, variants: { profileBatches: 2, profileNodes: 0 } });
    const passes = new ForwardPasses(engine, model.params);
    try {
      const losses = [...runQueued(engine, model, trainer, 0, BATCHES), ...engine.takeLosses(true)];
      console.log(`  variants ${engine.vpps.variantInfo.length}, chosen ${engine.vpps.chosenVariant?.name ?? "-"}`);
      assert.equal(losses.length, BATCHES, "every batch, profiled or not, reports its loss once");
      assert.ok(
        losses.every((x) => Number.isFinite(x) && x > 0),
        `losses ${losses.join(", ")}`,
      );
      assert.equal(engine.vpps.optimizer, "adam");
      assert.equal(trainer.updates, BATCHES);
      assert.equal(engine.vpps.updates, BATCHES);
      // an evaluation pass after queued steps sees the trained weights (ForwardPasses syncs them to the evaluation
      // engine)
      const cg = new ComputationGraph();
      const root = model.buildTree(cg, trees[0]!, vocab, false).rootScores;
      const evaluator = passes.engine();
      evaluator.forward(root);
      assert.ok(evaluator.value(root).every(Number.isFinite));
    } finally {
      passes.dispose();
      engine.dispose();
    }
  });
});
