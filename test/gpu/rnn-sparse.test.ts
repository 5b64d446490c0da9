// Pruned (sparse) W_hh on a GPU. PersistentRnn with `density` (or a given `mask`) on 'cuda:0' runs the sparse
// persistent kernels (src/rnn/runtime/sparse.ts) where the mask's layer fits them, and keeps dW_hh at the kept weights
// only. Compared with the masked CPU reference — forward (y, hn, cn) and backward (dx, dh0, dc0, every weight
// gradient) within the fp32 GPU tests' tolerances (test/gpu/rnn.test.ts):
// - the sparse kernels for every cell at batches 1, 2, 3, 4, 8 and 16 (the tiles of 1, 2 and 4 columns, partial tiles)
//   and several lengths, both directions, row-balanced and plain masks, reductions by shuffles and through shared
//   memory; Lamport synchronisation against the grid-barrier build (bit for bit: the same sums in the same order), wide
//   against scalar loads (bit for bit), the bank-aware against the naive order (each within tolerance of the
//   reference); new weights under the same mask (refilled in place) and a new mask; a GRU whose h is exactly −0.0 at
//   every step (Lamport's pending mark: published to the exchange buffer as +0.0, never waited for);
// - with the sparse kernels turned off, the dense persistent kernels on W_hh ⊙ mask, which the backend says once, in
//   one line, for LSTM, GRU and RNN, a bidirectional 2-layer stack, and re-pruning during training.
// The pruned weights' gradients are exactly zero. (The rnn graph op's pruned cases run on the GPU engines in
// test/gpu/op-engines.test.ts, from test/op-cases.ts.) Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { CHECK_TOLERANCE, denseOfRows, runSparseRnnBench, type SparseRnnBenchRow } from "../../src/bench/rnn-sparse.js";
import { cudaAvailable, type DevicePtr } from "../../src/cuda/index.js";
import { pruneKeeping } from "../../src/ops/prune.js";
import {
  gatesOf,
  RnnWorkspace,
  randomRowBalancedRows,
  referenceLayerForward,
  SparsePersistentRnnLayer,
} from "../../src/rnn/index.js";
import { PersistentRnn, type PersistentRnnOptions } from "../../src/rnn/layer.js";
import type { RnnPruning } from "../../src/rnn/prune.js";
import { GpuRnnBackend, type GpuRnnBackendOptions } from "../../src/rnn/runtime/gpu-backend.js";
import { RNN_PENDING_BITS } from "../../src/rnn/runtime/index.js";
import { openRnnGpu } from "../../src/rnn/runtime/layer-base.js";
import { RnnMaskKernel } from "../../src/rnn/runtime/masked-gradient.js";
import type { RnnCell } from "../../src/rnn/spec.js";
import { RandomStream } from "../../src/util/random.js";
import { close, randoms } from "./rnn-compare.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

interface Stack {
  cell: RnnCell;
  inputSize: number;
  hidden: number;
  layers: number;
  bidirectional: boolean;
}

const made: PersistentRnn[] = [];
after(() => {
  for (const r of made) r.dispose();
});

/** A CPU and a GPU layer with the same parameters and pruning; the GPU backend's notices collected. */
function pairOf(
  spec: Stack,
  sparsity: Pick<PersistentRnnOptions, "density" | "pruning" | "reprune">,
  backend: GpuRnnBackendOptions = { sparse: false },
) {
  const notices: string[] = [];
  const opts: PersistentRnnOptions = { ...spec, ...sparsity, seed: 7 };
  const cpu = new PersistentRnn({ ...opts, device: "cpu" });
  const gpu = new PersistentRnn({
    ...opts,
    backend: new GpuRnnBackend(0, { ...backend, notice: (l) => notices.push(l) }),
  });
  made.push(cpu, gpu);
  // loading re-prunes the GPU layer from the CPU layer's weights: the same masks
  gpu.loadParameters(cpu.parameters());
  assert.deepEqual(gpu.masks, cpu.masks);
  return { cpu, gpu, notices };
}

