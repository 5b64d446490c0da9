// Sparse (pruned) recurrent layers on the CPU: magnitude pruning (src/ops/prune.ts: counts, ties, tiny densities,
// row-balanced against plain, masks checked in one line), the masked reference (exactly the dense reference on
// W_hh ⊙ mask, dW_hh the dense gradient times the mask), and PersistentRnn's density / mask / pruning / reprune
// options, prune(), masks and density; the rnn graph op's density. The float64 finite-difference checks of masked stacks are in
// test/rnn-reference.test.ts.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { CpuEngine } from "../src/engines/cpu.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { ParameterCollection } from "../src/model/parameters.js";
import { concat, flatten, parameter, pickNegLogSoftmax, pickRange, rnn, sum } from "../src/ops/index.js";
import {
  keptPerRow,
  maskCounts,
  maskProblem,
  PersistentRnn,
  pruneByMagnitude,
  pruneKeeping,
  RnnArgumentError,
  type RnnBackend,
  referenceLayerBackward,
  referenceLayerForward,
  type WeightMask,
} from "../src/rnn/index.js";
import { CpuRnnBackend } from "../src/rnn/reference/cpu-backend.js";
import { RandomStream } from "../src/util/random.js";

function randoms(rng: RandomStream, n: number): Float32Array {
  return Float32Array.from({ length: n }, () => rng.uniform() * 2 - 1);
}

/** The kept columns of each row of a mask [rows, cols]. */
const keptColumns = (mask: WeightMask, rows: number, cols: number): number[][] =>
  Array.from({ length: rows }, (_, r) =>
    [...mask.subarray(r * cols, (r + 1) * cols)].flatMap((v, j) => (v ? [j] : [])),
  );

/** One line, an RnnArgumentError, matching `re`. */
const oneLine =
  (re: RegExp) =>
  (e: unknown): boolean =>
    e instanceof RnnArgumentError && re.test(e.message) && !e.message.includes("\n");

