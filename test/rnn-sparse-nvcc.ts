// The sparse persistent kernels (src/rnn/codegen/sparse-*.ts) under nvcc: every plan the planner offers at the
// densities of the benchmark — the largest hidden that fits per cell and density, and the benchmark's sizes — and the
// ladder's other builds at LSTM's largest at 10%, each compiled for sm_90 and checked for no stack frame, no spill,
// and registers under the per-thread limit (the pairs really stay in registers). `npm test` compiles a sample
// (test/rnn-sparse-kernels.test.ts: per cell kind, the largest layer whose kernels hold the most pairs per thread),
// the exhaustive sweep the rest (test/sweeps/rnn-sparse-kernels.test.ts, `npm run test:sweeps`). Each nvcc run takes
// about two seconds; a case's builds compile at once, a core each.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { assertNoSpills, parsePtxasReport } from "../src/cuda/compile/ptxas-report.js";
import { H100_SXM, schedulerRegisterLimit } from "../src/cuda/hw/device-model.js";
import { sparseBackwardSource } from "../src/rnn/codegen/sparse-backward.js";
import { sparseForwardSource } from "../src/rnn/codegen/sparse-forward.js";
import { SPARSE_KERNEL_NAMES } from "../src/rnn/codegen/sparse-product.js";
import {
  type CtasPerSm,
  largestSparseHidden,
  planSparseRnnLayer,
  type RnnCellName,
  type SparseRnnKernelPlan,
  type WideLoad,
} from "../src/rnn/plan/index.js";
import { compileForSm90 } from "./rnn-nvcc.js";

const nvcc = spawnSync("nvcc", ["--version"], { encoding: "utf8" });
const noNvcc = nvcc.status === 0 ? false : "nvcc is not on PATH";

export function sparseLayer(
  cell: RnnCellName,
  hidden: number,
  density: number,
  batch = 4,
  spread: { replicas?: number; ctasPerSm?: CtasPerSm; maxBatchTile?: WideLoad } = {},
) {
  const r = planSparseRnnLayer(cell, hidden, H100_SXM, { density, batch, ...spread });
  assert.ok(r.fits, `${cell} ${hidden} at ${density}: ${r.fits ? "" : r.reason}`);
  return r as Extract<typeof r, { fits: true }>;
}

export interface SparseNvccCase {
  readonly cell: RnnCellName;
  readonly hidden: number;
  readonly density: number;
  readonly batch: number;
  readonly why: string;
  /** Replicas, CTAs per SM and the widest tile of a launch over several tiles (default: one replica, one CTA per SM). */
  readonly spread?: { replicas?: number; ctasPerSm?: CtasPerSm; maxBatchTile?: WideLoad };
  /** In `npm test`'s sample. */
  readonly sample: boolean;
}

/** Pairs per thread a layer's forward and backward kernels hold in registers: the more, the nearer to a spill. */
export const pairsHeld = (c: { cell: RnnCellName; hidden: number; density: number; batch: number }) => {
  const l = sparseLayer(c.cell, c.hidden, c.density, c.batch);
  return l.forward.pairsPerThread + l.backward.pairsPerThread;
};

/**
 * Every (cell, hidden, density, batch) of the sweep: the largest sparse layers and the benchmark's. The sample: per
 * cell kind, the largest layer (of the densities below) whose kernels hold the most pairs per thread.
 */
