/**
 * The generic worker-thread graph builder (src/models/worker-builder.ts, its spec src/models/shared/task-builder.ts):
 * for every registered model without a builder of its own, a worker makes the task's model from the spec and builds
 * each batch's loss — the same graph, node for node, as the main thread's `buildBatchLoss`; through a schedule
 * pool's worker thread the same VPPS script.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { H100_SXM } from "../src/cuda/hw/device-model.js";
import { createModelLayout } from "../src/engines/vpps/plan/layout.js";
import { planVpps } from "../src/engines/vpps/plan/plan.js";
import { detachSchedule } from "../src/engines/vpps/schedule/batch.js";
import { SchedulePool } from "../src/engines/vpps/schedule/pool.js";
import { VppsScheduler } from "../src/engines/vpps/schedule/scheduler.js";
import type { GraphBuilderModule } from "../src/graph/builder.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { onChipMatrices } from "../src/model/parameters.js";
import { findModel } from "../src/models/registry.js";
import type { AnyTask, ModelOptions, TaskModel } from "../src/models/task.js";

/** Small sizes of each model with the generic builder. */
const SMALL: Readonly<Record<string, ModelOptions>> = {
  "td-rnn": { hidden: 8, embed: 8 },
  "td-lstm": { hidden: 6, embed: 5 },
  rvnn: { hidden: 7, embed: 5 },
  bilstm: { embed: 6, hidden: 5, mlp: 4 },
  "bilstm-char": { embed: 6, hidden: 5, mlp: 4, charEmbed: 3, minCount: 2 },
};

function setup(name: string, extra: ModelOptions = {}) {
  const task: AnyTask = findModel(name);
  const data = task.data.synthetic.make(3);
  const options = { ...task.defaults, ...SMALL[name], ...extra };
  const vocab = task.vocabulary.build(data.train, options);
  const model: TaskModel<unknown> = task.create(options, vocab, 5);
  return { task, train: data.train, model };
}

const ARRAYS = ["op", "rows", "cols", "argStart", "argCount", "aux", "aux2", "auxF", "depth", "valueOffset"] as const;

function assertSameGraph(got: ComputationGraph, want: ComputationGraph, what: string): void {
  assert.equal(got.size, want.size, `${what}: nodes`);
  for (const k of ARRAYS)
    assert.deepEqual(got[k].subarray(0, got.size), want[k].subarray(0, want.size), `${what}: ${k}`);
  assert.deepEqual(got.args.subarray(0, got.argsSize), want.args.subarray(0, want.argsSize), `${what}: arguments`);
  assert.deepEqual(
    got.inputData.subarray(0, got.inputSize),
    want.inputData.subarray(0, want.inputSize),
    `${what}: inputs`,
  );
}

/** Batches of the training examples: sizes 1, 3, 8 and 17 from spread-out starts. */
function batches(count: number): Int32Array[] {
  return [1, 3, 8, 17].map((size, k) => Int32Array.from({ length: size }, (_, i) => (11 * k + 5 * i) % count));
}

describe("the generic worker graph builder", () => {
  for (const name of Object.keys(SMALL)) {
    test(`${name}: a worker's model builds the main thread's graph node for node`, async () => {
      const { task, train, model } = setup(name);
      assert.ok(model.workerBuilder, `${name} has no worker builder`);
      const spec = model.workerBuilder(train);
      assert.match(spec.module, /\/models\/worker-builder\.ts$/);
      const mod = (await import(spec.module)) as GraphBuilderModule;
      // what a worker receives: a structured clone of the data
      const build = mod.createGraphBuilder(structuredClone(spec.data), model.params.all);
      const main = new ComputationGraph();
      const worker = new ComputationGraph();
      for (const [k, examples] of batches(train.length).entries()) {
        for (const g of [main, worker]) {
          g.renew();
          g.training = true;
          g.dropoutKey = 40 + k;
        }
        const want = model.buildBatchLoss(
          main,
          Array.from(examples, (i) => train[i]),
        ).id;
        assert.equal(build(worker, { examples, training: true, dropoutKey: 40 + k }), want, `${task.name} batch ${k}`);
        assertSameGraph(worker, main, `${task.name} batch ${k} (${examples.length} examples)`);
      }
      // an index outside the examples: one line naming the model and the count
      assert.throws(
        () => build(worker, { examples: Int32Array.of(train.length), training: true, dropoutKey: 0 }),
        new RegExp(`${name} graph builder: example ${train.length} is outside the ${train.length} given`),
      );
    });
  }

  test("a model of other sizes is refused, naming the parameter; the taggers' rnn-op formulation has none", async () => {
    const { train, model } = setup("td-rnn");
    const other = setup("td-rnn", { hidden: 12, embed: 12 }).model;
    const spec = model.workerBuilder!(train);
    const mod = (await import(spec.module)) as GraphBuilderModule;
    assert.throws(
      () => mod.createGraphBuilder(structuredClone(spec.data), other.params.all),
      /graph builder td-rnn: its model's parameter 0 is E lookup \d+×8, the engine's is E lookup \d+×12/,
    );
    assert.equal(setup("bilstm", { rnn: "persistent" }).model.workerBuilder, undefined);
  });

  test("td-lstm through a schedule pool's worker thread: the script the main thread would schedule", () => {
    const { train, model } = setup("td-lstm");
    const plan = planVpps(onChipMatrices(model.params), H100_SXM);
    const local = new VppsScheduler(createModelLayout(model.params.all, plan), {});
    const pool = new SchedulePool<number>({ workers: 1, params: model.params.all, plans: [plan] });
    try {
      pool.setGraphBuilder(model.workerBuilder!(train));
      const cg = new ComputationGraph();
      const expected: Uint32Array[] = [];
      for (const [k, examples] of batches(train.length).entries()) {
        cg.renew();
        cg.training = true;
        cg.dropoutKey = k;
        const loss = model.buildBatchLoss(
          cg,
          Array.from(examples, (i) => train[i]),
        );
        expected.push(Uint32Array.from(detachSchedule(local.schedule(cg, loss)).script));
        pool.postBuilt({ examples, training: true, dropoutKey: k }, 0, k);
      }
      for (let k = 0; k < expected.length; k++) {
        const b = pool.take(true)!;
        assert.equal(b.tag, k);
        assert.deepEqual(Uint32Array.from(b.batch.script), expected[k], `batch ${k}`);
        pool.release(b);
      }
    } finally {
      pool.dispose();
    }
  });
});