describe("magnitude pruning of W_hh", () => {
  test("the selection equals sorting by (|w| descending, index): many ties, zeros of both signs, NaN; both modes", () => {
    const rng = new RandomStream(17);
    const pool = [0, -0, 0.5, -0.5, 1, -1, 2, Number.NaN, 3, -3];
    const sorted = (w: Float32Array, from: number, n: number, keep: number) => {
      const mag = (x: number) => (Number.isNaN(x) ? Number.POSITIVE_INFINITY : Math.abs(x));
      const idx = Array.from({ length: n }, (_, j) => from + j);
      idx.sort((a, b) => mag(w[b]!) - mag(w[a]!) || a - b);
      return new Set(idx.slice(0, keep));
    };
    for (let trial = 0; trial < 60; trial++) {
      const rows = 1 + Math.floor(rng.uniform() * 6);
      const cols = 1 + Math.floor(rng.uniform() * 40);
      const ties = trial % 2 === 0;
      const w = Float32Array.from({ length: rows * cols }, () =>
        ties ? pool[Math.floor(rng.uniform() * pool.length)]! : rng.uniform() - 0.5,
      );
      const kept = 1 + Math.floor(rng.uniform() * cols);
      const rb = pruneKeeping(w, rows, cols, kept, "row-balanced");
      for (let r = 0; r < rows; r++) {
        const want = sorted(w, r * cols, cols, kept);
        for (let j = 0; j < cols; j++) assert.equal(rb[r * cols + j], want.has(r * cols + j) ? 1 : 0, `trial ${trial}`);
      }
      const plain = pruneKeeping(w, rows, cols, kept, "plain");
      const want = sorted(w, 0, rows * cols, kept * rows);
      for (let i = 0; i < rows * cols; i++) assert.equal(plain[i], want.has(i) ? 1 : 0, `trial ${trial} plain`);
    }
  });

  test("row-balanced keeps exactly k = max(1, round(d·H)) per row: the largest |w|, ties to the lower column", () => {
    const w = Float32Array.from([
      // row 0: |−4| and 3 are the largest
      1, -4, 3, 0.5,
      // row 1: a tie of 2s at the boundary: columns 0 and 2 (the lower two of 1, 0, 2, 3 by |w|, then column)
      2, -5, -2, 2,
      // row 2: all equal: the two lowest columns
      1, 1, -1, 1,
    ]);
    const mask = pruneByMagnitude(w, 3, 4, 0.5, "row-balanced");
    assert.deepEqual(keptColumns(mask, 3, 4), [
      [1, 2],
      [0, 1],
      [0, 1],
    ]);
    assert.deepEqual([...maskCounts(mask, 3, 4).rowCounts], [2, 2, 2]);
    assert.equal(maskCounts(mask, 3, 4).density, 0.5);
    // deterministic: the same values give the same mask, float64 values too
    assert.deepEqual(pruneByMagnitude(Float64Array.from(w), 3, 4, 0.5, "row-balanced"), mask);
  });

  test("counts over densities and sizes; density 1 keeps all; tiny densities keep one per row", () => {
    const rng = new RandomStream(3);
    for (const [rows, cols] of [
      [16, 4],
      [12, 7],
      [3, 1],
      [40, 33],
    ] as const) {
      const w = randoms(rng, rows * cols);
      for (const d of [1e-9, 0.01, 0.1, 0.25, 0.5, 0.77, 0.99, 1]) {
        const k = keptPerRow(d, cols);
        assert.equal(k, Math.min(cols, Math.max(1, Math.round(d * cols))));
        const balanced = maskCounts(pruneByMagnitude(w, rows, cols, d, "row-balanced"), rows, cols);
        assert.ok(
          balanced.rowCounts.every((c) => c === k),
          `${rows}×${cols} at ${d}: ${[...balanced.rowCounts]}`,
        );
        const plain = maskCounts(pruneByMagnitude(w, rows, cols, d, "plain"), rows, cols);
        assert.equal(plain.kept, k * rows, `plain ${rows}×${cols} at ${d}`);
      }
      assert.ok(pruneByMagnitude(w, rows, cols, 1, "plain").every((v) => v === 1));
      assert.ok(pruneByMagnitude(w, rows, cols, 1, "row-balanced").every((v) => v === 1));
    }
  });

  test("the kept weights are the largest: no pruned |w| exceeds a kept one (per row; overall for plain)", () => {
    const rng = new RandomStream(8);
    const rows = 24;
    const cols = 10;
    const w = randoms(rng, rows * cols);
    const check = (mask: WeightMask, from: number, to: number) => {
      let minKept = Number.POSITIVE_INFINITY;
      let maxPruned = 0;
      for (let i = from; i < to; i++) {
        if (mask[i]) minKept = Math.min(minKept, Math.abs(w[i]!));
        else maxPruned = Math.max(maxPruned, Math.abs(w[i]!));
      }
      assert.ok(maxPruned <= minKept, `${maxPruned} pruned above ${minKept} kept`);
    };
    const balanced = pruneByMagnitude(w, rows, cols, 0.3, "row-balanced");
    for (let r = 0; r < rows; r++) check(balanced, r * cols, (r + 1) * cols);
    check(pruneByMagnitude(w, rows, cols, 0.3, "plain"), 0, rows * cols);
  });

  test("plain and row-balanced differ on a matrix whose large weights sit in one row", () => {
    const w = Float32Array.from([9, 8, 7, 6, 0.1, 0.2, 0.3, 0.4]);
    const balanced = pruneByMagnitude(w, 2, 4, 0.5, "row-balanced");
    const plain = pruneByMagnitude(w, 2, 4, 0.5, "plain");
    assert.deepEqual(keptColumns(balanced, 2, 4), [
      [0, 1],
      [2, 3],
    ]);
    // the k·rows = 4 largest of the matrix are all in row 0
    assert.deepEqual(keptColumns(plain, 2, 4), [[0, 1, 2, 3], []]);
    assert.deepEqual([...maskCounts(plain, 2, 4).rowCounts], [4, 0]);
    // ties across rows go to the lower row (row-major order)
    assert.deepEqual(keptColumns(pruneKeeping(Float32Array.from([1, 1, 1, 1]), 2, 2, 1, "plain"), 2, 2), [[0, 1], []]);
    // a NaN counts as the largest: kept, so that it shows
    assert.deepEqual(keptColumns(pruneKeeping(Float32Array.from([5, Number.NaN, 1]), 1, 3, 1, "row-balanced"), 1, 3), [
      [1],
    ]);
  });

  test("a user's mask is checked: type, size, 0/1 values, something kept, balanced rows (the first bad row named)", () => {
    const ok = Uint8Array.from([1, 0, 0, 1, 1, 0]);
    assert.equal(maskProblem(ok, 3, 2, "row-balanced"), null);
    assert.match(maskProblem([1, 0], 3, 2, "plain")!, /must be a Uint8Array of \[G·H, H\] = \[3, 2\] = 6 values/);
    assert.match(maskProblem(new Uint8Array(5), 3, 2, "plain")!, /has 5 values; W_hh is \[G·H, H\] = \[3, 2\] = 6/);
    assert.match(maskProblem(Uint8Array.from([1, 0, 2, 1, 1, 0]), 3, 2, "plain")!, /holds 2 at row 1, column 0/);
    assert.match(maskProblem(new Uint8Array(6), 3, 2, "plain")!, /keeps no weight/);
    const unbalanced = Uint8Array.from([1, 0, 0, 1, 1, 1]);
    assert.match(
      maskProblem(unbalanced, 3, 2, "row-balanced")!,
      /is not row-balanced: row 2 keeps 2 weight\(s\), row 0 keeps 1; .*or give pruning 'plain'/,
    );
    assert.equal(maskProblem(unbalanced, 3, 2, "plain"), null);
  });
});

