/**
 * The taggers' GPU test setup, shared by test/gpu/models-taggers.test.ts (every engine, both optimizers) and
 * test/gpu/taggers-rows.test.ts (--rnn persistent on eager and autobatch): the two tasks at small sizes, the synthetic sentences
 * and WikiNER, a batch's loss as a compareWithCpu case, and a few training steps checked against the CPU engine's
 * losses and weights. Not a test file: it runs only through those two.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { splitSyntheticTagged } from "../../src/data/synthetic-tagged.js";
import type { TaggedSentence } from "../../src/data/tagged.js";
import type { Engine } from "../../src/engines/engine.js";
import { ComputationGraph } from "../../src/graph/graph.js";
import type { ParameterCollection } from "../../src/model/parameters.js";
import { biLstmTask } from "../../src/models/bilstm/task.js";
import type { TaggerVocabulary } from "../../src/models/bilstm/vocabulary.js";
import { charBiLstmTask } from "../../src/models/bilstm-char/task.js";
import { makeTrainer } from "../../src/optim/trainers.js";
import type { CaseGraph } from "../op-cases.js";

/** Either tagger, typed as the character one (whose options are a superset of the word tagger's). */
export type TaggerTask = typeof charBiLstmTask;
export type TaggerTestOptions = TaggerTask["defaults"];

export const TASKS: readonly TaggerTask[] = [biLstmTask as unknown as TaggerTask, charBiLstmTask];

/** Small sizes the GPU kernels take (multiples of 4: the word LSTM 24, the character LSTMs embed/2 = 8). */
export const SMALL: TaggerTestOptions = { ...charBiLstmTask.defaults, embed: 16, hidden: 24, mlp: 12, charEmbed: 8 };

/** WikiNER beside the repository (or copied into .gpu-data on a GPU machine); undefined where neither exists. */
export const WIKINER = [
  join(import.meta.dirname, "..", "..", "..", "shared", "data", "wikiner"),
  join(import.meta.dirname, "..", "..", ".gpu-data", "wikiner"),
].find((d) => existsSync(join(d, "dev.txt")));

export const synthetic = splitSyntheticTagged(8).train.slice(0, 200);

export type Optimizer = "sgd" | "adam";
export const LR = { sgd: 0.2, adam: 0.01 } as const;

/** A compareWithCpu case: the summed loss of `batch` on a fresh model (same seed, so same weights) per call. */
export function batchLossCase(
  task: TaggerTask,
  options: TaggerTestOptions,
  vocab: TaggerVocabulary,
  seed: number,
  batch: readonly TaggedSentence[],
): () => CaseGraph {
  return () => {
    const m = task.create(options, vocab, seed);
    return { params: m.params, build: (cg: ComputationGraph) => m.buildBatchLoss(cg, batch) };
  };
}

/** WikiNER's first `size` training sentences and the vocabulary of its training split at the task's defaults. */
export function wikinerBatch(task: TaggerTask, size: number) {
  if (WIKINER === undefined)
    throw new Error("WikiNER not found: put it in ../shared/data/wikiner or .gpu-data/wikiner");
  const data = task.data.fromDirectory(WIKINER, {});
  const vocab = task.vocabulary.build(data.train, task.defaults);
  return { vocab, batch: data.train.slice(0, size) };
}

/** Three batches of 6 sentences on one engine (clipping at 1): the losses, then the weights on the host. */
export function trainSteps(
  task: TaggerTask,
  options: TaggerTestOptions,
  vocab: TaggerVocabulary,
  optimizer: Optimizer,
  make: (p: ParameterCollection) => Engine,
) {
  const model = task.create(options, vocab, 4);
  const engine = make(model.params);
  const trainer = makeTrainer(optimizer, { learningRate: LR[optimizer], clipThreshold: 1 });
  const losses: number[] = [];
  try {
    for (let step = 0; step < 3; step++) {
      const cg = new ComputationGraph();
      const loss = model.buildBatchLoss(cg, synthetic.slice(6 * step, 6 * step + 6));
      losses.push(engine.forwardScalar(loss));
      engine.backward(loss);
      engine.update(trainer);
    }
    engine.syncToHost();
  } finally {
    engine.dispose();
  }
  return { losses, params: model.params };
}

/**
 * Why weights after 3 steps differ from the CPU engine's beyond 2e-4 of the tensor's largest magnitude, or "". Adam
 * divides each step by √v̂, so an element whose gradient is near zero can take a rather different step when fp32
 * sums run in another order: up to 1% of the elements may differ by up to 2 learning rates per step (as the VPPS
 * tests allow, test/vpps-reference.ts). SGD allows no such element.
 */
export function weightDifference(
  actual: Float32Array,
  expected: Float32Array,
  optimizer: Optimizer,
  lr: number,
): string {
  let scale = 0;
  for (const x of expected) scale = Math.max(scale, Math.abs(x));
  let loose = 0;
  for (let k = 0; k < expected.length; k++) {
    const d = Math.abs(actual[k]! - expected[k]!);
    if (d <= 2e-4 * scale + 2.4e-7 * Math.abs(expected[k]!)) continue;
    if (optimizer === "sgd" || d > 6 * lr) return `element ${k} is ${actual[k]}, CPU ${expected[k]}`;
    loose++;
  }
  return loose <= Math.max(1, 0.01 * expected.length) ? "" : `${loose} of ${expected.length} elements differ`;
}

/**
 * Asserts that `got` (trainSteps on engine `name`) trained like `want` (trainSteps on the CPU engine): each loss
 * within 1e-4 of max(1, CPU loss), then every parameter's weights as weightDifference allows.
 */
export function assertTrainedLike(
  name: string,
  got: ReturnType<typeof trainSteps>,
  want: ReturnType<typeof trainSteps>,
  optimizer: Optimizer,
): void {
  got.losses.forEach((l, k) => {
    const w = want.losses[k]!;
    assert.ok(Math.abs(l - w) <= 1e-4 * Math.max(1, w), `${name}: loss ${k}: ${l}, CPU ${w}`);
  });
  for (const p of want.params.all) {
    const d = weightDifference(got.params.get(p.name).value, p.value, optimizer, LR[optimizer]);
    assert.equal(d, "", `${name}: '${p.name}' after 3 steps: ${d}`);
  }
}
