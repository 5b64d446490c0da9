/**
 * The VPPS host pipeline without a GPU: graph snapshots rebuild the very graph the scheduler reads, and schedule
 * workers produce byte for byte the script and layout fields the in-thread VppsScheduler produces — several batches
 * in flight, two plan variants, SST and random graphs — report scheduling errors with their message, and never keep
 * the process alive (also when the worker must load TypeScript through tsx registered by API, as bin/vpps.js does).
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { type DeviceModel, H100_SXM } from "../src/cuda/hw/device-model.js";
import { readTrees } from "../src/data/sst.js";
import { syntheticTrees } from "../src/data/synthetic.js";
import type { TreeNode } from "../src/data/tree.js";
import { Vocabulary } from "../src/data/vocab.js";
import { workerBuildFromEnv } from "../src/engines/vpps/options.js";
import { createModelLayout } from "../src/engines/vpps/plan/layout.js";
import { type PlanOptions, planVpps, type VppsPlan } from "../src/engines/vpps/plan/plan.js";
import { detachSchedule, type ScheduledBatch } from "../src/engines/vpps/schedule/batch.js";
import {
  defaultScheduleWorkers,
  SchedulePool,
  ScheduleRefusal,
  ScheduleWorkerError,
} from "../src/engines/vpps/schedule/pool.js";
import { VppsScheduler } from "../src/engines/vpps/schedule/scheduler.js";
import { ComputationGraph, type Expression, snapshotInputs } from "../src/graph/graph.js";
import { onChipMatrices, ParameterCollection } from "../src/model/parameters.js";
import { treeLstmBuilderSpec } from "../src/models/treelstm/graph-builder.js";
import { TreeLstmModel } from "../src/models/treelstm/model.js";
import { add, input, matVec, parameter, pickNegLogSoftmax, tanh } from "../src/ops/index.js";
import { affineRows, lookupRows, pickNegLogSoftmaxRows } from "../src/ops/rows.js";
import { isUserError } from "../src/util/errors.js";
import { buildRandomVppsGraph, type RandomVppsModel, randomVppsModel } from "./random-graph.js";

const SMALL: DeviceModel = { ...H100_SXM, name: "small test GPU", smCount: 3 };
const SST_TRAIN = fileURLToPath(new URL("../../shared/data/sst/train.txt", import.meta.url));
const ROOT = fileURLToPath(new URL("..", import.meta.url));

/** Two variants that differ in every way the scheduler cares about: CTAs per SM, rpw, gradient placement. */
function twoPlans(pc: ParameterCollection): VppsPlan[] {
  const options: PlanOptions[] = [
    { ctasPerSm: 1, rowsPerWarp: 1 },
    { ctasPerSm: 2, rowsPerWarp: 2, gradients: "gemm" },
  ];
  return options.map((o) => planVpps(onChipMatrices(pc), SMALL, o));
}

/** A batch's schedule as plain data (every field the main thread reads), for deepEqual. */
function plain(b: ScheduledBatch) {
  const L = b.layout;
  return {
    script: Buffer.from(b.script.buffer, b.script.byteOffset, b.script.byteLength).toString("base64"),
    barriers: b.barriers,
    update: b.update,
    lossOffset: b.lossOffset,
    liveNodes: b.liveNodes,
    regions: [L.inputStart, L.gradStart, L.poolFloats],
    paramGrad: Array.from(L.paramGrad),
    lookupRows: [Array.from(L.lookupRows.table), Array.from(L.lookupRows.row), Array.from(L.lookupRows.offset)],
    collect: [Array.from(L.collectY), Array.from(L.collectX), Array.from(L.collectCount)],
  };
}

const pools: SchedulePool<number>[] = [];
after(() => {
  for (const p of pools) p.dispose();
});

function newPool(pc: ParameterCollection, plans: VppsPlan[], workers: number): SchedulePool<number> {
  const pool = new SchedulePool<number>({ workers, params: pc.all, plans, schedule: { exportGradients: true } });
  pools.push(pool);
  return pool;
}

