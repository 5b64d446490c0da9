import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { parseTrees } from "../src/data/sst.js";
import { syntheticTrees } from "../src/data/synthetic.js";
import { Vocabulary } from "../src/data/vocab.js";
import { CpuEngine } from "../src/engines/cpu.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { TreeLstmModel } from "../src/models/treelstm/model.js";
import { evaluateTreeLstm, trainTreeLstm } from "../src/train/treelstm.js";

const trees = parseTrees(
  ["(3 (2 (2 The) (2 Rock)) (4 (3 (2 is) (4 destined)) (2 .)))", "(1 (2 not) (1 (0 awful) (2 .)))", "(2 word)"].join(
    "\n",
  ),
);
const vocab = Vocabulary.fromTrees(trees);

function lossAndGrads(cell: "fused" | "ops") {
  const model = new TreeLstmModel({ vocabSize: vocab.size, embed: 6, hidden: 5, cell, seed: 7 });
  const engine = new CpuEngine(model.params);
  const cg = new ComputationGraph();
  const loss = model.buildBatchLoss(cg, trees, vocab);
  const value = engine.forwardScalar(loss);
  engine.backward(loss);
  return { value, grads: model.params.all.map((p) => Float32Array.from(p.grad)), nodes: cg.size };
}

describe("the Tree-LSTM model", () => {
  test("fused and plain-ops formulations compute the same loss and gradients", () => {
    const a = lossAndGrads("fused");
    const b = lossAndGrads("ops");
    assert.ok(a.nodes < b.nodes);
    assert.ok(Math.abs(a.value - b.value) < 1e-5 * Math.abs(a.value), `${a.value} vs ${b.value}`);
    a.grads.forEach((g, p) => {
      let maxDiff = 0;
      for (let k = 0; k < g.length; k++) maxDiff = Math.max(maxDiff, Math.abs(g[k]! - b.grads[p]![k]!));
      assert.ok(maxDiff < 1e-5, `parameter ${p}: max difference ${maxDiff}`);
    });
  });

  test("a loss at every node: the batch loss is the sum over all 15 nodes", () => {
    const model = new TreeLstmModel({ vocabSize: vocab.size, embed: 4, hidden: 4, seed: 1 });
    const engine = new CpuEngine(model.params);
    const cg = new ComputationGraph();
    // with all-zero output weights every node's loss is log 5
    model.W_out.value.fill(0);
    const loss = model.buildBatchLoss(cg, trees, vocab);
    assert.ok(Math.abs(engine.forwardScalar(loss) - 15 * Math.log(5)) < 1e-4);
  });

  test("training on the synthetic task beats the majority class", () => {
    const train = syntheticTrees(300, 3);
    const dev = syntheticTrees(100, 4);
    const v = Vocabulary.fromTrees(train);
    const { summary, model } = trainTreeLstm({
      train,
      dev,
      vocab: v,
      epochs: 3,
      batch: 8,
      hidden: 16,
      embed: 16,
      learningRate: 0.02,
      optimizer: "adam",
      seed: 1,
      cell: "fused",
      makeEngine: (params) => new CpuEngine(params),
    });
    const counts = [0, 0, 0, 0, 0];
    for (const t of dev) counts[t.label]!++;
    const majority = Math.max(...counts) / dev.length;
    const acc = summary.epochs[2]!.devAccuracy;
    assert.ok(acc > majority + 0.15, `dev accuracy ${acc} vs majority ${majority}`);
    assert.equal(evaluateTreeLstm(model, new CpuEngine(model.params), dev, v), acc, "evaluation is deterministic");
  });
});
