/** Metrics shared by models (see `Metric` in task.ts); a model with its own measure defines it in its folder. */
import type { Metric } from "./task.js";

/**
 * The fraction of examples whose label (`label(example)`) is the class predicted from their first score expression:
 * root accuracy for a sentence model, whose one score expression is the root's. 0 when there are no examples.
 */
export function labelAccuracy<E>(key: string, name: string, label: (example: E) => number): Metric<E> {
  return {
    key,
    name,
    compute(examples, predicted) {
      if (examples.length === 0) return 0;
      let correct = 0;
      for (let k = 0; k < examples.length; k++) if (predicted[k]![0] === label(examples[k]!)) correct++;
      return correct / examples.length;
    },
  };
}

/** Index of the largest score (the first of equal ones). */
export function argmax(xs: ArrayLike<number>): number {
  let best = 0;
  for (let k = 1; k < xs.length; k++) if (xs[k]! > xs[best]!) best = k;
  return best;
}
