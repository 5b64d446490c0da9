// The persistent RNN's CPU reference (src/rnn/reference/reference.ts over src/ops/recurrent.ts) against float64 finite
// differences: every cell, packed variable-length batches, bidirectional and multi-layer stacks, h0/c0 given or not,
// dense and with pruned (masked) W_hh; plus the single-layer entry points the GPU tests compare the kernels with, and
// the packing helpers.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { packSequences, permuteStates, sortByLength, unpackSequences } from "../src/rnn/packed.js";
import { maskCounts, pruneByMagnitude, type RnnPruning } from "../src/rnn/prune.js";
import {
  layerWeightsOf,
  referenceBackward,
  referenceForward,
  referenceLayerBackward,
  referenceLayerForward,
} from "../src/rnn/reference/reference.js";
import {
  RNN_CELLS,
  type RnnCell,
  type RnnSpec,
  recurrentFlopsPerStep,
  rnnParameterCount,
  rnnParameterLayout,
  validateRnnSpec,
} from "../src/rnn/spec.js";
import { RandomStream } from "../src/util/random.js";

function randomArray(rng: RandomStream, n: number, scale = 1): Float64Array {
  const a = new Float64Array(n);
  for (let i = 0; i < n; i++) a[i] = (rng.uniform() * 2 - 1) * scale;
  return a;
}

/** A packed float64 batch of sequences with the given lengths (in this order, so sorted or not). */
function batch(rng: RandomStream, lengths: number[], width: number) {
  return packSequences(
    lengths.map((len) => randomArray(rng, len * width)),
    width,
  );
}

interface Case {
  spec: RnnSpec;
  lengths: number[];
  withStates: boolean;
  /** Prune every W_hh by magnitude to this density and check the masked stack (undefined: dense). */
  pruned?: { density: number; pruning: RnnPruning };
}

/**
 * The loss L = Σ dy⊙y + Σ dhn⊙hn + Σ dcn⊙cn with fixed random dy, dhn, dcn; its analytic gradients (the backward)
 * against central differences of every parameter, input and initial-state entry.
 */
function gradientCheck({ spec, lengths, withStates, pruned }: Case): void {
  const rng = new RandomStream(1234 + lengths.length * 7 + spec.hidden);
  const D = spec.bidirectional ? 2 : 1;
  const H = spec.hidden;
  const B = lengths.length;
  const { packed } = batch(rng, lengths, spec.inputSize);
  const N = packed.data.length / spec.inputSize;
  const params = randomArray(rng, rnnParameterCount(spec), 0.6);
  const states = spec.layers * D * B * H;
  const lstm = spec.cell === "lstm";
  const h0 = withStates ? randomArray(rng, states) : null;
  const c0 = withStates && lstm ? randomArray(rng, states) : null;
  const dy = randomArray(rng, N * D * H);
  const dhn = randomArray(rng, states);
  const dcn = lstm ? randomArray(rng, states) : null;
  // fixed masks (the pruning of the starting weights): the function is then smooth in every weight, and a pruned
  // weight's finite difference is exactly 0
  const masks = pruned
    ? Array.from({ length: spec.layers * D }, (_, k) => {
        const w = layerWeightsOf(spec, params, Math.floor(k / D), k % D).weightHh;
        const G = w.length / (H * H);
        return pruneByMagnitude(w, G * H, H, pruned.density, pruned.pruning);
      })
    : null;
  const loss = (): number => {
    const f = referenceForward(spec, params, packed, h0, c0, masks);
    let s = 0;
    for (let i = 0; i < dy.length; i++) s += dy[i]! * f.y[i]!;
    for (let i = 0; i < dhn.length; i++) s += dhn[i]! * f.hn[i]!;
    if (dcn) for (let i = 0; i < dcn.length; i++) s += dcn[i]! * f.cn![i]!;
    return s;
  };
  const fwd = referenceForward(spec, params, packed, h0, c0, masks);
  const grads = new Float64Array(params.length);
  const back = referenceBackward(spec, params, fwd, dy, dhn, dcn, grads);
  if (masks) {
    // the pruned weights get no gradient, the kept ones do (a ReLU unit may be dead: counted over the stack)
    let keptWithGradient = 0;
    masks.forEach((m, k) => {
      const g = layerWeightsOf(spec, grads, Math.floor(k / D), k % D).weightHh;
      assert.ok(maskCounts(m, g.length / H, H).kept < m.length, "something is pruned");
      for (let i = 0; i < m.length; i++) {
        if (!m[i]) assert.equal(g[i], 0, `${spec.cell}: dW_hh[${k}][${i}] of a pruned weight`);
        else if (g[i] !== 0) keptWithGradient++;
      }
    });
    assert.ok(keptWithGradient > 0, `${spec.cell}: no kept weight of W_hh has a gradient`);
  }
  const check = (what: string, values: Float64Array, analytic: Float64Array): void => {
    for (let i = 0; i < values.length; i++) {
      const keep = values[i]!;
      const eps = 1e-6;
      values[i] = keep + eps;
      const up = loss();
      values[i] = keep - eps;
      const down = loss();
      values[i] = keep;
      const numeric = (up - down) / (2 * eps);
      const tol = 1e-6 + 1e-5 * Math.abs(numeric);
      if (Math.abs(numeric - analytic[i]!) > tol) {
        assert.fail(`${spec.cell}: d${what}[${i}] analytic ${analytic[i]} vs numeric ${numeric}`);
      }
    }
  };
  check("params", params, grads);
  check("x", packed.data, back.dx);
  if (h0) check("h0", h0, back.dh0);
  if (c0) check("c0", c0, back.dc0!);
}

