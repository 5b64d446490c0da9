/**
 * The Tree-LSTM's graph builder for worker threads (src/graph/builder.ts): VPPS's schedule workers import this
 * module, make the same model from the options, vocabulary and training trees handed over once, and build each
 * batch's loss graph themselves, as `TreeLstmModel.buildBatchLoss` does on the main thread — so that the main
 * thread of a VPPS training run only names batches and launches them.
 */

import type { TreeNode } from "../../data/tree.js";
import { Vocabulary } from "../../data/vocab.js";
import type { BuildBatch, BuildRequest, GraphBuilderSpec } from "../../graph/builder.js";
import { checkBuilderParameters } from "../../graph/builder.js";
import type { ComputationGraph, GraphParameter } from "../../graph/graph.js";
import { type CellFormulation, TreeLstmModel } from "./model.js";

/** What each worker receives once (structured-cloned). */
export interface TreeLstmBuilderData {
  readonly words: string[];
  readonly embed: number;
  readonly hidden: number;
  readonly labels: number;
  readonly cell: CellFormulation;
  readonly dropout: number;
  /**
   * The examples a request's indices point into, the training trees, as JSON: a string is copied to a worker in
   * tens of milliseconds, where structured-cloning the tree objects took the main thread ~0.7 s per worker (SST).
   */
  readonly treesJson: string;
}

/** The spec that hands `model` (over `vocab`) and the trees `examples` indices point into to the workers. */
export function treeLstmBuilderSpec(
  model: TreeLstmModel,
  vocab: Vocabulary,
  trees: readonly TreeNode[],
): GraphBuilderSpec {
  const data: TreeLstmBuilderData = {
    words: vocab.toJSON(),
    embed: model.embed,
    hidden: model.hidden,
    labels: model.labels,
    cell: model.cell,
    dropout: model.dropout,
    treesJson: JSON.stringify(trees),
  };
  return { module: import.meta.url, data };
}

/** Called in each worker (GraphBuilderModule). */
export function createGraphBuilder(data: unknown, params: readonly GraphParameter[]): BuildBatch {
  const d = data as TreeLstmBuilderData;
  const vocab = Vocabulary.fromJSON(d.words);
  const model = new TreeLstmModel({
    vocabSize: vocab.size,
    embed: d.embed,
    hidden: d.hidden,
    labels: d.labels,
    cell: d.cell,
    dropout: d.dropout,
  });
  checkBuilderParameters("treelstm", model.params.all, params);
  const trees = JSON.parse(d.treesJson) as TreeNode[];
  const batch: TreeNode[] = [];
  return (cg: ComputationGraph, request: BuildRequest): number => {
    const ix = request.examples;
    batch.length = 0;
    for (let k = 0; k < ix.length; k++) {
      const t = trees[ix[k]!];
      if (t === undefined) {
        throw new RangeError(`treelstm graph builder: example ${ix[k]} is outside the ${trees.length} trees given`);
      }
      batch.push(t);
    }
    return model.buildBatchLoss(cg, batch, vocab).id;
  };
}
