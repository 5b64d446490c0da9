import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { type DeviceModel, H100_SXM } from "../src/cuda/hw/device-model.js";
import { readTrees } from "../src/data/sst.js";
import { syntheticTrees } from "../src/data/synthetic.js";
import { Vocabulary } from "../src/data/vocab.js";
import { createModelLayout, type ModelLayout } from "../src/engines/vpps/plan/layout.js";
import { ADAM_DEFAULTS, adamStep, momentLayout } from "../src/engines/vpps/plan/moments.js";
import { type PlanOptions, planVpps } from "../src/engines/vpps/plan/plan.js";
import { type BatchSchedule, type ScheduleOptions, VppsScheduler } from "../src/engines/vpps/schedule/scheduler.js";
import { waitCoverage } from "../src/engines/vpps/script/coverage.js";
import { disassemble } from "../src/engines/vpps/script/disassemble.js";
import { type EmulatedBatch, emulateBatch } from "../src/engines/vpps/script/emulate-batch.js";
import { instructionWords, Opcode } from "../src/engines/vpps/script/format.js";
import { ComputationGraph, type Expression } from "../src/graph/graph.js";
import { onChipMatrices, ParameterCollection } from "../src/model/parameters.js";
import { TreeLstmModel } from "../src/models/treelstm/model.js";
import { add, input, matVec, parameter, pickNegLogSoftmax } from "../src/ops/index.js";
import { buildRandomVppsGraph, randomVppsModel } from "./random-graph.js";
import { tensorDifference as firstDifference, referenceSgdBatch, type SgdReference } from "./vpps-reference.js";
import { adamTrajectories } from "./vpps-trajectories.js";

/** A small GPU: few CTAs, so matrices spread over several slots of each CTA and processors share work. */
const SMALL: DeviceModel = { ...H100_SXM, name: "small test GPU", smCount: 3 };
const LR = 0.1;

type Reference = SgdReference;

/** The CPU engine's loss, gradients and clipped-SGD values at this file's learning rate. */
const reference = (pc: ParameterCollection, loss: Expression, clip: number): Reference =>
  referenceSgdBatch(pc, loss, LR, clip);

/** The loss, every gradient, and every parameter's update step (new − old: small next to the weights themselves). */
function compare(pc: ParameterCollection, ref: Reference, got: EmulatedBatch): string {
  if (!(Math.abs(ref.loss - got.loss) <= 1e-5 * Math.max(1, Math.abs(ref.loss)))) {
    return `loss: CPU ${ref.loss}, VPPS ${got.loss}`;
  }
  for (const [i, p] of pc.all.entries()) {
    const step = (v: Float32Array) => Float32Array.from(v, (x, k) => x - p.value[k]!);
    const d =
      firstDifference(`gradient of ${p.name}`, ref.gradients[i]!, got.gradients[i]!) ||
      firstDifference(`update of ${p.name}`, step(ref.values[i]!), step(got.values[i]!));
    if (d) return d;
  }
  return "";
}

/** Instructions of the given opcodes in all processors' scripts. */
function countOpcodes(script: Uint32Array, ctas: number, ops: readonly Opcode[]): number {
  let n = 0;
  for (let c = 0; c < ctas; c++) {
    for (let at = ctas + 1 + script[c]!; at < ctas + 1 + script[c + 1]!; at += instructionWords(script, at)) {
      if (ops.includes(script[at]! & 0xff)) n++;
    }
  }
  return n;
}

function schedule(
  pc: ParameterCollection,
  device: DeviceModel,
  plan: PlanOptions,
  cg: ComputationGraph,
  loss: Expression,
  opts: ScheduleOptions = {},
) {
  const model = createModelLayout(pc.all, planVpps(onChipMatrices(pc), device, plan));
  return { model, sched: new VppsScheduler(model, { exportGradients: true, ...opts }).schedule(cg, loss) };
}

