// The generic training loop (src/train/loop.ts) on a second task, a toy tagger (test/toy-task.ts): it learns, its
// checkpoints and state.json rebuild it, a resumed run equals an uninterrupted one, and an engine that cannot run
// forward-only passes is evaluated on an evaluation engine made once and refreshed before every evaluation.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { CpuEngine } from "../src/engines/cpu.js";
import type { Engine, EngineCapabilities } from "../src/engines/engine.js";
import type { Expression } from "../src/graph/graph.js";
import type { ParameterCollection } from "../src/model/parameters.js";
import { loadParameters, readSafetensors } from "../src/model/safetensors.js";
import type { Trainer } from "../src/optim/trainers.js";
import { evaluate } from "../src/train/evaluate.js";
import { type RunState, train } from "../src/train/loop.js";
import { inRunDir } from "./helpers.js";
import { toyTask } from "./toy-task.js";

const data = toyTask.data.synthetic.make(4);
const vocab = toyTask.vocabulary.build(data.train);

function run(opts: {
  epochs: number;
  makeEngine?: (p: ParameterCollection) => Engine;
  makeEvaluationEngine?: (p: ParameterCollection) => Engine;
  outDir?: string;
  resume?: { checkpoint: string; epochsDone: number; previous: RunState["epochs"] };
  optimizer?: "sgd" | "adam";
}) {
  return inRunDir(opts.outDir, { model: toyTask.name, ...(opts.resume ? { resume: opts.resume } : {}) }, (runDir) =>
    train({
      task: toyTask,
      options: toyTask.defaults,
      train: data.train,
      dev: data.dev,
      vocab,
      epochs: opts.epochs,
      batch: 8,
      learningRate: opts.optimizer === "sgd" ? 0.2 : 0.05,
      optimizer: opts.optimizer ?? "adam",
      seed: 3,
      makeEngine: opts.makeEngine ?? ((p) => new CpuEngine(p)),
      ...(opts.makeEvaluationEngine ? { makeEvaluationEngine: opts.makeEvaluationEngine } : {}),
      ...(runDir ? { runDir } : {}),
      ...(opts.resume ? { resume: opts.resume } : {}),
    }),
  );
}

/**
 * A training engine without forward-only passes (as VPPS): training runs on the CPU engine, forward() throws.
 * Counts host syncs.
 */
class TrainOnlyEngine implements Engine {
  readonly name = "train-only";
  readonly capabilities: EngineCapabilities = { forwardOnly: false, nodeGradients: false };
  private readonly inner: CpuEngine;
  syncs = 0;
  constructor(params: ParameterCollection) {
    this.inner = new CpuEngine(params);
  }
  forward(_e: Expression): void {
    throw new Error("train-only engine: no forward-only passes");
  }
  forwardScalar(e: Expression): number {
    return this.inner.forwardScalar(e);
  }
  backward(loss: Expression): void {
    this.inner.backward(loss);
  }
  value(_e: Expression): Float32Array {
    throw new Error("train-only engine: no values");
  }
  gradient(_e: Expression): Float32Array {
    throw new Error("train-only engine: no gradients");
  }
  update(trainer: Trainer): void {
    this.inner.update(trainer);
  }
  syncToHost(): void {
    this.syncs++;
  }
  dispose(): void {}
}

/** The CPU engine as an evaluation engine, recording reloads and disposal. */
class RecordingEvaluator extends CpuEngine {
  reloads = 0;
  disposed = 0;
  reloadParameters(): void {
    this.reloads++;
  }
  override dispose(): void {
    this.disposed++;
  }
}