/**
 * Posts `count` batches (variant k % 2) through a pool while scheduling each on the main thread too, taking
 * results both without blocking (as fb does) and blocking (as a flush does); three graphs rotate and each is
 * renewed right after posting, so a worker that read the live graph would see another batch.
 */
function compareWithPool(
  pc: ParameterCollection,
  count: number,
  build: (cg: ComputationGraph, k: number) => Expression,
  workers: number,
): void {
  const plans = twoPlans(pc);
  const local = plans.map((p) => new VppsScheduler(createModelLayout(pc.all, p), { exportGradients: true }));
  const pool = newPool(pc, plans, workers);
  const graphs = [new ComputationGraph(), new ComputationGraph(), new ComputationGraph()];
  const expected = new Map<number, { sched: ReturnType<typeof plain>; inputs: number[] }>();
  let taken = 0;
  const check = (block: boolean) => {
    for (;;) {
      const b = pool.take(block || pool.pending > workers);
      if (b === undefined) return;
      const want = expected.get(b.tag)!;
      assert.equal(b.tag, taken, "batches come back in posting order");
      assert.equal(b.variant, b.tag % 2);
      assert.deepEqual(plain(b.batch), want.sched, `batch ${b.tag} (variant ${b.variant})`);
      assert.deepEqual(Array.from(b.inputs), want.inputs, `batch ${b.tag}: input values`);
      assert.ok(b.scheduleMs >= 0);
      pool.release(b);
      taken++;
    }
  };
  for (let k = 0; k < count; k++) {
    const cg = graphs[k % 3]!;
    cg.renew();
    const loss = build(cg, k);
    const s = local[k % 2]!.schedule(cg, loss);
    expected.set(k, { sched: plain(detachSchedule(s)), inputs: Array.from(cg.inputData.subarray(0, cg.inputSize)) });
    pool.post(cg, loss, k % 2, k);
    cg.renew(); // the worker must not depend on the graph after post
    check(false);
    assert.ok(pool.pending <= workers, "at most `workers` batches stay in flight");
  }
  check(true);
  assert.equal(taken, count);
  assert.equal(pool.pending, 0);
  assert.ok(pool.stats.scheduleMs > 0 && pool.stats.snapshotMs > 0);
}

// ---- graphs ----------------------------------------------------------------------------------------------------

function sstSetup(): { trees: TreeNode[]; source: string } {
  if (existsSync(SST_TRAIN)) return { trees: readTrees(SST_TRAIN, { maxTrees: 200 }), source: "SST" };
  return { trees: syntheticTrees(200, 5), source: "synthetic (SST train.txt not found)" };
}

// ---- tests -----------------------------------------------------------------------------------------------------