describe("rnn reference: float64 gradient checks", () => {
  for (const cell of RNN_CELLS) {
    test(`${cell}: one layer, one direction, equal lengths, zero initial state`, () => {
      gradientCheck({ spec: spec(cell, 1, false), lengths: [3, 3], withStates: false });
    });
    test(`${cell}: packed variable-length batch, bidirectional, 2 layers, h0/c0 given`, () => {
      gradientCheck({ spec: spec(cell, 2, true), lengths: [2, 4, 1], withStates: true });
    });
    test(`${cell}: packed batch, one bidirectional layer, zero initial state`, () => {
      gradientCheck({ spec: spec(cell, 1, true), lengths: [1, 3, 3, 2], withStates: false });
    });
  }
});

describe("rnn reference: float64 gradient checks of pruned W_hh (masked)", () => {
  for (const cell of RNN_CELLS) {
    test(`${cell}: 2 bidirectional layers, packed batch, h0/c0 given, row-balanced density 0.5`, () => {
      gradientCheck({
        spec: spec(cell, 2, true),
        lengths: [2, 4, 1],
        withStates: true,
        pruned: { density: 0.5, pruning: "row-balanced" },
      });
    });
    test(`${cell}: one layer of hidden 3, plain density 0.3`, () => {
      gradientCheck({
        spec: validateRnnSpec({ cell, inputSize: 2, hidden: 3 }),
        lengths: [3, 1, 2],
        withStates: false,
        pruned: { density: 0.3, pruning: "plain" },
      });
    });
  }
});

function spec(cell: RnnCell, layers: number, bidirectional: boolean): RnnSpec {
  return validateRnnSpec({ cell, inputSize: 3, hidden: 2, layers, bidirectional });
}

describe("rnn reference: single-layer entry points", () => {
  test("a precomputed input projection gives the same forward and backward", () => {
    const rng = new RandomStream(5);
    const s = validateRnnSpec({ cell: "gru", inputSize: 3, hidden: 4, bidirectional: true });
    const { packed } = batch(rng, [5, 3, 2], 3);
    const params = randomArray(rng, rnnParameterCount(s), 0.5);
    const w = layerWeightsOf(s, params, 0, 1);
    const layer = { cell: s.cell, hidden: 4, inputSize: 3, batchSizes: packed.batchSizes, reverse: true };
    const a = referenceLayerForward(layer, packed.data, w, null, null);
    const b = referenceLayerForward(layer, null, w, null, null, a.xW);
    assert.deepEqual(b.y, a.y);
    assert.deepEqual(b.hn, a.hn);
    // the stack's backward direction of layer 0 is this layer: its hn sits at index l·D + d = 1
    const stack = referenceForward(s, params, packed, null, null);
    assert.deepEqual(stack.hn.subarray(3 * 4, 2 * 3 * 4), a.hn);
    const g = {
      weightIh: new Float64Array(48),
      weightHh: new Float64Array(48),
      biasIh: new Float64Array(12),
      biasHh: new Float64Array(12),
    };
    const dy = randomArray(rng, a.y.length);
    const back = referenceLayerBackward(layer, packed.data, w, null, null, a, dy, null, null, g);
    // db_ih is the column sums of dxW
    for (let j = 0; j < 12; j++) {
      let s2 = 0;
      for (let n = 0; n < a.y.length / 4; n++) s2 += back.dxW[n * 12 + j]!;
      assert.ok(Math.abs(s2 - g.biasIh[j]!) < 1e-12);
    }
  });

  test("hn of each sequence is its state at its own last step (forward) and at step 0 (backward direction)", () => {
    const rng = new RandomStream(9);
    const s = validateRnnSpec({ cell: "lstm", inputSize: 2, hidden: 3, bidirectional: true });
    const lengths = [2, 5, 3];
    const { packed, sortedIndices } = batch(rng, lengths, 2);
    const params = randomArray(rng, rnnParameterCount(s), 0.5);
    const f = referenceForward(s, params, packed, null, null);
    const ys = unpackSequences({ data: f.y, batchSizes: packed.batchSizes, width: 6 });
    for (let b = 0; b < 3; b++) {
      const len = lengths[sortedIndices[b]!]!;
      assert.deepEqual(f.hn.subarray(b * 3, b * 3 + 3), ys[b]!.subarray((len - 1) * 6, (len - 1) * 6 + 3));
      assert.deepEqual(f.hn.subarray(9 + b * 3, 9 + b * 3 + 3), ys[b]!.subarray(3, 6));
    }
    // a sequence run alone gives the same output as inside the packed batch
    const alone = packSequences([unpackSequences(packed)[2]!], 2).packed;
    const f1 = referenceForward(s, params, alone, null, null);
    for (let i = 0; i < f1.y.length; i++) assert.ok(Math.abs(f1.y[i]! - ys[2]![i]!) < 1e-14);
  });
});

