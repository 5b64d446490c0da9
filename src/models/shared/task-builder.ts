/**
 * The spec of a registered model's generic worker-thread graph builder (the worker's side: ../worker-builder.ts,
 * which imports the registry; the tasks import this file, which does not).
 */
import type { GraphBuilderSpec } from "../../graph/builder.js";
import type { ModelOptions } from "../task.js";

/** What each worker receives once (structured-cloned). */
export interface TaskBuilderData {
  /** The registry name of the task. */
  readonly task: string;
  readonly options: ModelOptions;
  /** `task.vocabulary.toJSON(vocab)`. */
  readonly vocabulary: unknown;
  /**
   * The examples a request's indices point into, as JSON: one string is copied to a worker quickly, where
   * structured-cloning many small objects takes the main thread long (see the Tree-LSTM's builder).
   */
  readonly examplesJson: string;
}

/**
 * The spec that hands the model of registered task `task` (with `options`, over the vocabulary `task.vocabulary`
 * saved as `vocabulary`) and the training examples `train` to worker threads.
 */
export function taskBuilderSpec(
  task: string,
  options: ModelOptions,
  vocabulary: unknown,
  train: readonly unknown[],
): GraphBuilderSpec {
  const here = new URL(import.meta.url);
  const module = new URL(`../worker-builder.${here.pathname.endsWith(".ts") ? "ts" : "js"}`, here).href;
  const data: TaskBuilderData = { task, options, vocabulary, examplesJson: JSON.stringify(train) };
  return { module, data };
}
