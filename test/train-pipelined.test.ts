// The training loop's pipelined path (engines that queue a step and hand its loss back later, as VPPS does), without
// a GPU: a test double over the CPU engine that holds each loss back for a few batches must train exactly as the
// plain CPU engine does (same epoch losses, same progress losses, same weights), a late NaN must still stop the run,
// and the VPPS batch pipeline's per-batch hook must report every batch once, in order.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { splitSynthetic } from "../src/data/synthetic.js";
import { Vocabulary } from "../src/data/vocab.js";
import { CpuEngine } from "../src/engines/cpu.js";
import {
  canBuildInWorkers,
  type Engine,
  type EngineCapabilities,
  isPipelined,
  type PipelinedEngine,
  type WorkerBuildEngine,
} from "../src/engines/engine.js";
import { KERNEL_ERRORS } from "../src/engines/vpps/codegen/interpreter.js";
import { BatchPipeline, type SlotDevice } from "../src/engines/vpps/runtime/pipeline.js";
import type { BuildBatch, BuildRequest, GraphBuilderSpec } from "../src/graph/builder.js";
import { ComputationGraph, type Expression } from "../src/graph/graph.js";
import { ParameterCollection } from "../src/model/parameters.js";
import { createGraphBuilder } from "../src/models/treelstm/graph-builder.js";
import type { Trainer } from "../src/optim/trainers.js";
import type { TrainProgress } from "../src/train/loop.js";
import { trainTreeLstm } from "../src/train/treelstm.js";

/**
 * A pipelined engine made of the CPU engine: `trainStep` trains at once, but each loss is released only `lag`
 * batches later (all of them on `takeLosses(true)`); batch `poison` (0-based, counted over the run) reports NaN.
 * Records what the loop did, and any forward pass or host sync made while losses were still held back.
 */
class LaggingEngine implements PipelinedEngine {
  readonly name = "lagging-cpu";
  readonly capabilities: EngineCapabilities = { forwardOnly: true, nodeGradients: true };
  private readonly inner: CpuEngine;
  private readonly held: number[] = [];
  steps = 0;
  syncSteps = 0;
  waits = 0;
  disposed = false;
  readonly violations: string[] = [];

  constructor(
    params: ParameterCollection,
    private readonly lag: number,
    private readonly poison = -1,
  ) {
    this.inner = new CpuEngine(params);
  }

  trainStep(loss: Expression, trainer: Trainer): void {
    const value = this.inner.forwardScalar(loss);
    this.inner.backward(loss);
    this.inner.update(trainer);
    this.held.push(this.steps === this.poison ? Number.NaN : value);
    this.steps++;
  }

  takeLosses(wait: boolean): number[] {
    if (wait) this.waits++;
    const n = wait ? this.held.length : Math.max(0, this.held.length - this.lag);
    return this.held.splice(0, n);
  }

  private check(what: string): void {
    if (this.held.length > 0) this.violations.push(`${what} with ${this.held.length} losses held back`);
  }

  forward(e: Expression): void {
    this.check("forward");
    this.inner.forward(e);
  }

  forwardScalar(e: Expression): number {
    this.syncSteps++;
    return this.inner.forwardScalar(e);
  }

  backward(loss: Expression): void {
    this.inner.backward(loss);
  }

  value(e: Expression): Float32Array {
    return this.inner.value(e);
  }

  gradient(e: Expression): Float32Array {
    return this.inner.gradient(e);
  }

  update(trainer: Trainer): void {
    this.inner.update(trainer);
  }

  syncToHost(): void {
    this.check("syncToHost");
  }

  dispose(): void {
    this.disposed = true;
  }
}

const { train: allTrain, dev: allDev } = splitSynthetic(11);
// 42 trees in batches of 4: ten full batches and a last one of 2
const train = allTrain.slice(0, 42);
const dev = allDev.slice(0, 20);
const vocab = Vocabulary.fromTrees(train);
const BATCHES = 11;
const LAG = 3;

