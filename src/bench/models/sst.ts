/**
 * What the throughput suite adds to the SST models' registry entries (TD-RNN, TD-LSTM, RvNN; the Tree-LSTM's extras
 * start from it): SST's training split beside the repository as the default data, named so in tables and plots.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { SST_DIR } from "../common.js";
import type { BenchExtras } from "./from-task.js";

/** SST train beside the repository when present, else (undefined) the task's synthetic data. */
export function sstTrainFile(): string | undefined {
  const file = join(SST_DIR, "train.txt");
  return existsSync(file) ? file : undefined;
}

/** The data's name in tables and the result file. */
export function describeSstData(path: string | undefined, isDefault: boolean): string {
  return path === undefined ? "synthetic (SST not found)" : isDefault ? "SST train" : `SST train (${path})`;
}

/** Extras of an SST sentence model titled `title`: SST train by default, the plot titled by the data. */
export function sstBenchExtras(title: string): BenchExtras {
  return {
    defaultData: sstTrainFile,
    describeData: describeSstData,
    plotTitle(device, source, hidden) {
      const on = source === undefined || source.startsWith("SST") ? "SST" : "synthetic data";
      return `${title} training on ${on}, hidden ${hidden} — ${device}`;
    },
  };
}
