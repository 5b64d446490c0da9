/**
 * Where the VPPS kernel's time goes: Tree-LSTM (hidden 256, embedding 256) on SST trees, fused and ops cell, rpw 1-3
 * at 1 CTA/SM, batches of 1, 8, 32 and 128 trees, with kernels rendered with `profile: true` (kernel-profile.ts):
 * the share of all CTAs' SM cycles spent waiting on barriers, in matrix instructions (matvec, matvec.bwd) and in the
 * rest, and per opcode its runs and cycles. The kernel times here are of the profiled build (a clock read per
 * instruction); bench/vpps.ts measures throughput with the normal kernels.
 *
 *   node --import tsx bench/vpps-profile.ts [--data <SST train.txt>] [--quick]
 *
 * Writes bench/results/vpps-profile-<device>.json (not with --quick).
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Vocabulary } from "../src/data/vocab.js";
import { formatKernelProfile, type KernelProfile } from "../src/engines/vpps/instrument/profile.js";
import { Vpps } from "../src/engines/vpps/vpps.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { type CellFormulation, TreeLstmModel } from "../src/models/treelstm/model.js";
import { batchAt, deviceSlug, loadBenchTrees, resultHeader, writeResult } from "./common.js";
import { requireGpu } from "./engine-timing.js";

requireGpu("bench/vpps-profile.ts");

const argv = process.argv.slice(2);
const at = argv.indexOf("--data");
const dataFile = at >= 0 ? argv[at + 1] : undefined;
const quick = argv.includes("--quick");
const cacheDir = mkdtempSync(join(tmpdir(), "vpps-profile-kernels-"));
const { trees, source } = loadBenchTrees(dataFile, 4096);
const vocab = Vocabulary.fromTrees(trees);
const BATCHES = quick ? [1, 128] : [1, 8, 32, 128];
const CELLS: CellFormulation[] = quick ? ["fused"] : ["fused", "ops"];
const RPW = quick ? [1] : [1, 2, 3];

interface Row {
  cell: CellFormulation;
  rowsPerWarp: number;
  batch: number;
  /** Kernel ms per batch of the profiled build (CUDA events). */
  kernelMs: number;
  waitShare: number;
  matrixShare: number;
  otherShare: number;
  opcodes: KernelProfile["opcodes"];
}

const rows: Row[] = [];
let device = "unknown";
for (const cell of CELLS) {
  for (const rpw of RPW) {
    const model = new TreeLstmModel({ vocabSize: vocab.size, embed: 256, hidden: 256, seed: 1, cell });
    const vpps = await Vpps.create(model.params, {
      variants: { rowsPerWarp: rpw, ctasPerSm: 1 },
      instrument: { profileKernel: true, timing: true },
      training: { learningRate: 0.05 },
      cacheDir,
    });
    device = vpps.ctx.deviceName;
    try {
      for (const batch of BATCHES) {
        const count = Math.max(6, Math.ceil(512 / batch));
        let k = 0;
        const run = () => {
          const cg = new ComputationGraph();
          vpps.fb(cg, model.buildBatchLoss(cg, batchAt(trees, batch, k++), vocab));
        };
        for (let i = 0; i < 3; i++) run(); // warm-up, not counted
        await vpps.syncLatestLoss();
        vpps.kernelProfile(true);
        const s0 = { ...vpps.stats };
        for (let i = 0; i < count; i++) run();
        await vpps.syncLatestLoss();
        const p = vpps.kernelProfile(true);
        const kernelMs = (vpps.stats.kernelMs - s0.kernelMs) / (vpps.stats.timedBatches - s0.timedBatches);
        rows.push({
          cell,
          rowsPerWarp: rpw,
          batch,
          kernelMs,
          waitShare: p.waitShare,
          matrixShare: p.matrixShare,
          otherShare: p.otherShare,
          opcodes: p.opcodes,
        });
        console.log(`\n== ${cell} cell, rpw ${rpw}, batch ${batch}: ${kernelMs.toFixed(3)} ms/batch (profiled kernel)`);
        console.log(formatKernelProfile(p));
      }
    } finally {
      vpps.dispose();
    }
  }
}

if (!quick) {
  writeResult(`vpps-profile-${deviceSlug(device)}`, {
    ...resultHeader({
      benchmark: "vpps-profile",
      command: `node --import tsx bench/vpps-profile.ts ${argv.join(" ")}`.trim(),
      device,
      data: source,
    }),
    model: { name: "treelstm", hidden: 256, embed: 256 },
    method:
      "kernels rendered with profile: true; thread 0 of every CTA reads clock64() around each instruction (up to the " +
      "__syncthreads that ends it); shares are of all CTAs' cycles from kernel start to end, summed over the timed " +
      "batches (3 untimed first).",
    rows,
  });
}
