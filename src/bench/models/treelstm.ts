/**
 * What the throughput suite adds to the Tree-LSTM's registry entry: the sweep of sizes (hidden 128 and 512 beside
 * the main 256), the fused and the plain-ops cell (VPPS runs both), SST beside the repository as the default data.
 */
import type { BenchExtras } from "./from-task.js";
import { describeSstData, sstTrainFile } from "./sst.js";

/**
 * Embedding size per hidden size: 128 for the small model, 256 (the DyNet benchmark's) otherwise, but 1024 at hidden
 * 1024 (the large model of hidden = embedding = 1024; hidden 1536 keeps 256).
 */
const EMBED_OF: Readonly<Record<number, number>> = { 128: 128, 256: 256, 512: 256, 1024: 1024, 1536: 256 };

export const TREE_LSTM_BENCH: BenchExtras = {
  sizes: [
    { hidden: 256, embed: 256 },
    { hidden: 128, embed: 128 },
    { hidden: 512, embed: 256 },
  ],
  embedFor: (hidden) => EMBED_OF[hidden] ?? Math.min(hidden, 256),
  variants: {
    option: "cell",
    values: [
      { name: "fused", label: "fused cell" },
      { name: "ops", label: "ops cell" },
    ],
  },
  defaultData: sstTrainFile,
  describeData: describeSstData,
  // the first targets for VPPS at hidden 256 on the H100
  targets: { vppsBatch1: 5000, vppsBatch8: 15000, vppsBatch128: 30000, vppsVsAgendaUpTo32: 3 },
  plotTitle(device, source, hidden) {
    const on = source === undefined || source.startsWith("SST") ? "SST" : "synthetic trees";
    return `Tree-LSTM training on ${on}, hidden ${hidden} — ${device}`;
  },
};
