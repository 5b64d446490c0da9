// The sparse persistent kernels' generated CUDA (src/rnn/codegen/sparse-*.ts): the ladder's switches change what
// they say and nothing else, the parameter tables match the signatures, and, compiled with nvcc for sm_90, a sample of
// the plans the planner offers (per cell kind, the largest layer whose kernels hold the most pairs per thread) has no
// stack frame, no spill, and registers under the per-thread limit. test/rnn-sparse-nvcc.ts lists every plan; the
// rest compile in test/sweeps/rnn-sparse-kernels.test.ts (`npm run test:sweeps`).

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { assertNoSpills, parsePtxasReport } from "../src/cuda/compile/ptxas-report.js";
import { H100_SXM } from "../src/cuda/hw/device-model.js";
import { SPARSE_BACKWARD_PARAMS, SPARSE_FORWARD_PARAMS } from "../src/rnn/codegen/params.js";
import { sparseBackwardSource } from "../src/rnn/codegen/sparse-backward.js";
import { sparseForwardSource } from "../src/rnn/codegen/sparse-forward.js";
import {
  batchedPoll,
  exchangeShape,
  piecesPerThread,
  SPARSE_KERNEL_NAMES,
  SPARSE_LADDER,
  type SparseKernelOptions,
  sparseSharedBytes,
} from "../src/rnn/codegen/sparse-product.js";
import { largestSparseHidden, permutesRows, planSparseRnnLayer } from "../src/rnn/plan/index.js";
import { PRUNED_LAYER_SOURCE } from "../src/rnn/runtime/masked-gradient.js";
import { compileForSm90 } from "./rnn-nvcc.js";
import { describeSparseCompile, pairsHeld, sparseLayer, sparseNvccCases } from "./rnn-sparse-nvcc.js";

const layer = sparseLayer;

const signature = (src: string, name: string) => {
  const m = src.match(new RegExp(`${name}\\(([^)]*)\\)`));
  assert.ok(m, `no ${name} in the source`);
  return m[1]!
    .split(",")
    .map((d) => d.trim().split(" ").at(-1))
    .filter((n) => n !== "");
};