describe("rnn spec and packing", () => {
  test("parameter layout follows PyTorch's names, shapes and order", () => {
    const s = validateRnnSpec({ cell: "lstm", inputSize: 5, hidden: 4, layers: 2, bidirectional: true });
    const layout = rnnParameterLayout(s);
    assert.deepEqual(
      layout.slice(0, 5).map((p) => [p.name, p.shape]),
      [
        ["weight_ih_l0", [16, 5]],
        ["weight_hh_l0", [16, 4]],
        ["bias_ih_l0", [16]],
        ["bias_hh_l0", [16]],
        ["weight_ih_l0_reverse", [16, 5]],
      ],
    );
    assert.deepEqual(layout[8]!.shape, [16, 8]);
    assert.equal(layout[8]!.name, "weight_ih_l1");
    assert.equal(rnnParameterCount(s), 2 * (16 * 5 + 16 * 4 + 32) + 2 * (16 * 8 + 16 * 4 + 32));
    assert.equal(recurrentFlopsPerStep("lstm", 1152, 4), 2 * 4 * 1152 * 1152 * 4);
  });

  test("bad specs are refused in one line naming the argument", () => {
    assert.throws(() => validateRnnSpec({ cell: "lstmx" as RnnCell, inputSize: 1, hidden: 1 }), /argument 'cell'/);
    assert.throws(() => validateRnnSpec({ cell: "gru", inputSize: 0, hidden: 1 }), /argument 'inputSize'.*got 0/);
    assert.throws(() => validateRnnSpec({ cell: "gru", inputSize: 1, hidden: 2.5 }), /argument 'hidden'/);
    assert.throws(() => validateRnnSpec({ cell: "gru", inputSize: 1, hidden: 2, layers: 0 }), /argument 'layers'/);
  });

  test("pack sorts by decreasing length (stable), unpack and permuteStates undo it", () => {
    const seqs = [1, 3, 2, 3].map((len, i) => Float32Array.from({ length: len * 2 }, (_, k) => i * 100 + k));
    const p = packSequences(seqs, 2);
    assert.deepEqual([...p.sortedIndices], [1, 3, 2, 0]);
    assert.deepEqual([...p.packed.batchSizes], [4, 3, 2]);
    assert.deepEqual([...p.packed.data.subarray(0, 8)], [100, 101, 300, 301, 200, 201, 0, 1]);
    assert.deepEqual(unpackSequences(p.packed, p.unsortedIndices), seqs);
    assert.deepEqual(sortByLength([1, 3, 2, 3]).unsortedIndices, p.unsortedIndices);
    const states = Float32Array.from({ length: 2 * 4 * 1 }, (_, i) => i);
    const sorted = permuteStates(states, 1, p.sortedIndices);
    assert.deepEqual([...sorted], [1, 3, 2, 0, 5, 7, 6, 4]);
    assert.deepEqual(permuteStates(sorted, 1, p.unsortedIndices), states);
    assert.throws(() => packSequences([new Float32Array(3)], 2), /sequences\[0\] has 3 values/);
  });
});
