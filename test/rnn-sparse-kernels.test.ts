// The sparse persistent kernels' generated CUDA (src/rnn/codegen/sparse-*.ts): the ladder's switches change what
// they say and nothing else, the parameter tables match the signatures, and every plan the planner offers at the
// densities of the benchmark — the largest hidden that fits per cell and density, and the benchmark's sizes — compiles
// with nvcc for sm_90 with no stack frame and no spill, under the per-thread register limit (the pairs really stay in
// registers). Each nvcc run takes about a second: the sweep is capped at the sizes below.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { assertNoSpills, parsePtxasReport } from "../src/cuda/compile/ptxas-report.js";
import { H100_SXM, schedulerRegisterLimit } from "../src/cuda/hw/device-model.js";
import { SPARSE_BACKWARD_PARAMS, SPARSE_FORWARD_PARAMS } from "../src/rnn/codegen/params.js";
import { sparseBackwardSource } from "../src/rnn/codegen/sparse-backward.js";
import { sparseForwardSource } from "../src/rnn/codegen/sparse-forward.js";
import {
  SPARSE_KERNEL_NAMES,
  SPARSE_LADDER,
  type SparseKernelOptions,
  sparseSharedBytes,
} from "../src/rnn/codegen/sparse-product.js";
import {
  largestSparseHidden,
  planSparseRnnLayer,
  type RnnCellName,
  type SparseRnnKernelPlan,
} from "../src/rnn/plan/index.js";

const nvcc = spawnSync("nvcc", ["--version"], { encoding: "utf8" });
const noNvcc = nvcc.status === 0 ? false : "nvcc is not on PATH";

function layer(cell: RnnCellName, hidden: number, density: number, batch = 4) {
  const r = planSparseRnnLayer(cell, hidden, H100_SXM, { density, batch });
  assert.ok(r.fits, `${cell} ${hidden} at ${density}: ${r.fits ? "" : r.reason}`);
  return r as Extract<typeof r, { fits: true }>;
}

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

  test("each module defines its kernel and the pending fill once, with the parameter table's names in order", () => {
    const f = sparseForwardSource(l.forward);
    const b = sparseBackwardSource(l.backward);
    for (const [src, name, table] of [
      [f, SPARSE_KERNEL_NAMES.forward, SPARSE_FORWARD_PARAMS],
      [b, SPARSE_KERNEL_NAMES.backward, SPARSE_BACKWARD_PARAMS],
    ] as const) {
      const kernels = [...src.matchAll(/__global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(/g)].map((m) => m[1]);
      assert.deepEqual(kernels.sort(), [name, "rnn_fill"].sort());
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

/** The sweep: (cell, hidden, density, batch) of the benchmark and the largest sparse layers. */
function sweep(): { cell: RnnCellName; hidden: number; density: number; batch: number; why: string }[] {
  const out: { cell: RnnCellName; hidden: number; density: number; batch: number; why: string }[] = [];
  for (const cell of ["rnn-tanh", "lstm", "gru"] as const) {
    for (const density of [0.01, 0.05, 0.1, 0.2, 0.3]) {
      out.push({ cell, hidden: largestSparseHidden(cell, density, H100_SXM, 4), density, batch: 4, why: "largest" });
    }
  }
  // the benchmark's targets, and the narrower tiles of batch 1 and 2
  for (const hidden of [1152, 1792, 2304]) out.push({ cell: "rnn-tanh", hidden, density: 0.1, batch: 4, why: "bench" });
  out.push({ cell: "rnn-tanh", hidden: 5760, density: 0.1, batch: 4, why: "bench" });
  out.push({ cell: "rnn-relu", hidden: 1792, density: 0.1, batch: 1, why: "batch 1" });
  out.push({ cell: "lstm", hidden: 1152, density: 0.1, batch: 2, why: "batch 2" });
  return out;
}

function compileOne(dir: string, file: string, src: string, kernel: string, plan: SparseRnnKernelPlan): void {
  writeFileSync(join(dir, `${file}.cu`), src);
  const r = spawnSync(
    "nvcc",
    ["-arch=sm_90", "-std=c++17", "-cubin", "-Xptxas", "-v", "-o", `${file}.cubin`, `${file}.cu`],
    {
      cwd: dir,
      encoding: "utf8",
    },
  );
  assert.equal(r.status, 0, `nvcc failed for ${file}:\n${r.stderr}`);
  const report = parsePtxasReport(r.stderr).find((f) => f.name.includes(kernel));
  assert.ok(report, `no ptxas report for ${kernel}:\n${r.stderr}`);
  assertNoSpills(report);
  assert.ok(report.registers <= schedulerRegisterLimit(H100_SXM, plan.threads), `${file}: ${report.registers}`);
}

describe("sparse kernels under nvcc: no stack, no spill", { skip: noNvcc }, () => {
  for (const { cell, hidden, density, batch, why } of sweep()) {
    test(`${cell} ${hidden} at ${100 * density}%, batch ${batch} (${why}): forward and backward`, () => {
      const l = layer(cell, hidden, density, batch);
      const dir = mkdtempSync(join(tmpdir(), "vpps-sparse-"));
      try {
        compileOne(dir, "forward", sparseForwardSource(l.forward), SPARSE_KERNEL_NAMES.forward, l.forward);
        compileOne(dir, "backward", sparseBackwardSource(l.backward), SPARSE_KERNEL_NAMES.backward, l.backward);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }

  test("the ladder's other builds (barrier sync, scalar loads) at the tightest: LSTM 3008 at 10%", () => {
    const l = layer("lstm", largestSparseHidden("lstm", 0.1, H100_SXM, 4), 0.1);
    const dir = mkdtempSync(join(tmpdir(), "vpps-sparse-"));
    try {
      for (const opts of [{ sync: "barrier" }, { wideLoads: false, sync: "barrier" }] as const) {
        const tag = `${opts.sync}-${"wideLoads" in opts ? "scalar" : "wide"}`;
        compileOne(dir, `f-${tag}`, sparseForwardSource(l.forward, opts), SPARSE_KERNEL_NAMES.forward, l.forward);
        compileOne(dir, `b-${tag}`, sparseBackwardSource(l.backward, opts), SPARSE_KERNEL_NAMES.backward, l.backward);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
