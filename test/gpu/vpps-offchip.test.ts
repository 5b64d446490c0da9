// VPPS with weight matrices kept off chip (in global memory, products as tile instructions over the master copy) on
// a real GPU against the CPU reference: the large Tree-LSTMs the registers cannot hold — hidden = embedding = 1024,
// and hidden 1536 with embedding 256 — with the planner's placement at batches of 1 to 8 trees (SGD, clipping
// active; Adam over consecutive batches at 1024), and a Tree-LSTM 256 with every matrix forced off chip (SGD and
// Adam, fused and plain-ops cell). Loss, every parameter's gradient and the updated weights are compared; every
// kernel must run without local memory. Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { cudaAvailable } from "../../src/cuda/index.js";
import { syntheticTrees } from "../../src/data/synthetic.js";
import { Vocabulary } from "../../src/data/vocab.js";
import { Vpps, type VppsVariantOptions } from "../../src/engines/vpps/vpps.js";
import { ComputationGraph, type Expression } from "../../src/graph/graph.js";
import type { ParameterCollection } from "../../src/model/parameters.js";
import { type CellFormulation, TreeLstmModel } from "../../src/models/treelstm/model.js";
import { AdamTrainer } from "../../src/optim/trainers.js";
import { compareAdamBatch, referenceAdamBatch, referenceSgdBatch } from "../vpps-reference.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const LR = 0.05;
const CLIP = 5;
const ADAM_LR = 0.01;
const ADAM_CLIP = 1;
const cacheDir = process.env["VPPS_TEST_CACHE"] ?? join(tmpdir(), "vpps-test-kernels");

/**
 * First element off by more than 2e-4 of the tensor's largest magnitude (fp32 sums in another order) plus, for
 * updated weights, two fp32 ulps of the weight itself (W − step rounds to the weight's precision), or "".
 */
function firstDifference(what: string, expected: Float32Array, actual: Float32Array, base?: Float32Array): string {
  let scale = 0;
  for (const v of expected) scale = Math.max(scale, Math.abs(v));
  for (let k = 0; k < expected.length; k++) {
    const tol = 1e-9 + 2e-4 * scale + (base ? 2.4e-7 * Math.abs(base[k]!) : 0);
    const d = Math.abs(expected[k]! - actual[k]!);
    if (!(d <= tol)) return `${what}[${k}]: CPU ${expected[k]}, VPPS ${actual[k]} (tolerance ${tol.toExponential(1)})`;
  }
  return "";
}

function setup(H: number, E: number, cell: CellFormulation = "fused") {
  const trees = syntheticTrees(48, 17);
  const vocab = Vocabulary.fromTrees(trees);
  const model = new TreeLstmModel({ vocabSize: vocab.size, embed: E, hidden: H, seed: 5, cell });
  return { trees, vocab, model };
}

/** One SGD batch through `vpps` and the CPU reference from the same weights; the first mismatch, or "". */
async function checkBatch(vpps: Vpps, pc: ParameterCollection, cg: ComputationGraph, loss: Expression, what: string) {
  const ref = referenceSgdBatch(pc, loss, LR, CLIP);
  const before = pc.all.map((p) => Float32Array.from(p.value));
  vpps.fb(cg, loss);
  const got = await vpps.syncLatestLoss();
  const grads = vpps.gradients();
  vpps.syncToHost();
  let d =
    Math.abs(got - ref.loss) <= 1e-4 * Math.max(1, Math.abs(ref.loss)) ? "" : `loss: CPU ${ref.loss}, VPPS ${got}`;
  for (const [i, p] of pc.all.entries()) {
    const step = (v: Float32Array) => Float32Array.from(v, (x, k) => x - before[i]![k]!);
    d ||= firstDifference(`gradient of ${p.name}`, ref.gradients[i]!, grads[i]!);
    d ||= firstDifference(`update of ${p.name}`, step(ref.values[i]!), step(p.value), before[i]);
  }
  console.log(`  ${what}: loss CPU ${ref.loss.toFixed(5)} VPPS ${got.toFixed(5)} ${d || "ok"}`);
  return d;
}

/**
 * SGD batches of `sizes` trees through one Vpps instance and the CPU reference; per batch the first mismatch, the
 * matrices the plan kept off chip, and the variants' local memory.
 */
async function compareBatches(
  H: number,
  E: number,
  sizes: readonly number[],
  variants: VppsVariantOptions,
  cell: CellFormulation = "fused",
) {
  const { trees, vocab, model } = setup(H, E, cell);
  const pc = model.params;
  const vpps = await Vpps.create(pc, {
    cacheDir,
    exportGradients: true,
    training: { learningRate: LR, clip: CLIP },
    variants,
  });
  const out: string[] = [];
  try {
    const plan = vpps.plan;
    const offChip = plan.matrices.filter((m) => m.placement === "off-chip").map((m) => m.name);
    for (const v of vpps.variantInfo) {
      console.log(`  H ${H} E ${E}: ${v.name}: ${v.registers} registers, ${v.localBytes} B local; off chip ${offChip}`);
    }
    let start = 0;
    for (const n of sizes) {
      const cg = new ComputationGraph();
      const loss = model.buildBatchLoss(cg, trees.slice(start, start + n), vocab);
      start += n;
      out.push(await checkBatch(vpps, pc, cg, loss, `H ${H} E ${E} ${cell} batch ${n}`));
    }
    return { out, offChip, local: vpps.variantInfo.map((v) => v.localBytes) };
  } finally {
    vpps.dispose();
  }
}

