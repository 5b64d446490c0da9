/** The Tree-LSTM in the throughput suite: SST trees (or the synthetic task), the fused or the plain-ops cell. */
import type { TreeNode } from "../../data/tree.js";
import { Vocabulary } from "../../data/vocab.js";
import { type CellFormulation, TreeLstmModel } from "../../models/treelstm.js";
import type { BenchModel, BenchTask } from "../model.js";
import { batchAt, loadBenchTrees } from "../trees.js";

/** Embedding size per hidden size: 128 for the small model, 256 (the DyNet benchmark's) otherwise. */
const EMBED_OF: Readonly<Record<number, number>> = { 128: 128, 256: 256, 512: 256 };

export const treeLstmBench: BenchModel<TreeNode> = {
  name: "treelstm",
  title: "Tree-LSTM",
  dataHelp:
    "SST train.txt (or a folder holding it); default ../shared/data/sst/train.txt when present, else the synthetic tree task",
  sizes: [
    { hidden: 256, embed: 256 },
    { hidden: 128, embed: 128 },
    { hidden: 512, embed: 256 },
  ],
  embedFor: (hidden) => EMBED_OF[hidden] ?? Math.min(hidden, 256),
  variants: [
    { name: "fused", label: "fused cell" },
    { name: "ops", label: "ops cell" },
  ],
  maxItems: 8192,
  // issue 6's targets for VPPS at hidden 256 on the H100
  targets: { vppsBatch1: 5000, vppsBatch8: 15000, vppsBatch128: 30000, vppsVsAgendaUpTo32: 3 },
  unit: "sentences",
  batchUnit: "trees",
  load(dataFile, maxItems): BenchTask<TreeNode> {
    const { trees, source } = loadBenchTrees(dataFile, maxItems);
    const vocab = Vocabulary.fromTrees(trees);
    return {
      source,
      items: trees.length,
      vocabulary: vocab.size,
      batch: (size, k) => batchAt(trees, size, k),
      net(size, variant) {
        const model = new TreeLstmModel({
          vocabSize: vocab.size,
          embed: size.embed,
          hidden: size.hidden,
          seed: 1,
          cell: variant as CellFormulation,
        });
        return { params: model.params, batchLoss: (cg, batch) => model.buildBatchLoss(cg, batch, vocab) };
      },
    };
  },
  plotTitle(device, source, hidden) {
    const on = source === undefined || source.startsWith("SST") ? "SST" : "synthetic trees";
    return `Tree-LSTM training on ${on}, hidden ${hidden} — ${device}`;
  },
};