/** One forward and backward of both layers over packed `lengths`, compared; the pruned weights' gradients are 0. */
function compare(
  p: ReturnType<typeof pairOf>,
  spec: Stack,
  lengths: readonly number[],
  seed: number,
  tol = 5e-5,
  initial?: { h0: Float32Array },
) {
  const { cpu, gpu } = p;
  const rng = new RandomStream(seed);
  const D = spec.bidirectional ? 2 : 1;
  const states = spec.layers * D * lengths.length * spec.hidden;
  const lstm = spec.cell === "lstm";
  const seqs = lengths.map((n) => randoms(rng, n * spec.inputSize));
  const h0 = initial?.h0 ?? randoms(rng, states, 0.5);
  const c0 = lstm ? randoms(rng, states, 0.5) : null;
  const dys = lengths.map((n) => randoms(rng, n * D * spec.hidden));
  const dhn = randoms(rng, states);
  const dcn = lstm ? randoms(rng, states) : null;
  cpu.zeroGradients();
  gpu.zeroGradients();
  const a = cpu.forward(seqs, h0, c0);
  const b = gpu.forward(seqs, h0, c0);
  for (let i = 0; i < lengths.length; i++) close(b.y[i]!, a.y[i]!, `y of sequence ${i}`, tol);
  close(b.hn, a.hn, "hn", tol);
  if (c0) close(b.cn!, a.cn!, "cn", tol);
  const ga = cpu.backward(dys, dhn, dcn);
  const gb = gpu.backward(dys, dhn, dcn);
  for (let i = 0; i < lengths.length; i++) close(gb.dx[i]!, ga.dx[i]!, `dx of sequence ${i}`, 10 * tol);
  close(gb.dh0, ga.dh0, "dh0", 10 * tol);
  if (c0) close(gb.dc0!, ga.dc0!, "dc0", 10 * tol);
  const wa = cpu.gradients();
  const wb = gpu.gradients();
  for (const name of Object.keys(wa)) close(wb[name]!, wa[name]!, `gradient of ${name}`, 10 * tol);
  const masks = gpu.masks!;
  const hh = Object.keys(wb).filter((n) => n.startsWith("weight_hh"));
  hh.forEach((name, k) => {
    const g = wb[name]!;
    for (let i = 0; i < g.length; i++) if (!masks[k]![i]) assert.equal(g[i], 0, `${name}[${i}] is pruned`);
  });
  // copies (gradients() are live views), for comparing two GPU builds with each other
  const grads = Object.fromEntries(Object.entries(wb).map(([n, v]) => [n, Float32Array.from(v)]));
  return { y: b.y, hn: b.hn, cn: b.cn, dx: gb.dx, dh0: gb.dh0, dc0: gb.dc0, grads };
}

const BATCH_4 = [13, 10, 10, 4];
const BATCH_16 = [12, 12, 11, 11, 10, 9, 9, 8, 7, 6, 5, 5, 4, 3, 2, 1];

