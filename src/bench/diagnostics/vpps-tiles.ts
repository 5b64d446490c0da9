/**
 * `vpps bench vpps tiles`: where long lists should become tiles. Tree-LSTM training (hidden 256, embedding 256, fused
 * cell, SGD) on SST trees with VPPS at several `tileEntries` thresholds (0 = lists only, the holders do every
 * product), batches of 1 to 128, kernel ms per batch (CUDA events) and sentences/s. The settings run interleaved,
 * round after round, so that a drift of the machine hits all of them alike; the table shows medians over rounds. The
 * same kernel serves every setting (tiles are a scheduling choice), so only the first creation compiles.
 * Writes vpps-tiles.json (not with --quick).
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Vocabulary } from "../../data/vocab.js";
import { DEFAULT_TILE_ENTRIES, Vpps } from "../../engines/vpps/index.js";
import { TreeLstmModel } from "../../models/treelstm/model.js";
import { median, resultHeader } from "../common.js";
import { deviceSlug, requireGpu, resultsDir } from "../device.js";
import type { BenchNet } from "../model.js";
import { writeJson } from "../output.js";
import { batchAt, loadBenchTrees } from "../trees.js";
import { timeVppsBatch } from "../vpps-timing.js";

export interface VppsTilesOptions {
  dataFile?: string;
  quick: boolean;
  ctasPerSm: 1 | 2;
  rowsPerWarp: number;
  /** Rounds over every setting (3; 1 with --quick). */
  rounds?: number;
  /** tileEntries thresholds (0, 16, 32, the default, 96, 192). */
  settings?: number[];
  out?: string;
  command: string;
}

interface Sample {
  tileEntries: number;
  batch: number;
  round: number;
  kernelMs: number;
  msPerBatch: number;
  sentencesPerSecond: number;
}

/** Settings in the order given (their order is the interleaving's). */
export const DEFAULT_TILE_SETTINGS = [0, 16, 32, DEFAULT_TILE_ENTRIES, 96, 192];

export async function runVppsTiles(o: VppsTilesOptions): Promise<number> {
  requireGpu("vpps bench vpps tiles");
  const { trees, source } = loadBenchTrees(o.dataFile, 4096);
  const vocab = Vocabulary.fromTrees(trees);
  const BATCHES = o.quick ? [1, 8, 128] : [1, 2, 8, 32, 128];
  const SETTINGS = o.settings ?? DEFAULT_TILE_SETTINGS;
  const ROUNDS = o.rounds ?? (o.quick ? 1 : 3);
  const { ctasPerSm, rowsPerWarp } = o;
  const cacheDir = mkdtempSync(join(tmpdir(), "vpps-tiles-kernels-"));

  const samples: Sample[] = [];
  let device = "unknown";
  const model = new TreeLstmModel({ vocabSize: vocab.size, embed: 256, hidden: 256, seed: 1 });
  const net: BenchNet<(typeof trees)[number]> = {
    params: model.params,
    batchLoss: (cg, batch) => model.buildBatchLoss(cg, batch, vocab),
  };
  for (let round = 0; round < ROUNDS; round++) {
    for (const tileEntries of SETTINGS) {
      const vpps = await Vpps.create(model.params, {
        variants: { ctasPerSm, rowsPerWarp, tileEntries },
        instrument: { timing: true },
        training: { learningRate: 0.05 },
        cacheDir,
      });
      device = vpps.ctx.deviceName;
      try {
        for (const batch of BATCHES) {
          process.stdout.write(`round ${round} tileEntries ${String(tileEntries).padStart(3)}: `);
          const row = await timeVppsBatch(vpps, net, {
            cell: "fused",
            batch,
            sentences: o.quick ? 256 : 1024,
            warmSentences: 0, // the older warm-up of 5 untimed batches only (its results compare tile thresholds)
            batchOf: (size, k) => batchAt(trees, size, k),
            weightFloats: 0,
            agenda: undefined,
          });
          samples.push({
            tileEntries,
            batch,
            round,
            kernelMs: row.kernelMs,
            msPerBatch: row.msPerBatch,
            sentencesPerSecond: row.sentencesPerSecond,
          });
        }
      } finally {
        vpps.dispose();
      }
    }
  }

  const table = BATCHES.map((batch) => ({
    batch,
    settings: SETTINGS.map((tileEntries) => {
      const mine = samples.filter((s) => s.batch === batch && s.tileEntries === tileEntries);
      return {
        tileEntries,
        kernelMs: median(mine.map((s) => s.kernelMs)),
        sentencesPerSecond: median(mine.map((s) => s.sentencesPerSecond)),
      };
    }),
  }));
  console.log(`\n${device}, cta${ctasPerSm} rpw${rowsPerWarp}: median kernel ms (sentences/s) over ${ROUNDS} round(s)`);
  console.log(`batch  ${SETTINGS.map((t) => `tiles>=${t === 0 ? "off" : t}`.padStart(20)).join("")}`);
  for (const r of table) {
    console.log(
      `${String(r.batch).padStart(5)}  ${r.settings
        .map((s) => `${s.kernelMs.toFixed(3)} (${s.sentencesPerSecond.toFixed(0)})`.padStart(20))
        .join("")}`,
    );
  }
  if (!o.quick || o.out !== undefined) {
    const path = writeJson(resultsDir(deviceSlug(device), o.out), "vpps-tiles", {
      ...resultHeader({ benchmark: "vpps-tiles", command: o.command, device, data: source }),
      model: { name: "treelstm", hidden: 256, embed: 256, cell: "fused", ctasPerSm, rowsPerWarp },
      method:
        "one Vpps instance per tileEntries setting (the same compiled kernel), settings interleaved per round; per " +
        "batch size timeVppsBatch (src/bench/vpps-timing.ts): 5 untimed batches, then >= 20 timed; medians over rounds",
      table,
      samples,
    });
    console.log(`wrote ${path}`);
  }
  return 0;
}
