// The CTA-pair multicast of the persistent RNN kernels: which layouts are built as clusters of two, and what the
// generated CUDA of each kind contains (the GPU tests run both kinds against the CPU reference).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { H100_SXM } from "../src/cuda/hw/device-model.js";
import {
  backwardKernelSource,
  clustered,
  clusterSize,
  forwardKernelSource,
  MULTICAST_MIN_WEIGHT_REGISTERS,
  multicastPays,
} from "../src/rnn/codegen/index.js";
import { planRnnLayer, type RnnCellName } from "../src/rnn/plan/index.js";

function layer(cell: RnnCellName, hidden: number) {
  const p = planRnnLayer(cell, hidden, H100_SXM);
  if (!p.fits) throw new Error(p.reason);
  return p;
}

describe("the pair multicast", () => {
  test("layouts near the register limit are clustered, those with few weights per thread are not", () => {
    for (const [cell, hidden, on] of [
      ["lstm", 1152, true],
      ["rnn-tanh", 2304, true],
      ["rnn-tanh", 1792, true],
      ["rnn-tanh", 1152, false],
      ["gru", 1152, false],
      ["rnn-tanh", 512, false],
    ] as const) {
      const p = layer(cell, hidden);
      assert.equal(clustered(p.forward), on, `${cell} ${hidden} forward (${p.forward.weightRegisters} registers)`);
      assert.equal(multicastPays(p.forward), p.forward.weightRegisters >= MULTICAST_MIN_WEIGHT_REGISTERS);
    }
  });

  test("an odd grid is never clustered, and the option overrides the rule", () => {
    const p = layer("rnn-tanh", 1152).forward;
    assert.equal(clustered({ ctas: 127, weightRegisters: 200 }), false);
    assert.equal(clustered({ ctas: 127, weightRegisters: 200 }, { cluster: true }), false);
    assert.equal(clustered(p, { cluster: true }), true);
    assert.equal(clustered(layer("lstm", 1152).forward, { cluster: false }), false);
  });

  test("a clustered kernel declares the cluster and loads through the multicast; the others do not", () => {
    const big = layer("lstm", 1152);
    for (const src of [forwardKernelSource(big.forward), backwardKernelSource(big.backward)]) {
      assert.match(src, /__cluster_dims__\(2, 1, 1\)/);
      assert.match(src, /mcx \? load_tile_mc\(/);
      assert.match(src, /const bool mcx = mc != 0;/);
    }
    // clusters of 4 where asked and the grid divides (128 CTAs); an odd pair count falls back to pairs
    for (const src of [
      forwardKernelSource(big.forward, { clusterSize: 4 }),
      backwardKernelSource(big.backward, { clusterSize: 4 }),
    ]) {
      assert.match(src, /__cluster_dims__\(4, 1, 1\)/);
      assert.match(src, /constexpr int CS = 4;/);
    }
    assert.equal(clusterSize({ ctas: 128, weightRegisters: 180 }, { clusterSize: 4 }), 4);
    assert.equal(clusterSize({ ctas: 126, weightRegisters: 180 }, { clusterSize: 4 }), 2);
    assert.equal(clusterSize({ ctas: 128, weightRegisters: 180 }), 2);
    assert.equal(clusterSize({ ctas: 128, weightRegisters: 20 }, { clusterSize: 4 }), 0);
    const small = layer("rnn-tanh", 1152);
    for (const src of [forwardKernelSource(small.forward), backwardKernelSource(small.backward)]) {
      assert.doesNotMatch(src, /__cluster_dims__/);
      assert.doesNotMatch(src, /load_tile_mc\(const_cast/);
      assert.match(src, /const bool mcx = false;/);
    }
  });
});