describe("the masked reference", () => {
  for (const cell of ["rnn-tanh", "lstm", "gru"] as const) {
    test(`${cell}: a masked layer is exactly the dense reference on W_hh ⊙ mask; dW_hh is its gradient times the mask`, () => {
      const rng = new RandomStream(17);
      const H = 5;
      const G = cell === "lstm" ? 4 : cell === "gru" ? 3 : 1;
      const layer = { cell, hidden: H, inputSize: 3, batchSizes: Int32Array.from([3, 3, 2, 1]), reverse: true };
      const N = 9;
      const weights = {
        weightIh: randoms(rng, G * H * 3),
        weightHh: randoms(rng, G * H * H),
        biasIh: randoms(rng, G * H),
        biasHh: randoms(rng, G * H),
      };
      const mask = pruneByMagnitude(weights.weightHh, G * H, H, 0.4, "row-balanced");
      const maskedW = { ...weights, weightHh: weights.weightHh.map((v, i) => (mask[i] ? v : 0)) };
      const x = randoms(rng, N * 3);
      const h0 = randoms(rng, 3 * H);
      const c0 = cell === "lstm" ? randoms(rng, 3 * H) : null;
      const dy = randoms(rng, N * H);
      const dhn = randoms(rng, 3 * H);
      const grads = () => ({
        weightIh: new Float32Array(G * H * 3),
        weightHh: new Float32Array(G * H * H),
        biasIh: new Float32Array(G * H),
        biasHh: new Float32Array(G * H),
      });
      const sparse = referenceLayerForward(layer, x, { ...weights, mask }, h0, c0);
      const dense = referenceLayerForward(layer, x, maskedW, h0, c0);
      assert.deepEqual(sparse.y, dense.y);
      assert.deepEqual(sparse.hn, dense.hn);
      const gs = grads();
      const gd = grads();
      const bs = referenceLayerBackward(layer, x, { ...weights, mask }, h0, c0, sparse, dy, dhn, null, gs);
      const bd = referenceLayerBackward(layer, x, maskedW, h0, c0, dense, dy, dhn, null, gd);
      assert.deepEqual(bs.dx, bd.dx);
      assert.deepEqual(bs.dh0, bd.dh0);
      assert.deepEqual(gs.weightIh, gd.weightIh);
      assert.deepEqual(gs.biasHh, gd.biasHh);
      assert.deepEqual(
        gs.weightHh,
        gd.weightHh.map((g, i) => (mask[i] ? g : 0)),
      );
      assert.ok(
        gd.weightHh.some((g, i) => !mask[i] && g !== 0),
        "the dense gradient is non-zero at pruned weights",
      );
      // the caller's W_hh is the master copy: untouched
      assert.ok(weights.weightHh.some((v, i) => !mask[i] && v !== 0));
    });
  }
});