/** Consecutive Adam batches of `sizes` trees, VPPS against the CPU engine + AdamTrainer from the same weights. */
async function compareAdam(H: number, E: number, sizes: readonly number[], variants: VppsVariantOptions) {
  const { trees, vocab, model } = setup(H, E);
  const reference = setup(H, E).model; // same seed: the same initial weights
  const trainer = new AdamTrainer({ learningRate: ADAM_LR, clipThreshold: ADAM_CLIP });
  const pc = model.params;
  const vpps = await Vpps.create(pc, {
    cacheDir,
    exportGradients: true,
    training: { learningRate: ADAM_LR, clip: ADAM_CLIP, optimizer: "adam" },
    variants,
  });
  const loose = { count: 0, total: 0 };
  const out: string[] = [];
  try {
    let start = 0;
    for (const [k, n] of sizes.entries()) {
      const batch = trees.slice(start, start + n);
      start += n;
      const ref = referenceAdamBatch(
        reference.params,
        trainer,
        reference.buildBatchLoss(new ComputationGraph(), batch, vocab),
      );
      const cg = new ComputationGraph();
      const loss = model.buildBatchLoss(cg, batch, vocab);
      const before = pc.all.map((p) => Float32Array.from(p.value));
      vpps.fb(cg, loss);
      const value = await vpps.syncLatestLoss();
      const gradients = vpps.gradients();
      vpps.syncToHost();
      const moments = vpps.adamMoments();
      assert.ok(moments, "an Adam instance has moments");
      const got = { loss: value, gradients, before, after: pc.all.map((p) => Float32Array.from(p.value)), moments };
      const d = compareAdamBatch(pc.all, ref, got, ADAM_LR, k + 1, loose, 1e-4);
      console.log(
        `  H ${H} E ${E} Adam step ${k + 1} (${n} trees): loss CPU ${ref.loss.toFixed(5)} VPPS ${value.toFixed(5)} ${d || "ok"}`,
      );
      out.push(d);
    }
  } finally {
    vpps.dispose();
  }
  assert.ok(loose.count <= 0.01 * loose.total, `${loose.count} of ${loose.total} steps compared loosely`);
  return out;
}

describe("VPPS with matrices off chip against the CPU engine", { skip }, () => {
  test("Tree-LSTM hidden = embedding = 1024, the planner's placement: batches of 1, 2, 4 and 8 trees (SGD)", async () => {
    const r = await compareBatches(1024, 1024, [1, 2, 4, 8], { rowsPerWarp: 1 });
    assert.ok(r.offChip.includes("U_iou"), `off chip: ${r.offChip}`);
    assert.ok(r.offChip.length < 5, "some matrices stay in registers");
    assert.deepEqual(
      r.local,
      r.local.map(() => 0),
      "a kernel uses local memory",
    );
    assert.deepEqual(r.out, ["", "", "", ""]);
  });

  test("Tree-LSTM hidden 1536, embedding 256, the planner's placement: batches of 1, 2, 4 and 8 trees (SGD)", async () => {
    const r = await compareBatches(1536, 256, [1, 2, 4, 8], { rowsPerWarp: 1 });
    assert.ok(r.offChip.includes("U_iou"), `off chip: ${r.offChip}`);
    assert.ok(r.offChip.length < 5, "some matrices stay in registers");
    assert.deepEqual(
      r.local,
      r.local.map(() => 0),
      "a kernel uses local memory",
    );
    assert.deepEqual(r.out, ["", "", "", ""]);
  });

  test("Tree-LSTM hidden = embedding = 1024: 3 consecutive Adam batches of 1, 4 and 8 trees", async () => {
    assert.deepEqual(await compareAdam(1024, 1024, [1, 4, 8], { rowsPerWarp: 1 }), ["", "", ""]);
  });

  for (const cell of ["fused", "ops"] as const) {
    test(`Tree-LSTM 256 (${cell} cell), every matrix off chip: batches of 1, 8 and 32 trees (SGD)`, async () => {
      const r = await compareBatches(256, 256, [1, 8, 32], { offChip: "all" }, cell);
      assert.deepEqual(r.offChip, ["W_iou", "U_iou", "U_f1", "U_f2", "W_out"]);
      assert.deepEqual(
        r.local,
        r.local.map(() => 0),
        "a kernel uses local memory",
      );
      assert.deepEqual(r.out, ["", "", ""]);
    });
  }

  test("Tree-LSTM 256, every matrix off chip: 3 consecutive Adam batches of 1, 8 and 16 trees", async () => {
    assert.deepEqual(await compareAdam(256, 256, [1, 8, 16], { offChip: "all" }), ["", "", ""]);
  });
});
