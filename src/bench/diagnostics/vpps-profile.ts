/**
 * `vpps bench vpps profile`: where the VPPS kernel's time goes. Tree-LSTM (hidden 256, embedding 256) on SST trees,
 * fused and ops cell, rpw 1-3 at 1 CTA/SM, batches of 1, 8, 32 and 128 trees, with kernels rendered with
 * `profile: true` (instrument/profile.ts): the share of all CTAs' SM cycles spent waiting on barriers, in matrix
 * instructions (matvec, matvec.bwd) and in the rest, and per opcode its runs and cycles. The kernel times here are
 * of the profiled build (a clock read per instruction); `vpps bench vpps timing` measures throughput with the normal
 * kernels. Writes vpps-profile.json (not with --quick).
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Vocabulary } from "../../data/vocab.js";
import { formatKernelProfile, type KernelProfile, Vpps } from "../../engines/vpps/index.js";
import { ComputationGraph } from "../../graph/graph.js";
import { type CellFormulation, TreeLstmModel } from "../../models/treelstm/model.js";
import { resultHeader } from "../common.js";
import { deviceSlug, requireGpu, resultsDir } from "../device.js";
import { writeJson } from "../output.js";
import { batchAt, loadBenchTrees } from "../trees.js";

export interface VppsProfileOptions {
  dataFile?: string;
  quick: boolean;
  out?: string;
  command: string;
}

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

export async function runVppsProfile(o: VppsProfileOptions): Promise<number> {
  requireGpu("vpps bench vpps profile");
  const cacheDir = mkdtempSync(join(tmpdir(), "vpps-profile-kernels-"));
  const { trees, source } = loadBenchTrees(o.dataFile, 4096);
  const vocab = Vocabulary.fromTrees(trees);
  const BATCHES = o.quick ? [1, 128] : [1, 8, 32, 128];
  const CELLS: CellFormulation[] = o.quick ? ["fused"] : ["fused", "ops"];
  const RPW = o.quick ? [1] : [1, 2, 3];

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
          console.log(
            `\n== ${cell} cell, rpw ${rpw}, batch ${batch}: ${kernelMs.toFixed(3)} ms/batch (profiled kernel)`,
          );
          console.log(formatKernelProfile(p));
        }
      } finally {
        vpps.dispose();
      }
    }
  }

  if (!o.quick || o.out !== undefined) {
    const path = writeJson(resultsDir(deviceSlug(device), o.out), "vpps-profile", {
      ...resultHeader({ benchmark: "vpps-profile", command: o.command, device, data: source }),
      model: { name: "treelstm", hidden: 256, embed: 256 },
      method:
        "kernels rendered with profile: true; thread 0 of every CTA reads clock64() around each instruction (up to " +
        "the __syncthreads that ends it); shares are of all CTAs' cycles from kernel start to end, summed over the " +
        "timed batches (3 untimed first).",
      rows,
    });
    console.log(`wrote ${path}`);
  }
  return 0;
}