export function sparseNvccCases(): SparseNvccCase[] {
  const out: Omit<SparseNvccCase, "sample">[] = [];
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
  // two CTAs per SM: the benchmark's batch 16 (four replicas of tile 4) and batch 4 (two replicas of tile 2)
  const two = { ctasPerSm: 2 } as const;
  out.push({
    cell: "rnn-tanh",
    hidden: 2304,
    density: 0.1,
    batch: 16,
    why: "2 per SM",
    spread: { replicas: 4, ...two },
  });
  out.push({
    cell: "rnn-tanh",
    hidden: 2304,
    density: 0.1,
    batch: 4,
    why: "2 per SM, tile 2",
    spread: { replicas: 2, maxBatchTile: 2, ...two },
  });
  out.push({ cell: "lstm", hidden: 1152, density: 0.1, batch: 16, why: "2 per SM", spread: { replicas: 4, ...two } });
  // the benchmark's launches (sparseLaunchPlan on an H100): replicas of tile 4 / 2 at batch 16, of tile 1 at batch 4
  for (const [hidden, batch, replicas, maxBatchTile] of [
    [2304, 16, 4, 4],
    [1792, 16, 8, 2],
    [2304, 4, 4, 1],
    [1792, 4, 4, 1],
  ] as const) {
    out.push({ cell: "rnn-tanh", hidden, density: 0.1, batch, why: "launch", spread: { replicas, maxBatchTile } });
  }
  const sampled = new Set<(typeof out)[number]>();
  for (const cell of ["rnn-tanh", "lstm", "gru"] as const) {
    const largest = out.filter((c) => c.cell === cell && c.why === "largest");
    sampled.add(largest.reduce((a, b) => (pairsHeld(b) > pairsHeld(a) ? b : a)));
  }
  return out.map((c) => ({ ...c, sample: sampled.has(c) }));
}

/** Compiles the kernels (at once, a core each) and checks ptxas's report: no stack, no spill, under the limit. */
async function compileAll(
  dir: string,
  builds: readonly { file: string; src: string; kernel: string; plan: SparseRnnKernelPlan }[],
): Promise<void> {
  const logs = await compileForSm90(dir, builds);
  for (const [i, { file, kernel, plan }] of builds.entries()) {
    const report = parsePtxasReport(logs[i]!).find((f) => f.name.includes(kernel));
    assert.ok(report, `no ptxas report for ${kernel} (${file}):\n${logs[i]}`);
    assertNoSpills(report);
    const limit = schedulerRegisterLimit(H100_SXM, plan.threads, plan.ctasPerSm);
    assert.ok(report.registers <= limit, `${file}: ${report.registers} > ${limit}`);
  }
}

/** A suite compiling `cases`' forward and backward kernels (and, with `ladder`, the ladder's other builds). */
export function describeSparseCompile(title: string, cases: readonly SparseNvccCase[], ladder: boolean): void {
  describe(title, { skip: noNvcc }, () => {
    for (const { cell, hidden, density, batch, why, spread } of cases) {
      test(`${cell} ${hidden} at ${100 * density}%, batch ${batch} (${why}): forward and backward`, async () => {
        const l = sparseLayer(cell, hidden, density, batch, spread);
        const dir = mkdtempSync(join(tmpdir(), "vpps-sparse-"));
        try {
          await compileAll(dir, [
            {
              file: "forward",
              src: sparseForwardSource(l.forward),
              kernel: SPARSE_KERNEL_NAMES.forward,
              plan: l.forward,
            },
            {
              file: "backward",
              src: sparseBackwardSource(l.backward),
              kernel: SPARSE_KERNEL_NAMES.backward,
              plan: l.backward,
            },
          ]);
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      });
    }
    if (!ladder) return;
    test("the ladder's other builds (barrier sync, scalar loads) at LSTM's largest at 10%", async () => {
      const l = sparseLayer("lstm", largestSparseHidden("lstm", 0.1, H100_SXM, 4), 0.1);
      const dir = mkdtempSync(join(tmpdir(), "vpps-sparse-"));
      try {
        await compileAll(
          dir,
          ([{ sync: "barrier" }, { wideLoads: false, sync: "barrier" }] as const).flatMap((opts) => {
            const tag = `${opts.sync}-${"wideLoads" in opts ? "scalar" : "wide"}`;
            return [
              {
                file: `f-${tag}`,
                src: sparseForwardSource(l.forward, opts),
                kernel: SPARSE_KERNEL_NAMES.forward,
                plan: l.forward,
              },
              {
                file: `b-${tag}`,
                src: sparseBackwardSource(l.backward, opts),
                kernel: SPARSE_KERNEL_NAMES.backward,
                plan: l.backward,
              },
            ];
          }),
        );
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });
}
