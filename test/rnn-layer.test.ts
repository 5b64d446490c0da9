// PersistentRnn (src/rnn/layer.ts) on the CPU backend: equal to the float64 reference stack, list input equal to
// packed input (sorting and unsorting), gradients accumulated, parameters loaded by PyTorch names, one-line errors;
// precision fp16 (W_hh rounded to fp16, as the GPU kernels store it).

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { cudaAvailable } from "../src/cuda/index.js";
import { PersistentRnn, type RnnBackend } from "../src/index.js";
import { packSequences, unpackSequences } from "../src/rnn/packed.js";
import { CpuRnnBackend } from "../src/rnn/reference/cpu-backend.js";
import { referenceBackward, referenceForward } from "../src/rnn/reference/reference.js";
import { RNN_CELLS, RnnArgumentError } from "../src/rnn/spec.js";
import { roundToFp16Array } from "../src/util/fp16.js";
import { deriveKey, RandomStream } from "../src/util/random.js";

function randoms(rng: RandomStream, n: number): Float32Array {
  return Float32Array.from({ length: n }, () => rng.uniform() * 2 - 1);
}

const close = (a: ArrayLike<number>, b: ArrayLike<number>, what: string, tol = 2e-5): void => {
  assert.equal(a.length, b.length, `${what}: length`);
  for (let i = 0; i < a.length; i++) {
    if (Math.abs(a[i]! - b[i]!) > tol * (1 + Math.abs(b[i]!))) assert.fail(`${what}[${i}]: ${a[i]} vs ${b[i]}`);
  }
};