function runAll(
  pc: ParameterCollection,
  model: ModelLayout,
  sched: BatchSchedule,
  cg: ComputationGraph,
  ref: Reference,
  seeds: number,
  clip: number,
): { mismatches: string[]; stalls: number } {
  const mismatches: string[] = [];
  let stalls = 0;
  const values = pc.all.map((p) => p.value);
  for (let seed = 1; seed <= seeds; seed++) {
    for (const interleaving of ["random", "greedy"] as const) {
      const got = emulateBatch(model, sched, cg, values, { seed, interleaving, learningRate: LR, clip });
      stalls += got.stats.stalls;
      const d = compare(pc, ref, got);
      if (d) mismatches.push(`${interleaving} seed ${seed}: ${d}`);
    }
  }
  return { mismatches, stalls };
}

function treeBatch(count: number, seed: number, H: number, E: number, dropout = 0) {
  const trees = syntheticTrees(count, seed);
  const vocab = Vocabulary.fromTrees(trees);
  const model = new TreeLstmModel({ vocabSize: 60, embed: E, hidden: H, seed, dropout });
  const cg = new ComputationGraph();
  cg.dropoutKey = seed;
  const loss = model.buildBatchLoss(cg, trees, vocab);
  return { pc: model.params, cg, loss };
}

describe("VPPS emulator against the CPU engine", () => {
  const configs: { name: string; plan: PlanOptions; device: DeviceModel; clip: number }[] = [
    { name: "1 CTA/SM, rpw 1, clipping", plan: { ctasPerSm: 1, rowsPerWarp: 1 }, device: SMALL, clip: 5 },
    {
      name: "2 CTAs/SM, rpw 2, no clipping, transposed copies",
      plan: { ctasPerSm: 2, rowsPerWarp: 2, transposed: true },
      device: SMALL,
      clip: 0,
    },
    {
      name: "gradients by GEMM (host update)",
      plan: { ctasPerSm: 1, rowsPerWarp: 1, gradients: "gemm" },
      device: SMALL,
      clip: 5,
    },
    { name: "132 CTAs (H100 grid)", plan: { ctasPerSm: 1, rowsPerWarp: 1 }, device: H100_SXM, clip: 1 },
    {
      name: "132 CTAs, rpw 2, transposed copies",
      plan: { ctasPerSm: 1, rowsPerWarp: 2, transposed: true },
      device: H100_SXM,
      clip: 1,
    },
  ];
  for (const c of configs) {
    test(`Tree-LSTM batches, ${c.name}: loss, gradients and updated weights over many interleavings`, () => {
      for (const [count, seed] of [
        [1, 11],
        [3, 12],
        [8, 13],
      ] as const) {
        const { pc, cg, loss } = treeBatch(count, seed, 12, 7, seed === 13 ? 0.2 : 0);
        const ref = reference(pc, loss, c.clip);
        const { model, sched } = schedule(pc, c.device, c.plan, cg, loss);
        // x̄ of short backward lists runs on the transposed copies (matvec.acc) exactly when the plan has them
        const copies = model.plan.transposed.length;
        if (c.plan.transposed !== true) assert.equal(copies, 0);
        else assert.ok(copies > 0, `${c.name}: the plan has no transposed copies`);
        const acc = countOpcodes(sched.script, model.plan.ctas, [Opcode.MatVecAcc]);
        assert.equal(acc > 0, copies > 0, `${acc} matvec.acc instructions with ${copies} transposed copies`);
        const { mismatches, stalls } = runAll(pc, model, sched, cg, ref, 4, c.clip);
        assert.deepEqual(mismatches.slice(0, 3), [], `${count} tree(s), seed ${seed}`);
        assert.ok(stalls > 0, "no processor ever had to wait: the interleavings did not test the barriers");
      }
    });
  }

  // Long lists as tile instructions (schedule-steps.ts flushTiles): tileEntries 2 turns nearly every list into
  // tiles on arbitrary processors; 0 turns tiling off, which the default (a few dozen entries) does for short lists.
  for (const tileEntries of [2, 0]) {
    test(`Tree-LSTM batches with tileEntries ${tileEntries}: loss, gradients and updated weights`, () => {
      for (const [count, seed, plan] of [
        [1, 21, { ctasPerSm: 1, rowsPerWarp: 1 }],
        [8, 22, { ctasPerSm: 2, rowsPerWarp: 2 }],
      ] as const) {
        const { pc, cg, loss } = treeBatch(count, seed, 12, 70, 0);
        const ref = reference(pc, loss, 5);
        const { model, sched } = schedule(pc, SMALL, plan, cg, loss, { tileEntries });
        const tiles = countOpcodes(sched.script, model.plan.ctas, [Opcode.Tile, Opcode.TileXbar, Opcode.TileWbar]);
        if (tileEntries === 2) assert.ok(tiles > 0, "tileEntries 2 must produce tile instructions");
        else assert.equal(tiles, 0, "tileEntries 0 must not tile");
        assert.equal(sched.zeroGradients, tileEntries === 2);
        const { mismatches } = runAll(pc, model, sched, cg, ref, 3, 5);
        assert.deepEqual(mismatches.slice(0, 3), [], `${count} tree(s), seed ${seed}`);
      }
    });
  }

  // the default tiles nothing in graphs this small; tileEntries 2 runs nearly every product as tiles
  for (const tiles of [{}, { tileEntries: 2 }] as const) {
    const seeds = "tileEntries" in tiles ? 12 : 30;
    test(`random graphs over every op${"tileEntries" in tiles ? " with tiles (tileEntries 2)" : ""}: loss, gradients and updated weights`, () => {
      for (let seed = 1; seed <= seeds; seed++) {
        const { pc, build } = randomVppsModel(seed);
        const cg = new ComputationGraph();
        const loss = buildRandomVppsGraph(cg, build, seed);
        const clip = seed % 3 === 0 ? 0 : 2;
        const ref = reference(pc, loss, clip);
        const plan: PlanOptions = {
          ctasPerSm: seed % 2 === 0 ? 2 : 1,
          rowsPerWarp: 1 + (seed % 3),
          gradients: seed % 5 === 0 ? "gemm" : "auto",
          transposed: seed % 2 === 1,
        };
        const { model, sched } = schedule(pc, SMALL, plan, cg, loss, tiles);
        const { mismatches } = runAll(pc, model, sched, cg, ref, 2, clip);
        assert.deepEqual(mismatches.slice(0, 3), [], `random graph seed ${seed} (${cg.size} nodes)`);
      }
    });
  }
});