describe("graph snapshots", () => {
  const arrays = ["op", "rows", "cols", "argStart", "argCount", "aux", "aux2", "auxF", "depth", "valueOffset"] as const;

  function assertSameGraph(a: ComputationGraph, b: ComputationGraph, n: number): void {
    assert.equal(b.size, n);
    for (const k of arrays) assert.deepEqual(Array.from(b[k]), Array.from(a[k].subarray(0, n)), k);
    assert.deepEqual(Array.from(b.args.subarray(0, b.argsSize)), Array.from(a.args.subarray(0, b.argsSize)));
    assert.deepEqual(
      Array.from(b.inputData.subarray(0, b.inputSize)),
      Array.from(a.inputData.subarray(0, a.inputSize)),
    );
    assert.equal(b.training, a.training);
    assert.equal(b.dropoutKey, a.dropoutKey);
    for (let i = 0; i < n; i++) {
      assert.equal(b.describe(i), a.describe(i));
      const e = b.expression(i);
      assert.equal(b.check(e, "test", "e"), i);
    }
  }

  test("snapshot → fromSnapshot: the same arrays, describe() and graph-wide fields", () => {
    const m = randomVppsModel(3);
    const cg = new ComputationGraph();
    cg.training = false;
    const loss = buildRandomVppsGraph(cg, m.build, 7);
    const buffer = cg.snapshot();
    const g = ComputationGraph.fromSnapshot(buffer, m.pc.all);
    assertSameGraph(cg, g, cg.size);
    assert.equal(g.valueSize, cg.valueSize);
    assert.equal(g.argsSize, cg.argsSize);
    assert.equal(g.generation, cg.generation);
    assert.deepEqual(
      Object.keys(g.parameters).map(Number),
      Object.keys(cg.parameters).map(Number),
      "the parameters in use",
    );
    for (const k of Object.keys(cg.parameters).map(Number)) assert.equal(g.parameters[k], m.pc.all[k]);
    assert.deepEqual(Array.from(snapshotInputs(buffer)), Array.from(cg.inputData.subarray(0, cg.inputSize)));
    assert.equal(g.describe(loss.id), cg.describe(loss.id));
  });

  test("a prefix of the nodes, reuse of a large enough buffer, and read-only rebuilt graphs", () => {
    const m = randomVppsModel(4);
    const cg = new ComputationGraph();
    buildRandomVppsGraph(cg, m.build, 11);
    const n = Math.floor(cg.size / 2);
    const big = new ArrayBuffer(1 << 20);
    const buffer = cg.snapshot(n, big);
    assert.equal(buffer, big, "a large enough buffer is reused");
    const g = ComputationGraph.fromSnapshot(buffer);
    assertSameGraph(cg, g, n);
    assert.equal(g.valueSize, cg.valueOffset[n]);
    assert.notEqual(cg.snapshot(cg.size, new ArrayBuffer(16)).byteLength, 16, "a small buffer is not used");
    assert.throws(() => tanh(g.expression(0)), /cannot add a node to a graph rebuilt from a snapshot/);
    assert.throws(() => input(g, [1, 2]), /cannot add input data to a graph rebuilt from a snapshot/);
    assert.throws(() => g.renew(), /cannot renew a graph rebuilt from a snapshot/);
    assert.throws(() => ComputationGraph.fromSnapshot(new ArrayBuffer(200)), /not a graph snapshot/);
    assert.throws(() => cg.snapshot(cg.size + 1), /node count .* is outside/);
  });
});

