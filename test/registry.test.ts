// The engine registry (src/engines/registry.ts) and the model registry (src/models/registry.ts): one list each, what
// the CLI and the training loop read from them, and the one on-chip rule.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Option } from "commander";
import { cudaAvailable } from "../src/cuda/runtime/device.js";
import { AutobatchCpuEngine } from "../src/engines/autobatch/cpu-batched.js";
import { AutobatchGpuEngine } from "../src/engines/autobatch/gpu-engine.js";
import { CpuEngine } from "../src/engines/cpu.js";
import type { Engine } from "../src/engines/engine.js";
import {
  createEngine,
  createEvaluationEngine,
  ENGINE_NAMES,
  ENGINES,
  EngineUnavailableError,
  engineEntry,
  ForwardPasses,
} from "../src/engines/registry.js";
import { onChipMatrices, ParameterCollection } from "../src/model/parameters.js";
import { findModel, MODELS } from "../src/models/registry.js";
import { checkModelOption } from "../src/models/task.js";
import { TreeLstmModel } from "../src/models/treelstm/model.js";
import { treeLstmTask } from "../src/models/treelstm/task.js";

describe("the engine registry", () => {
  test("lists every engine once, in the CLI's order, with what it can do", () => {
    assert.deepEqual(ENGINE_NAMES, ["cpu", "eager", "autobatch", "vpps"]);
    for (const e of ENGINES) {
      assert.ok(e.description.length > 0, e.name);
      assert.equal(
        e.capabilities.forwardOnly,
        e.evaluatedBy === undefined,
        `${e.name}: names its evaluators exactly when it cannot run forward-only passes`,
      );
      for (const name of e.evaluatedBy ?? []) {
        const by = engineEntry(name);
        assert.ok(by.capabilities.forwardOnly, `${e.name} is evaluated by ${name}, which runs forward-only passes`);
      }
    }
    assert.deepEqual(engineEntry("vpps").evaluatedBy, ["autobatch", "cpu"]);
    assert.equal(engineEntry("vpps").pipelined, true);
    // an evaluation engine that keeps its own copy of the weights can be refreshed from the host
    assert.equal(typeof AutobatchGpuEngine.prototype.reloadParameters, "function");
  });

  test("an unknown engine is refused with the list", () => {
    const pc = new ParameterCollection();
    assert.throws(
      () => createEngine("gpu", pc),
      (e: unknown) =>
        e instanceof EngineUnavailableError &&
        e.message === "unknown engine 'gpu'; choose one of cpu, eager, autobatch, vpps",
    );
  });

  test("the CPU engines' capabilities are the registry's", () => {
    const pc = new ParameterCollection();
    const cpu = createEngine("cpu", pc);
    assert.ok(cpu instanceof CpuEngine);
    assert.deepEqual(cpu.capabilities, engineEntry("cpu").capabilities);
    const batched = createEngine("autobatch", pc, { device: "cpu", batching: "depth" });
    assert.ok(batched instanceof AutobatchCpuEngine);
    assert.equal(batched.strategy, "depth");
    assert.deepEqual(batched.capabilities, engineEntry("autobatch").capabilities);
  });

  test("evaluation engines: the engine itself where it can; for VPPS autobatch on the GPU, else the CPU", () => {
    const pc = new ParameterCollection();
    assert.equal(createEvaluationEngine("cpu", pc).name, "cpu");
    const forVpps = createEvaluationEngine("vpps", pc);
    try {
      assert.equal(forVpps.name, cudaAvailable().ok ? "autobatch" : "cpu");
    } finally {
      forVpps.dispose();
    }
  });

  test("ForwardPasses: the training engine itself when it can run forward passes, else one evaluator, refreshed", () => {
    const pc = new ParameterCollection();
    const cpu = new CpuEngine(pc);
    assert.equal(new ForwardPasses(cpu, pc).engine(), cpu);

    const calls: string[] = [];
    // a training engine that cannot run forward passes (only what ForwardPasses touches)
    const training = {
      name: "vpps",
      capabilities: { forwardOnly: false, nodeGradients: false },
      syncToHost: () => calls.push("sync"),
    } as unknown as Engine;
    const evaluator = Object.assign(new CpuEngine(pc), {
      reloadParameters: () => calls.push("reload"),
      dispose: () => calls.push("dispose"),
    });
    const passes = new ForwardPasses(training, pc, () => {
      calls.push("make");
      return evaluator;
    });
    assert.equal(passes.engine(), evaluator);
    assert.equal(passes.engine(), evaluator);
    passes.dispose();
    assert.deepEqual(calls, ["sync", "make", "sync", "reload", "dispose"]);
  });
});

describe("the model registry", () => {
  test("lists the models by unique name; an unknown one is refused with the list", () => {
    const names = MODELS.map((t) => t.name);
    for (const name of ["treelstm", "bilstm", "bilstm-char", "td-rnn", "td-lstm", "rvnn"])
      assert.ok(names.includes(name), name);
    assert.equal(new Set(names).size, names.length);
    assert.equal(findModel("treelstm"), treeLstmTask);
    assert.throws(() => findModel("lstm"), /unknown model 'lstm'; choose one of treelstm, /);
  });

  test("every model option has a valid default and is named as commander names its flag", () => {
    for (const task of MODELS) {
      assert.ok(task.metrics.length >= 1, `${task.name}: a metric`);
      for (const o of task.options) {
        assert.equal(checkModelOption(o, task.defaults[o.key]), null, `${task.name} ${o.flag}: its default`);
        assert.equal(new Option(o.flag).attributeName(), o.key, `${task.name} ${o.flag}`);
      }
    }
  });

  test("treelstm: its parameter shapes are the model's, and the on-chip matrices are the same from either", () => {
    const options = { ...treeLstmTask.defaults, hidden: 12, embed: 7 };
    const model = new TreeLstmModel({ vocabSize: 30, hidden: 12, embed: 7, seed: 1 });
    const shapes = treeLstmTask.parameterShapes(options, 30);
    assert.deepEqual(
      shapes,
      model.params.all.map((p) =>
        p.kind === "lookup"
          ? { kind: p.kind, name: p.name, rows: p.rows, cols: p.cols }
          : { kind: p.kind, name: p.name, rows: p.rows, cols: p.cols, isMatrix: p.isMatrix },
      ),
    );
    assert.deepEqual(onChipMatrices(shapes), onChipMatrices(model.params));
    assert.deepEqual(
      onChipMatrices(model.params).map((m) => m.name),
      ["W_iou", "U_iou", "U_f1", "U_f2", "W_out"],
      "dense 2-D parameters only: no vectors, no lookup table",
    );
  });

  test("treelstm: a run's options come back from state.json, checked", () => {
    const current = { ...treeLstmTask.defaults, hidden: 99, dropout: 0.3 };
    const restored = treeLstmTask.restoreOptions({ hidden: 8, embed: 6, cell: "ops", labels: 5 }, current);
    assert.deepEqual(restored, { hidden: 8, embed: 6, cell: "ops", dropout: 0.3 });
    assert.throws(
      () => treeLstmTask.restoreOptions({ hidden: 8, embed: 6, cell: "bogus" }, current),
      /options\.cell must be one of fused, ops; got 'bogus'/,
    );
    assert.throws(() => treeLstmTask.restoreOptions({ embed: 6, cell: "ops" }, current), /options\.hidden must be/);
  });
});