describe("pruned W_hh on a GPU, sparse kernels off (the dense kernels on W_hh ⊙ mask) against the masked CPU reference", {
  skip,
}, () => {
  for (const cell of ["lstm", "gru", "rnn-tanh"] as const) {
    for (const [density, pruning] of [
      [0.1, "row-balanced"],
      [0.25, "plain"],
    ] as [number, RnnPruning][]) {
      test(`${cell}: hidden 256, density ${density} ${pruning}, packed batches of 4 and 16; one notice`, () => {
        const spec = { cell, inputSize: 64, hidden: 256, layers: 1, bidirectional: false };
        const p = pairOf(spec, { density, pruning });
        compare(p, spec, BATCH_4, 11);
        compare(p, spec, BATCH_16, 12);
        const shown = Number(p.gpu.density.toPrecision(3));
        assert.deepEqual(p.notices, [
          `vpps: persistent ${cell} 256: density ${shown} runs on the dense kernel with the pruned weights stored as ` +
            "zeros (the sparse kernels are turned off)",
        ]);
      });
    }
  }

  test("gru: 2 bidirectional layers, hidden 132, a given row-balanced mask per (layer, direction)", () => {
    const spec = { cell: "gru", inputSize: 24, hidden: 132, layers: 2, bidirectional: true } as const;
    const rng = new RandomStream(3);
    const mask = Array.from({ length: 4 }, () => {
      const m = new Uint8Array(3 * 132 * 132);
      for (let r = 0; r < 3 * 132; r++) {
        for (let k = 0; k < 20; k++) m[r * 132 + Math.floor(rng.uniform() * 132)] = 1;
        // top the row up to 20 kept weights (duplicates above), lowest columns first
        let kept = m.subarray(r * 132, (r + 1) * 132).reduce((s, v) => s + v, 0);
        for (let j = 0; kept < 20; j++) {
          if (!m[r * 132 + j]) {
            m[r * 132 + j] = 1;
            kept++;
          }
        }
      }
      return m;
    });
    const cpu = new PersistentRnn({ ...spec, seed: 7, mask });
    const gpu = new PersistentRnn({
      ...spec,
      seed: 7,
      mask,
      backend: new GpuRnnBackend(0, { sparse: false, notice: () => {} }),
    });
    made.push(cpu, gpu);
    compare({ cpu, gpu, notices: [] }, spec, [5, 7, 1, 5, 2], 13);
  });

  test("lstm hidden 128, reprune every step: the GPU and the CPU layers train to the same masks and weights", () => {
    const spec = { cell: "lstm", inputSize: 32, hidden: 128, layers: 1, bidirectional: true } as const;
    const p = pairOf(spec, { density: 0.2, reprune: { every: 1 } });
    for (let s = 0; s < 3; s++) {
      compare(p, spec, BATCH_4, 20 + s);
      for (const r of [p.cpu, p.gpu]) {
        const g = r.gradients();
        for (const [n, v] of Object.entries(r.parameters()))
          for (let i = 0; i < v.length; i++) v[i]! -= 0.5 * g[n]![i]!;
      }
      // the masks of the next forward come from weights that differ by the GPU's rounding only: compare them there
      const a = p.cpu.forward([new Float32Array(32)], null, null, false);
      const b = p.gpu.forward([new Float32Array(32)], null, null, false);
      close(b.hn, a.hn, `hn after step ${s}`, 1e-4);
      for (const [n, v] of Object.entries(p.gpu.parameters()))
        close(v, p.cpu.parameters()[n]!, `${n} after step ${s}`, 1e-4);
      // both re-pruned from their own weights: a weight at a row's boundary may tip either way, rarely
      let differ = 0;
      p.gpu.masks!.forEach((m, k) => {
        for (let i = 0; i < m.length; i++) if (m[i] !== p.cpu.masks![k]![i]) differ++;
      });
      assert.ok(differ <= 4, `${differ} mask entries differ after step ${s}`);
      // continue from the CPU's weights (and so its masks) on both
      p.gpu.loadParameters(p.cpu.parameters());
    }
  });
});

/** Packed lengths of a batch of `b` sequences, decreasing, the longest `longest`. */
function lengthsOf(b: number, longest: number): number[] {
  return Array.from({ length: b }, (_, i) => Math.max(1, longest - Math.floor((i * longest) / (b + 1))));
}

const same = (a: ArrayLike<number> | null, b: ArrayLike<number> | null, what: string) => {
  assert.ok((a === null) === (b === null), what);
  if (a === null || b === null) return;
  assert.equal(a.length, b.length, what);
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) assert.fail(`${what}[${i}]: ${a[i]} vs ${b[i]}`);
  }
};

