/**
 * The VPPS host path keeps scratch across batches (grow-only arrays, per-batch stamps instead of clearing); these
 * tests check that reuse never leaks one batch into the next: a long-lived scheduler writes exactly the script and
 * layout a fresh one writes, also after its stamps wrap, and encoding into a caller's buffer equals the fresh
 * encoding. (Whether the scripts are right is test/vpps-emulator.test.ts's job.)
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type DeviceModel, H100_SXM } from "../src/cuda/hw/device-model.js";
import { syntheticTrees } from "../src/data/synthetic.js";
import { Vocabulary } from "../src/data/vocab.js";
import { type BatchLayout, createModelLayout, type ModelLayout } from "../src/engines/vpps/plan/layout.js";
import { type PlanOptions, planVpps } from "../src/engines/vpps/plan/plan.js";
import { type BatchSchedule, VppsScheduler } from "../src/engines/vpps/schedule/scheduler.js";
import { ComputationGraph, type Expression } from "../src/graph/graph.js";
import { onChipMatrices } from "../src/model/parameters.js";
import { TreeLstmModel } from "../src/models/treelstm/model.js";

const SMALL: DeviceModel = { ...H100_SXM, name: "small test GPU", smCount: 3 };
const H = 16;

function setup(plan: PlanOptions = {}) {
  const trees = syntheticTrees(400, 7);
  const vocab = Vocabulary.fromTrees(trees);
  const net = new TreeLstmModel({ vocabSize: vocab.size, embed: H, hidden: H, seed: 3 });
  const matrices = onChipMatrices(net.params);
  const model = createModelLayout(net.params.all, planVpps(matrices, SMALL, plan));
  /**
   * Batch k: a varying number of trees from a varying start, so scratch grows and shrinks; batches 0 and 255 are
   * the same large batch, and the 254 between them small ones, so that the large batch's step × CTA cells still
   * hold the first batch's stamp when the byte stamps come round to it again.
   */
  const batch = (k: number): { cg: ComputationGraph; loss: Expression } => {
    const size = k % 255 === 0 ? 12 : k < 255 ? 1 + (k % 2) : 1 + ((k * 7) % 9);
    const start = k % 255 === 0 ? 0 : (k * 13) % (trees.length - size);
    const cg = new ComputationGraph();
    return { cg, loss: net.buildBatchLoss(cg, trees.slice(start, start + size), vocab) };
  };
  return { model, batch };
}

/** Everything a consumer of a BatchSchedule reads, copied (layouts are reused two batches later). */
function snapshot(s: BatchSchedule) {
  const L: BatchLayout = s.layout;
  return {
    script: Array.from(s.script),
    barriers: s.barriers,
    update: s.update,
    lossOffset: s.lossOffset,
    liveNodes: s.liveNodes,
    layout: {
      value: Array.from(L.value),
      grad: Array.from(L.grad),
      temp: Array.from(L.temp),
      valueRoot: Array.from(L.valueRoot),
      gradRoot: Array.from(L.gradRoot),
      live: Array.from(L.live),
      needGrad: Array.from(L.needGrad),
      placed: Array.from(L.placed),
      uses: Array.from(L.uses),
      paramGrad: Array.from(L.paramGrad),
      paramNode: Array.from(L.paramNode),
      collect: [Array.from(L.collectY), Array.from(L.collectX), Array.from(L.collectCount)],
      lookupRows: structuredClone(L.lookupRows),
      regions: [L.inputStart, L.gradStart, L.normOffset, L.poolFloats],
    },
  };
}

function fresh(model: ModelLayout, cg: ComputationGraph, loss: Expression) {
  return snapshot(new VppsScheduler(model).schedule(cg, loss));
}

describe("VPPS host path: reused scratch", () => {
  for (const [name, plan] of [
    ["register gradients", {}],
    ["GEMM gradients", { gradients: "gemm" }],
  ] as const) {
    test(`a long-lived scheduler equals a fresh one batch by batch, past the stamp wrap (${name})`, () => {
      const { model, batch } = setup(plan);
      const reused = new VppsScheduler(model);
      // 300 batches: the per-cell wait stamps are bytes and wrap after 255
      for (let k = 0; k < 300; k++) {
        const { cg, loss } = batch(k);
        const got = snapshot(reused.schedule(cg, loss));
        if (k % 3 !== 0 && k < 250 && k !== 0) continue; // compare a sample (a fresh scheduler per batch is the slow part)
        assert.deepEqual(got, fresh(model, cg, loss), `batch ${k}`);
      }
    });
  }

  test("a schedule's layout stays valid while the next batch is scheduled", () => {
    const { model, batch } = setup();
    const s = new VppsScheduler(model);
    const a = batch(4);
    const first = s.schedule(a.cg, a.loss);
    const before = snapshot(first);
    const b = batch(5);
    s.schedule(b.cg, b.loss);
    assert.deepEqual(snapshot(first), before);
  });

  test("encoding into a caller's buffer equals the fresh encoding", () => {
    const { model, batch } = setup();
    const s = new VppsScheduler(model);
    for (let k = 0; k < 6; k++) {
      const { cg, loss } = batch(k);
      const expected = fresh(model, cg, loss);
      const buffer = new Uint32Array(expected.script.length + 100).fill(0xdeadbeef);
      let asked = -1;
      const got = s.schedule(cg, loss, (words) => {
        asked = words;
        return buffer;
      });
      assert.equal(asked, expected.script.length);
      assert.equal(got.script.buffer, buffer.buffer, "the script is a view of the caller's buffer");
      assert.deepEqual(snapshot(got), expected);
      assert.equal(buffer[expected.script.length], 0xdeadbeef, "nothing written past the script");
    }
  });
});