describe("VPPS scheduling errors and dumps", () => {
  test("a register-held matrix used other than as the W of a product is refused, naming it", () => {
    const pc = new ParameterCollection({ seed: 1 });
    const W = pc.addParameters([3, 1], undefined, "W"); // a [3,1] matrix: the graph also accepts it as a vector
    const cg = new ComputationGraph();
    const loss = pickNegLogSoftmax(add(matVec(W, input(cg, [2])), parameter(cg, W)), 0);
    assert.throws(
      () => schedule(pc, SMALL, {}, cg, loss),
      /add\(.*\) \[3\] uses matrix 'W' as argument 1; VPPS holds 'W' in registers/,
    );
  });

  test("a tileEntries that is not a whole number >= 0 is refused, naming the option", () => {
    const { pc, cg, loss } = treeBatch(1, 5, 12, 7);
    for (const tileEntries of [-1, 2.5, Number.NaN]) {
      assert.throws(
        () => schedule(pc, SMALL, {}, cg, loss, { tileEntries }),
        /tileEntries must be a whole number >= 0 \(0: no tiles\); got/,
      );
    }
  });

  test("VPPS_DUMP writes the graph, the schedule, the script and the kernel source", async () => {
    const { mkdtemp, readdir, readFile, rm } = await import("node:fs/promises");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    const { generateKernelSource, kernelName } = await import("../src/engines/vpps/codegen/template.js");
    const dir = await mkdtemp(join(tmpdir(), "vpps-dump-"));
    const saved = process.env["VPPS_DUMP"];
    process.env["VPPS_DUMP"] = dir;
    try {
      const { pc, cg, loss } = treeBatch(2, 5, 8, 5);
      const { model } = schedule(pc, SMALL, {}, cg, loss);
      generateKernelSource(model.plan, { model: "dumped" });
      const kernelFile = `${kernelName(model.plan, { model: "dumped" })}.cu`;
      const [batch] = (await readdir(dir)).filter((f) => f.startsWith("batch-"));
      assert.ok(batch, "no batch folder");
      const files = await readdir(join(dir, batch));
      assert.deepEqual(files.sort(), ["graph.txt", "layout.json", "schedule.txt", "script.txt"]);
      assert.match(await readFile(join(dir, batch, "schedule.txt"), "utf8"), /step +\d+ forward +#\d+ affine/);
      assert.match(await readFile(join(dir, batch, "script.txt"), "utf8"), /processor 0: \d+ words\n +0 +/);
      assert.match(await readFile(join(dir, kernelFile), "utf8"), /VPPS forward\/backward\/update kernel/);
    } finally {
      if (saved === undefined) delete process.env["VPPS_DUMP"];
      else process.env["VPPS_DUMP"] = saved;
      await rm(dir, { recursive: true, force: true });
    }
  });
});

/** Word offsets of every wait instruction, per processor. */
function waitsOf(script: Uint32Array, ctas: number): { cta: number; at: number }[] {
  const out: { cta: number; at: number }[] = [];
  for (let c = 0; c < ctas; c++) {
    for (let at = ctas + 1 + script[c]!; at < ctas + 1 + script[c + 1]!; at += instructionWords(script, at)) {
      if ((script[at]! & 0xff) === Opcode.Wait) out.push({ cta: c, at });
    }
  }
  return out;
}

/** The waits that order something (script/coverage.ts). */
function uncoveredWaits(script: Uint32Array, ctas: number): { cta: number; at: number }[] {
  return waitCoverage(script, ctas).filter((w) => !w.covered);
}

/** The script without the 2-word instruction at `at` of processor `cta`. */
function without(script: Uint32Array, ctas: number, cta: number, at: number): Uint32Array {
  const out = new Uint32Array(script.length - 2);
  out.set(script.subarray(0, at));
  out.set(script.subarray(at + 2), at);
  for (let c = cta + 1; c <= ctas; c++) out[c]! -= 2;
  return out;
}

describe("VPPS script synchronisation", () => {
  // clipping always active (a tiny threshold), so even the waits of the norm's reads decide the result
  const CLIP = 0.01;
  const { pc, cg, loss } = treeBatch(4, 21, 8, 5);
  const ref = reference(pc, loss, CLIP);
  const { model, sched } = schedule(pc, SMALL, { ctasPerSm: 1, rowsPerWarp: 1 }, cg, loss);
  const ctas = model.plan.ctas;

  test("every wait counts exactly the signals of its barrier, and every signal is waited for", () => {
    const signals = new Map<number, number>();
    const waited = new Set<number>();
    const text = disassemble(sched.script, ctas);
    for (const line of text.split("\n")) {
      const s = /\bsignal bar=(\d+)/.exec(line);
      if (s) signals.set(Number(s[1]), (signals.get(Number(s[1])) ?? 0) + 1);
    }
    for (const { at } of waitsOf(sched.script, ctas)) {
      const b = sched.script[at]! >>> 8;
      waited.add(b);
      assert.equal(sched.script[at + 1], signals.get(b), `wait on barrier ${b}`);
    }
    for (const b of signals.keys()) assert.ok(waited.has(b), `barrier ${b} is signalled but nobody waits for it`);
    assert.ok(waited.size > 3, `only ${waited.size} barriers used`);
  });

  test("barriers per producer class: a matrix's barrier counts only its holders, after their lists", () => {
    // Barrier K·s + 1 + m (K = 1 + matrices) is signalled by the holders of matrix m right after their list of step
    // s; barrier K·s by the CTAs that ran elementwise instructions in step s, before their lists. So a reader of one
    // list waits for exactly that matrix's holders, and a reader of elementwise results for no list at all.
    // matrix numbers: the plan's matrices, then their transposed copies (each with its own barrier)
    const held = [...model.plan.matrices, ...model.plan.transposed];
    const K = 1 + held.length;
    const holders = held.map((m) => new Set(m.partitions.map((p) => p.cta)).size);
    const lastForward = sched.barriers - 3 * K; // the norm, grid barrier and update steps close the script
    let groupWaits = 0;
    let elementwiseSignals = 0;
    for (let c = 0; c < ctas; c++) {
      let previous = -1;
      for (let at = ctas + 1 + sched.script[c]!; at < ctas + 1 + sched.script[c + 1]!; ) {
        const op = sched.script[at]! & 0xff;
        const n = sched.script[at]! >>> 8;
        if (op === Opcode.Signal && n < lastForward) {
          const list = previous === Opcode.MatVec || previous === Opcode.MatVecBwd || previous === Opcode.MatVecAcc;
          if (n % K === 0) {
            elementwiseSignals++;
            assert.ok(!list, `processor ${c}: elementwise barrier ${n} signalled right after a matrix list`);
          } else {
            assert.ok(list, `processor ${c}: matrix barrier ${n} signalled other than right after its list`);
            assert.equal(sched.script[at - 3]! >>> 8, (n % K) - 1, `processor ${c}: barrier ${n} after another matrix`);
          }
        }
        if (op === Opcode.Wait && n % K !== 0 && n < lastForward) {
          groupWaits++;
          assert.equal(sched.script[at + 1], holders[(n % K) - 1], `wait on matrix barrier ${n}`);
        }
        if (op !== Opcode.Signal) previous = op;
        at += instructionWords(sched.script, at);
      }
    }
    assert.ok(groupWaits > 10 && elementwiseSignals > 10, `${groupWaits} matrix waits, ${elementwiseSignals} signals`);
  });

  test("the waits that order something are found (a covered wait is one whose signals its processor has seen)", () => {
    const all = waitsOf(sched.script, ctas);
    const uncovered = uncoveredWaits(sched.script, ctas);
    assert.ok(uncovered.length > 10 && uncovered.length < all.length, `${uncovered.length} of ${all.length}`);
    // removing a covered wait leaves every other wait uncovered as before, and the results equal
    const covered = all.find(({ at }) => !uncovered.some((u) => u.at === at))!;
    const broken = without(sched.script, ctas, covered.cta, covered.at);
    assert.equal(uncoveredWaits(broken, ctas).length, uncovered.length);
  });

  test("a script with one uncovered wait removed is caught by some interleaving", () => {
    // Waits of the forward and backward passes that order something (a wait covered transitively, by an earlier
    // wait on a later signal of the same producers, changes nothing when removed); the waits of the seed step and
    // of the norm change results too little or not at all.
    const waits = uncoveredWaits(sched.script, ctas).filter(({ at }) => {
      const b = sched.script[at]! >>> 8;
      return b > 0 && b < sched.barriers - 4;
    });
    assert.ok(waits.length > 10);
    const values = pc.all.map((p) => p.value);
    const sample = Array.from({ length: 8 }, (_, k) => waits[Math.floor((k * waits.length) / 8)]!);
    const missed: string[] = [];
    for (const { cta, at } of sample) {
      const broken = { ...sched, script: without(sched.script, ctas, cta, at) };
      let caught = "";
      for (let seed = 1; seed <= 20 && !caught; seed++) {
        for (const interleaving of ["greedy", "random"] as const) {
          const got = emulateBatch(model, broken, cg, values, { seed, interleaving, learningRate: LR, clip: CLIP });
          caught ||= compare(pc, ref, got);
        }
      }
      if (!caught) missed.push(`processor ${cta} wait on barrier ${sched.script[at]! >>> 8}`);
    }
    console.log(`removed-wait sample: ${sample.length - missed.length}/${sample.length} caught`);
    assert.ok(missed.length <= 1, `removed waits that no interleaving noticed: ${missed.join("; ")}`);
  });

  test("a wait that can never be satisfied is reported as a deadlock, naming the barrier", () => {
    const { at } = waitsOf(sched.script, ctas)[0]!;
    const stuck = Uint32Array.from(sched.script);
    stuck[at + 1]! += 1;
    const values = pc.all.map((p) => p.value);
    assert.throws(
      () => emulateBatch(model, { ...sched, script: stuck }, cg, values, { seed: 1, learningRate: LR, clip: 0 }),
      new RegExp(`deadlock.*waits on barrier ${stuck[at]! >>> 8} for ${stuck[at + 1]} signals`),
    );
  });
});

/** SST training trees beside the repository (the shared data set), when present. */
const SST_FILE = join(import.meta.dirname, "..", "..", "shared", "data", "sst", "train.txt");

describe("VPPS emulator: Adam against the CPU engine and the AdamTrainer", () => {
  const sst = existsSync(SST_FILE);
  const configs: { name: string; plan: PlanOptions; clip: number; tileEntries?: number }[] = [
    { name: "kernel update, 1 CTA/SM, rpw 1, clipping at 1", plan: { ctasPerSm: 1, rowsPerWarp: 1 }, clip: 1 },
    {
      name: "kernel update with tiles (tileEntries 2), clipping at 1",
      plan: { ctasPerSm: 1, rowsPerWarp: 1 },
      clip: 1,
      tileEntries: 2,
    },
    { name: "kernel update, 2 CTAs/SM, rpw 2, clipping at 5", plan: { ctasPerSm: 2, rowsPerWarp: 2 }, clip: 5 },
    { name: "gradients by GEMM (host update), clipping at 1", plan: { rowsPerWarp: 1, gradients: "gemm" }, clip: 1 },
  ];
  for (const c of configs) {
    test(`${sst ? "SST" : "synthetic (SST not found)"} Tree-LSTM batches, ${c.name}: 3 Adam steps`, () => {
      const trees = sst ? readTrees(SST_FILE, { maxTrees: 12 }) : syntheticTrees(12, 31);
      const vocab = Vocabulary.fromTrees(trees);
      const model = new TreeLstmModel({ vocabSize: vocab.size, embed: 7, hidden: 12, seed: 4 });
      const graphs = (k: number) => {
        const cg = new ComputationGraph();
        return { cg, loss: model.buildBatchLoss(cg, trees.slice(4 * k, 4 * k + 1 + k), vocab) };
      };
      const loose = { count: 0, total: 0 };
      const out = adamTrajectories(model.params, graphs, SMALL, c.plan, c.clip, 0.01, 3, loose, c.tileEntries);
      assert.deepEqual(out.slice(0, 3), []);
      assert.ok(loose.count <= 0.01 * loose.total, `${loose.count} of ${loose.total} steps compared loosely`);
    });
  }

  test("random graphs (unused parameters keep moving): 3 Adam steps, kernel and host update", () => {
    const loose = { count: 0, total: 0 };
    for (let seed = 1; seed <= 12; seed++) {
      const { pc, build } = randomVppsModel(seed);
      const graphs = (k: number) => {
        const cg = new ComputationGraph();
        return { cg, loss: buildRandomVppsGraph(cg, build, 100 * seed + k) };
      };
      const plan: PlanOptions = {
        ctasPerSm: seed % 2 === 0 ? 2 : 1,
        rowsPerWarp: 1 + (seed % 3),
        gradients: seed % 4 === 0 ? "gemm" : "auto",
      };
      const out = adamTrajectories(pc, graphs, SMALL, plan, seed % 3 === 0 ? 0 : 1, 0.05, 3, loose);
      assert.deepEqual(out.slice(0, 3), [], `random graph seed ${seed}`);
    }
    assert.ok(loose.count <= 0.01 * loose.total, `${loose.count} of ${loose.total} steps compared loosely`);
  });

  test("an Adam script with learning rate 0 changes neither weights nor moments", () => {
    const { pc, cg, loss } = treeBatch(2, 41, 8, 5);
    const model = createModelLayout(pc.all, planVpps(onChipMatrices(pc), SMALL, { rowsPerWarp: 1 }));
    const sched = new VppsScheduler(model, { optimizer: "adam" }).schedule(cg, loss);
    const moments = new Float32Array(momentLayout(model).floats).fill(0.5);
    const values = pc.all.map((p) => p.value);
    const adam = adamStep(ADAM_DEFAULTS, 3);
    const got = emulateBatch(model, sched, cg, values, { seed: 1, learningRate: 0, clip: 1, adam }, moments);
    assert.deepEqual(got.moments, moments);
    for (const [i, v] of got.values.entries()) assert.deepEqual(v, values[i], pc.all[i]!.name);
    const ran = emulateBatch(model, sched, cg, values, { seed: 1, learningRate: 0.01, clip: 1, adam }, moments);
    assert.notDeepEqual(ran.moments, moments);
  });
});