describe("the generic training loop on a second task (a toy tagger)", () => {
  test("it learns; every metric is reported, the first as devAccuracy; the loss is per token", () => {
    const { model, summary } = run({ epochs: 4 });
    assert.equal(summary.epochs.length, 4);
    const last = summary.epochs[3]!;
    assert.deepEqual(Object.keys(last.devMetrics), ["tokenAccuracy", "sentenceAccuracy"]);
    assert.equal(last.devAccuracy, last.devMetrics.tokenAccuracy);
    assert.ok(last.devMetrics.tokenAccuracy! > 0.95, `token accuracy ${last.devMetrics.tokenAccuracy}`);
    assert.ok(last.trainLoss < summary.epochs[0]!.trainLoss && last.trainLoss < Math.log(2), `${last.trainLoss}`);
    assert.equal(summary.bestDevAccuracy, Math.max(...summary.epochs.map((e) => e.devAccuracy)));
    assert.equal(summary.parameters, model.params.count);
    const again = evaluate(model, toyTask.metrics, vocab, new CpuEngine(model.params), data.dev);
    assert.deepEqual(again, last.devMetrics, "evaluation is deterministic");
  });

  test("a checkpoint and state.json rebuild the model; a resumed run equals an uninterrupted one", () => {
    const a = mkdtempSync(join(tmpdir(), "vpps-loop-a-"));
    const b = mkdtempSync(join(tmpdir(), "vpps-loop-b-"));
    const straight = run({ epochs: 2, outDir: a, optimizer: "sgd" });
    run({ epochs: 1, outDir: b, optimizer: "sgd" });
    const state = JSON.parse(readFileSync(join(b, "state.json"), "utf8")) as RunState;
    assert.equal(state.model, "toy-tagger");
    assert.deepEqual(state.options, { embed: 8 });
    assert.deepEqual(state.training, {
      optimizer: "sgd",
      learningRate: 0.2,
      batch: 8,
      seed: 3,
      clip: 5,
      shuffle: "examples",
    });
    const resumed = run({
      epochs: 2,
      outDir: b,
      optimizer: "sgd",
      resume: { checkpoint: join(b, "epoch-1.safetensors"), epochsDone: 1, previous: state.epochs },
    });
    // the files differ in their metadata (timings, paths): every tensor must be equal
    assert.deepEqual(
      readSafetensors(join(b, "epoch-2.safetensors")).tensors,
      readSafetensors(join(a, "epoch-2.safetensors")).tensors,
    );
    assert.equal(resumed.summary.epochs.length, 2);
    assert.equal(resumed.summary.epochs[1]!.trainLoss, straight.summary.epochs[1]!.trainLoss);
    assert.deepEqual(resumed.summary.epochs[1]!.devMetrics, straight.summary.epochs[1]!.devMetrics);

    // rebuilt from state.json and the last checkpoint alone, the model scores what training reported
    const saved = JSON.parse(readFileSync(join(b, "state.json"), "utf8")) as RunState;
    const options = toyTask.restoreOptions(saved.options, toyTask.defaults);
    const savedVocab = toyTask.vocabulary.fromJSON(saved.vocabulary);
    const rebuilt = toyTask.create(options, savedVocab, 99);
    loadParameters(rebuilt.params, join(b, "epoch-2.safetensors"));
    const metrics = evaluate(rebuilt, toyTask.metrics, savedVocab, new CpuEngine(rebuilt.params), data.dev);
    assert.deepEqual(metrics, saved.epochs[1]!.devMetrics);
    assert.throws(
      () => toyTask.restoreOptions({ embed: 0 }, toyTask.defaults),
      /options\.embed must be a positive integer/,
    );
  });

  test("an engine without forward-only passes is evaluated on one evaluation engine, refreshed every epoch", () => {
    const reference = run({ epochs: 3 });
    let trainer: TrainOnlyEngine | undefined;
    const made: RecordingEvaluator[] = [];
    const out = mkdtempSync(join(tmpdir(), "vpps-loop-eval-"));
    const { summary } = run({
      epochs: 3,
      outDir: out,
      makeEngine: (p) => {
        trainer = new TrainOnlyEngine(p);
        return trainer;
      },
      makeEvaluationEngine: (p) => {
        const e = new RecordingEvaluator(p);
        made.push(e);
        return e;
      },
    });
    assert.equal(made.length, 1, "one evaluation engine for the whole run");
    assert.equal(made[0]!.reloads, 2, "its weights refreshed before every evaluation after the first");
    assert.equal(made[0]!.disposed, 1, "disposed at the end");
    assert.equal(trainer!.syncs, 6, "a host sync before each evaluation and each checkpoint");
    summary.epochs.forEach((e, k) => {
      assert.deepEqual(e.devMetrics, reference.summary.epochs[k]!.devMetrics, `epoch ${k + 1}: the same metrics`);
    });
    assert.throws(
      () => evaluate(reference.model, toyTask.metrics, vocab, new TrainOnlyEngine(reference.model.params), data.dev),
      /engine train-only cannot run forward-only passes/,
    );
  });
});
