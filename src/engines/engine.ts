import type { Expression } from "../graph/graph.js";
import type { Trainer } from "../train/trainers.js";

/**
 * What every engine does with a graph: compute values forward, gradients backward (accumulated into the
 * parameters' gradients), and apply a trainer's update to the parameters wherever they live.
 * The CPU engine is the reference; the CUDA engines (eager, autobatch, vpps) implement the same interface and
 * are tested against it.
 */
export interface Engine {
  readonly name: string;
  /** Computes every node up to `e` (incrementally: nodes already computed in this graph are kept). */
  forward(e: Expression): void;
  /** Forward, then the value of a scalar expression (a loss). */
  forwardScalar(e: Expression): number;
  /** Gradients of the scalar `loss` with respect to every node, accumulated into parameter gradients. */
  backward(loss: Expression): void;
  /** A host copy of a computed node's value. */
  value(e: Expression): Float32Array;
  /** A host copy of a node's gradient after `backward`. */
  gradient(e: Expression): Float32Array;
  /** Applies `trainer` to the parameters and zeroes their gradients. */
  update(trainer: Trainer): void;
  /**
   * Makes the host copy of the parameters (the model's `ParameterCollection`) current, e.g. before a checkpoint.
   * Engines that keep parameters on a device copy them back here; the CPU engine has nothing to do.
   */
  syncToHost(): void;
  /** Releases device resources (no-op on the CPU). */
  dispose(): void;
}

/** The engines vpps knows, with whether this build implements them yet. */
export const ENGINE_NAMES = ["cpu", "eager", "autobatch", "vpps"] as const;
export type EngineName = (typeof ENGINE_NAMES)[number];