function run(makeEngine: (params: ParameterCollection) => Engine, outDir?: string, shuffle?: "examples" | "batches") {
  const progress: TrainProgress[] = [];
  const { model, summary } = trainTreeLstm({
    train,
    dev,
    vocab,
    epochs: 2,
    batch: 4,
    hidden: 8,
    embed: 8,
    learningRate: 0.05,
    optimizer: "adam",
    seed: 5,
    cell: "fused",
    dropout: 0.1,
    makeEngine,
    ...(outDir !== undefined ? { outDir } : {}),
    ...(shuffle !== undefined ? { shuffle } : {}),
    onProgress: (p) => progress.push(p),
  });
  return { model, summary, progress };
}

describe("training through a pipelined engine", () => {
  test("isPipelined tells the capability apart", () => {
    const pc = new ParameterCollection({ seed: 1 });
    assert.equal(isPipelined(new CpuEngine(pc)), false);
    assert.equal(isPipelined(new LaggingEngine(pc, 1)), true);
  });

  test("losses that arrive late give the same epoch losses, progress losses and weights as the CPU engine", () => {
    const sync = run((p) => new CpuEngine(p));
    let lagging: LaggingEngine | undefined;
    const piped = run((p) => {
      lagging = new LaggingEngine(p, LAG);
      return lagging;
    });
    const e = lagging!;
    assert.equal(e.steps, 2 * BATCHES, "every batch went through trainStep");
    assert.equal(e.syncSteps, 0, "no batch went through forwardScalar");
    assert.equal(e.waits, 2, "one waiting takeLosses per epoch");
    assert.deepEqual(e.violations, [], "every loss was taken before evaluation");
    assert.ok(e.disposed);

    assert.equal(piped.summary.epochs.length, 2);
    for (let k = 0; k < 2; k++) {
      const a = sync.summary.epochs[k]!;
      const b = piped.summary.epochs[k]!;
      assert.ok(Number.isFinite(a.trainLoss) && a.trainLoss > 0);
      assert.equal(b.trainLoss, a.trainLoss, `epoch ${k + 1}: the same mean loss`);
      assert.equal(b.devAccuracy, a.devAccuracy, `epoch ${k + 1}: the same dev accuracy`);
    }
    sync.model.params.all.forEach((p, i) => {
      assert.deepEqual(piped.model.params.all[i]!.value, p.value, `parameter ${p.name}`);
    });

    // progress: nothing until the first loss arrives (batch LAG + 1), then the mean over the losses received so
    // far, which is the synchronous run's mean LAG batches earlier, plus one report after the wait with all of them
    for (const epoch of [1, 2]) {
      const s = sync.progress.filter((p) => p.epoch === epoch);
      const q = piped.progress.filter((p) => p.epoch === epoch);
      assert.equal(s.length, BATCHES);
      assert.deepEqual(
        q.map((p) => p.loss),
        [...s.slice(0, BATCHES - LAG).map((p) => p.loss), s[BATCHES - 1]!.loss],
        `epoch ${epoch}: progress losses`,
      );
      assert.deepEqual(
        q.map((p) => p.sentencesDone),
        [...s.slice(LAG).map((p) => p.sentencesDone), train.length],
        `epoch ${epoch}: sentences done counts the queued batches`,
      );
    }
  });

  /** Trains with a lagging engine whose batch `poison` reports NaN; returns the engine and what training threw. */
  const poisoned = (poison: number): { engine: LaggingEngine; error: unknown } => {
    let engine: LaggingEngine | undefined;
    try {
      run((p) => {
        engine = new LaggingEngine(p, LAG, poison);
        return engine;
      });
    } catch (error) {
      return { engine: engine!, error };
    }
    return assert.fail("training with a NaN loss did not throw");
  };

  test("a NaN loss stops training when it arrives, with the usual message", () => {
    const poison = 4;
    const { engine, error } = poisoned(poison);
    assert.match(
      String(error),
      /^TrainingDivergedError: training diverged in epoch 1, batch 5 of 11, after 4 updates: the loss is NaN; lower the learning rate \(--lr, now [\d.]+\)$/,
    );
    assert.equal(engine.steps, poison + LAG + 1, "thrown when the loss came back, LAG batches after its own");
    assert.ok(engine.disposed, "the engine was disposed");
  });

  test("a NaN in the last batches is caught by the wait at the end of the epoch", () => {
    const { engine, error } = poisoned(BATCHES + BATCHES - 1); // epoch 2's last batch, held back when the loop ends
    assert.match(String(error), /training diverged in epoch 2, batch 11 of 11, after 21 updates: the loss is NaN/);
    assert.equal(engine.steps, 2 * BATCHES);
  });
});

