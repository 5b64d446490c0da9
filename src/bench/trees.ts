/** The trees the Tree-LSTM benchmarks train on: SST when present, else the synthetic tree task. */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { readTrees } from "../data/sst.js";
import { splitSynthetic } from "../data/synthetic.js";
import type { TreeNode } from "../data/tree.js";
import { SST_DIR } from "./common.js";

/** The trees of `dataFile` when given, else SST beside the repository, else the synthetic task. */
export function loadBenchTrees(dataFile: string | undefined, max: number): { trees: TreeNode[]; source: string } {
  return dataFile
    ? { trees: readTrees(dataFile, { maxTrees: max }), source: `SST train (${dataFile})` }
    : benchTrees(max);
}

/** SST training trees when the data set is beside the repository, otherwise the synthetic task. */
export function benchTrees(max = 2048): { trees: TreeNode[]; source: string } {
  const file = join(SST_DIR, "train.txt");
  if (existsSync(file)) return { trees: readTrees(file, { maxTrees: max }), source: "SST train" };
  return { trees: splitSynthetic(1).train.slice(0, max), source: "synthetic (SST not found)" };
}

/** Batch k of `size` consecutive items, wrapping around the list: every engine sees the same batches. */
export function batchAt<T>(items: readonly T[], size: number, k: number): T[] {
  const start = (k * size) % Math.max(1, items.length - size);
  return items.slice(start, start + size);
}

/** The indices among `count` items of `batchAt`'s batch k of `size`. */
export function batchIndices(count: number, size: number, k: number): Int32Array {
  const start = (k * size) % Math.max(1, count - size);
  return Int32Array.from({ length: Math.max(0, Math.min(size, count - start)) }, (_, i) => start + i);
}