describe("schedule workers", () => {
  test("a batch goes to the first worker with the fewest batches in hand: one at a time to worker 0", () => {
    const { trees } = sstSetup();
    const vocab = Vocabulary.fromTrees(trees);
    const net = new TreeLstmModel({ vocabSize: vocab.size, embed: 8, hidden: 8, seed: 3 });
    const pool = newPool(net.params, twoPlans(net.params), 3);
    // batches of 32 trees (~10,000 nodes): a worker takes milliseconds over one, posting takes microseconds, so no
    // reply can come back between the three back-to-back posts below
    const graphs = [0, 1, 2].map((k) => {
      const cg = new ComputationGraph();
      return { cg, loss: net.buildBatchLoss(cg, trees.slice(32 * k, 32 * k + 32), vocab) };
    });
    const slots: number[] = [];
    for (let k = 0; k < 4; k++) {
      pool.post(graphs[k % 3]!.cg, graphs[k % 3]!.loss, 0, k);
      const b = pool.take(true)!; // read back before the next post: worker 0 has nothing in hand again
      slots.push(b.slot);
      pool.release(b);
    }
    assert.deepEqual(slots, [0, 0, 0, 0]);
    for (let k = 0; k < 3; k++) pool.post(graphs[k]!.cg, graphs[k]!.loss, 0, 4 + k); // three in flight: one each
    const spread: number[] = [];
    for (let b = pool.take(true); b !== undefined; b = pool.take(true)) {
      spread.push(b.slot);
      pool.release(b);
    }
    assert.deepEqual(spread, [0, 1, 2]);
  });

  test("SST Tree-LSTM batches: worker scripts and layouts equal the in-thread scheduler's (2 workers, 2 variants)", () => {
    const { trees, source } = sstSetup();
    const vocab = Vocabulary.fromTrees(trees);
    const net = new TreeLstmModel({ vocabSize: vocab.size, embed: 8, hidden: 8, seed: 2, dropout: 0.2 });
    const sizes = [1, 4, 2, 8, 3, 1, 6, 2, 5, 8];
    let at = 0;
    compareWithPool(
      net.params,
      sizes.length,
      (cg, k) => {
        const size = sizes[k]!;
        cg.dropoutKey = k;
        const batch = trees.slice(at, at + size);
        at = (at + size) % (trees.length - 8);
        return net.buildBatchLoss(cg, batch, vocab);
      },
      2,
    );
    assert.ok(source.length > 0);
  });

  test("worker-built batches (a graph builder): the workers build the very graph the main thread would", () => {
    const { trees } = sstSetup();
    const vocab = Vocabulary.fromTrees(trees);
    const net = new TreeLstmModel({ vocabSize: vocab.size, embed: 8, hidden: 8, seed: 2, dropout: 0.2 });
    const plans = twoPlans(net.params);
    const local = plans.map((p) => new VppsScheduler(createModelLayout(net.params.all, p), { exportGradients: true }));
    const pool = newPool(net.params, plans, 2);
    pool.setGraphBuilder(treeLstmBuilderSpec(net, vocab, trees));
    const sizes = [1, 4, 2, 8, 3, 1, 6, 2, 5, 8];
    const cg = new ComputationGraph();
    const expected: ReturnType<typeof plain>[] = [];
    let at = 0;
    for (let k = 0; k < sizes.length; k++) {
      const examples = Int32Array.from({ length: sizes[k]! }, (_, i) => (at + 7 * i) % trees.length);
      at += 13;
      cg.renew();
      cg.training = true;
      cg.dropoutKey = 100 + k;
      const loss = net.buildBatchLoss(
        cg,
        Array.from(examples, (i) => trees[i]!),
        vocab,
      );
      expected.push(plain(detachSchedule(local[k % 2]!.schedule(cg, loss))));
      pool.postBuilt({ examples, training: true, dropoutKey: 100 + k }, k % 2, k);
    }
    for (let k = 0; k < sizes.length; k++) {
      const b = pool.take(true)!;
      assert.equal(b.tag, k);
      assert.deepEqual(plain(b.batch), expected[k], `batch ${k} (variant ${k % 2})`);
      pool.release(b);
    }
    // an example index outside the trees: that batch's error, with the builder's message; the next batch goes on
    pool.postBuilt({ examples: Int32Array.of(trees.length + 5), training: true, dropoutKey: 0 }, 0, 50);
    pool.postBuilt({ examples: Int32Array.of(0, 1), training: true, dropoutKey: 0 }, 0, 51);
    assert.throws(() => pool.take(true), /example \d+ is outside the \d+ trees given \(in schedule worker\)/);
    assert.equal(pool.take(true)!.tag, 51);
  });

  test("a graph builder for another model, or a module that is none, is refused in one line", () => {
    const { trees } = sstSetup();
    const vocab = Vocabulary.fromTrees(trees);
    const net = new TreeLstmModel({ vocabSize: vocab.size, embed: 8, hidden: 8, seed: 2 });
    const pool = newPool(net.params, twoPlans(net.params), 1);
    const other = new TreeLstmModel({ vocabSize: vocab.size, embed: 8, hidden: 12, seed: 2 });
    assert.throws(
      () => pool.setGraphBuilder(treeLstmBuilderSpec(other, vocab, trees)),
      /could not load the graph builder .*graph-builder\.ts: graph builder treelstm: its model's parameter 1 is W_iou dense 36×8, the engine's is W_iou dense 24×8/,
    );
    assert.throws(
      () => pool.setGraphBuilder({ module: new URL("../src/graph/builder.ts", import.meta.url).href, data: {} }),
      /could not load the graph builder .*builder\.ts: graph builder .* does not export createGraphBuilder/,
    );
    // neither was set, so a batch to build has no builder
    pool.postBuilt({ examples: Int32Array.of(0), training: true, dropoutKey: 0 }, 0, 1);
    assert.throws(() => pool.take(true), /no graph builder was set \(SchedulePool.setGraphBuilder\)/);
  });

  test("random graphs over every op: equal to the in-thread scheduler's (1 worker: batches queue up)", () => {
    for (const seed of [5, 6]) {
      const m: { pc: ParameterCollection; build: RandomVppsModel } = randomVppsModel(seed);
      compareWithPool(m.pc, 6, (cg, k) => buildRandomVppsGraph(cg, m.build, 100 * seed + k), 1);
    }
  });

  test("a worker's refusal of the user's graph (an op VPPS cannot run) comes back as one-line user error, no trace", () => {
    const pc = new ParameterCollection({ seed: 1 });
    const E = pc.addLookupParameters(10, 8, undefined, "E");
    const W = pc.addParameters([5, 8], undefined, "W");
    const b = pc.addParameters([5], undefined, "b");
    const plans = [planVpps(onChipMatrices(pc), SMALL, {})];
    const pool = newPool(pc, plans, 1);
    const cg = new ComputationGraph();
    const x = lookupRows(cg, E, [1, 2, 3]);
    pool.post(cg, pickNegLogSoftmaxRows(affineRows(parameter(cg, b), parameter(cg, W), x), [0, 4, 2]), 0, 0);
    assert.throws(
      () => pool.take(true),
      (e: unknown) =>
        e instanceof ScheduleRefusal &&
        isUserError(e) &&
        !e.message.includes("\n") &&
        e.workerErrorName === "UnsupportedOpError" &&
        /op 'lookupRows' is not supported: .*--rnn steps/.test(e.message),
    );
  });

  test("a scheduling error in a worker comes back with its message; later batches go on", () => {
    const pc = new ParameterCollection({ seed: 1 });
    const W = pc.addParameters([3, 1], undefined, "W"); // a [3,1] matrix: the graph also accepts it as a vector
    const v = pc.addParameters(3, undefined, "v");
    const plans = [planVpps(onChipMatrices(pc), SMALL, {})];
    const pool = newPool(pc, plans, 2);
    const cg = new ComputationGraph();
    const bad = pickNegLogSoftmax(add(matVec(W, input(cg, [2])), parameter(cg, W)), 0);
    pool.post(cg, bad, 0, 0);
    const cg2 = new ComputationGraph();
    const good = pickNegLogSoftmax(add(matVec(W, input(cg2, [2])), parameter(cg2, v)), 1);
    pool.post(cg2, good, 0, 1);
    assert.throws(
      () => pool.take(true),
      (e: unknown) =>
        e instanceof ScheduleWorkerError &&
        /add\(.*\) \[3\] uses matrix 'W' as argument 1; VPPS holds 'W' in registers/.test(e.message) &&
        e.message.endsWith("(in schedule worker)") &&
        e.workerErrorName === "Error" &&
        e.workerStack.includes("refuseMatrixUse"),
    );
    const next = pool.take(true);
    assert.equal(next?.tag, 1);
    const expected = new VppsScheduler(createModelLayout(pc.all, plans[0]!), { exportGradients: true }).schedule(
      cg2,
      good,
    );
    assert.deepEqual(plain(next!.batch), plain(detachSchedule(expected)));
    assert.equal(pool.take(true), undefined, "nothing pending");
  });

  test("argument errors: worker count, unknown variant, a disposed pool", () => {
    const m = randomVppsModel(6);
    const plans = twoPlans(m.pc);
    assert.throws(() => new SchedulePool({ workers: 0, params: m.pc.all, plans }), /workers must be an integer >= 1/);
    const pool = newPool(m.pc, plans, 1);
    const cg = new ComputationGraph();
    pool.post(cg, buildRandomVppsGraph(cg, m.build, 1), 5, 0);
    assert.throws(() => pool.take(true), /no plan variant 5 \(the worker has 2\) \(in schedule worker\)/);
    pool.dispose();
    assert.throws(() => pool.post(cg, buildRandomVppsGraph(cg, m.build, 2), 0, 1), /the pool was disposed/);
  });
});

