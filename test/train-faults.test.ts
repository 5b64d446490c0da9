// Resuming, non-finite values and faults at the training loop (test/toy-task.ts's tagger, CPU engine): a resumed Adam run
// equals an uninterrupted one (moments and step count travel with the checkpoint); a NaN or ∞ input, loss or
// gradient never reaches the weights, and the error says whether the learning rate or the starting weights are at
// fault; a checkpoint holding NaN or ∞ (or a negative second moment) is refused on load, naming the tensor.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { CpuEngine } from "../src/engines/cpu.js";
import type { ComputationGraph } from "../src/graph/graph.js";
import { ParameterCollection } from "../src/model/parameters.js";
import {
  CheckpointError,
  loadParameters,
  readSafetensors,
  saveParameters,
  writeSafetensors,
} from "../src/model/safetensors.js";
import type { TaskModel } from "../src/models/task.js";
import { input, sum } from "../src/ops/index.js";
import type { Trainer } from "../src/optim/trainers.js";
import { AdamTrainer, NonFiniteUpdateError, SimpleSGDTrainer } from "../src/optim/trainers.js";
import { readCheckpoint, restoreCheckpoint } from "../src/train/checkpoint.js";
import { TrainingDivergedError } from "../src/train/errors.js";
import { type RunState, train } from "../src/train/loop.js";
import type { RunDir } from "../src/train/run-dir.js";
import { bestDevAccuracy, type EpochResult } from "../src/train/run-state.js";
import { inRunDir } from "./helpers.js";
import { stripChecksums } from "./safetensors-raw.js";
import { type TaggedSentence, toyTask } from "./toy-task.js";

const data = toyTask.data.synthetic.make(4);
const vocab = toyTask.vocabulary.build(data.train);
const tmp = (name: string) => mkdtempSync(join(tmpdir(), `vpps-faults-${name}-`));

type Task = typeof toyTask;

/**
 * As a GPU engine reports a refused update: update `poison` (0-based) changes nothing, and the next update or sync
 * throws NonFiniteUpdateError for it.
 */
class LateReportingEngine extends CpuEngine {
  private pending = -1;
  constructor(
    params: ParameterCollection,
    private readonly poison: number,
  ) {
    super(params);
  }
  private check(): void {
    if (this.pending < 0) return;
    const before = this.pending;
    this.pending = -1;
    throw new NonFiniteUpdateError("W", 0, Number.NaN, before);
  }
  override update(trainer: Trainer): void {
    this.check();
    if (trainer.updates === this.poison) {
      this.pending = trainer.updates++;
      this.params.zeroGradients();
      return;
    }
    super.update(trainer);
  }
  override syncToHost(): void {
    this.check();
  }
}

/** Trains with `outDir` opened as the CLI opens it: created, locked, checked for a run other than the one resumed. */
function run(opts: {
  epochs: number;
  makeEngine?: (p: ParameterCollection) => CpuEngine;
  optimizer: "sgd" | "adam";
  outDir?: string;
  resume?: { checkpoint: string; epochsDone: number; previous: RunState["epochs"] };
  learningRate?: number;
  task?: Task;
  devSet?: string;
  notes?: string[];
}) {
  const note = (line: string) => opts.notes?.push(line);
  const model = (opts.task ?? toyTask).name;
  return inRunDir(opts.outDir, { model, note, ...(opts.resume ? { resume: opts.resume } : {}) }, (runDir) =>
    trainWith(opts, runDir, note),
  );
}

function trainWith(opts: Parameters<typeof run>[0], runDir: RunDir | undefined, note: (line: string) => void) {
  return train({
    task: opts.task ?? toyTask,
    options: toyTask.defaults,
    train: data.train,
    dev: data.dev,
    vocab,
    epochs: opts.epochs,
    batch: 8,
    learningRate: opts.learningRate ?? (opts.optimizer === "sgd" ? 0.2 : 0.05),
    optimizer: opts.optimizer,
    seed: 3,
    makeEngine: opts.makeEngine ?? ((p) => new CpuEngine(p)),
    ...(runDir ? { runDir } : {}),
    ...(opts.resume ? { resume: opts.resume } : {}),
    ...(opts.devSet ? { devSet: opts.devSet } : {}),
    onNote: note,
  });
}

