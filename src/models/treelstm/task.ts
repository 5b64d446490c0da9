/**
 * The Tree-LSTM's registry entry: SST trees (or the synthetic tree task), a word vocabulary, root accuracy, and the
 * options `vpps train treelstm` takes beyond the training loop's.
 */
import { type TreeNode, treeSize } from "../../data/tree.js";
import type { Vocabulary } from "../../data/vocab.js";
import type { GraphBuilderSpec } from "../../graph/builder.js";
import type { ComputationGraph, Expression } from "../../graph/graph.js";
import type { ParameterCollection } from "../../model/parameters.js";
import { restoreSavedOptions, SIZE_OPTIONS } from "../shared/options.js";
import { rootAccuracy, SST_TREES, TREE_WORDS } from "../shared/sst-data.js";
import type { ModelOption, Task, TaskModel } from "../task.js";
import { treeLstmBuilderSpec } from "./graph-builder.js";
import { type CellFormulation, TreeLstmModel, treeLstmParameterShapes } from "./model.js";

export type TreeLstmTaskOptions = {
  readonly hidden: number;
  readonly embed: number;
  readonly cell: CellFormulation;
  readonly dropout: number;
};

/** A `TreeLstmModel` with its vocabulary, as the training loop uses it. */
export class TreeLstmTaskModel implements TaskModel<TreeNode> {
  constructor(
    readonly net: TreeLstmModel,
    readonly vocab: Vocabulary,
  ) {}

  get params(): ParameterCollection {
    return this.net.params;
  }

  buildBatchLoss(cg: ComputationGraph, trees: readonly TreeNode[]): Expression {
    return this.net.buildBatchLoss(cg, trees, this.vocab);
  }

  /** A loss at every tree node. */
  lossUnits(tree: TreeNode): number {
    return treeSize(tree);
  }

  buildScores(cg: ComputationGraph, tree: TreeNode): Expression[] {
    return [this.net.buildTree(cg, tree, this.vocab, false).rootScores];
  }

  workerBuilder(train: readonly TreeNode[]): GraphBuilderSpec {
    return treeLstmBuilderSpec(this.net, this.vocab, train);
  }
}

const OPTIONS: readonly ModelOption[] = [
  ...SIZE_OPTIONS,
  {
    key: "cell",
    flag: "--cell <kind>",
    help: "fused: one lstmCell op per node; ops: the same function from plain ops",
    type: { kind: "choice", choices: ["fused", "ops"] },
  },
  {
    key: "dropout",
    flag: "--dropout <p>",
    help: "dropout on word embeddings while training",
    type: { kind: "fraction" },
  },
];

/** The options a run's state.json fixes: the model's shape (dropout is a training setting, from the command line). */
const SAVED = ["hidden", "embed", "cell"] as const;

export const treeLstmTask: Task<TreeNode, Vocabulary, TreeLstmTaskOptions, TreeLstmTaskModel> = {
  name: "treelstm",
  title: "Tree-LSTM",
  description: "the Tree-LSTM sentiment model (DyNet benchmark 'treenn')",
  options: OPTIONS,
  defaults: { hidden: 256, embed: 256, cell: "fused", dropout: 0 },
  data: SST_TREES,
  vocabulary: TREE_WORDS,
  metrics: [rootAccuracy<TreeNode>()],
  create(options, vocab, seed) {
    const net = new TreeLstmModel({
      vocabSize: vocab.size,
      embed: options.embed,
      hidden: options.hidden,
      cell: options.cell,
      dropout: options.dropout,
      seed,
    });
    return new TreeLstmTaskModel(net, vocab);
  },
  parameterShapes: (options, vocabSize) =>
    treeLstmParameterShapes({ vocabSize, embed: options.embed, hidden: options.hidden }),
  describe: (o) => `Tree-LSTM (${o.cell} cell), hidden ${o.hidden}, embedding ${o.embed}`,
  savedOptions: (o, model) => ({ hidden: o.hidden, embed: o.embed, cell: o.cell, labels: model.net.labels }),
  restoreOptions: (saved, current) => restoreSavedOptions(OPTIONS, SAVED, saved, current),
};
