// fp16 weight storage of the persistent recurrent kernels (PersistentRnn `precision: "fp16"`): the GPU layer
// (device 'cuda:0') against the CPU reference with the same option, which rounds W_hh to fp16 as the kernels' packs
// do — forward (y, hn, cn) and backward (dx, dh0, dc0, every weight gradient) within the fp32 GPU tests'
// tolerances (test/gpu/rnn.test.ts); LSTM, GRU and RNN at hidden 256 and 132 over packed batches of 1, 4 and 16
// sequences, a bidirectional 2-layer stack, the largest fp16 layers of an H100 (LSTM 1568, GRU 1792, RNN 3168; batch
// 16 runs the pipelined tile loops with the registers full), none of them on the stepwise fallback or a build
// replaced for spilling; and fp16 really differs from fp32, by little. Layers are reused across tests (compiling
// dominates the time).
// Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { cudaAvailable } from "../../src/cuda/index.js";
import { PersistentRnn, type PersistentRnnOptions } from "../../src/rnn/layer.js";
import type { RnnCell } from "../../src/rnn/spec.js";
import { RandomStream } from "../../src/util/random.js";
import { close, randoms, worst } from "./rnn-compare.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

/**
 * Runs `f` and fails if a layer fell back to the stepwise path meanwhile, or had a kernel build replaced because it
 * spilled (GpuRnnBackend and PersistentRnnLayer say so in one line on stderr): every size here must run the planned
 * persistent fp16 kernels, pipelined builds included, as they compile without spills since f8df294.
 */
function persistentOnly<T>(f: () => T): T {
  const lines: string[] = [];
  const write = process.stderr.write;
  process.stderr.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    lines.push(String(chunk));
    return (write as (...a: unknown[]) => boolean).call(process.stderr, chunk, ...rest);
  }) as typeof process.stderr.write;
  try {
    return f();
  } finally {
    process.stderr.write = write;
    const fallback = lines.find((l) => l.includes("non-persistent path") || l.includes("spills"));
    if (fallback) assert.fail(`not the planned persistent kernels: ${fallback.trim()}`);
  }
}

interface Stack {
  cell: RnnCell;
  inputSize: number;
  hidden: number;
  layers: number;
  bidirectional: boolean;
}

/** The GPU and the CPU layer of one stack, both fp16, with the same parameters. */
interface Pair {
  readonly spec: Stack;
  readonly gpu: PersistentRnn;
  readonly cpu: PersistentRnn;
}

/** Layers built once and shared by the tests that use the same stack (their kernels compile once). */
const pairs = new Map<string, Pair>();
const extra: PersistentRnn[] = [];
after(() => {
  for (const p of pairs.values()) {
    p.gpu.dispose();
    p.cpu.dispose();
  }
  for (const r of extra) r.dispose();
});

function pairOf(spec: Stack): Pair {
  const key = JSON.stringify(spec);
  let p = pairs.get(key);
  if (!p) {
    const opts: PersistentRnnOptions = { ...spec, seed: 5, precision: "fp16" };
    const cpu = new PersistentRnn({ ...opts, device: "cpu" });
    const gpu = new PersistentRnn({ ...opts, device: "cuda:0" });
    assert.equal(gpu.precision, "fp16");
    gpu.loadParameters(cpu.parameters());
    p = { spec, gpu, cpu };
    pairs.set(key, p);
  }
  return p;
}

interface Inputs {
  seqs: Float32Array[];
  h0: Float32Array;
  c0: Float32Array | null;
  dys: Float32Array[];
  dhn: Float32Array;
  dcn: Float32Array | null;
}

function inputsOf(s: Stack, lengths: readonly number[], seed: number): Inputs {
  const rng = new RandomStream(seed);
  const D = s.bidirectional ? 2 : 1;
  const states = s.layers * D * lengths.length * s.hidden;
  const lstm = s.cell === "lstm";
  return {
    seqs: lengths.map((n) => randoms(rng, n * s.inputSize)),
    h0: randoms(rng, states, 0.5),
    c0: lstm ? randoms(rng, states, 0.5) : null,
    dys: lengths.map((n) => randoms(rng, n * D * s.hidden)),
    dhn: randoms(rng, states),
    dcn: lstm ? randoms(rng, states) : null,
  };
}

/** Forward and backward of both layers of `p` over the sequences of `lengths`, compared (gradients ×10 tol). */
function compare(p: Pair, lengths: readonly number[], tol: number): void {
  const { gpu, cpu, spec } = p;
  const x = inputsOf(spec, lengths, spec.hidden * 31 + lengths.length);
  cpu.zeroGradients();
  gpu.zeroGradients();
  const a = cpu.forward(x.seqs, x.h0, x.c0);
  const b = persistentOnly(() => gpu.forward(x.seqs, x.h0, x.c0));
  for (let i = 0; i < lengths.length; i++) close(b.y[i]!, a.y[i]!, `y of sequence ${i}`, tol);
  close(b.hn, a.hn, "hn", tol);
  if (x.c0) close(b.cn!, a.cn!, "cn", tol);
  const ga = cpu.backward(x.dys, x.dhn, x.dcn);
  const gb = persistentOnly(() => gpu.backward(x.dys, x.dhn, x.dcn));
  for (let i = 0; i < lengths.length; i++) close(gb.dx[i]!, ga.dx[i]!, `dx of sequence ${i}`, 10 * tol);
  close(gb.dh0, ga.dh0, "dh0", 10 * tol);
  if (x.c0) close(gb.dc0!, ga.dc0!, "dc0", 10 * tol);
  const wa = cpu.gradients();
  const wb = gpu.gradients();
  for (const name of Object.keys(wa)) close(wb[name]!, wa[name]!, `gradient of ${name}`, 10 * tol);
}