describe("PersistentRnn on the CPU", () => {
  for (const cell of RNN_CELLS) {
    test(`${cell}: 2 bidirectional layers equal the float64 reference; list input equals packed input`, () => {
      const rng = new RandomStream(77);
      const rnn = new PersistentRnn({ cell, inputSize: 3, hidden: 4, layers: 2, bidirectional: true, seed: 3 });
      assert.equal(rnn.device, "cpu");
      const lengths = [2, 5, 1, 5];
      const seqs = lengths.map((n) => randoms(rng, n * 3));
      const K = 4; // L·D
      const h0 = randoms(rng, K * 4 * 4);
      const c0 = cell === "lstm" ? randoms(rng, K * 4 * 4) : null;
      const out = rnn.forward(seqs, h0, c0);
      assert.equal(out.y.length, 4);
      assert.equal(out.y[1]!.length, 5 * 8);
      const dys = lengths.map((n) => randoms(rng, n * 8));
      const dhn = randoms(rng, K * 4 * 4);
      const back = rnn.backward(dys, dhn, null);

      // the same in float64 through the reference, on the packed (sorted) batch
      const p = packSequences(seqs, 3);
      const f64 = (a: Float32Array): Float64Array => Float64Array.from(a);
      const params = Float64Array.from(Object.values(rnn.parameters()).flatMap((a) => [...a]));
      const sort = (s: Float32Array): Float64Array => {
        const o = new Float64Array(s.length);
        for (let k = 0; k < K; k++) {
          for (let b = 0; b < 4; b++)
            o.set(
              s.subarray((k * 4 + p.sortedIndices[b]!) * 4, (k * 4 + p.sortedIndices[b]!) * 4 + 4),
              (k * 4 + b) * 4,
            );
        }
        return o;
      };
      const x64 = { data: f64(p.packed.data), batchSizes: p.packed.batchSizes, width: 3 };
      const ref = referenceForward(rnn.spec, params, x64, sort(h0), c0 ? sort(c0) : null);
      const dyPacked = packSequences(dys, 8).packed.data;
      const grads = new Float64Array(params.length);
      const rb = referenceBackward(rnn.spec, params, ref, f64(dyPacked), sort(dhn), null, grads);
      // packed input gives the packed forms of the same results
      const outP = rnn.forward(p.packed, Float32Array.from(sort(h0)), c0 ? Float32Array.from(sort(c0)) : null);
      close(outP.y.data, ref.y, `${cell} y`);
      close(outP.hn, ref.hn, `${cell} hn`);
      if (cell === "lstm") close(outP.cn!, ref.cn!, "cn");
      const refYs = unpackSequences({ data: ref.y, batchSizes: p.packed.batchSizes, width: 8 }, p.unsortedIndices);
      for (let i = 0; i < 4; i++) close(out.y[i]!, refYs[i]!, `${cell} y of sequence ${i} (list)`);
      close(sort(out.hn), ref.hn, `${cell} hn (list, unsorted back)`);
      const flatGrad = Float64Array.from(Object.values(rnn.gradients()).flatMap((a) => [...a]));
      close(flatGrad, grads, `${cell} weight gradients`, 1e-4);
      close(packSequences(back.dx, 3).packed.data, rb.dx, `${cell} dx`, 1e-4);
      close(sort(back.dh0), rb.dh0, `${cell} dh0`, 1e-4);
      // a second backward of a second forward accumulates
      rnn.forward(seqs, h0, c0);
      rnn.backward(dys, dhn, null);
      const twice = Float64Array.from(Object.values(rnn.gradients()).flatMap((a) => [...a]));
      close(
        twice,
        grads.map((g) => 2 * g),
        `${cell} accumulated gradients`,
        1e-4,
      );
      rnn.zeroGradients();
      assert.ok(Object.values(rnn.gradients()).every((g) => g.every((v) => v === 0)));
    });
  }

  test("loadParameters takes PyTorch state_dict names (with a module prefix) and refuses wrong ones", () => {
    const a = new PersistentRnn({ cell: "gru", inputSize: 2, hidden: 3, seed: 1 });
    const b = new PersistentRnn({ cell: "gru", inputSize: 2, hidden: 3, seed: 2 });
    const state: Record<string, Float32Array> = {};
    for (const [k, v] of Object.entries(a.parameters())) state[`rnn.${k}`] = v;
    b.loadParameters(state);
    assert.deepEqual(b.parameters(), a.parameters());
    assert.throws(
      () => b.loadParameters({ ...state, "rnn.weight_ih_l1": new Float32Array(1) }),
      /unknown parameter 'weight_ih_l1'/,
    );
    const { "rnn.bias_hh_l0": _, ...missing } = state;
    assert.throws(() => b.loadParameters(missing), /parameter 'bias_hh_l0' \[9\] is missing/);
    assert.throws(
      () => b.loadParameters({ ...state, "rnn.weight_hh_l0": new Float32Array(4) }),
      /'weight_hh_l0' has 4 values; expected \[9, 3\] = 27/,
    );
  });

  test("arguments are checked in one line naming the argument", () => {
    const rnn = new PersistentRnn({ cell: "lstm", inputSize: 2, hidden: 3 });
    assert.throws(() => rnn.backward(null), /no training forward\(\)/);
    assert.throws(() => rnn.forward([new Float32Array(3)]), /sequences\[0\] has 3 values/);
    assert.throws(
      () => rnn.forward([new Float32Array(4)], new Float32Array(5)),
      /argument 'h0' must be a Float32Array \[L·D, B, H\] = \[1, 1, 3\]/,
    );
    const bad = { data: new Float32Array(6), batchSizes: Int32Array.from([1, 2]), width: 2 };
    assert.throws(() => rnn.forward(bad), /batchSizes\[1\] = 2 after 1/);
    if (!cudaAvailable().ok) {
      assert.throws(
        () => new PersistentRnn({ cell: "lstm", inputSize: 2, hidden: 3, device: "cuda:0" }),
        (e: unknown) =>
          e instanceof RnnArgumentError &&
          /^PersistentRnn: device 'cuda:0' cannot be used: .*; use device 'cpu'$/.test(e.message) &&
          !e.message.includes("\n"),
      );
    }
    assert.throws(
      () => new PersistentRnn({ cell: "lstm", inputSize: 2, hidden: 3, device: "tpu" }),
      /argument 'device' must be 'cpu' or 'cuda:N'/,
    );
    const packed = { data: new Float32Array(6), batchSizes: Int32Array.from([2, 1]), width: 2 };
    rnn.forward(packed);
    const dy = { data: new Float32Array(9), batchSizes: Int32Array.from([1, 1, 1]), width: 3 };
    assert.throws(() => rnn.backward(dy), /argument 'dy' has batchSizes \[1, 1, 1\]; x had \[2, 1\]/);
    const gru = new PersistentRnn({ cell: "gru", inputSize: 2, hidden: 3 });
    assert.throws(() => gru.forward([new Float32Array(4)], null, new Float32Array(3)), /'c0' is for LSTM only/);
  });

  for (const cell of RNN_CELLS) {
    test(`${cell}: precision fp16 computes exactly the fp32 layer with W_hh rounded to fp16 (and nothing else)`, () => {
      const rng = new RandomStream(91);
      const spec = { cell, inputSize: 5, hidden: 8, layers: 2, bidirectional: true, seed: 4 } as const;
      const half = new PersistentRnn({ ...spec, precision: "fp16" });
      const full = new PersistentRnn(spec);
      const rounded = new PersistentRnn(spec);
      assert.equal(half.precision, "fp16");
      assert.equal(full.precision, "fp32");
      const before = Object.fromEntries(Object.entries(half.parameters()).map(([k, v]) => [k, Float32Array.from(v)]));
      const p: Record<string, Float32Array> = {};
      for (const [k, v] of Object.entries(full.parameters())) {
        p[k] = k.startsWith("weight_hh") ? roundToFp16Array(v) : Float32Array.from(v);
      }
      rounded.loadParameters(p);
      const lengths = [3, 6, 1, 4];
      const seqs = lengths.map((n) => randoms(rng, n * 5));
      const K = 4;
      const h0 = randoms(rng, K * 4 * 8);
      const c0 = cell === "lstm" ? randoms(rng, K * 4 * 8) : null;
      const dys = lengths.map((n) => randoms(rng, n * 16));
      const dhn = randoms(rng, K * 4 * 8);
      const dcn = cell === "lstm" ? randoms(rng, K * 4 * 8) : null;
      const run = (r: PersistentRnn) => ({ f: r.forward(seqs, h0, c0), b: r.backward(dys, dhn, dcn) });
      const a = run(half);
      const b = run(rounded);
      const c = run(full);
      const exact = (x: ArrayLike<number>, y: ArrayLike<number>, what: string) =>
        assert.deepEqual(Float32Array.from(x), Float32Array.from(y), what);
      for (let i = 0; i < lengths.length; i++) {
        exact(a.f.y[i]!, b.f.y[i]!, `y[${i}]`);
        exact(a.b.dx[i]!, b.b.dx[i]!, `dx[${i}]`);
      }
      exact(a.f.hn, b.f.hn, "hn");
      exact(a.b.dh0, b.b.dh0, "dh0");
      if (c0) {
        exact(a.f.cn!, b.f.cn!, "cn");
        exact(a.b.dc0!, b.b.dc0!, "dc0");
      }
      for (const [k, g] of Object.entries(half.gradients())) exact(g, rounded.gradients()[k]!, `gradient of ${k}`);
      // the parameters themselves stay fp32 (only what the math reads is rounded)
      for (const [k, v] of Object.entries(half.parameters())) exact(v, before[k]!, `parameter ${k}`);
      // and the rounding does take effect: fp16 differs from fp32, by about the rounding's relative 2⁻¹¹
      let diff = 0;
      for (let i = 0; i < lengths.length; i++) {
        for (let j = 0; j < a.f.y[i]!.length; j++) diff = Math.max(diff, Math.abs(a.f.y[i]![j]! - c.f.y[i]![j]!));
      }
      assert.ok(diff > 0 && diff < 5e-3, `fp16 vs fp32 y: ${diff}`);
    });
  }

  test("precision: fp32 or fp16, anything else refused in one line; a given backend's own precision applies", () => {
    const spec = { cell: "gru", inputSize: 2, hidden: 3 } as const;
    for (const bad of ["fp8", "FP16", "half", "", 16, null]) {
      assert.throws(
        () => new PersistentRnn({ ...spec, precision: bad as never }),
        (e: unknown) =>
          e instanceof RnnArgumentError &&
          /^PersistentRnn: argument 'precision' must be 'fp32' or 'fp16' .*; got /.test(e.message) &&
          !e.message.includes("\n"),
        String(bad),
      );
    }
    assert.throws(
      () => new CpuRnnBackend({ precision: "bf16" as never }),
      /CpuRnnBackend: argument 'precision' must be 'fp32' or 'fp16'/,
    );
    assert.equal(new PersistentRnn({ ...spec, precision: "fp32" }).precision, "fp32");
    assert.equal(new PersistentRnn({ ...spec, device: "cpu", precision: "fp16" }).precision, "fp16");
    const fp16 = new CpuRnnBackend({ precision: "fp16" });
    assert.equal(new PersistentRnn({ ...spec, backend: fp16 }).precision, "fp16");
    assert.equal(new PersistentRnn({ ...spec, backend: fp16, precision: "fp16" }).precision, "fp16");
    assert.throws(
      () => new PersistentRnn({ ...spec, backend: new CpuRnnBackend(), precision: "fp16" }),
      /argument 'precision' is 'fp16' but the given backend stores W_hh as fp32; give the precision to the backend/,
    );
  });

  test("a custom backend sees one call per (layer, direction), in order, with the weights' version", () => {
    const calls: string[] = [];
    const cpu = new CpuRnnBackend();
    const spy: RnnBackend = {
      device: "spy",
      forwardLayer(a) {
        calls.push(`f${a.layer}${a.direction}v${a.weightsVersion}`);
        return cpu.forwardLayer(a);
      },
      backwardLayer(a) {
        calls.push(`b${a.layer}${a.direction}v${a.weightsVersion}`);
        return cpu.backwardLayer(a);
      },
    };
    const rnn = new PersistentRnn({
      cell: "rnn-relu",
      inputSize: 2,
      hidden: 2,
      layers: 2,
      bidirectional: true,
      backend: spy,
    });
    assert.equal(rnn.device, "spy");
    rnn.forward([new Float32Array(4)]);
    rnn.backward(null, new Float32Array(8));
    assert.deepEqual(calls, ["f00v1", "f01v1", "f10v1", "f11v1", "b10v1", "b11v1", "b00v1", "b01v1"]);
  });
});