/** Resumes the run in `dir` after its last epoch, up to `epochs`. */
function resume(dir: string, epochs: number, optimizer: "sgd" | "adam", extra: { notes?: string[] } = {}) {
  const state = JSON.parse(readFileSync(join(dir, "state.json"), "utf8")) as RunState;
  const done = state.epochs.length;
  return run({
    epochs,
    optimizer,
    outDir: dir,
    resume: { checkpoint: join(dir, `epoch-${done}.safetensors`), epochsDone: done, previous: state.epochs },
    ...extra,
  });
}

/** The toy tagger with one input value added to every batch's loss, set to `value` after the graph is built. */
function taskWithInput(value: number, atBatch: number): Task {
  let batch = 0;
  return {
    ...toyTask,
    create: (options, v, seed) => {
      const inner = toyTask.create(options, v, seed) as TaskModel<TaggedSentence>;
      return Object.assign(Object.create(Object.getPrototypeOf(inner)), inner, {
        buildBatchLoss(cg: ComputationGraph, examples: readonly TaggedSentence[]) {
          const loss = inner.buildBatchLoss(cg, examples);
          const x = input(cg, [0]);
          // written after input() so that the loop's own check is what is tested (input() may check its values)
          if (batch++ === atBatch) cg.inputData[cg.inputSize - 1] = value;
          return sum([loss, x]);
        },
      });
    },
  } as Task;
}

