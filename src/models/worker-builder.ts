/**
 * A registered model's graph builder for worker threads (src/graph/builder.ts), for the models without one of their
 * own (the spec: shared/task-builder.ts; this module imports the registry, which the tasks must not): each worker makes the task's model from its name, options and saved vocabulary (`task.create`, the same
 * parameters in the same order as the main thread's), reads the training examples once, and builds a batch's loss
 * with the model's own `buildBatchLoss` — the code the main thread would run, so the graphs are equal node for node
 * (test/worker-builder.test.ts). VPPS's schedule workers then build the batches and the training loop's main thread
 * only names them: at batch 128 a TD-LSTM batch is ~138,000 nodes.
 */
import type { BuildBatch, BuildRequest } from "../graph/builder.js";
import { checkBuilderParameters } from "../graph/builder.js";
import type { ComputationGraph, GraphParameter } from "../graph/graph.js";
import { findModel } from "./registry.js";
import type { TaskBuilderData } from "./shared/task-builder.js";

/** Called in each worker (GraphBuilderModule). */
export function createGraphBuilder(data: unknown, params: readonly GraphParameter[]): BuildBatch {
  const d = data as TaskBuilderData;
  const task = findModel(d.task);
  const model = task.create(d.options, task.vocabulary.fromJSON(d.vocabulary), 1);
  checkBuilderParameters(task.name, model.params.all, params);
  const examples = JSON.parse(d.examplesJson) as unknown[];
  const batch: unknown[] = [];
  return (cg: ComputationGraph, request: BuildRequest): number => {
    const ix = request.examples;
    batch.length = 0;
    for (let k = 0; k < ix.length; k++) {
      const e = examples[ix[k]!];
      if (e === undefined) {
        throw new RangeError(`${task.name} graph builder: example ${ix[k]} is outside the ${examples.length} given`);
      }
      batch.push(e);
    }
    return model.buildBatchLoss(cg, batch).id;
  };
}
