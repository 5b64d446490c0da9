// The VPPS persistent kernel on a real GPU against the CPU reference: loss, every parameter's gradient and the
// SGD-updated weights (clipping active) on Tree-LSTM batches of 1, 8 and 32 trees at hidden 128, 256 and 512 (512
// forms some gradients by GEMM), the ops cell, dropout, gradients forced to GEMM, profile-guided rpw, the Engine
// adapter in a training loop, random graphs over every op, and a barrier that is never satisfied (an error naming
// processor and barrier, no hang); and Adam over consecutive batches (moments and steps against the AdamTrainer) in
// the kernel and in the host update, on random graphs and through the Engine adapter. Skipped, with the reason
// printed, without a GPU.

import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { cudaAvailable } from "../../src/cuda/index.js";
import { readTrees } from "../../src/data/sst.js";
import { syntheticTrees } from "../../src/data/synthetic.js";
import { Vocabulary } from "../../src/data/vocab.js";
import { createEngine, ForwardPasses } from "../../src/engines/index.js";
import { VppsEngine } from "../../src/engines/vpps/engine.js";
import { formatKernelProfile } from "../../src/engines/vpps/instrument/profile.js";
import { formatKernelTrace } from "../../src/engines/vpps/instrument/trace.js";
import { PIPELINE_SLOTS, VppsKernelError } from "../../src/engines/vpps/runtime/pipeline.js";
import { instructionWords, OPCODE_COUNT, OPCODES, Opcode } from "../../src/engines/vpps/script/format.js";
import { Vpps, type VppsVariantOptions } from "../../src/engines/vpps/vpps.js";
import { ComputationGraph, type Expression } from "../../src/graph/graph.js";
import { ParameterCollection } from "../../src/model/parameters.js";
import { type CellFormulation, TreeLstmModel } from "../../src/models/treelstm/model.js";
import { add, input, matVec, parameter, pickNegLogSoftmax } from "../../src/ops/index.js";
import { AdamTrainer, SimpleSGDTrainer } from "../../src/optim/trainers.js";
import { buildRandomVppsGraph, randomVppsModel } from "../random-graph.js";
import {
  type AdamBatch,
  compareAdamBatch,
  type Looseness,
  referenceAdamBatch,
  referenceSgdBatch,
  type SgdReference,
} from "../vpps-reference.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const LR = 0.05;
const CLIP = 5;
const cacheDir = process.env["VPPS_TEST_CACHE"] ?? join(tmpdir(), "vpps-test-kernels");

type Reference = SgdReference;

/** The CPU engine's loss, gradients and clipped-SGD values at this file's learning rate. */
const reference = (pc: ParameterCollection, loss: Expression, clip: number): Reference =>
  referenceSgdBatch(pc, loss, LR, clip);

/**
 * First element off by more than 2e-4 of the tensor's largest magnitude (fp32 sums in another order) plus, for
 * updated weights, two fp32 ulps of the weight itself (the step is compared as new − old, and W − step rounds to the
 * weight's precision: a gradient differing in its 7th digit may move the result by an ulp), or "".
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

/** SST training trees where the data set is beside the repository (or copied into .gpu-data on a GPU machine). */
const SST_FILE = [
  join(import.meta.dirname, "..", "..", "..", "shared", "data", "sst", "train.txt"),
  join(import.meta.dirname, "..", "..", ".gpu-data", "sst", "train.txt"),
].find((f) => existsSync(f));

function setup(H: number, cell: CellFormulation = "fused", dropout = 0, real = false) {
  const trees = real && SST_FILE ? readTrees(SST_FILE, { maxTrees: 160 }) : syntheticTrees(64, 7);
  const vocab = Vocabulary.fromTrees(trees);
  const model = new TreeLstmModel({
    vocabSize: vocab.size,
    embed: H === 512 ? 256 : H,
    hidden: H,
    seed: 3,
    cell,
    dropout,
  });
  return { trees, vocab, model };
}

/**
 * Runs one batch through `vpps` and the CPU reference from the same weights (the collection's host values, which
 * must equal the device's); returns the first mismatch of loss, gradients or updated weights, or "".
 */
