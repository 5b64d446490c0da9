import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { cpus, hostname } from "node:os";
import { join } from "node:path";
import { readTrees } from "../src/data/sst.js";
import { splitSynthetic } from "../src/data/synthetic.js";
import type { TreeNode } from "../src/data/tree.js";

export const ROOT = join(import.meta.dirname, "..");
export const SST_DIR = join(ROOT, "..", "shared", "data", "sst");

/** The trees of `--data <file>` when given, else SST beside the repository, else the synthetic task. */
export function loadBenchTrees(dataFile: string | undefined, max: number): { trees: TreeNode[]; source: string } {
  return dataFile
    ? { trees: readTrees(dataFile, { maxTrees: max }), source: `SST train (${dataFile})` }
    : benchTrees(max);
}

/** Batch k of `size` consecutive trees, wrapping around the list. */
export function batchAt(trees: readonly TreeNode[], size: number, k: number): TreeNode[] {
  const start = (k * size) % Math.max(1, trees.length - size);
  return trees.slice(start, start + size);
}

/** `NVIDIA H100 80GB HBM3` → `h100`; other names as a lower-case slug (for result file names). */
export function deviceSlug(name: string): string {
  const m = /\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b/.exec(name.replace(/^NVIDIA\s+/, ""));
  return (m ? m[1]! : name).toLowerCase().replace(/[^a-z0-9]+/g, "-");
}

/** SST training trees when the data set is beside the repository, otherwise the synthetic task. */
export function benchTrees(max = 2048): { trees: TreeNode[]; source: string } {
  const file = join(SST_DIR, "train.txt");
  if (existsSync(file)) return { trees: readTrees(file, { maxTrees: max }), source: "SST train" };
  return { trees: splitSynthetic(1).train.slice(0, max), source: "synthetic (SST not found)" };
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

export function machine(): { host: string; cpu: string; cores: number; node: string } {
  const c = cpus();
  return { host: hostname(), cpu: c[0]?.model ?? "unknown", cores: c.length, node: process.version };
}

/**
 * The fields every result file starts with, in this order: what ran (benchmark, command), when, on which device and
 * machine, and on which data (trees and vocabulary when the benchmark trains on trees).
 */
export function resultHeader(o: {
  benchmark: string;
  command: string;
  device?: string;
  data: string;
  trees?: number;
  vocabulary?: number;
}): Record<string, unknown> {
  return {
    benchmark: o.benchmark,
    command: o.command,
    date: new Date().toISOString(),
    ...(o.device === undefined ? {} : { device: o.device }),
    machine: machine(),
    data: o.data,
    ...(o.trees === undefined ? {} : { trees: o.trees }),
    ...(o.vocabulary === undefined ? {} : { vocabulary: o.vocabulary }),
  };
}

/** Writes a result file under bench/results/ and returns its path. */
export function writeResult(name: string, data: unknown): string {
  const dir = join(ROOT, "bench", "results");
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `${name}.json`);
  writeFileSync(path, `${JSON.stringify(data, null, 2)}\n`);
  return path;
}