describe("VPPS batch pipeline: the per-batch loss hook", () => {
  /** A fake device whose slots finish only when waited for (or when `finished` says so). */
  function fake(slots: number) {
    const losses = new Array<number>(slots).fill(0);
    const status = Array.from({ length: slots }, () => new Int32Array(6));
    const finished = new Array<boolean>(slots).fill(false);
    const device: SlotDevice = {
      wait: (s) => {
        finished[s] = true;
      },
      done: (s) => finished[s]!,
      loss: (s) => losses[s]!,
      status: (s) => status[s]!,
    };
    const queue = (p: BatchPipeline, loss: number): number => {
      const s = p.begin();
      losses[s] = loss;
      finished[s] = false;
      return p.end(s);
    };
    return { device, status, finished, queue };
  }

  test("every batch reports once, in order, whether retired on reuse of its slot, when done, or by drain", () => {
    const f = fake(3);
    const p = new BatchPipeline(f.device, () => "k", 3);
    const seen: [number, number][] = [];
    p.onRetired = (batch, loss) => seen.push([batch, loss]);
    for (let k = 0; k < 4; k++) f.queue(p, 10 + k); // the fourth waits for batch 0's slot
    assert.deepEqual(seen, [[0, 10]]);
    f.finished[1] = true;
    f.queue(p, 14); // batch 1 is done: retired without waiting
    assert.deepEqual(seen, [
      [0, 10],
      [1, 11],
    ]);
    assert.equal(p.drain(), 14);
    assert.deepEqual(
      seen.map(([b]) => b),
      [0, 1, 2, 3, 4],
    );
    assert.deepEqual(
      seen.map(([, l]) => l),
      [10, 11, 12, 13, 14],
    );
    p.drain();
    assert.equal(seen.length, 5, "a second drain reports nothing again");
  });

  test("a batch whose kernel failed throws instead of reporting", () => {
    const f = fake(2);
    const p = new BatchPipeline(f.device, () => "k", 2);
    const seen: number[] = [];
    p.onRetired = (batch) => seen.push(batch);
    f.queue(p, 1);
    f.queue(p, 2);
    f.status[1]![0] = KERNEL_ERRORS.badOpcode; // batch 1's kernel reports an error
    assert.throws(() => p.drain(), /batch 1/);
    assert.deepEqual(seen, [0]);
  });
});

/**
 * A `WorkerBuildEngine` made of the lagging CPU engine: `setGraphBuilder` makes the builder a worker would (from the
 * spec's data, the model's own module), `buildsInWorkers` turns true after `profiled` batches (as VPPS's does once
 * its variants are profiled), and `trainStepBuilt` builds the batch's graph with the builder, on its own model,
 * then trains the engine's parameters on it — the graph's parameter references rebound to the engine's collection
 * through a snapshot, as a VPPS worker's scheduler reads parameters by index.
 */
class BuildingEngine extends LaggingEngine implements WorkerBuildEngine {
  private build: BuildBatch | undefined;
  private readonly cg = new ComputationGraph();
  builtSteps = 0;
  /** Requests marked recurring (fixed batches). */
  recurring = 0;

  constructor(
    private readonly params: ParameterCollection,
    lag: number,
    private readonly profiled: number,
  ) {
    super(params, lag);
  }

