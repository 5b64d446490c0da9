/**
 * Where long lists should become tiles: Tree-LSTM training (hidden 256, embedding 256, fused cell, SGD) on SST
 * trees with VPPS at several `tileEntries` thresholds (0 = lists only, the holders do every product), batches of
 * 1 to 128, kernel ms per batch (CUDA events) and sentences/s. The settings run interleaved, round after round, so
 * that a drift of the machine hits all of them alike; the table shows medians over rounds. The same kernel serves
 * every setting (tiles are a scheduling choice), so only the first creation compiles.
 *
 *   node --import tsx bench/vpps-tiles.ts [--data <SST train.txt>] [--quick] [--ctas-per-sm 1|2] [--rpw n]
 *                                         [--rounds n] [--settings 0,16,48,...]
 *
 * Writes bench/results/vpps-tiles-<device>.json (not with --quick).
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Vocabulary } from "../src/data/vocab.js";
import { DEFAULT_TILE_ENTRIES } from "../src/engines/vpps/schedule/steps.js";
import { Vpps } from "../src/engines/vpps/vpps.js";
import { TreeLstmModel } from "../src/models/treelstm/model.js";
import { batchAt, deviceSlug, loadBenchTrees, resultHeader, writeResult } from "./common.js";
import { requireGpu } from "./engine-timing.js";
import { timeVppsBatch } from "./vpps-timing.js";

requireGpu("bench/vpps-tiles.ts");

const argv = process.argv.slice(2);
const arg = (name: string) => {
  const at = argv.indexOf(name);
  return at >= 0 ? argv[at + 1] : undefined;
};
const quick = argv.includes("--quick");
const { trees, source } = loadBenchTrees(arg("--data"), 4096);
const vocab = Vocabulary.fromTrees(trees);
const BATCHES = quick ? [1, 8, 128] : [1, 2, 8, 32, 128];
const SETTINGS = (arg("--settings") ?? `0,16,32,${DEFAULT_TILE_ENTRIES},96,192`).split(",").map(Number);
const ROUNDS = Number(arg("--rounds") ?? (quick ? 1 : 3));
const ctasPerSm = Number(arg("--ctas-per-sm") ?? 1) as 1 | 2;
const rowsPerWarp = Number(arg("--rpw") ?? 2);
const cacheDir = mkdtempSync(join(tmpdir(), "vpps-tiles-kernels-"));

interface Sample {
  tileEntries: number;
  batch: number;
  round: number;
  kernelMs: number;
  msPerBatch: number;
  sentencesPerSecond: number;
}
const samples: Sample[] = [];
let device = "unknown";
const model = new TreeLstmModel({ vocabSize: vocab.size, embed: 256, hidden: 256, seed: 1 });
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
        const row = await timeVppsBatch(vpps, model, {
          cell: "fused",
          batch,
          sentences: quick ? 256 : 1024,
          warmSentences: 0, // as before session 7: 5 untimed batches (its results compare tile thresholds)
          batchOf: (size, k) => batchAt(trees, size, k),
          vocab,
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

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 === 1 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
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
if (!quick) {
  writeResult(`vpps-tiles-${deviceSlug(device)}`, {
    ...resultHeader({
      benchmark: "vpps-tiles",
      command: `node --import tsx bench/vpps-tiles.ts ${argv.join(" ")}`.trim(),
      device,
      data: source,
    }),
    model: { name: "treelstm", hidden: 256, embed: 256, cell: "fused", ctasPerSm, rowsPerWarp },
    method:
      "one Vpps instance per tileEntries setting (the same compiled kernel), settings interleaved per round; per " +
      "batch size timeVppsBatch (bench/vpps-timing.ts): 5 untimed batches, then >= 20 timed; medians over rounds",
    table,
    samples,
  });
}