describe("sparse kernels: generated source", () => {
  const l = layer("lstm", 1024, 0.1);

  test("each module defines its kernel once, with the parameter table's names in order", () => {
    const f = sparseForwardSource(l.forward);
    const b = sparseBackwardSource(l.backward);
    for (const [src, name, table] of [
      [f, SPARSE_KERNEL_NAMES.forward, SPARSE_FORWARD_PARAMS],
      [b, SPARSE_KERNEL_NAMES.backward, SPARSE_BACKWARD_PARAMS],
    ] as const) {
      const kernels = [...src.matchAll(/__global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(/g)].map((m) => m[1]);
      assert.deepEqual(kernels, [name]);
      assert.deepEqual(
        signature(src, name),
        table.params.map((p) => p.name),
      );
    }
  });

  test("the plan's layout is what the constants say", () => {
    const p = l.forward;
    const src = sparseForwardSource(p);
    const c = (name: string) => Number(src.match(new RegExp(`constexpr int ${name} = (\\d+);`))?.[1]);
    assert.equal(c("H"), 1024);
    assert.equal(c("G"), 4);
    assert.equal(c("UC"), p.unitsPerCta);
    assert.equal(c("NT"), p.threads);
    assert.equal(c("BT"), p.batchTile);
    assert.equal(c("K"), 1024);
    assert.equal(c("S"), p.pairsPerThread);
    assert.equal(c("SW"), Math.ceil(p.pairsPerThread / 2));
    assert.equal(c("P"), p.pairsPerPiece);
    assert.equal(c("RW"), p.rowsPerThread);
    assert.equal(c("T"), p.threadsPerRowGroup);
    assert.equal(c("RG"), p.rowGroups);
    assert.match(src, /constexpr bool IDX16 = true;/);
    const b = sparseBackwardSource(l.backward);
    assert.match(b, /constexpr int K = 4096;/, "the backward's vector is the G·H gate gradients");
    // 32-bit indices: one word per slot
    const r32 = planSparseRnnLayer("gru", 256, H100_SXM, { density: 0.2, indexBits: 32 });
    assert.ok(r32.fits);
    if (r32.fits) {
      const s32 = sparseForwardSource(r32.forward);
      assert.match(s32, /constexpr bool IDX16 = false;/);
      assert.match(s32, new RegExp(`constexpr int SW = ${r32.forward.pairsPerThread};`));
    }
  });

  test("the ladder's switches: sync and wide loads change their constants and nothing else", () => {
    const base = sparseForwardSource(l.forward);
    assert.match(base, /constexpr bool LAMPORT = true;/);
    assert.match(base, /constexpr bool WIDE = true;/);
    const variants: [SparseKernelOptions, RegExp][] = [
      [{ sync: "barrier" }, /constexpr bool LAMPORT = false;/],
      [{ wideLoads: false }, /constexpr bool WIDE = false;/],
    ];
    for (const [opts, re] of variants) {
      for (const gen of [sparseForwardSource, sparseBackwardSource] as const) {
        const plan = gen === sparseForwardSource ? l.forward : l.backward;
        const a = gen(plan).split("\n");
        const v = gen(plan, opts).split("\n");
        assert.equal(v.length, a.length);
        const differ = a.map((line, i) => [line, v[i]!] as const).filter(([x, y]) => x !== y);
        // the header comment and the one constant
        assert.equal(differ.length, 2, JSON.stringify(differ));
        assert.match(differ[1]![1], re);
      }
    }
    assert.deepEqual(
      SPARSE_LADDER.map((r) => r.name),
      ["naive", "wide-loads", "bank-aware", "lamport"],
    );
    // each rung differs from the one before in one thing
    for (let i = 1; i < SPARSE_LADDER.length; i++) {
      const a = SPARSE_LADDER[i - 1]!;
      const b = SPARSE_LADDER[i]!;
      const changed = (["sync", "wideLoads", "order"] as const).filter((k) => a[k] !== b[k]);
      assert.equal(changed.length, 1, `${a.name} → ${b.name}: ${changed.join(", ")}`);
    }
  });

  test("a plan of the other kind is refused; shared memory covers the vector, row sums and partial sums", () => {
    assert.throws(() => sparseForwardSource(l.backward), /plan is for the backward kernel/);
    assert.throws(() => sparseBackwardSource(l.forward), /plan is for the forward kernel/);
    for (const p of [l.forward, l.backward]) {
      const bytes = sparseSharedBytes(p);
      assert.ok(bytes >= 4 * p.cols * p.batchTile + 4 * p.rows * p.batchTile);
      assert.ok(bytes <= H100_SXM.sharedPerBlock, `${p.kind}: ${bytes}`);
    }
  });
});

describe("sparse kernels: the poll of a step's vector", () => {
  test("one unrolled pass where the registers allow (the benchmark's batch 16), loops on the tightest layouts", () => {
    const roomy = sparseLayer("rnn-tanh", 2304, 0.1, 16, { replicas: 4 }).forward;
    assert.equal(piecesPerThread(roomy), 7);
    assert.ok(batchedPoll(roomy));
    const src = sparseForwardSource(roomy);
    assert.match(src, /constexpr int PPT = \(NC \+ NT - 1\) \/ NT;/);
    assert.doesNotMatch(src, /for \(int c = tid; c < NC; c \+= NT\) \{\n\s+if \(piece_polled/);
    const tight = sparseLayer("lstm", largestSparseHidden("lstm", 0.1, H100_SXM, 4), 0.1, 4).backward;
    assert.ok(!batchedPoll(tight), `${tight.registersEstimate} of ${tight.registerLimit}`);
    const loop = sparseBackwardSource(tight);
    assert.doesNotMatch(loop, /constexpr int PPT/);
    assert.match(loop, /for \(int c = tid; c < NC; c \+= NT\) \{\n\s+if \(piece_polled/);
    // more than 8 pieces a thread: loops whatever the registers
    const wide = { ...roomy, cols: 8 * roomy.threads + 4, registersEstimate: 0 }; // tile 4: a piece per column
    assert.equal(piecesPerThread(wide), 9);
    assert.ok(!batchedPoll(wide));
  });
});

describe("sparse kernels: the row order", () => {
  test("row sums go through the row order where registers allow, in place on the tightest layouts", () => {
    const roomy = sparseLayer("rnn-tanh", 2304, 0.1, 16, { replicas: 4 }).forward;
    assert.ok(permutesRows(roomy));
    assert.match(sparseForwardSource(roomy), /constexpr bool ROWMAP = true;/);
    const tight = sparseLayer("rnn-tanh", 5760, 0.1, 4).backward;
    assert.ok(!permutesRows(tight), `${tight.registersEstimate} of ${tight.registerLimit}`);
    assert.match(sparseBackwardSource(tight), /constexpr bool ROWMAP = false;/);
    // the row order sits at the end of shared memory, inside the kernel's dynamic shared memory
    const pr = roomy.rowGroups * roomy.rowsPerThread;
    assert.match(
      sparseForwardSource(roomy),
      new RegExp(`int\\* rmap = reinterpret_cast<int\\*>\\(hs\\) \\+ ${sparseSharedBytes(roomy) / 4 - pr};`),
    );
  });
});

describe("sparse kernels: the exchange buffer", () => {
  test("the last (step, tile) region ends where the buffer does, and the pending fill covers it exactly", () => {
    for (const batch of [1, 2, 3, 4, 5, 8, 13, 16, 64]) {
      for (const kind of ["forward", "backward"] as const) {
        const l = planSparseRnnLayer("lstm", 256, H100_SXM, { density: 0.1, batch, replicas: Math.ceil(batch / 4) });
        assert.ok(l.fits, l.fits ? "" : l.reason);
        const plan = l[kind];
        for (const steps of [1, 7, 256]) {
          const x = exchangeShape(plan, steps, batch);
          const region = plan.cols * plan.batchTile;
          // regionOf: xh + (t·tiles + b0 / BT)·(K·BT), for the last tile of the last step
          const lastTile = Math.ceil(batch / plan.batchTile) - 1;
          assert.equal(x.tiles, lastTile + 1);
          const end = ((steps - 1) * x.tiles + lastTile) * region + region;
          assert.equal(4 * end, x.bytes, `${kind} batch ${batch} steps ${steps}`);
          assert.equal(x.floatsPerStep, x.tiles * region);
          assert.equal(4 * x.rows * x.floatsPerStep, x.bytes, "the fill writes the buffer and nothing past it");
        }
      }
    }
  });
});

describe("sparse kernels under nvcc: npm test's sample and the sweep", () => {
  test("the sample is, per cell kind, the largest layer whose kernels hold the most pairs per thread", () => {
    const cases = sparseNvccCases();
    const sample = cases.filter((c) => c.sample);
    assert.deepEqual(sample.map((c) => c.cell).sort(), ["gru", "lstm", "rnn-tanh"]);
    assert.ok(cases.length >= 3 * sample.length, `the sweep holds the most: ${cases.length}`);
    for (const s of sample) {
      assert.equal(s.why, "largest");
      assert.equal(s.hidden, largestSparseHidden(s.cell, s.density, H100_SXM, 4));
      const ofCell = cases.filter((c) => c.cell === s.cell && c.why === "largest");
      assert.equal(pairsHeld(s), Math.max(...ofCell.map(pairsHeld)), `${s.cell}: ${s.density}`);
    }
  });
});

describeSparseCompile(
  "sparse kernels under nvcc: no stack, no spill (a sample)",
  sparseNvccCases().filter((c) => c.sample),
  false,
);

describe("the pruned layers' device module under nvcc", {
  skip: spawnSync("nvcc", ["--version"]).status === 0 ? false : "nvcc is not on PATH",
}, () => {
  test("the masked gradient, the row-balanced mask and the pairs' gather compile for sm_90 with no stack or spill", async () => {
    const dir = mkdtempSync(join(tmpdir(), "vpps-pruned-"));
    try {
      const [log] = await compileForSm90(dir, [{ file: "pruned", src: PRUNED_LAYER_SOURCE }]);
      const reports = parsePtxasReport(log!);
      for (const kernel of ["rnn_masked_add", "rnn_prune_rows", "rnn_gather_pairs"]) {
        const report = reports.find((f) => f.name.includes(kernel));
        assert.ok(report, `no ptxas report for ${kernel}:\n${log}`);
        assertNoSpills(report);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
