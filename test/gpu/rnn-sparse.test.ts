// Pruned (sparse) W_hh on a GPU, while there is no sparse kernel: PersistentRnn with `density` (or a given `mask`) on
// 'cuda:0' runs the dense persistent kernels on W_hh ⊙ mask and keeps dW_hh at the kept weights only. Compared with the
// masked CPU reference — forward (y, hn, cn) and backward (dx, dh0, dc0, every weight gradient) within the fp32 GPU
// tests' tolerances (test/gpu/rnn.test.ts) — for LSTM, GRU and RNN, row-balanced and plain pruning, a bidirectional
// 2-layer stack, and re-pruning during training; the pruned weights' gradients are exactly zero; the backend says
// once, in one line, that a density runs on the dense kernel. (The rnn graph op's pruned cases run on the GPU engines
// in test/gpu/op-engines.test.ts, from test/op-cases.ts.)
// Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { cudaAvailable } from "../../src/cuda/index.js";
import { PersistentRnn, type PersistentRnnOptions } from "../../src/rnn/layer.js";
import type { RnnPruning } from "../../src/rnn/prune.js";
import { GpuRnnBackend } from "../../src/rnn/runtime/gpu-backend.js";
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
function pairOf(spec: Stack, sparsity: Pick<PersistentRnnOptions, "density" | "pruning" | "reprune">) {
  const notices: string[] = [];
  const opts: PersistentRnnOptions = { ...spec, ...sparsity, seed: 7 };
  const cpu = new PersistentRnn({ ...opts, device: "cpu" });
  const gpu = new PersistentRnn({ ...opts, backend: new GpuRnnBackend(0, { notice: (l) => notices.push(l) }) });
  made.push(cpu, gpu);
  // loading re-prunes the GPU layer from the CPU layer's weights: the same masks
  gpu.loadParameters(cpu.parameters());
  assert.deepEqual(gpu.masks, cpu.masks);
  return { cpu, gpu, notices };
}

/** One forward and backward of both layers over packed `lengths`, compared; the pruned weights' gradients are 0. */
function compare(p: ReturnType<typeof pairOf>, spec: Stack, lengths: readonly number[], seed: number, tol = 5e-5) {
  const { cpu, gpu } = p;
  const rng = new RandomStream(seed);
  const D = spec.bidirectional ? 2 : 1;
  const states = spec.layers * D * lengths.length * spec.hidden;
  const lstm = spec.cell === "lstm";
  const seqs = lengths.map((n) => randoms(rng, n * spec.inputSize));
  const h0 = randoms(rng, states, 0.5);
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
}

const BATCH_4 = [13, 10, 10, 4];
const BATCH_16 = [12, 12, 11, 11, 10, 9, 9, 8, 7, 6, 5, 5, 4, 3, 2, 1];

describe("pruned W_hh on a GPU (the dense kernels on W_hh ⊙ mask) against the masked CPU reference", { skip }, () => {
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
            "zeros (no sparse kernel for it yet)",
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
    const gpu = new PersistentRnn({ ...spec, seed: 7, mask, backend: new GpuRnnBackend(0, { notice: () => {} }) });
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