/** A layer's W_hh gradients, masks and parameters after one forward/backward of fixed random data. */
function step(rnn: PersistentRnn, seed: number) {
  const rng = new RandomStream(seed);
  const lengths = [4, 2, 3];
  const xs = lengths.map((n) => randoms(rng, n * rnn.spec.inputSize));
  const D = rnn.spec.bidirectional ? 2 : 1;
  const out = rnn.forward(xs);
  const back = rnn.backward(lengths.map((n) => randoms(rng, n * D * rnn.spec.hidden)));
  return { out, back };
}

describe("PersistentRnn with pruned W_hh", () => {
  const spec = { cell: "lstm", inputSize: 3, hidden: 6, layers: 2, bidirectional: true, seed: 5 } as const;

  test("density: masks per (layer, direction), k per row; equal to a dense layer holding W_hh ⊙ mask", () => {
    const sparse = new PersistentRnn({ ...spec, density: 0.34 });
    assert.equal(sparse.pruning, "row-balanced");
    const masks = sparse.masks!;
    assert.equal(masks.length, 4);
    const k = keptPerRow(0.34, 6);
    assert.equal(k, 2);
    for (const m of masks) assert.ok(maskCounts(m, 24, 6).rowCounts.every((c) => c === k));
    assert.equal(sparse.density, k / 6);
    const names = ["weight_hh_l0", "weight_hh_l0_reverse", "weight_hh_l1", "weight_hh_l1_reverse"];
    // the masks are those of the weights' own magnitudes
    names.forEach((n, i) => {
      assert.deepEqual(masks[i], pruneByMagnitude(sparse.parameters()[n]!, 24, 6, 0.34, "row-balanced"));
    });
    const dense = new PersistentRnn(spec);
    const p: Record<string, Float32Array> = {};
    for (const [n, v] of Object.entries(sparse.parameters())) {
      const i = names.indexOf(n);
      p[n] = i < 0 ? Float32Array.from(v) : v.map((w, j) => (masks[i]![j] ? w : 0));
    }
    dense.loadParameters(p);
    const before = Object.fromEntries(Object.entries(sparse.parameters()).map(([n, v]) => [n, Float32Array.from(v)]));
    const a = step(sparse, 9);
    const b = step(dense, 9);
    a.out.y.forEach((y, i) => {
      assert.deepEqual(y, b.out.y[i]);
    });
    assert.deepEqual(a.out.hn, b.out.hn);
    a.back.dx.forEach((dx, i) => {
      assert.deepEqual(dx, b.back.dx[i]);
    });
    for (const [n, g] of Object.entries(sparse.gradients())) {
      const i = names.indexOf(n);
      const want = dense.gradients()[n]!;
      assert.deepEqual(g, i < 0 ? want : want.map((v, j) => (masks[i]![j] ? v : 0)), n);
    }
    // parameters are the dense master copy: unchanged by pruning and by the forward/backward
    assert.deepEqual(sparse.parameters(), before);
  });

  test("plain pruning; a user mask (one for all, or one per (layer, direction)); density 1 is dense", () => {
    const plain = new PersistentRnn({ ...spec, density: 0.25, pruning: "plain" });
    assert.equal(plain.pruning, "plain");
    for (const m of plain.masks!) assert.equal(maskCounts(m, 24, 6).kept, keptPerRow(0.25, 6) * 24);
    const one = new Uint8Array(24 * 6);
    for (let r = 0; r < 24; r++) one[r * 6 + (r % 6)] = 1;
    const given = new PersistentRnn({ ...spec, mask: one });
    assert.equal(given.masks!.length, 4);
    for (const m of given.masks!) assert.deepEqual(m, one);
    assert.equal(given.density, 1 / 6);
    one[0] = 0; // the layer keeps its own copy
    assert.equal(given.masks![0]![0], 1);
    const each = [0, 1, 2, 3].map((k) => Uint8Array.from({ length: 144 }, (_, i) => (i % 6 === k % 6 ? 1 : 0)));
    assert.deepEqual(new PersistentRnn({ ...spec, mask: each }).masks, each);
    const full = new PersistentRnn({ ...spec, density: 1 });
    assert.equal(full.masks, null);
    assert.equal(full.density, 1);
  });

  test("prune(): a trained dense layer becomes sparse, back to dense with 1; loadParameters re-prunes", () => {
    const rnn = new PersistentRnn(spec);
    assert.equal(rnn.masks, null);
    assert.throws(
      () => rnn.prune(),
      oneLine(/^PersistentRnn\.prune: argument 'density' is needed: this layer is dense$/),
    );
    rnn.prune(0.5, "plain");
    assert.equal(rnn.pruning, "plain");
    assert.equal(rnn.density, 0.5);
    rnn.prune(1);
    assert.equal(rnn.masks, null);
    rnn.prune(0.2);
    const w = rnn.parameters().weight_hh_l1!;
    assert.deepEqual(rnn.masks![2], pruneByMagnitude(w, 24, 6, 0.2, "plain"));
    // new weights, new masks
    const other = new PersistentRnn({ ...spec, seed: 99 });
    rnn.loadParameters(other.parameters());
    assert.deepEqual(rnn.masks![2], pruneByMagnitude(other.parameters().weight_hh_l1!, 24, 6, 0.2, "plain"));
    assert.throws(
      () => rnn.prune(0),
      oneLine(/^PersistentRnn\.prune: argument 'density' must be a number in \(0, 1\]/),
    );
  });

  test("reprune { every: 2 }: the mask changes only at the forward after every 2nd backward, from the dense weights", () => {
    const rnn = new PersistentRnn({ ...spec, density: 0.34, reprune: { every: 2 } });
    const sgd = () => {
      const grads = rnn.gradients();
      for (const [n, v] of Object.entries(rnn.parameters())) {
        const g = grads[n]!;
        // a large step, so that the order of magnitudes changes
        for (let i = 0; i < v.length; i++) v[i] = v[i]! - 40 * g[i]!;
      }
      rnn.zeroGradients();
    };
    const masksAt: (readonly WeightMask[])[] = [];
    const pruned: Float32Array[] = [];
    for (let s = 0; s < 5; s++) {
      const wBefore = Float32Array.from(rnn.parameters().weight_hh_l0!);
      step(rnn, 100 + s);
      masksAt.push(rnn.masks!);
      // between re-prunings the pruned weights keep their values
      const m = rnn.masks![0]!;
      const w = rnn.parameters().weight_hh_l0!;
      sgd();
      for (let i = 0; i < m.length; i++)
        if (!m[i]) assert.equal(w[i], wBefore[i], `step ${s}: pruned weight ${i} moved`);
      pruned.push(Float32Array.from(rnn.parameters().weight_hh_l0!));
    }
    // forwards 0, 1 use the first mask; 2, 3 the re-pruned one; 4 another
    assert.equal(masksAt[1], masksAt[0]);
    assert.notEqual(masksAt[2], masksAt[1]);
    assert.equal(masksAt[3], masksAt[2]);
    assert.notEqual(masksAt[4], masksAt[3]);
    // each re-pruning is the magnitude pruning of the weights after the optimizer's step
    assert.deepEqual(masksAt[2]![0], pruneByMagnitude(pruned[1]!, 24, 6, 0.34, "row-balanced"));
    assert.deepEqual(masksAt[4]![0], pruneByMagnitude(pruned[3]!, 24, 6, 0.34, "row-balanced"));
    assert.notDeepEqual(masksAt[2]![0], masksAt[0]![0], "the large steps changed which weights are the largest");
  });

  test("the backend seam carries the masks: forward and backward of one (layer, direction) get the same", () => {
    const seen: string[] = [];
    const cpu = new CpuRnnBackend();
    const spy: RnnBackend = {
      device: "spy",
      forwardLayer(a) {
        seen.push(`f${a.layer}${a.direction}:${a.mask ? maskCounts(a.mask, 24, 6).kept : "dense"}`);
        return cpu.forwardLayer(a);
      },
      backwardLayer(a) {
        seen.push(`b${a.layer}${a.direction}:${a.mask ? maskCounts(a.mask, 24, 6).kept : "dense"}`);
        return cpu.backwardLayer(a);
      },
    };
    const rnn = new PersistentRnn({ ...spec, layers: 1, bidirectional: false, density: 0.5, backend: spy });
    step(rnn, 1);
    assert.deepEqual(seen, ["f00:72", "b00:72"]);
    // fp16 storage and a mask compose: W_hh rounded and masked
    const half = new PersistentRnn({ ...spec, density: 0.5, precision: "fp16" });
    step(half, 2);
    for (const [n, g] of Object.entries(half.gradients())) {
      if (!n.startsWith("weight_hh")) continue;
      const k = ["weight_hh_l0", "weight_hh_l0_reverse", "weight_hh_l1", "weight_hh_l1_reverse"].indexOf(n);
      assert.ok(
        g.every((v, i) => half.masks![k]![i] || v === 0),
        n,
      );
    }
  });

  test("bad density, mask, pruning and reprune are refused in one line naming the option", () => {
    for (const bad of [0, -0.5, 1.5, Number.NaN, Number.POSITIVE_INFINITY, "0.5", null]) {
      assert.throws(
        () => new PersistentRnn({ ...spec, density: bad as number }),
        oneLine(
          /^PersistentRnn: argument 'density' must be a number in \(0, 1\] \(the fraction of W_hh kept; 1 = dense\); got /,
        ),
        String(bad),
      );
    }
    assert.throws(() => new PersistentRnn({ ...spec, density: Number.NaN }), oneLine(/got NaN$/));
    const ok = Uint8Array.from({ length: 144 }, (_, i) => (i % 3 === 0 ? 1 : 0));
    assert.throws(
      () => new PersistentRnn({ ...spec, density: 0.5, mask: ok }),
      oneLine(/^PersistentRnn: arguments 'density' and 'mask' exclude each other/),
    );
    assert.throws(
      () => new PersistentRnn({ ...spec, mask: new Uint8Array(10) }),
      oneLine(/^PersistentRnn: argument 'mask' has 10 values; W_hh is \[G·H, H\] = \[24, 6\] = 144$/),
    );
    assert.throws(
      () => new PersistentRnn({ ...spec, mask: [ok, ok, ok] }),
      oneLine(/^PersistentRnn: argument 'mask' must be one Uint8Array .* L·D = 4; got a list of 3$/),
    );
    const unbalanced = Uint8Array.from(ok);
    unbalanced[7 * 6 + 1] = 1;
    assert.throws(
      () => new PersistentRnn({ ...spec, mask: [ok, ok, unbalanced, ok] }),
      oneLine(/^PersistentRnn: argument 'mask\[2\]' is not row-balanced: row 7 keeps 3 weight\(s\), row 0 keeps 2; /),
    );
    assert.equal(new PersistentRnn({ ...spec, mask: unbalanced, pruning: "plain" }).masks!.length, 4);
    assert.throws(
      () => new PersistentRnn({ ...spec, mask: Float32Array.from(ok) as unknown as Uint8Array }),
      oneLine(/^PersistentRnn: argument 'mask' must be a Uint8Array .*; got Float32Array$/),
    );
    assert.throws(
      () => new PersistentRnn({ ...spec, density: 0.5, pruning: "naive" as never }),
      oneLine(/^PersistentRnn: argument 'pruning' must be 'row-balanced' .* or 'plain'; got "naive"$/),
    );
    for (const bad of [{ every: 0 }, { every: 1.5 }, {}, 3]) {
      assert.throws(
        () => new PersistentRnn({ ...spec, density: 0.5, reprune: bad as never }),
        oneLine(/^PersistentRnn: argument 'reprune' must be \{ every: n \} with n a positive integer/),
        JSON.stringify(bad),
      );
    }
    assert.throws(
      () => new PersistentRnn({ ...spec, reprune: { every: 2 } }),
      oneLine(/^PersistentRnn: argument 'reprune' needs 'density': .*this layer is dense/),
    );
    assert.throws(
      () => new PersistentRnn({ ...spec, mask: ok, reprune: { every: 2 } }),
      oneLine(/^PersistentRnn: argument 'reprune' needs 'density': .*a given 'mask' stays as it is/),
    );
  });
});

