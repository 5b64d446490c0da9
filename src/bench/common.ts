/**
 * What every benchmark shares: where the package and the data are, medians, the machine a result came from, and the
 * fields every result file starts with.
 */
import { cpus, hostname } from "node:os";
import { join } from "node:path";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

/** The package's root: src/bench/ in a checkout and dist/bench/ in an installed package are both two below it. */
export const PACKAGE_ROOT = join(import.meta.dirname, "..", "..");

/** The Stanford Sentiment Treebank beside the repository (this workspace keeps data sets outside it). */
export const SST_DIR = join(PACKAGE_ROOT, "..", "shared", "data", "sst");

/** Our WikiNER copy beside the repository (one file, dev.txt, that the taggers split by --split-seed). */
export const WIKINER_DIR = join(PACKAGE_ROOT, "..", "shared", "data", "wikiner");

let gcFunction: (() => void) | undefined;
/**
 * A full garbage collection now (V8's `gc`, exposed on first use), so that a timed repeat does not pay for the garbage
 * of the one before it, which may be another engine's: engines timed side by side share one heap.
 */
export function collectGarbage(): void {
  if (gcFunction === undefined) {
    setFlagsFromString("--expose-gc");
    gcFunction = runInNewContext("gc") as () => void;
  }
  gcFunction();
}

/** The arithmetic mean (NaN for none). */
export function mean(xs: readonly number[]): number {
  return xs.reduce((a, b) => a + b, 0) / xs.length;
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

export interface Machine {
  host: string;
  cpu: string;
  cores: number;
  node: string;
}

export function machine(): Machine {
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