async function checkBatch(vpps: Vpps, pc: ParameterCollection, cg: ComputationGraph, loss: Expression, what: string) {
  const ref = reference(pc, loss, CLIP);
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
 * Runs batches of `sizes` trees through one Vpps instance and the CPU reference from the same weights; returns
 * the first mismatch per batch (empty strings when all agree).
 */
async function compareBatches(
  H: number,
  sizes: readonly number[],
  variants: VppsVariantOptions,
  cell: CellFormulation = "fused",
  dropout = 0,
  real = false,
) {
  const { trees, vocab, model } = setup(H, cell, dropout, real);
  const pc = model.params;
  const vpps = await Vpps.create(pc, {
    cacheDir,
    exportGradients: true,
    training: { learningRate: LR, clip: CLIP },
    variants,
  });
  const out: string[] = [];
  try {
    let start = 0;
    for (const n of sizes) {
      const cg = new ComputationGraph();
      cg.training = dropout > 0;
      cg.dropoutKey = 99 + n;
      const loss = model.buildBatchLoss(cg, trees.slice(start, start + n), vocab);
      start += n;
      out.push(await checkBatch(vpps, pc, cg, loss, `H ${H} ${cell} batch ${n}`));
    }
    return { out, vpps: vpps.variantInfo };
  } finally {
    vpps.dispose();
  }
}

const ADAM_LR = 0.01;
const ADAM_CLIP = 1;

/**
 * Consecutive Adam batches through `run` (one VPPS trajectory) and through the CPU engine + AdamTrainer on a copy of
 * the model with the same initial weights; per batch the first mismatch of loss, gradients (when `run` reads
 * them), moments or steps (vpps-reference.ts), or "".
 */
async function compareAdamRuns(
  what: string,
  batches: number,
  reference: (k: number) => AdamBatch,
  run: (k: number) => Promise<AdamBatch>,
  params: ParameterCollection,
): Promise<{ out: string[]; loose: Looseness }> {
  const loose = { count: 0, total: 0 };
  const out: string[] = [];
  for (let k = 0; k < batches; k++) {
    const ref = reference(k);
    const got = await run(k);
    const d = compareAdamBatch(params.all, ref, got, ADAM_LR, k + 1, loose, 1e-4);
    console.log(
      `  ${what}, Adam step ${k + 1}: loss CPU ${ref.loss.toFixed(5)} VPPS ${got.loss.toFixed(5)} ${d || "ok"}`,
    );
    out.push(d);
  }
  console.log(
    `  ${what}: ${loose.count} of ${loose.total} steps compared with a tolerance above 1% of the learning rate`,
  );
  return { out, loose };
}

/** One Vpps batch for compareAdamRuns: fb, the loss, gradients, weights before and after, moments. */
async function vppsAdamBatch(vpps: Vpps, pc: ParameterCollection, cg: ComputationGraph, loss: Expression) {
  const before = pc.all.map((p) => Float32Array.from(p.value));
  vpps.fb(cg, loss);
  const value = await vpps.syncLatestLoss();
  const gradients = vpps.gradients();
  vpps.syncToHost();
  const moments = vpps.adamMoments();
  assert.ok(moments, "an Adam instance has moments");
  return { loss: value, gradients, before, after: pc.all.map((p) => Float32Array.from(p.value)), moments };
}

/** Tree-LSTM batches of `sizes` trees, one Adam step each, VPPS against the CPU engine + AdamTrainer. */
async function compareAdamTrees(H: number, sizes: readonly number[], variants: VppsVariantOptions, real = false) {
  const { trees, vocab, model } = setup(H, "fused", 0, real);
  const reference = setup(H, "fused", 0, real).model; // same seed: the same initial weights
  const trainer = new AdamTrainer({ learningRate: ADAM_LR, clipThreshold: ADAM_CLIP });
  const pc = model.params;
  const vpps = await Vpps.create(pc, {
    cacheDir,
    training: { learningRate: ADAM_LR, clip: ADAM_CLIP, optimizer: "adam" },
    variants,
  });
  const starts = sizes.map((_, k) => sizes.slice(0, k).reduce((a, b) => a + b, 0));
  const batch = (k: number) => trees.slice(starts[k]!, starts[k]! + sizes[k]!);
  try {
    return await compareAdamRuns(
      `H ${H}${variants.gradients === "gemm" ? " GEMM" : ""} batch of ${sizes.join("/")}`,
      sizes.length,
      (k) => {
        const cg = new ComputationGraph();
        return referenceAdamBatch(reference.params, trainer, reference.buildBatchLoss(cg, batch(k), vocab));
      },
      (k) => {
        const cg = new ComputationGraph();
        return vppsAdamBatch(vpps, pc, cg, model.buildBatchLoss(cg, batch(k), vocab));
      },
      pc,
    );
  } finally {
    vpps.dispose();
  }
}

describe("VPPS kernel against the CPU engine", { skip }, () => {
  for (const H of [128, 256, 512]) {
    test(`Tree-LSTM hidden ${H}: loss, gradients, updated weights for batches of 1, 8, 32`, async () => {
      const { out, vpps } = await compareBatches(H, [1, 8, 32], { rowsPerWarp: 1 });
      console.log(
        `  variant ${vpps[0]!.name}: JIT ${vpps[0]!.jitMs.toFixed(0)} ms (cache ${vpps[0]!.cacheHit}), ${vpps[0]!.registers} regs, ${vpps[0]!.localBytes} B local`,
      );
      assert.deepEqual(out, ["", "", ""]);
      assert.equal(vpps[0]!.localBytes, 0, "the kernel spills to local memory");
    });
  }

  test("SST batches of 1, 16 and 128 trees, hidden 256", { skip: SST_FILE ? false : "SST not found" }, async () => {
    const { out } = await compareBatches(256, [1, 16, 128], { rowsPerWarp: 1 }, "fused", 0, true);
    assert.deepEqual(out, ["", "", ""]);
  });

  test("tiles everywhere (tileEntries 2) and nowhere (0), hidden 256, batches of 1 and 16", async () => {
    for (const tileEntries of [2, 0]) {
      const { out } = await compareBatches(256, [1, 16], { rowsPerWarp: 1, tileEntries });
      assert.deepEqual(out, ["", ""], `tileEntries ${tileEntries}`);
    }
  });

  test("kernel trace: the critical path of a batch adds up and crosses processors", async () => {
    const { trees, vocab, model } = setup(256);
    const vpps = await Vpps.create(model.params, {
      cacheDir,
      variants: { rowsPerWarp: 1 },
      instrument: { traceKernel: true },
      training: { learningRate: LR },
    });
    try {
      const cg = new ComputationGraph();
      vpps.fb(cg, model.buildBatchLoss(cg, trees.slice(0, 8), vocab));
      const a = vpps.kernelTrace();
      console.log(formatKernelTrace(a));
      const sum = a.path.reduce((s, p) => s + p.ns, 0);
      assert.ok(Math.abs(sum - a.pathNs) <= 1e-6 * a.pathNs, `path items ${sum} ns, path ${a.pathNs} ns`);
      assert.ok(a.pathNs > 0 && a.pathNs <= a.spanNs, `path ${a.pathNs} ns, span ${a.spanNs} ns`);
      assert.ok(a.hops > 5, `${a.hops} barrier hops on the path of a batch of 8 trees`);
      assert.ok(
        a.path.some((p) => p.label.startsWith("matvec") || p.label.startsWith("tile")),
        "matrix work lies on the path",
      );
    } finally {
      vpps.dispose();
    }
  });

  test("ops cell and dropout, hidden 128, 2 CTAs/SM", async () => {
    const { out } = await compareBatches(128, [8], { rowsPerWarp: 1, ctasPerSm: 2 }, "ops", 0.2);
    assert.deepEqual(out, [""]);
  });

  test("gradients forced to GEMM (host update), hidden 256", async () => {
    const { out } = await compareBatches(256, [1, 8], { rowsPerWarp: 1, gradients: "gemm" });
    assert.deepEqual(out, ["", ""]);
  });

  test("rpw 2 and 3 at 1 CTA/SM, hidden 256", async () => {
    for (const rowsPerWarp of [2, 3]) {
      const { out } = await compareBatches(256, [8], { rowsPerWarp, ctasPerSm: 1 });
      assert.deepEqual(out, [""], `rpw ${rowsPerWarp}`);
    }
  });

  test("transposed copies (matvec.acc, load.t, W̄ after the backward pass), hidden 128 and 256", async () => {
    for (const [H, rowsPerWarp] of [
      [128, 1],
      [256, 2],
    ] as const) {
      const { out, vpps } = await compareBatches(H, [1, 8, 32], { rowsPerWarp, ctasPerSm: 1, transposed: true });
      assert.ok(
        vpps.every((v) => v.name.endsWith("_t")),
        "the variant must hold transposed copies",
      );
      assert.deepEqual(out, ["", "", ""], `H ${H}`);
    }
  });

  test("random graphs over every op (awkward widths, GEMM and register gradients, dropout, tiles)", async () => {
    const out: string[] = [];
    for (let seed = 1; seed <= 6; seed++) {
      const { pc, build } = randomVppsModel(seed);
      const vpps = await Vpps.create(pc, {
        cacheDir,
        exportGradients: true,
        training: { learningRate: LR, clip: CLIP },
        variants: {
          rowsPerWarp: 1,
          gradients: seed % 3 === 0 ? "gemm" : "auto",
          ...(seed % 2 === 0 ? { tileEntries: 2 } : {}), // most lists as tiles
        },
        name: `random${seed}`,
      });
      try {
        for (let batch = 0; batch < 2; batch++) {
          const cg = new ComputationGraph();
          const loss = buildRandomVppsGraph(cg, build, 100 * seed + batch);
          out.push(await checkBatch(vpps, pc, cg, loss, `random graph seed ${seed}.${batch} (${cg.size} nodes)`));
        }
      } finally {
        vpps.dispose();
      }
    }
    assert.deepEqual(out, Array(12).fill(""));
  });

  test("kernel profile: every executed instruction counted once, cycle shares add up", async () => {
    const { trees, vocab, model } = setup(128);
    const counts = new Array<number>(OPCODE_COUNT).fill(0);
    const vpps = await Vpps.create(
      model.params,
      {
        cacheDir,
        variants: { rowsPerWarp: 1 },
        instrument: { profileKernel: true },
        exportGradients: true,
        training: { learningRate: LR, clip: CLIP },
      },
      {
        editScript: (script, ctas) => {
          for (let at = ctas + 1; at < ctas + 1 + script[ctas]!; at += instructionWords(script, at)) {
            counts[script[at]! & 0xff]!++;
          }
        },
      },
    );
    try {
      const out: string[] = [];
      for (let b = 0; b < 2; b++) {
        const cg = new ComputationGraph();
        const loss = model.buildBatchLoss(cg, trees.slice(8 * b, 8 * b + 8), vocab);
        out.push(await checkBatch(vpps, model.params, cg, loss, `profiled kernel, batch ${b}`));
      }
      assert.deepEqual(out, ["", ""]);
      const p = vpps.kernelProfile(true);
      console.log(formatKernelProfile(p));
      for (const o of OPCODES) {
        const got = p.opcodes.find((x) => x.mnemonic === o.mnemonic)?.count ?? 0;
        assert.equal(
          got,
          counts[o.opcode],
          `${o.mnemonic}: executed ${got} times, the scripts hold ${counts[o.opcode]}`,
        );
      }
      const shares = p.waitShare + p.matrixShare + p.otherShare + (p.loadCycles + p.stagingCycles) / p.totalCycles;
      assert.ok(shares > 0.5 && shares <= 1 + 1e-9, `cycle shares add up to ${shares}`);
      assert.equal(vpps.kernelProfile().totalCycles, 0, "reset zeroes the counters");
    } finally {
      vpps.dispose();
    }
  });

  test("profile-guided rpw picks one of the compiled variants and keeps training", async () => {
    const { trees, vocab, model } = setup(256);
    const lines: string[] = [];
    const W = 2; // schedule workers: launches lag fb by up to W batches
    const vpps = await Vpps.create(model.params, {
      cacheDir,
      variants: { profileBatches: 2 },
      log: (l) => lines.push(l),
      host: { scheduleWorkers: W },
    });
    try {
      const losses: number[] = [];
      // round-robin until every variant ran profileBatches batches and ~profileNodes graph nodes, then 4 more
      let after = 0;
      for (let k = 0; after < 4 && k < 100 * vpps.variantInfo.length; k++) {
        const cg = new ComputationGraph();
        losses.push(vpps.fb(cg, model.buildBatchLoss(cg, trees.slice(k % 56, (k % 56) + 8), vocab)));
        if (vpps.chosenVariant !== undefined) after++;
      }
      losses.push(await vpps.syncLatestLoss());
      console.log(lines.join("\n"));
      assert.ok(vpps.variantInfo.length >= 2, "H100 offers several rpw variants at hidden 256");
      assert.ok(vpps.chosenVariant !== undefined, "no variant was chosen");
      // every profiled batch ran on every variant (the fb that chose was the last profiled one), later ones once
      const fbs = losses.length - 1;
      const n = vpps.variantInfo.length;
      assert.equal(vpps.stats.batches, (fbs - 3) * n + 3, `${fbs} fb calls, ${n} variants`);
      assert.ok(
        vpps.variantInfo.every((v) => v.profileMs !== undefined && v.profileMs > 0),
        "every variant was timed",
      );
      // launches lag fb by up to 2W batches (scheduleAhead's default); once every pipeline slot has been used, each
      // launch retires the oldest batch: a loss is always known
      assert.ok(losses.slice(2 * W + PIPELINE_SLOTS).every(Number.isFinite), `losses: ${losses.join(", ")}`);
      // with the default `transposed: "profile"`, plans with copies are among the variants
      assert.ok(
        vpps.variantInfo.some((v) => v.name.endsWith("_t")),
        "no variant with transposed copies",
      );
      // profileAgain: the next batches (of 1 tree here) are profiled over every variant again
      vpps.profileAgain();
      assert.equal(vpps.chosenVariant, undefined, "profileAgain forgets the choice");
      for (let k = 0; vpps.chosenVariant === undefined && k < 200 * vpps.variantInfo.length; k++) {
        const cg = new ComputationGraph();
        vpps.fb(cg, model.buildBatchLoss(cg, trees.slice(k % 64, (k % 64) + 1), vocab));
      }
      assert.ok(vpps.chosenVariant !== undefined, "the second profile chose no variant");
      assert.ok(Number.isFinite(await vpps.syncLatestLoss()));
      console.log(lines.join("\n"));
    } finally {
      vpps.dispose();
    }
  });

  test("schedule workers: batches in flight train like scheduling inside fb; stale losses are earlier ones", async () => {
    const W = 2;
    const SLOTS = 2; // few slots and no look-ahead beyond W, so that 8 batches show losses coming back
    const run = async (scheduleWorkers: number) => {
      const { trees, vocab, model } = setup(128);
      const vpps = await Vpps.create(model.params, {
        cacheDir,
        variants: { rowsPerWarp: 1 },
        training: { learningRate: LR, clip: CLIP },
        host: { scheduleWorkers, scheduleAhead: W, pipelineSlots: SLOTS },
      });
      try {
        assert.equal(vpps.scheduleWorkers, scheduleWorkers);
        const returned: number[] = [];
        // in the reference run (no workers) every batch's own loss, waited for after its fb
        const exact: number[] = [];
        const graphs = [new ComputationGraph(), new ComputationGraph()];
        for (let k = 0; k < 8; k++) {
          const cg = graphs[k % 2]!;
          cg.renew(); // with workers the graph is snapshotted: renewing it while its batch is in flight is fine
          returned.push(vpps.fb(cg, model.buildBatchLoss(cg, trees.slice(4 * k, 4 * k + 4), vocab)));
          if (scheduleWorkers === 0) exact.push(await vpps.syncLatestLoss());
        }
        const last = await vpps.syncLatestLoss();
        vpps.syncToHost();
        assert.equal(vpps.stats.batches, 8);
        const w = model.params.all.map((p) => Float32Array.from(p.value));
        return { returned, exact, last, w, stats: { ...vpps.stats } };
      } finally {
        vpps.dispose();
      }
    };
    const inline = await run(0);
    const pooled = await run(W);
    console.log(`  losses returned: in fb ${inline.returned.join(", ")}; workers ${pooled.returned.join(", ")}`);
    const lossOf = (j: number) => inline.exact[j]!;
    const near = (a: number, b: number) => Math.abs(a - b) <= 1e-4 * Math.max(1, Math.abs(a));
    assert.ok(near(inline.last, pooled.last), `last loss: in fb ${inline.last}, workers ${pooled.last}`);
    for (let k = 0; k < 8; k++) {
      const got = pooled.returned[k]!;
      // launches lag by up to W batches, and a launch waits for a batch only once every slot is in flight
      if (k >= W + SLOTS) assert.ok(Number.isFinite(got), `fb ${k} returned ${got} with ${W} workers`);
      if (Number.isNaN(got)) continue;
      const candidates = Array.from({ length: k }, (_, j) => j);
      assert.ok(
        candidates.some((j) => near(lossOf(j), got)),
        `fb ${k} returned ${got}, not the loss of batches ${candidates.join(", ")}`,
      );
    }
    for (const [i, w] of inline.w.entries()) assert.equal(firstDifference(`weight ${i}`, w, pooled.w[i]!), "");
    assert.ok(pooled.stats.scheduleMs > 0 && pooled.stats.snapshotMs > 0, JSON.stringify(pooled.stats));
    assert.equal(inline.stats.snapshotMs, 0);
  });

  test("deviceMemory: the pool as batches use it grows with the batch and stays within the reservation", async () => {
    const { trees, vocab, model } = setup(128);
    const vpps = await Vpps.create(model.params, {
      cacheDir,
      variants: { rowsPerWarp: 1 },
      host: { scheduleWorkers: 0 },
    });
    try {
      const run = async (n: number) => {
        const cg = new ComputationGraph();
        vpps.fb(cg, model.buildBatchLoss(cg, trees.slice(0, n), vocab));
        await vpps.syncLatestLoss();
        return vpps.deviceMemory();
      };
      const one = await run(1);
      const many = await run(32);
      const weightBytes = 4 * model.params.all.reduce((a, p) => a + p.value.length, 0);
      assert.ok(one.peakBytes > weightBytes, `peak ${one.peakBytes} B holds less than the weights (${weightBytes} B)`);
      assert.ok(many.peakBytes > one.peakBytes, `batch 32 peak ${many.peakBytes} B, batch 1 ${one.peakBytes} B`);
      assert.ok(many.peakBytes < many.capacityBytes, `peak ${many.peakBytes} B, reserved ${many.capacityBytes} B`);
      assert.equal((await run(1)).peakBytes, many.peakBytes, "the peak is a high-water mark");
    } finally {
      vpps.dispose();
    }
  });

  test("a scheduling error comes back from fb's caller with the scheduler's message, with and without workers", async () => {
    const pc = new ParameterCollection({ seed: 1 });
    const W = pc.addParameters([3, 1], undefined, "W"); // a [3,1] matrix: the graph also accepts it as a vector
    const v = pc.addParameters(3, undefined, "v");
    const message = /add\(.*\) \[3\] uses matrix 'W' as argument 1; VPPS holds 'W' in registers/;
    for (const scheduleWorkers of [0, 1]) {
      const vpps = await Vpps.create(pc, {
        cacheDir,
        variants: { rowsPerWarp: 1 },
        name: "refused",
        host: { scheduleWorkers },
      });
      try {
        const cg = new ComputationGraph();
        const bad = pickNegLogSoftmax(add(matVec(W, input(cg, [2])), parameter(cg, W)), 0);
        assert.throws(() => {
          vpps.fb(cg, bad);
          vpps.latestLossSync();
        }, message);
        const cg2 = new ComputationGraph();
        vpps.fb(cg2, pickNegLogSoftmax(add(matVec(W, input(cg2, [2])), parameter(cg2, v)), 1));
        assert.ok(Number.isFinite(vpps.latestLossSync()), `workers ${scheduleWorkers}: the next batch runs`);
      } finally {
        vpps.dispose();
      }
    }
  });

  test("the Engine adapter trains like the CPU engine (3 SGD batches) and evaluates on the GPU with fresh weights", () => {
    const run = (engineName: "cpu" | "vpps") => {
      const { trees, vocab, model } = setup(128);
      const engine = createEngine(engineName, model.params);
      // VPPS runs no forward-only passes: the registry's evaluation engine (autobatch on the GPU) runs them
      const passes = new ForwardPasses(engine, model.params);
      const trainer = new SimpleSGDTrainer({ learningRate: LR, clipThreshold: CLIP });
      const losses: number[] = [];
      const batch = (k: number) => {
        const cg = new ComputationGraph();
        const loss = model.buildBatchLoss(cg, trees.slice(8 * k, 8 * k + 8), vocab);
        losses.push(engine.forwardScalar(loss));
        engine.backward(loss);
        engine.update(trainer);
      };
      // a forward-only pass (evaluation) of one tree's root scores
      const scores = () => {
        const cg = new ComputationGraph();
        cg.training = false;
        const root = model.buildTree(cg, trees[40]!, vocab, false).rootScores;
        const evaluator = passes.engine();
        assert.equal(evaluator.name, engineName === "vpps" ? "autobatch" : "cpu");
        evaluator.forward(root);
        return Float32Array.from(evaluator.value(root));
      };
      try {
        for (let k = 0; k < 3; k++) batch(k);
        const before = scores();
        batch(3); // the evaluator must see the weights this batch changes
        const after = scores();
        engine.syncToHost();
        return { losses, w: Float32Array.from(model.params.all[0]!.value), before, after };
      } finally {
        passes.dispose();
        engine.dispose();
      }
    };
    const cpu = run("cpu");
    const gpu = run("vpps");
    console.log(`  losses CPU ${cpu.losses.join(", ")}; VPPS ${gpu.losses.join(", ")}`);
    for (let k = 0; k < 4; k++)
      assert.ok(Math.abs(cpu.losses[k]! - gpu.losses[k]!) <= 1e-4 * cpu.losses[k]!, `batch ${k}`);
    assert.equal(firstDifference("W after 4 batches", cpu.w, gpu.w), "");
    assert.equal(firstDifference("root scores after 3 batches", cpu.before, gpu.before), "");
    assert.equal(firstDifference("root scores after 4 batches", cpu.after, gpu.after), "");
    assert.notDeepEqual(gpu.before, gpu.after, "the evaluation did not see the 4th batch's weights");
  });

  test("Adam, hidden 256, SST: 3 consecutive batches of 1, 8 and 32 trees: loss, gradients, moments, steps", async () => {
    const { out, loose } = await compareAdamTrees(256, [1, 8, 32], { rowsPerWarp: 1 }, true);
    assert.deepEqual(out, ["", "", ""]);
    assert.ok(loose.count <= 0.01 * loose.total, `${loose.count} of ${loose.total} steps compared loosely`);
  });

  test("Adam with gradients forced to GEMM (host update), hidden 256: 3 batches of 1, 8 and 16 trees", async () => {
    const { out, loose } = await compareAdamTrees(256, [1, 8, 16], { rowsPerWarp: 1, gradients: "gemm" });
    assert.deepEqual(out, ["", "", ""]);
    assert.ok(loose.count <= 0.01 * loose.total, `${loose.count} of ${loose.total} steps compared loosely`);
  });

  test("Adam on random graphs (parameters a batch does not use still move), kernel and host update", async () => {
    const out: string[] = [];
    for (const seed of [1, 3]) {
      const { pc, build } = randomVppsModel(seed);
      const reference = randomVppsModel(seed); // the same weights
      const trainer = new AdamTrainer({ learningRate: ADAM_LR, clipThreshold: ADAM_CLIP });
      const vpps = await Vpps.create(pc, {
        cacheDir,
        training: { learningRate: ADAM_LR, clip: ADAM_CLIP, optimizer: "adam" },
        variants: { rowsPerWarp: 1, gradients: seed === 3 ? "gemm" : "auto" },
        name: `random${seed}`,
      });
      try {
        const r = await compareAdamRuns(
          `random graph seed ${seed}`,
          3,
          (k) => {
            const cg = new ComputationGraph();
            return referenceAdamBatch(reference.pc, trainer, buildRandomVppsGraph(cg, reference.build, 100 * seed + k));
          },
          (k) => {
            const cg = new ComputationGraph();
            return vppsAdamBatch(vpps, pc, cg, buildRandomVppsGraph(cg, build, 100 * seed + k));
          },
          pc,
        );
        out.push(...r.out);
      } finally {
        vpps.dispose();
      }
    }
    assert.deepEqual(out, Array(6).fill(""));
  });

  test("the Engine adapter trains with an AdamTrainer like the CPU engine (3 batches; the trainer's step count)", async () => {
    const { trees, vocab, model } = setup(128);
    const reference = setup(128).model;
    const refTrainer = new AdamTrainer({ learningRate: ADAM_LR, clipThreshold: ADAM_CLIP });
    const trainer = new AdamTrainer({ learningRate: ADAM_LR, clipThreshold: ADAM_CLIP });
    const engine = createEngine("vpps", model.params);
    assert.ok(engine instanceof VppsEngine);
    const pc = model.params;
    try {
      const { out } = await compareAdamRuns(
        "Engine adapter",
        3,
        (k) => {
          const cg = new ComputationGraph();
          return referenceAdamBatch(
            reference.params,
            refTrainer,
            reference.buildBatchLoss(cg, trees.slice(8 * k, 8 * k + 8), vocab),
          );
        },
        async (k) => {
          const before = pc.all.map((p) => Float32Array.from(p.value));
          const cg = new ComputationGraph();
          const loss = model.buildBatchLoss(cg, trees.slice(8 * k, 8 * k + 8), vocab);
          const value = engine.forwardScalar(loss);
          engine.backward(loss);
          engine.update(trainer);
          engine.syncToHost();
          const moments = engine.vpps.adamMoments();
          assert.ok(moments);
          return { loss: value, before, after: pc.all.map((p) => Float32Array.from(p.value)), moments };
        },
        pc,
      );
      assert.deepEqual(out, ["", "", ""]);
      assert.equal(trainer.updates, 3);
      assert.equal(engine.vpps.updates, 3);
      assert.equal(engine.vpps.optimizer, "adam");
    } finally {
      engine.dispose();
    }
  });

  test("a barrier never satisfied ends the launch with an error naming processor and barrier", async () => {
    const { trees, vocab, model } = setup(128);
    const vpps = await Vpps.create(
      model.params,
      { cacheDir, variants: { rowsPerWarp: 1 }, barrierSpinLimit: 1 << 14 },
      {
        // the first wait of the script expects one signal more than will ever come
        editScript: (script, ctas) => {
          for (let at = ctas + 1; at < ctas + 1 + script[ctas]!; at += instructionWords(script, at)) {
            if ((script[at]! & 0xff) === Opcode.Wait) {
              script[at + 1]! += 1;
              return;
            }
          }
        },
      },
    );
    try {
      const cg = new ComputationGraph();
      vpps.fb(cg, model.buildBatchLoss(cg, trees.slice(0, 8), vocab));
      const t0 = performance.now();
      await assert.rejects(vpps.syncLatestLoss(), (e: unknown) => {
        assert.ok(e instanceof VppsKernelError, String(e));
        console.log(`  ${e.message} (after ${(performance.now() - t0).toFixed(0)} ms)`);
        assert.ok(e.processor >= 0 && e.processor < vpps.plan.ctas, `processor ${e.processor}`);
        assert.ok(e.barrier >= 0);
        assert.match(e.message, /processor \(CTA\) \d+ timed out waiting on barrier \d+/);
        return true;
      });
    } finally {
      vpps.dispose();
    }
  });
});