/** Two GPU runs bit for bit: outputs, input gradients and every weight gradient. */
function sameRuns(a: ReturnType<typeof compare>, b: ReturnType<typeof compare>, what: string) {
  for (const [i, y] of a.y.entries()) same(y, b.y[i]!, `${what}: y of sequence ${i}`);
  same(a.hn, b.hn, `${what}: hn`);
  same(a.cn, b.cn, `${what}: cn`);
  for (const [i, d] of (a.dx ?? []).entries()) same(d, b.dx![i]!, `${what}: dx of sequence ${i}`);
  same(a.dh0, b.dh0, `${what}: dh0`);
  same(a.dc0, b.dc0, `${what}: dc0`);
  for (const n of Object.keys(a.grads)) same(a.grads[n]!, b.grads[n]!, `${what}: gradient of ${n}`);
}

describe("the sparse persistent kernels against the masked CPU reference", { skip }, () => {
  for (const cell of ["rnn-tanh", "rnn-relu", "lstm", "gru"] as const) {
    test(`${cell}: hidden 256 at 10%, batches 1, 2, 3, 4, 8, 16, several lengths; no notice (the sparse kernel runs)`, () => {
      const spec = { cell, inputSize: 48, hidden: 256, layers: 1, bidirectional: false };
      const p = pairOf(spec, { density: 0.1 }, {});
      [1, 2, 3, 4, 8, 16].forEach((b, i) => {
        compare(p, spec, lengthsOf(b, 5 + 3 * i), 100 + i);
      });
      compare(p, spec, [1], 99); // one step
      assert.deepEqual(p.notices, []);
    });
  }

  test("lstm 1024 at 10% (reductions through shared memory) and gru 132 at 30%, plain masks: batch 4 and 16", () => {
    for (const [cell, hidden, density] of [
      ["lstm", 1024, 0.1],
      ["gru", 132, 0.3],
    ] as const) {
      const spec = { cell, inputSize: 32, hidden, layers: 1, bidirectional: false };
      const p = pairOf(spec, { density, pruning: "plain" }, {});
      compare(p, spec, BATCH_4, 31, 1e-4);
      compare(p, spec, BATCH_16, 32, 1e-4);
      assert.deepEqual(p.notices, []);
    }
  });

  test("one or two CTAs per SM, tiles of 4, 2 and 1 (VPPS_RNN_SPARSE_CPS, _TILE): each matches the reference", () => {
    const saved = [process.env.VPPS_RNN_SPARSE_CPS, process.env.VPPS_RNN_SPARSE_TILE];
    try {
      for (const [cell, hidden] of [
        ["lstm", 256],
        ["rnn-tanh", 1152],
      ] as const) {
        const spec = { cell, inputSize: 32, hidden, layers: 1, bidirectional: false };
        for (const [cps, tile] of [
          [1, 4],
          [2, 4],
          [2, 2],
          [2, 1],
        ]) {
          process.env.VPPS_RNN_SPARSE_CPS = String(cps);
          process.env.VPPS_RNN_SPARSE_TILE = String(tile);
          const p = pairOf(spec, { density: 0.1 }, {});
          compare(p, spec, BATCH_16, 40 + cps + tile, 1e-4);
          compare(p, spec, BATCH_4, 50 + cps + tile, 1e-4);
          assert.deepEqual(p.notices, [], `${cell} ${hidden}: ${cps} per SM, tile ${tile}`);
        }
      }
    } finally {
      for (const [k, v] of [
        ["VPPS_RNN_SPARSE_CPS", saved[0]],
        ["VPPS_RNN_SPARSE_TILE", saved[1]],
      ] as const) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  });

  test("new weights under the same mask (values refilled in place) and under a new mask (packed again), batch 16", () => {
    const spec = { cell: "gru", inputSize: 32, hidden: 128, layers: 1, bidirectional: false } as const;
    const p = pairOf(spec, { density: 0.2 }, {});
    compare(p, spec, BATCH_16, 51);
    const scaled = (f: (name: string, i: number, v: number) => number) =>
      Object.fromEntries(
        Object.entries(p.cpu.parameters()).map(([n, v]) => [n, Float32Array.from(v, (x, i) => f(n, i, x))]),
      );
    // every weight × 0.9: the ranking of |w| in each row stays, so the masks stay and the GPU layer only refills
    const masks = p.gpu.masks!.map((m) => Uint8Array.from(m));
    const same = scaled((_, __, x) => 0.9 * x);
    p.cpu.loadParameters(same);
    p.gpu.loadParameters(same);
    assert.deepEqual(p.gpu.masks, masks);
    compare(p, spec, BATCH_16, 52);
    // W_hh reversed within each row: a new mask, packed and ordered again
    const H = spec.hidden;
    const other = scaled((n, i, x) =>
      n.startsWith("weight_hh") ? p.cpu.parameters()[n]![i - (i % H) + (H - 1 - (i % H))]! : x,
    );
    p.cpu.loadParameters(other);
    p.gpu.loadParameters(other);
    assert.notDeepEqual(p.gpu.masks, masks);
    compare(p, spec, BATCH_16, 53);
    assert.deepEqual(p.notices, []);
  });

  test("lstm: 2 bidirectional layers (both directions' kernels), hidden 128 at 20%", () => {
    const spec = { cell: "lstm", inputSize: 24, hidden: 128, layers: 2, bidirectional: true } as const;
    const p = pairOf(spec, { density: 0.2 }, {});
    compare(p, spec, [9, 7, 7, 3, 1], 41);
    assert.deepEqual(p.notices, []);
  });

  test("Lamport synchronisation equals the grid-barrier build, and wide loads scalar loads, bit for bit", () => {
    for (const cell of ["lstm", "gru", "rnn-tanh"] as const) {
      const spec = { cell, inputSize: 32, hidden: 384, layers: 1, bidirectional: false };
      // the same pair order in each compared two (the bank-aware order depends on the width of the loads)
      const pairs = (
        [
          { sync: "lamport" },
          { sync: "barrier" },
          { sync: "barrier", order: "naive" },
          { sync: "barrier", order: "naive", wideLoads: false },
        ] as const
      ).map((o) => pairOf(spec, { density: 0.1 }, { sparse: o }));
      for (const lengths of [BATCH_4, BATCH_16, [6, 4, 1]]) {
        const runs = pairs.map((p) => compare(p, spec, lengths, 51));
        sameRuns(runs[0]!, runs[1]!, `${cell} Lamport vs barrier`);
        sameRuns(runs[2]!, runs[3]!, `${cell} wide vs scalar loads`);
      }
    }
  });

  test("the bank-aware order and the naive order each match the reference", () => {
    for (const cell of ["lstm", "rnn-tanh"] as const) {
      const spec = { cell, inputSize: 32, hidden: 512, layers: 1, bidirectional: false };
      for (const order of ["naive", "bank-aware"] as const) {
        const p = pairOf(spec, { density: 0.1 }, { sparse: { order } });
        compare(p, spec, BATCH_16, 61, 1e-4);
        assert.deepEqual(p.notices, []);
      }
    }
  });

  test("−0.0: a GRU whose h is exactly −0.0 every step (z = 1, h0 = −0.0) runs with Lamport flags and publishes +0.0", () => {
    const spec = { cell: "gru", inputSize: 8, hidden: 256, layers: 1, bidirectional: false } as const;
    for (const sync of ["lamport", "barrier"] as const) {
      const p = pairOf(spec, { density: 0.1 }, { sparse: { sync } });
      const w = p.cpu.parameters();
      // W_ih = 0; b_ih: r 0, z 200 (σ = 1 exactly), n −1: h = (1 − 1)·tanh(−1 + r·(W_hn h + b_hn)) + 1·h(t−1) = −0.0
      w.weight_ih_l0!.fill(0);
      const bih = w.bias_ih_l0!;
      bih.fill(0);
      bih.fill(200, 256, 512);
      bih.fill(-1, 512, 768);
      w.bias_hh_l0!.fill(0);
      p.gpu.loadParameters(w);
      const lengths = [7, 5, 5, 2];
      const h0 = new Float32Array(lengths.length * 256).fill(-0);
      const r = compare(p, spec, lengths, 71, 5e-5, { h0 });
      // the reference's h is −0.0 at every step. The exchange buffer that the next step reads carries it as +0.0,
      // never as the pending mark (a Lamport run that waited for it would time out), so the first step's y is the
      // cell's −0.0 and every later step computes 0·x + 1·(+0.0) = +0.0: zeros, with the sign of the carried value
      r.y.forEach((y, i) => {
        for (let k = 0; k < y.length; k++) {
          const shown = `${sync}: y of sequence ${i}[${k}] = ${Object.is(y[k], 0) ? "+0" : y[k]}`;
          if (k < 256) assert.ok(Object.is(y[k], -0), shown);
          else assert.ok(y[k] === 0, shown);
        }
      });
      const ref = p.cpu.forward(
        lengths.map((n) => new Float32Array(n * 8)),
        h0,
      );
      assert.ok(Object.is(ref.y[0]![0], -0), "the reference computes −0.0");
    }
  });
});

describe("the exchange buffer between Lamport launches", { skip }, () => {
  test("a sparse forward leaves it −0.0 everywhere (packed lengths, both directions, tiles 4 / 2 / 1), and the next needs no fill", () => {
    const gpu = openRnnGpu(0);
    const d = gpu.device.driver;
    const ptrs: DevicePtr[] = [];
    const upload = (a: Float32Array | Int32Array) => {
      const p = d.memAlloc(Math.max(4, a.byteLength));
      ptrs.push(p);
      d.memcpyHtoD(p, a);
      return p;
    };
    const rng = new RandomStream(11);
    try {
      for (const cell of ["rnn-tanh", "lstm"] as const) {
        const H = 256;
        const I = 16;
        const G = gatesOf(cell);
        const rows = randomRowBalancedRows(G * H, H, 26, 5);
        for (let i = 0; i < rows.value.length; i++) rows.value[i]! *= 0.2;
        const whh = denseOfRows(rows);
        const wih = randoms(rng, G * H * I, 0.3);
        const bih = randoms(rng, G * H, 0.1);
        const bhh = randoms(rng, G * H, 0.1);
        const weights = { wih: upload(wih), whh: upload(new Float32Array(1)), bih: upload(bih), bhh: upload(bhh) };
        const layer = new SparsePersistentRnnLayer(gpu, cell, H, {});
        const ws = new RnnWorkspace(gpu, cell, H, 16 * 40, 16);
        try {
          // shrinking batches (forward: replicas run out of tiles), one sequence, a full batch, reverse; with
          // the batch tile of 4, 2 and 1 as the launch rule picks them
          for (const [lengths, reverse] of [
            [[40, 33, 33, 30, 21, 20, 20, 18, 11, 9, 9, 5, 4, 3, 2, 1], false],
            [[7], false],
            [[12, 12, 12, 12, 12, 12, 12, 12], true],
            [[9, 6, 6, 2, 1], true],
            [[25, 25, 3], false],
          ] as const) {
            const B = lengths.length;
            const steps = lengths[0]!;
            const batchSizes = Int32Array.from({ length: steps }, (_, t) => lengths.filter((n) => n > t).length);
            const offsets = new Int32Array(steps);
            for (let t = 1; t < steps; t++) offsets[t] = offsets[t - 1]! + batchSizes[t - 1]!;
            const N = offsets[steps - 1]! + batchSizes[steps - 1]!;
            const x = randoms(rng, N * I, 1);
            const h0 = randoms(rng, B * H, 0.5);
            const c0 = randoms(rng, B * H, 0.5);
            assert.equal(layer.setRows(rows, B), null);
            const y = upload(new Float32Array(N * H));
            const a = {
              weights,
              x: upload(x),
              h0: upload(h0),
              c0: upload(c0),
              y,
              ldy: H,
              hn: upload(new Float32Array(B * H)),
              cn: upload(new Float32Array(B * H)),
              steps: { batchSizes, offsets, total: N, dBatchSizes: upload(batchSizes), dOffsets: upload(offsets) },
              reverse,
              train: false,
              ws,
            };
            layer.forward(a, I);
            layer.checkStatus(ws);
            const shown = `${cell} ${reverse ? "reverse" : "forward"} lengths ${lengths.join(",")}`;
            const words = layer.exchangeWords()!;
            const stale = words.findIndex((w) => w !== RNN_PENDING_BITS);
            assert.equal(
              stale,
              -1,
              `${shown}: word ${stale} of the exchange buffer is 0x${words[stale]?.toString(16)}`,
            );
            const got = new Float32Array(N * H);
            d.memcpyDtoH(got, y, 4 * N * H);
            const ref = referenceLayerForward(
              { cell, hidden: H, inputSize: I, batchSizes: [...batchSizes], reverse },
              Float64Array.from(x),
              {
                weightIh: Float64Array.from(wih),
                weightHh: whh,
                biasIh: Float64Array.from(bih),
                biasHh: Float64Array.from(bhh),
              },
              Float64Array.from(h0),
              G === 4 ? Float64Array.from(c0) : null,
            );
            close(got, ref.y, `${shown}: y`, 1e-4);
          }
        } finally {
          ws.dispose();
          layer.dispose();
        }
      }
    } finally {
      for (const p of ptrs) d.memFree(p);
      gpu.dispose();
    }
  });
});

describe("masks derived on the device (row-balanced and plain)", { skip }, () => {
  test("rnn_prune_rows keeps exactly what pruneKeeping keeps (ties, NaN, ±inf, −0; keep 1 … all; plain) and says when a mask moved", () => {
    const gpu = openRnnGpu(0);
    const kernel = new RnnMaskKernel(gpu);
    const d = gpu.device.driver;
    const held: number[] = [];
    const alloc = (bytes: number) => {
      const p = d.memAlloc(Math.max(4, bytes));
      held.push(p);
      return p;
    };
    const bits = (a: Float32Array) => new Uint32Array(a.buffer, a.byteOffset, a.length);
    try {
      const rand = new RandomStream(11);
      const special = [
        0,
        -0,
        0.5,
        -0.5,
        0.25,
        -0.25,
        1,
        Number.POSITIVE_INFINITY,
        Number.NEGATIVE_INFINITY,
        Number.NaN,
      ];
      for (const [rows, cols, keep] of [
        [8, 256, 26],
        [12, 300, 1],
        [4, 64, 64],
        [16, 1000, 100],
        [3, 5000, 499],
        [4, 4, 3],
        [1024, 256, 26],
      ] as const) {
        const w = new Float32Array(rows * cols);
        // even rows: a few values, many ties; odd rows: random magnitudes, some specials
        for (let r = 0; r < rows; r++) {
          for (let j = 0; j < cols; j++) {
            const u = rand.uniform();
            w[r * cols + j] =
              r % 2 === 0
                ? special[Math.floor(u * special.length)]!
                : u < 0.02
                  ? special[j % special.length]!
                  : u - 0.5;
          }
        }
        const n = rows * cols;
        const wd = alloc(4 * n);
        d.memcpyHtoD(wd, w);
        const mask = alloc(4 * n);
        const masked = alloc(4 * n);
        const last = alloc(n);
        const words = Math.ceil(n / 4);
        d.memsetD32(last, 0x02020202, words);
        const changed = alloc(4);
        const run = () => {
          d.memsetD32(changed, 0, 1);
          kernel.pruneRows({ w: wd, rows, cols, keep, mask, masked, last, changed }, gpu.stream);
          gpu.stream.synchronize();
          const c = new Int32Array(1);
          d.memcpyDtoH(c, changed);
          return c[0];
        };
        const at = `rows ${rows}, cols ${cols}, keep ${keep}`;
        assert.equal(run(), 1, `${at}: a first mask differs from nothing`);
        const want = pruneKeeping(w, rows, cols, keep, "row-balanced");
        const got = new Float32Array(n);
        d.memcpyDtoH(got, mask);
        const gotMasked = new Float32Array(n);
        d.memcpyDtoH(gotMasked, masked);
        const wantMasked = Float32Array.from(w, (v, i) => (want[i] ? v : 0));
        for (let i = 0; i < n; i++) {
          assert.equal(got[i], want[i], `${at}: entry ${i} (row ${Math.floor(i / cols)}, |w| ${Math.abs(w[i]!)})`);
          assert.equal(bits(gotMasked)[i], bits(wantMasked)[i], `${at}: W ⊙ mask at ${i}`);
        }
        assert.equal(run(), 0, `${at}: the same weights, the same mask`);
        // a kept weight of row 1 to 0 moves its row's mask (unless every weight is kept)
        const r1 = want.subarray(cols, 2 * cols).indexOf(1);
        w[cols + r1] = 0;
        d.memcpyHtoD(wd, w);
        assert.equal(run(), keep < cols ? 1 : 0, `${at}: a kept weight zeroed`);
        // plain: the keep·rows largest |w| of the whole matrix, ties in row-major order (one CTA over all of it)
        d.memsetD32(last, 0x02020202, words);
        d.memsetD32(changed, 0, 1);
        const t0 = performance.now();
        kernel.pruneMatrix({ mode: "plain", w: wd, rows, cols, keep, mask, masked, last, changed }, gpu.stream);
        gpu.stream.synchronize();
        const ms = performance.now() - t0;
        if (n >= 1 << 18) console.log(`# plain mask of ${rows} × ${cols} on the device: ${ms.toFixed(2)} ms`);
        const wantPlain = pruneKeeping(w, rows, cols, keep, "plain");
        d.memcpyDtoH(got, mask);
        for (let i = 0; i < n; i++)
          assert.equal(got[i], wantPlain[i], `${at}: plain, entry ${i} (|w| ${Math.abs(w[i]!)})`);
      }
    } finally {
      for (const p of held) d.memFree(p);
      kernel.dispose();
      gpu.dispose();
    }
  });
});

describe("vpps bench rnn --density on a GPU (small)", { skip }, () => {
  test("every rung and the dense layer are timed at hidden 256 and the largest sparse layer at 30%", () => {
    const res = runSparseRnnBench({
      cells: ["rnn-tanh"],
      hiddens: [256],
      batches: [1, 3],
      densities: [0.1, 0.3],
      steps: 16,
      repeats: 2,
      ladder: true,
      largest: true,
      backward: true,
      device: 0,
    });
    const at = (r: SparseRnnBenchRow) => `${r.cell} ${r.hidden} b${r.batch} ${r.density} ${r.rung}`;
    for (const r of res.rows) assert.ok(r.reason === undefined && r.recurrentMs! > 0, `${at(r)}: ${r.reason}`);
    // every timed launch was compared with the CPU reference first
    for (const r of res.rows) assert.ok(r.maxError! <= CHECK_TOLERANCE, `${at(r)}: max |Δ| ${r.maxError}`);
    for (const cell of ["rnn-tanh"] as const) {
      for (const batch of [1, 3]) {
        const of = res.rows.filter((r) => r.cell === cell && r.batch === batch && r.hidden === 256);
        assert.equal(of.length, 1 + 2 * 5, `${cell} batch ${batch}: dense, production and 4 rungs at 2 densities`);
        // the ladder at the widest tile the batch fills
        for (const r of of.filter((x) => x.ladder)) assert.equal(r.layout!.batchTile, batch >= 2 ? 2 : 1, at(r));
        const big = res.largest[`${cell}/0.3`]!;
        assert.ok(res.rows.some((r) => r.cell === cell && r.hidden === big && r.batch === batch && r.density === 0.3));
      }
    }
    for (const r of res.rows.filter((x) => x.rung === "lamport" && !x.ladder)) {
      assert.ok(r.backwardRecurrentMs! > 0, at(r));
    }
  });
});
