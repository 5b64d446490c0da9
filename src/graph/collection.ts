// Which ParameterCollection a graph reads. Nodes name parameters by index alone, so a graph reads the parameters of
// one collection, and an engine computes only graphs of the collection it was made for; these are the id's sentinel,
// its name in messages and the error of a mismatch (graph.ts and ParameterCollection.checkGraph throw it).

import { UserError } from "../util/errors.js";

/**
 * Thrown when a graph would read parameters of two collections, or an engine is given a graph that reads another
 * collection than its own: either would compute with (and update) the wrong weights.
 */
export class CollectionMismatchError extends UserError {
  constructor(message: string) {
    super(message);
    this.name = "CollectionMismatchError";
  }
}

/**
 * `ComputationGraph.collection` of a graph that reads no parameter yet. Collection ids start at 1, so a parameter
 * that is not a collection's (no id, or 0) differs from it too and is refused when it is added.
 */
export const NO_COLLECTION = -1;

/** How messages name a collection. */
export function collectionLabel(id: number): string {
  return `ParameterCollection #${id}`;
}
