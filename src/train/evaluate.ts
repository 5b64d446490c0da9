import type { Engine } from "../engines/engine.js";
import { ComputationGraph, type Expression } from "../graph/graph.js";
import { argmax } from "../models/metrics.js";
import type { Metric, TaskModel } from "../models/task.js";

/**
 * Every metric of `metrics` on `examples` (by key), from forward-only passes on `engine` (one that can run them:
 * `capabilities.forwardOnly`; see `ForwardPasses`), `batch` examples per graph. `vocab` is the model's vocabulary.
 */
export function evaluate<E, V>(
  model: TaskModel<E>,
  metrics: readonly Metric<E, V>[],
  vocab: V,
  engine: Engine,
  examples: readonly E[],
  batch = 64,
): Record<string, number> {
  const predicted = predict(model, engine, examples, batch);
  const out: Record<string, number> = {};
  for (const m of metrics) out[m.key] = m.compute(examples, predicted, vocab);
  return out;
}

/** Each example's predicted classes: the argmax of each of its score expressions (`buildScores`), in order. */
export function predict<E>(model: TaskModel<E>, engine: Engine, examples: readonly E[], batch = 64): number[][] {
  // 0 would loop for ever, NaN end after one empty batch with no prediction and no error
  if (!Number.isInteger(batch) || batch < 1) {
    throw new RangeError(`predict: batch must be a positive integer (examples per graph); got ${String(batch)}`);
  }
  if (!engine.capabilities.forwardOnly) {
    throw new Error(
      `engine ${engine.name} cannot run forward-only passes; evaluate on the engine ForwardPasses gives for it`,
    );
  }
  const out: number[][] = [];
  const cg = new ComputationGraph();
  for (let start = 0; start < examples.length; start += batch) {
    cg.renew();
    cg.training = false;
    const part = examples.slice(start, start + batch);
    const scores: Expression[][] = part.map((e) => model.buildScores(cg, e));
    // forward computes every node up to the one named: the last one built covers the batch
    let last: Expression | undefined;
    for (const list of scores) for (const s of list) if (last === undefined || s.id > last.id) last = s;
    if (last === undefined) {
      for (const _ of part) out.push([]);
      continue;
    }
    engine.forward(last);
    for (const list of scores) out.push(list.map((s) => argmax(engine.value(s))));
  }
  return out;
}