describe("schedule workers in other processes", () => {
  /**
   * A child process that builds a graph, schedules it on 2 workers and prints the script's length, then either
   * disposes the pool or just returns (workers are unref'd: the process must exit either way).
   */
  function child(tsxByApi: boolean, dispose: boolean): { status: number | null; out: string; err: string } {
    const dir = mkdtempSync(join(tmpdir(), "vpps-pool-"));
    try {
      const url = (p: string) => new URL(p, new URL(`file://${ROOT}/`)).href;
      const file = join(dir, "child.mjs");
      writeFileSync(
        file,
        `${tsxByApi ? `const { register } = await import(${JSON.stringify(import.meta.resolve("tsx/esm/api"))});\nregister();\n` : ""}
const { SchedulePool } = await import(${JSON.stringify(url("src/engines/vpps/schedule/pool.ts"))});
const { planVpps } = await import(${JSON.stringify(url("src/engines/vpps/plan/plan.ts"))});
const { H100_SXM } = await import(${JSON.stringify(url("src/cuda/hw/device-model.ts"))});
const { ComputationGraph } = await import(${JSON.stringify(url("src/graph/graph.ts"))});
const { ParameterCollection } = await import(${JSON.stringify(url("src/model/parameters.ts"))});
const { input, matVec, pickNegLogSoftmax } = await import(${JSON.stringify(url("src/ops/index.ts"))});
const pc = new ParameterCollection({ seed: 1 });
const W = pc.addParameters([4, 3], undefined, "W");
const plan = planVpps([{ name: "W", rows: 4, cols: 3 }], { ...H100_SXM, smCount: 2 }, {});
const pool = new SchedulePool({ workers: 2, params: pc.all, plans: [plan] });
const cg = new ComputationGraph();
pool.post(cg, pickNegLogSoftmax(matVec(W, input(cg, [1, 2, 3])), 2), 0, undefined);
const b = pool.take(true);
console.log("script words " + b.batch.script.length);
${dispose ? "pool.dispose();" : ""}
`,
      );
      const args = tsxByApi ? [file] : ["--import", "tsx", file];
      const r = spawnSync(process.execPath, args, { cwd: ROOT, encoding: "utf8", timeout: 60_000, env: process.env });
      return { status: r.status, out: r.stdout, err: r.stderr };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  test("under node --import tsx, without dispose: the workers load the .ts entry and the process exits", () => {
    const r = child(false, false);
    assert.equal(r.status, 0, r.err);
    assert.match(r.out, /script words \d+/);
  });

  test("with tsx registered by API (bin/vpps.js) and dispose: the workers register tsx themselves", () => {
    const r = child(true, true);
    assert.equal(r.status, 0, r.err);
    assert.match(r.out, /script words \d+/);
  });
});

describe("defaultScheduleWorkers", () => {
  test("VPPS_SCHEDULE_WORKERS overrides the core-count default; anything but a whole number is one clear error", () => {
    assert.equal(defaultScheduleWorkers({ VPPS_SCHEDULE_WORKERS: "11" }), 11);
    assert.equal(defaultScheduleWorkers({ VPPS_SCHEDULE_WORKERS: "0" }), 0);
    const d = defaultScheduleWorkers({});
    assert.ok(Number.isInteger(d) && d >= 0 && d <= 6, `default ${d}`);
    for (const bad of ["-1", "2.5", "many"]) {
      assert.throws(
        () => defaultScheduleWorkers({ VPPS_SCHEDULE_WORKERS: bad }),
        /VPPS_SCHEDULE_WORKERS must be a whole number >= 0.*got "/,
      );
    }
  });
});

describe("workerBuildFromEnv", () => {
  test("VPPS_WORKER_BUILD: unset or 1 builds on the workers, 0 does not, anything else is one clear error", () => {
    assert.equal(workerBuildFromEnv({}), true);
    assert.equal(workerBuildFromEnv({ VPPS_WORKER_BUILD: "1" }), true);
    assert.equal(workerBuildFromEnv({ VPPS_WORKER_BUILD: "0" }), false);
    assert.throws(
      () => workerBuildFromEnv({ VPPS_WORKER_BUILD: "off" }),
      /VPPS_WORKER_BUILD must be 1 .* or 0 .*; got "off"/,
    );
  });
});