  setGraphBuilder(spec: GraphBuilderSpec): boolean {
    assert.match(spec.module, /\/src\/models\/treelstm\/graph-builder\.ts$/);
    // a structured clone, as a worker gets it
    this.build = createGraphBuilder(structuredClone(spec.data), this.params.all);
    return true;
  }

  get buildsInWorkers(): boolean {
    return this.build !== undefined && this.steps >= this.profiled;
  }

  trainStepBuilt(request: BuildRequest, trainer: Trainer): void {
    if (request.recurring === true) this.recurring++;
    const cg = this.cg;
    cg.renew();
    cg.training = request.training;
    cg.dropoutKey = request.dropoutKey;
    const id = this.build!(cg, request);
    const snapshot = cg.snapshot(id + 1);
    new Float64Array(snapshot, 0, 12)[11] = this.params.all[0]!.collection; // header word 11: the collection
    const g = ComputationGraph.fromSnapshot(snapshot, this.params.all);
    this.builtSteps++;
    this.trainStep(g.expression(id), trainer);
  }
}

/** A building engine whose workers never have room: the loop builds every batch, unless batches recur. */
class BusyBuildingEngine extends BuildingEngine {
  override get buildsInWorkers(): boolean {
    return false;
  }
  get workerBuildReady(): boolean {
    return super.buildsInWorkers;
  }
}

describe("training through an engine whose workers build the graphs", () => {
  test("canBuildInWorkers tells the capability apart", () => {
    const pc = new ParameterCollection({ seed: 1 });
    assert.equal(canBuildInWorkers(new LaggingEngine(pc, 1)), false);
    assert.equal(canBuildInWorkers(new BuildingEngine(pc, 1, 0)), true);
  });

  test("batches built from their indices by the Tree-LSTM's graph builder train exactly as graphs built in the loop", () => {
    const sync = run((p) => new CpuEngine(p));
    let building: BuildingEngine | undefined;
    const built = run((p) => {
      building = new BuildingEngine(p, LAG, 3);
      return building;
    });
    const e = building!;
    assert.equal(e.steps, 2 * BATCHES);
    assert.equal(
      e.builtSteps,
      2 * BATCHES - 3,
      "every batch after the first 3 (the 'profiled' ones) was built from indices",
    );
    for (let k = 0; k < 2; k++) {
      assert.equal(built.summary.epochs[k]!.trainLoss, sync.summary.epochs[k]!.trainLoss, `epoch ${k + 1}: mean loss`);
      assert.equal(built.summary.epochs[k]!.devAccuracy, sync.summary.epochs[k]!.devAccuracy);
    }
    sync.model.params.all.forEach((p, i) => {
      assert.deepEqual(built.model.params.all[i]!.value, p.value, `parameter ${p.name}`);
    });
  });

  test("fixed batches (shuffle: batches) go to the workers whenever they can build, marked recurring", () => {
    const sync = run((p) => new CpuEngine(p), undefined, "batches");
    let busy: BusyBuildingEngine | undefined;
    const built = run(
      (p) => {
        busy = new BusyBuildingEngine(p, LAG, 3);
        return busy;
      },
      undefined,
      "batches",
    );
    assert.equal(busy!.builtSteps, 2 * BATCHES - 3, "every batch after the profiled ones, though no worker had room");
    assert.equal(busy!.recurring, busy!.builtSteps);
    for (let k = 0; k < 2; k++) {
      assert.equal(built.summary.epochs[k]!.trainLoss, sync.summary.epochs[k]!.trainLoss, `epoch ${k + 1}: mean loss`);
    }
    let examples: BusyBuildingEngine | undefined;
    run(
      (p) => {
        examples = new BusyBuildingEngine(p, LAG, 3);
        return examples;
      },
      undefined,
      "examples",
    );
    assert.equal(examples!.builtSteps, 0, "new batches every epoch: built in the loop while no worker has room");
  });
});