describe("the rnn graph op with density", () => {
  test("equals the dense op over W_hh ⊙ mask (the mask of the weights' values); dW_hh at the kept weights only", () => {
    const build = (density: number, masked: boolean) => {
      const pc = new ParameterCollection({ seed: 4 });
      const H = 5;
      const xs = Array.from({ length: 6 }, (_, k) => pc.addParameters(3, { kind: "uniform", scale: 1 }, `x${k}`));
      const dirs = [0, 1].map((d) => ({
        W_ih: pc.addParameters([4 * H, 3], { kind: "uniform", scale: 1 }, `W_ih${d}`),
        W_hh: pc.addParameters([4 * H, H], { kind: "uniform", scale: 1 }, `W_hh${d}`),
        b_ih: pc.addParameters(4 * H, { kind: "uniform", scale: 1 }, `b_ih${d}`),
      }));
      const masks = dirs.map((d) => pruneByMagnitude(d.W_hh.value, 4 * H, H, 0.4, "plain"));
      if (masked) {
        dirs.forEach((d, k) => {
          d.W_hh.value.set(d.W_hh.value.map((w, i) => (masks[k]![i] ? w : 0)));
        });
      }
      const cg = new ComputationGraph();
      const x = concat(xs.map((v) => parameter(cg, v)));
      const y = rnn(x, [3, 2, 1], "lstm", dirs, { density, pruning: "plain" });
      const loss = sum([0, 1, 2].map((k) => pickNegLogSoftmax(pickRange(flatten(y), 10 * k, 10 * k + 10), k)));
      const engine = new CpuEngine(pc);
      const value = engine.forwardScalar(loss);
      engine.backward(loss);
      return { value, dirs, masks, y: engine.value(y) };
    };
    const sparse = build(0.4, false);
    const dense = build(1, true);
    assert.deepEqual(sparse.y, dense.y);
    assert.equal(sparse.value, dense.value);
    sparse.dirs.forEach((d, k) => {
      const m = sparse.masks[k]!;
      assert.equal(maskCounts(m, 20, 5).kept, keptPerRow(0.4, 5) * 20);
      assert.deepEqual(
        d.W_hh.grad,
        dense.dirs[k]!.W_hh.grad.map((g, i) => (m[i] ? g : 0)),
      );
      assert.deepEqual(d.W_ih.grad, dense.dirs[k]!.W_ih.grad);
    });
  });
});