/** Packed batches: one sequence, 4 and 16 of different lengths (16: several tiles per step). */
const BATCH_1 = [13];
const BATCH_4 = [13, 10, 10, 4];
const BATCH_16 = [12, 12, 11, 11, 10, 9, 9, 8, 7, 6, 5, 5, 4, 3, 2, 1];

describe("fp16 weight storage: PersistentRnn on a GPU against the CPU reference's fp16", { skip }, () => {
  for (const cell of ["lstm", "gru", "rnn-tanh"] as const) {
    test(`${cell}: hidden 256, packed batches of 1, 4 and 16 sequences`, () => {
      const p = pairOf({ cell, inputSize: 64, hidden: 256, layers: 1, bidirectional: false });
      for (const lengths of [BATCH_1, BATCH_4, BATCH_16]) compare(p, lengths, 5e-5);
    });
    test(`${cell}: hidden 132 (a multiple of 4, not of 32), packed batch of 4`, () => {
      compare(pairOf({ cell, inputSize: 40, hidden: 132, layers: 1, bidirectional: false }), BATCH_4, 5e-5);
    });
  }

  test("gru: 2 bidirectional layers, hidden 132, packed lengths 7/5/5/2/1", () => {
    const p = pairOf({ cell: "gru", inputSize: 24, hidden: 132, layers: 2, bidirectional: true });
    compare(p, [5, 7, 1, 5, 2], 5e-5);
  });

  // the largest fp16 layers of an H100 (largestPersistentHidden(cell, H100, "fp16")): the registers full of packed
  // weights, the kernels compiled without spills (f8df294)
  const LSTM_LARGEST = { cell: "lstm", inputSize: 64, hidden: 1568, layers: 1, bidirectional: false } as const;
  test("lstm hidden 1568 (the fp16 largest), batch 4, 8 steps", () => {
    compare(pairOf(LSTM_LARGEST), [8, 8, 7, 5], 1e-4);
  });
  test("lstm hidden 1568, batch 16 (four tiles: the pipelined tile loops with the registers full), 4 steps", () => {
    compare(pairOf(LSTM_LARGEST), [4, 4, 4, 4, 4, 4, 3, 3, 3, 3, 2, 2, 2, 1, 1, 1], 1e-4);
  });
  test("gru hidden 1792 (the fp16 largest), batch 4, 6 steps", () => {
    compare(pairOf({ cell: "gru", inputSize: 64, hidden: 1792, layers: 1, bidirectional: false }), [6, 6, 5, 3], 1e-4);
  });
  test("rnn-tanh hidden 3168 (the fp16 largest), batch 4, 6 steps", () => {
    const p = pairOf({ cell: "rnn-tanh", inputSize: 64, hidden: 3168, layers: 1, bidirectional: false });
    compare(p, [6, 6, 5, 3], 1e-4);
  });

  test("fp16 differs from fp32 (the option takes effect), by little", () => {
    const spec = { cell: "lstm", inputSize: 64, hidden: 256, layers: 1, bidirectional: false } as const;
    const p = pairOf(spec);
    const fp32 = new PersistentRnn({ ...spec, seed: 5, device: "cuda:0", precision: "fp32" });
    extra.push(fp32);
    assert.equal(fp32.precision, "fp32");
    fp32.loadParameters(p.cpu.parameters());
    const x = inputsOf(spec, BATCH_4, 7);
    const half = persistentOnly(() => p.gpu.forward(x.seqs, x.h0, x.c0, false));
    const full = persistentOnly(() => fp32.forward(x.seqs, x.h0, x.c0, false));
    const ref = p.cpu.forward(x.seqs, x.h0, x.c0, false);
    const flat = (ys: Float32Array[]) => Float32Array.from(ys.flatMap((y) => [...y]));
    const apart = worst(flat(half.y), flat(full.y)).err; // fp16 against fp32, both on the GPU
    const noise = worst(flat(half.y), flat(ref.y)).err; // fp16 on the GPU against fp16 on the CPU
    // W_hh rounded to fp16 moves each weight by up to 2⁻¹¹ relative: y moves by ~1e-5…1e-4 here, far more than the
    // GPU and CPU fp16 differ (summation order, ~1e-6) and far less than a wrong matrix would
    assert.ok(
      apart > 4 * noise && apart > 1e-6,
      `fp16 vs fp32 ${apart.toExponential(2)}, GPU vs CPU fp16 ${noise.toExponential(2)}`,
    );
    assert.ok(apart < 2e-3, `fp16 vs fp32 ${apart.toExponential(2)}`);
    close(half.hn, full.hn, "hn, fp16 against fp32", 2e-3);
    close(half.cn!, full.cn!, "cn, fp16 against fp32", 2e-3);
  });
});
