/**
 * `vpps bench vpps profile`: where the VPPS kernel's time goes. Tree-LSTM (hidden 256, embedding 256) on SST trees,
 * fused and ops cell, rpw 1-3 at 1 CTA/SM, batches of 1, 8, 32 and 128 trees, with kernels rendered with
 * `profile: true` (instrument/profile.ts): the share of all CTAs' SM cycles spent waiting on barriers, in matrix
 * instructions (matvec, matvec.bwd) and in the rest, and per opcode its runs and cycles. The kernel times here are
 * of the profiled build (a clock read per instruction); `vpps bench vpps timing` measures throughput with the normal
 * kernels. Writes vpps-profile.json (not with --quick). With `--model <name>` another registered model instead, at
 * its default size on its default data (`vpps bench <model>`'s), each of its formulations at rpw 1 and the CTAs per
 * SM the planner picks, batches of 1, 8, 32 and 128: vpps-profile-<model>.json.
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
import { benchModel } from "../models/index.js";
import { writeJson } from "../output.js";
import { batchAt, loadBenchTrees } from "../trees.js";

export interface VppsProfileOptions {
  /** A registered model other than the Tree-LSTM (its formulations at rpw 1); the Tree-LSTM sweep when absent. */
  model?: string;
  dataFile?: string;
  quick: boolean;
  out?: string;
  command: string;
}

interface Row {
  /** The Tree-LSTM's cell, or the model's formulation. */
  cell: string;
  /** The plan's CTAs per SM (1 for the Tree-LSTM sweep). */
  ctasPerSm?: number;
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
  if (o.model !== undefined && o.model !== "treelstm") return runModelProfile(o, o.model);
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
          const { profile, ...row } = await profileBatches(vpps, batch, (cg, k) => {
            vpps.fb(cg, model.buildBatchLoss(cg, batchAt(trees, batch, k), vocab));
          });
          rows.push({ cell, rowsPerWarp: rpw, ...row });
          console.log(
            `\n== ${cell} cell, rpw ${rpw}, batch ${batch}: ${row.kernelMs.toFixed(3)} ms/batch (profiled kernel)`,
          );
          console.log(formatKernelProfile(profile));
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
      method: METHOD,
      rows,
    });
    console.log(`wrote ${path}`);
  }
  return 0;
}

const METHOD =
  "kernels rendered with profile: true; thread 0 of every CTA reads clock64() around each instruction (up to " +
  "the __syncthreads that ends it); shares are of all CTAs' cycles from kernel start to end, summed over the " +
  "timed batches (3 untimed first).";

/** One batch size's profile: 3 untimed batches, then enough to cover ~512 examples (at least 6). */
async function profileBatches(
  vpps: Vpps,
  batch: number,
  submit: (cg: ComputationGraph, k: number) => void,
): Promise<Omit<Row, "cell" | "rowsPerWarp"> & { profile: KernelProfile }> {
  const count = Math.max(6, Math.ceil(512 / batch));
  let k = 0;
  const run = () => submit(new ComputationGraph(), k++);
  for (let i = 0; i < 3; i++) run(); // warm-up, not counted
  await vpps.syncLatestLoss();
  vpps.kernelProfile(true);
  const s0 = { ...vpps.stats };
  for (let i = 0; i < count; i++) run();
  await vpps.syncLatestLoss();
  const p = vpps.kernelProfile(true);
  const kernelMs = (vpps.stats.kernelMs - s0.kernelMs) / (vpps.stats.timedBatches - s0.timedBatches);
  return {
    batch,
    kernelMs,
    waitShare: p.waitShare,
    matrixShare: p.matrixShare,
    otherShare: p.otherShare,
    opcodes: p.opcodes,
    profile: p,
  };
}

/** `--model`: each formulation of a registered model at its default size and rpw 1, on its default data. */
async function runModelProfile(o: VppsProfileOptions, name: string): Promise<number> {
  const bm = benchModel(name);
  requireGpu(`vpps bench vpps profile --model ${name}`);
  const cacheDir = mkdtempSync(join(tmpdir(), "vpps-profile-kernels-"));
  const task = bm.load(o.dataFile, bm.maxItems);
  const size = bm.sizes[0]!;
  const batches = o.quick ? [1, 128] : [1, 8, 32, 128];
  const rows: Row[] = [];
  let device = "unknown";
  for (const variant of bm.variants) {
    const net = task.net(size, variant.name);
    const vpps = await Vpps.create(net.params, {
      variants: { rowsPerWarp: 1 },
      instrument: { profileKernel: true, timing: true },
      training: { learningRate: 0.05 },
      cacheDir,
    });
    device = vpps.ctx.deviceName;
    try {
      for (const batch of batches) {
        const { profile, ...row } = await profileBatches(vpps, batch, (cg, k) => {
          vpps.fb(cg, net.batchLoss(cg, task.batch(batch, k)));
        });
        rows.push({ cell: variant.name, ctasPerSm: vpps.plan.ctasPerSm, rowsPerWarp: 1, ...row });
        console.log(
          `\n== ${bm.title}, ${variant.label}, ${vpps.plan.ctasPerSm} CTA(s)/SM, rpw 1, batch ${batch}: ` +
            `${row.kernelMs.toFixed(3)} ms/batch (profiled kernel)`,
        );
        console.log(formatKernelProfile(profile));
      }
    } finally {
      vpps.dispose();
    }
  }
  if (!o.quick || o.out !== undefined) {
    const path = writeJson(resultsDir(deviceSlug(device), o.out), `vpps-profile-${name}`, {
      ...resultHeader({ benchmark: "vpps-profile", command: o.command, device, data: task.source }),
      model: { name, hidden: size.hidden, embed: size.embed },
      method: METHOD,
      rows,
    });
    console.log(`wrote ${path}`);
  }
  return 0;
}
