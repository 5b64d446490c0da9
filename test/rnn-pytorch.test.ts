// vpps's recurrent reference against PyTorch's nn.RNN / nn.LSTM / nn.GRU (float64, CPU): the cases that
// `python3 bench/pytorch/rnn.py golden --out test/golden/rnn-pytorch.json` writes — 2 bidirectional layers over a
// packed batch of unsorted sequences, h0/c0 given — must give the same outputs and gradients with the parameters
// loaded by PyTorch's names: the gate order, the two biases, the packing and the sorting are PyTorch's.
// Skipped, with the reason printed, until that file exists (it needs torch to be written).

import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { packSequences, permuteStates, unpackSequences } from "../src/rnn/packed.js";
import { referenceBackward, referenceForward } from "../src/rnn/reference/reference.js";
import { type RnnCell, rnnParameterCount, rnnParameterLayout, validateRnnSpec } from "../src/rnn/spec.js";

const FILE = join(import.meta.dirname, "golden", "rnn-pytorch.json");
const skip = existsSync(FILE)
  ? false
  : "test/golden/rnn-pytorch.json is missing: write it with `python3 bench/pytorch/rnn.py golden --out test/golden/rnn-pytorch.json` where torch is installed";
if (skip) console.log(`skipping: ${skip}`);

interface Case {
  cell: RnnCell;
  input_size: number;
  hidden: number;
  layers: number;
  bidirectional: boolean;
  lengths: number[];
  batchSizes: number[];
  sortedIndices: number[];
  parameters: Record<string, number[]>;
  x: number[][];
  h0: number[];
  c0: number[] | null;
  y: number[];
  hn: number[];
  cn: number[] | null;
  dy: number[];
  dhn: number[];
  dcn: number[] | null;
  gradients: Record<string, number[]>;
  dx: number[][];
  dh0: number[];
  dc0: number[] | null;
}

function close(got: ArrayLike<number>, want: ArrayLike<number>, what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) {
    if (Math.abs(got[i]! - want[i]!) > 1e-10 * (1 + Math.abs(want[i]!)))
      assert.fail(`${what}[${i}]: ${got[i]} vs ${want[i]} (PyTorch)`);
  }
}

describe("the rnn reference equals PyTorch (float64)", { skip }, () => {
  const cases = skip ? [] : (JSON.parse(readFileSync(FILE, "utf8")) as { cases: Case[] }).cases;
  for (const c of cases) {
    test(`${c.cell}: ${c.layers} bidirectional layers, lengths [${c.lengths}]`, () => {
      const spec = validateRnnSpec({
        cell: c.cell,
        inputSize: c.input_size,
        hidden: c.hidden,
        layers: c.layers,
        bidirectional: c.bidirectional,
      });
      const params = new Float64Array(rnnParameterCount(spec));
      for (const p of rnnParameterLayout(spec)) params.set(c.parameters[p.name]!, p.offset);
      const p = packSequences(
        c.x.map((s) => Float64Array.from(s)),
        c.input_size,
      );
      assert.deepEqual([...p.packed.batchSizes], c.batchSizes);
      assert.deepEqual([...p.sortedIndices], c.sortedIndices);
      const H = c.hidden;
      const sorted = (s: number[] | null) => (s ? permuteStates(Float64Array.from(s), H, p.sortedIndices) : null);
      const f = referenceForward(spec, params, p.packed, sorted(c.h0), sorted(c.c0));
      close(f.y, c.y, "y");
      close(permuteStates(f.hn, H, p.unsortedIndices), c.hn, "hn");
      if (c.cn) close(permuteStates(f.cn!, H, p.unsortedIndices), c.cn, "cn");
      const grads = new Float64Array(params.length);
      const b = referenceBackward(spec, params, f, Float64Array.from(c.dy), sorted(c.dhn), sorted(c.dcn), grads);
      for (const q of rnnParameterLayout(spec))
        close(grads.subarray(q.offset, q.offset + q.length), c.gradients[q.name]!, q.name);
      const dx = unpackSequences(
        { data: b.dx, batchSizes: p.packed.batchSizes, width: c.input_size },
        p.unsortedIndices,
      );
      for (const [i, want] of c.dx.entries()) close(dx[i]!, want, `dx of sequence ${i}`);
      close(permuteStates(b.dh0, H, p.unsortedIndices), c.dh0, "dh0");
      if (c.dc0) close(permuteStates(b.dc0!, H, p.unsortedIndices), c.dc0, "dc0");
    });
  }
});