describe("a resumed run equals an uninterrupted one", () => {
  for (const optimizer of ["adam", "sgd"] as const) {
    test(`${optimizer}: 2 epochs straight vs 1 + resume 1: every weight (and Adam's moments and step) equal`, () => {
      const a = tmp("a");
      const b = tmp("b");
      run({ epochs: 2, optimizer, outDir: a });
      run({ epochs: 1, optimizer, outDir: b });
      const notes: string[] = [];
      resume(b, 2, optimizer, { notes });
      assert.deepEqual(notes, [], "the optimiser state continued without a remark");
      const straight = readCheckpoint(join(a, "epoch-2.safetensors"));
      const resumed = readCheckpoint(join(b, "epoch-2.safetensors"));
      assert.deepEqual(resumed.tensors, straight.tensors);
      assert.deepEqual(resumed.optimizer, straight.optimizer);
      assert.equal(straight.optimizer?.kind, optimizer);
      assert.equal(straight.optimizer?.updates, 2 * Math.ceil(data.train.length / 8));
      if (optimizer === "adam") assert.ok(straight.tensors.has("adam.v/W"), "Adam's moments are in the checkpoint");
    });
  }

  test("the Adam checkpoint restores moments and step count into a fresh trainer", () => {
    const dir = tmp("adam");
    run({ epochs: 1, optimizer: "adam", outDir: dir });
    const ckpt = readCheckpoint(join(dir, "epoch-1.safetensors"));
    const model = toyTask.create(toyTask.defaults, vocab, 1);
    const trainer = new AdamTrainer({ learningRate: 0.05 });
    assert.equal(restoreCheckpoint(ckpt, model.params, trainer), null);
    assert.equal(trainer.updates, ckpt.optimizer!.updates);
    const W = model.params.all.find((p) => p.name === "W")!;
    assert.deepEqual(trainer.moments(W)!.v, ckpt.tensors.get("adam.v/W")!.data);
    // another optimiser starts afresh, and says so
    const sgd = new SimpleSGDTrainer({ learningRate: 0.1 });
    assert.match(restoreCheckpoint(ckpt, model.params, sgd)!, /written by adam; sgd starts afresh \(Adam's moments/);
    assert.equal(sgd.updates, 0);
  });

  test("the best accuracy compares only epochs on the same dev set", () => {
    const e = (epoch: number, acc: number, devSet?: string): EpochResult => ({
      epoch,
      trainLoss: 1,
      devAccuracy: acc,
      devMetrics: {},
      ...(devSet ? { devSet } : {}),
      seconds: 1,
      sentencesPerSecond: 1,
      checkpoint: null,
    });
    const epochs = [e(1, 0.9, "synthetic (seed 1)"), e(2, 0.5, "/data/sst"), e(3, 0.8), e(4, 0.6, "/data/sst")];
    assert.equal(bestDevAccuracy(epochs, "/data/sst"), 0.6);
    assert.equal(bestDevAccuracy(epochs, undefined), 0.9, "the API without dev set names compares all");
    const dir = tmp("devset");
    run({ epochs: 1, optimizer: "sgd", outDir: dir, devSet: "elsewhere" });
    const state = JSON.parse(readFileSync(join(dir, "state.json"), "utf8")) as RunState;
    assert.equal(state.epochs[0]!.devSet, "elsewhere");
    state.epochs[0]!.devAccuracy = 2; // better than anything on the dev set below: must not count
    const resumed = run({
      epochs: 2,
      optimizer: "sgd",
      outDir: dir,
      devSet: "here",
      resume: { checkpoint: join(dir, "epoch-1.safetensors"), epochsDone: 1, previous: state.epochs },
    });
    assert.equal(resumed.summary.bestDevAccuracy, resumed.summary.epochs[1]!.devAccuracy);
  });
});

describe("NaN and ∞ never reach the weights", () => {
  test("the trainer refuses a non-finite gradient, naming the parameter; nothing changes", () => {
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY]) {
      for (const trainer of [new SimpleSGDTrainer({ learningRate: 0.1 }), new AdamTrainer({ learningRate: 0.1 })]) {
        const pc = new ParameterCollection({ seed: 1 });
        const W = pc.addParameters([2, 3], undefined, "W");
        const E = pc.addLookupParameters(5, 3, undefined, "E");
        const before = [Float32Array.from(W.value), Float32Array.from(E.value)];
        W.grad.fill(0.5);
        E.touch(2);
        E.grad[2 * 3 + 1] = bad;
        assert.throws(
          () => trainer.update(pc),
          (e: unknown) =>
            e instanceof NonFiniteUpdateError &&
            e.parameter === "E" &&
            e.element === 7 &&
            new RegExp(`parameter 'E' holds ${bad} at element 7; refusing to apply update 1`).test(e.message),
        );
        assert.deepEqual([W.value, E.value], before, `${trainer.kind}: no weight moved`);
        assert.equal(trainer.updates, 0);
      }
    }
  });

  test("an update a device engine refuses and reports later is named where it was queued", () => {
    const batches = Math.ceil(data.train.length / 8);
    for (const [poison, outDir, epoch, batch] of [
      [5, undefined, 1, 6], // reported by the next update
      [batches - 1, tmp("late"), 1, batches], // by the checkpoint's sync
      [2 * batches - 1, undefined, 2, batches], // by the sync at the end of training
    ] as const) {
      assert.throws(
        () =>
          run({
            epochs: 2,
            optimizer: "sgd",
            makeEngine: (p) => new LateReportingEngine(p, poison),
            ...(outDir ? { outDir } : {}),
          }),
        (e: unknown) =>
          e instanceof TrainingDivergedError &&
          e.message ===
            `training diverged in epoch ${epoch}, batch ${batch} of ${batches}, after ${poison} updates: the gradient ` +
              "of parameter 'W' holds NaN at element 0 (not applied); lower the learning rate (--lr, now 0.2)",
      );
    }
  });

  test("a NaN input stops the run before the batch runs: the data are blamed, not the rate", () => {
    const dir = tmp("input");
    assert.throws(
      () => run({ epochs: 1, optimizer: "sgd", outDir: dir, task: taskWithInput(Number.NaN, 3) }),
      (e: unknown) =>
        e instanceof TrainingDivergedError &&
        /^training stopped in epoch 1, batch 4 of \d+: input value 0 of the batch is NaN \(training examples #\d+/.test(
          e.message,
        ) &&
        /the data are at fault, not the learning rate$/.test(e.message),
    );
  });

  test("a loss that becomes infinite after updates blames the rate, in one line", () => {
    const dir = tmp("rate");
    assert.throws(
      () => run({ epochs: 2, optimizer: "sgd", outDir: dir, learningRate: 1e36 }),
      (e: unknown) =>
        e instanceof TrainingDivergedError &&
        /^training diverged in epoch 1, batch \d+ of \d+, after [1-9]\d* updates: the loss is (NaN|Infinity); lower the learning rate \(--lr, now 1e\+36\)$/.test(
          e.message,
        ) &&
        !e.message.includes("\n"),
    );
  });

  test("a loss that is not finite before any update blames the checkpoint, not the rate", () => {
    const dir = tmp("huge");
    run({ epochs: 1, optimizer: "sgd", outDir: dir });
    // finite weights within the load check's range (|x| < 2^64) whose products still overflow: the loss shows it
    const path = join(dir, "epoch-1.safetensors");
    const { tensors, metadata } = readSafetensors(path);
    tensors.get("W")!.data.fill(1.8e19);
    tensors.get("E")!.data.fill(1.8e19);
    writeSafetensors(path, tensors, metadata);
    assert.throws(
      () => resume(dir, 2, "sgd"),
      (e: unknown) =>
        e instanceof TrainingDivergedError &&
        e.message.includes(
          `before any update: the loss is NaN; the cause is the weights and optimiser state loaded from ${path} (a corrupt checkpoint?), not the learning rate`,
        ),
    );
    assert.equal(
      (JSON.parse(readFileSync(join(dir, "state.json"), "utf8")) as RunState).epochs.length,
      1,
      "nothing more was saved",
    );
  });

  test("a checkpoint holding NaN or ∞ is refused on load, naming the tensor; so is a negative second moment", () => {
    const dir = tmp("ckpt");
    const pc = new ParameterCollection({ seed: 1 });
    pc.addParameters([2, 2], undefined, "W");
    pc.addParameters(2, undefined, "b");
    const path = join(dir, "x.safetensors");
    saveParameters(pc, path);
    // a file without checksums (an older vpps, another tool): the finite check is what refuses it
    stripChecksums(path);
    for (const bad of [Number.NaN, Number.NEGATIVE_INFINITY]) {
      const bytes = readFileSync(path);
      const n = Number(bytes.readBigUInt64LE(0));
      // tensor 'b' follows W's 4 floats: its element 1
      bytes.writeFloatLE(bad, 8 + n + 4 * 5);
      writeFileSync(path, bytes);
      assert.throws(
        () => loadParameters(pc, path),
        (e: unknown) =>
          e instanceof CheckpointError &&
          e.message ===
            `${path}: tensor 'b' holds ${bad} at element 1; the checkpoint is corrupt (resume from an earlier epoch's checkpoint or train again)`,
      );
    }
    const pcNaN = new ParameterCollection({ seed: 1 });
    pcNaN.addParameters(2, undefined, "b").value[0] = Number.NaN;
    assert.throws(
      () => saveParameters(pcNaN, join(dir, "y.safetensors")),
      /refusing to write tensor 'b': element 0 is NaN/,
    );

    const run1 = tmp("moments");
    run({ epochs: 1, optimizer: "adam", outDir: run1 });
    const ck = join(run1, "epoch-1.safetensors");
    const { tensors, metadata } = readSafetensors(ck);
    tensors.get("adam.v/b")!.data[1] = -1;
    writeSafetensors(ck, tensors, metadata);
    const model = toyTask.create(toyTask.defaults, vocab, 1);
    assert.throws(
      () => restoreCheckpoint(readCheckpoint(ck), model.params, new AdamTrainer({ learningRate: 0.1 })),
      /tensor 'adam\.v\/b' holds -1 at element 1; Adam's second moments are never negative/,
    );
  });
});