test("PersistentRnn refuses, in one line naming it, a non-integer seed, a stack too large for one array, and NaN or ±∞ in x, h0 or the weights", () => {
  const bad = (f: () => unknown, message: RegExp) =>
    assert.throws(
      f,
      (e: unknown) => e instanceof RnnArgumentError && message.test(e.message) && !e.message.includes("\n"),
    );
  for (const seed of [Number.NaN, 1.5, Number.POSITIVE_INFINITY]) {
    bad(() => new PersistentRnn({ cell: "gru", inputSize: 3, hidden: 4, seed }), /argument 'seed' must be an integer/);
  }
  bad(
    () => new PersistentRnn({ cell: "lstm", inputSize: 3, hidden: 40000 }),
    /lstm stack of hidden 40000 has 6,400,800,000 parameters, more than one Float32Array holds .* the largest 'hidden' is 23167$/,
  );
  const random = new RandomStream(deriveKey(5, "non-finite"));
  for (let round = 0; round < 12; round++) {
    const layer = new PersistentRnn({ cell: "lstm", inputSize: 3, hidden: 4, seed: round });
    const xs = [6, 3, 5].map((len) => Float32Array.from({ length: len * 3 }, () => random.uniform() - 0.5));
    const poison = [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY][round % 3]!;
    const which = random.int(xs.length);
    const at = random.int(xs[which]!.length);
    xs[which]![at] = poison;
    bad(() => layer.forward(xs), new RegExp(`argument 'x\\[${which}\\]' holds ${poison} at element ${at}$`));
    xs[which]![at] = 0;
    const h0 = new Float32Array(3 * 4);
    h0[round % 12] = poison;
    bad(() => layer.forward(xs, h0), new RegExp(`argument 'h0' holds ${poison} at element ${round % 12}$`));
    const [name, w] = Object.entries(layer.parameters())[round % 4]!;
    w[round % w.length] = poison;
    bad(() => layer.forward(xs), new RegExp(`parameter '${name}' holds ${poison} at element ${round % w.length};`));
  }
});
