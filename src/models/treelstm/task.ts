/**
 * The Tree-LSTM's registry entry: SST trees (or the synthetic tree task), a word vocabulary, root accuracy, and the
 * options `vpps train treelstm` takes beyond the training loop's.
 */
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { readTrees } from "../../data/sst.js";
import { splitSynthetic } from "../../data/synthetic.js";
import { type TreeNode, treeSize } from "../../data/tree.js";
import { Vocabulary } from "../../data/vocab.js";
import type { ComputationGraph, Expression } from "../../graph/graph.js";
import type { ParameterCollection } from "../../model/parameters.js";
import { showValue } from "../../util/text.js";
import { labelAccuracy } from "../metrics.js";
import { checkModelOption, DataError, type Dataset, type ModelOption, type Task, type TaskModel } from "../task.js";
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
}

const OPTIONS: readonly ModelOption[] = [
  { key: "hidden", flag: "--hidden <n>", help: "hidden size", type: { kind: "positive-int" }, planLabel: "hidden" },
  {
    key: "embed",
    flag: "--embed <n>",
    help: "word embedding size",
    type: { kind: "positive-int" },
    planLabel: "embedding",
  },
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

/** Train and dev splits (test too when asked for) of an SST-format directory. */
function fromDirectory(data: string, opts: { maxTrain?: number; test?: boolean }): Dataset<TreeNode> {
  const dir = resolve(data);
  const files = opts.test ? ["train.txt", "dev.txt", "test.txt"] : ["train.txt", "dev.txt"];
  for (const f of files) {
    if (!existsSync(join(dir, f))) {
      const must = opts.test ? "train.txt, dev.txt and test.txt" : "train.txt and dev.txt";
      throw new DataError(`--data ${data}: no ${f} there; the directory must hold ${must} with one PTB tree per line`);
    }
  }
  const train = readTrees(join(dir, "train.txt"), opts.maxTrain ? { maxTrees: opts.maxTrain } : {});
  const dev = readTrees(join(dir, "dev.txt"));
  return { train, dev, ...(opts.test ? { test: readTrees(join(dir, "test.txt")) } : {}), source: dir };
}

export const treeLstmTask: Task<TreeNode, Vocabulary, TreeLstmTaskOptions, TreeLstmTaskModel> = {
  name: "treelstm",
  title: "Tree-LSTM",
  description: "the Tree-LSTM sentiment model (DyNet benchmark 'treenn')",
  options: OPTIONS,
  defaults: { hidden: 256, embed: 256, cell: "fused", dropout: 0 },
  data: {
    help: "directory with train.txt and dev.txt (SST format: one PTB tree per line, labels 0-4)",
    noun: "trees",
    fromDirectory,
    fromFile: (path) => readTrees(path),
    synthetic: {
      description: "a small synthetic tree task",
      make: (seed) => ({ ...splitSynthetic(seed), source: "synthetic sentiment trees (no --data given)" }),
    },
  },
  vocabulary: {
    build: (train) => Vocabulary.fromTrees(train as TreeNode[]),
    toJSON: (vocab) => vocab.toJSON(),
    fromJSON: (json) => Vocabulary.fromJSON(json as string[]),
    describe: (vocab) => `vocabulary ${vocab.size}`,
    size: (vocab) => vocab.size,
  },
  metrics: [labelAccuracy<TreeNode>("rootAccuracy", "root accuracy", (tree) => tree.label)],
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
  restoreOptions(saved, current) {
    if (typeof saved !== "object" || saved === null)
      throw new Error(`"options" must be an object; got ${showValue(saved)}`);
    const record = saved as Record<string, unknown>;
    const restored: Record<string, unknown> = { ...current };
    for (const key of SAVED) {
      const why = checkModelOption(OPTIONS.find((o) => o.key === key)!, record[key]);
      if (why !== null) throw new Error(`options.${key} ${why}`);
      restored[key] = record[key];
    }
    return restored as TreeLstmTaskOptions;
  },
};
