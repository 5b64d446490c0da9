/**
 * What the throughput suite adds to the taggers' registry entries: WikiNER beside the repository as the default
 * data (its training split under --split-seed 1, as `vpps train <tagger> --data ../shared/data/wikiner` trains on).
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { TAGGER_RNNS } from "../../models/bilstm/packed.js";
import { WIKINER_DIR } from "../common.js";
import type { BenchExtras } from "./from-task.js";

export function taggerBench(title: string): BenchExtras {
  return {
    choices: [
      {
        name: "rnn",
        values: TAGGER_RNNS,
        defaultValue: "steps",
        help:
          "the taggers' formulation the engines train: steps (an affine and a cell per word) or persistent (each " +
          "batch as a handful of row-batch nodes around one rnn op; the eager, autobatch and CPU engines run it, " +
          "VPPS refuses it); the PyTorch reference is the same function either way",
      },
      {
        name: "density",
        values: "density",
        defaultValue: 1,
        help:
          "with --rnn persistent: the kept fraction of each W_hh, pruned by magnitude (row-balanced) as `vpps train " +
          "--density` does, on the sparse persistent kernels where the mask fits them; the PyTorch reference stays dense",
      },
    ],
    defaultData: () => (existsSync(join(WIKINER_DIR, "dev.txt")) ? WIKINER_DIR : undefined),
    describeData: (path, isDefault) =>
      path === undefined
        ? "synthetic named entities (WikiNER not found)"
        : isDefault
          ? "WikiNER train split (--split-seed 1)"
          : path,
    plotTitle(device, source, hidden) {
      const on = source?.startsWith("WikiNER") ? "WikiNER" : "tagged sentences";
      return `${title} training on ${on}, hidden ${hidden} — ${device}`;
    },
  };
}
