/**
 * Graph builders that run on another thread: what a model hands to an engine whose worker threads build each
 * training batch's graph themselves (VPPS's schedule workers, `Vpps.setGraphBuilder`), so that the main thread only
 * names the batch (which examples, the dropout key) and launches it.
 *
 * A builder is a module and its data. The module is imported by URL in every worker and exports
 * `createGraphBuilder(data, params)`; `data` is structured-cloned to each worker once (a model's options, its
 * vocabulary, the training examples), so a batch's request is a few numbers. The builder makes its own model from
 * `data` — the same parameters, in the same order, as the main thread's (`params` lists those, and the builder
 * must refuse a mismatch) — and adds a batch's loss to the graph it is given, exactly as the model's
 * `buildBatchLoss` does on the main thread: the two graphs are equal node for node.
 */
import type { ComputationGraph, GraphParameter } from "./graph.js";

/** Where a worker finds a model's graph builder, and what it needs (structured-clonable). */
export interface GraphBuilderSpec {
  /** URL of a module exporting `createGraphBuilder` (GraphBuilderModule). */
  readonly module: string;
  /** Passed to `createGraphBuilder` in each worker. */
  readonly data: unknown;
}

/** One batch to build: indices into the examples the builder was given, and the graph's training settings. */
export interface BuildRequest {
  readonly examples: Int32Array;
  readonly training: boolean;
  readonly dropoutKey: number;
  /**
   * The same examples, in the same order, come again as a batch later (the training loop's `shuffle: "batches"`): an
   * engine may keep what it derived from this batch (VPPS: its script) and reuse it. In data-parallel training, the
   * other ranks' shares of the same global batch come again with it, in the same step on every rank (VPPS keeps the
   * union of the ranks' touched rows too: runtime/dp-exchange.ts).
   */
  readonly recurring?: boolean;
}

/** Adds the batch's summed loss to `cg` (renewed by the caller, `training` and `dropoutKey` set); returns its node. */
export type BuildBatch = (cg: ComputationGraph, request: BuildRequest) => number;

/** What a builder module exports. */
export interface GraphBuilderModule {
  createGraphBuilder(data: unknown, params: readonly GraphParameter[]): BuildBatch;
}

/**
 * Refuses a builder whose model's parameters differ from the engine's (name, shape, kind, in order): a graph built
 * over other parameters would be scheduled against the wrong weights.
 */
export function checkBuilderParameters(
  builder: string,
  own: readonly GraphParameter[],
  engine: readonly GraphParameter[],
): void {
  const show = (p: GraphParameter | undefined) => (p ? `${p.name} ${p.kind} ${p.rows}×${p.cols}` : "none");
  const n = Math.max(own.length, engine.length);
  for (let k = 0; k < n; k++) {
    const a = own[k];
    const b = engine[k];
    if (a?.name !== b?.name || a?.rows !== b?.rows || a?.cols !== b?.cols || a?.kind !== b?.kind) {
      throw new Error(
        `graph builder ${builder}: its model's parameter ${k} is ${show(a)}, the engine's is ${show(b)}; ` +
          "the builder must make the model the engine trains (same options and vocabulary)",
      );
    }
  }
}
