// The persistent RNN kernels under nvcc: the tightest configurations (which `npm test` compiles a sample of, one of
// each kind of risk, in test/rnn-kernels.test.ts; `npm run test:sweeps` the rest, in test/sweeps/rnn-kernels.test.ts)
// and the check: the forward and backward builds (with the pipelined and deferred variants) compile for sm_90 with no
// stack frame, no spill, and within the per-scheduler register limit.

import assert from "node:assert/strict";
import { execFile, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { promisify } from "node:util";
import { assertNoSpills, parsePtxasReport } from "../src/cuda/compile/ptxas-report.js";
import { H100_SXM, schedulerRegisterLimit } from "../src/cuda/hw/device-model.js";
import { backwardKernelSource, forwardKernelSource } from "../src/rnn/codegen/index.js";
import { largestPersistentHidden, planRnnLayer, rnnLayouts } from "../src/rnn/plan/index.js";
import { RNN_CELLS, type RnnCell } from "../src/rnn/spec.js";

export interface RnnNvccCase {
  readonly cell: RnnCell;
  readonly what: string;
  readonly plan: ReturnType<typeof planRnnLayer>;
  /** In `npm test`'s sample. */
  readonly sample: boolean;
}

/**
 * Every configuration of the sweep. The sample, one of each kind: LSTM at its largest fp32 hidden, the clustered
 * RNN 1792, LSTM 640's replicated layout at the 168-register margin, and GRU at its largest fp16 hidden.
 */
export function rnnNvccCases(): RnnNvccCase[] {
  const cases: Omit<RnnNvccCase, "sample">[] = [
    ...RNN_CELLS.flatMap((cell) => {
      const hidden = largestPersistentHidden(cell, H100_SXM);
      const most = rnnLayouts(cell, 512, H100_SXM).at(-1)!;
      return [
        { cell, what: `at the largest hidden (${hidden})`, plan: planRnnLayer(cell, hidden, H100_SXM) },
        {
          cell,
          what: `at hidden 512 with the most replicas (${most.forward.replicas} × ${most.forward.ctas} CTAs)`,
          plan: { fits: true as const, ...most },
        },
      ];
    }),
    // clustered (pairs of CTAs sharing the poll by multicast) from 112 weight registers on, as RNN 1792 is
    { cell: "rnn-tanh" as const, what: "at hidden 1792 (clustered)", plan: planRnnLayer("rnn-tanh", 1792, H100_SXM) },
    // replicated layouts that spilled under nvcc 13.0 at the limit of 168 registers before its margin (a sweep of
    // every planned layout): LSTM 640's backward with 15 units per CTA (20 bytes), GRU 896's forward with 14 (4 bytes)
    ...(
      [
        ["lstm", 640, 15],
        ["gru", 896, 14],
      ] as const
    ).map(([cell, hidden, units]) => {
      const layout = rnnLayouts(cell, hidden, H100_SXM).find((l) => l.forward.unitsPerCta === units);
      assert.ok(layout, `${cell} ${hidden}: a layout of ${units} units per CTA`);
      return {
        cell,
        what: `at hidden ${hidden}, ${units} units per CTA (a margin at 168 registers)`,
        plan: { fits: true as const, ...layout! },
      };
    }),
    // the layout the JIT re-plans LSTM 1024 to where ptxas spills the planned one (nvcc 13.0: the backward's 384
    // threads and the forward's pipelined build at 512, 8 bytes each): 16 registers per thread kept free
    {
      cell: "lstm" as const,
      what: "at hidden 1024 planned with 16 registers of headroom",
      plan: planRnnLayer("lstm", 1024, H100_SXM, "fp32", 1, 0, 16),
    },
    // fp16 weight storage (two per register) at its largest hidden: ptxas must pack the weights as they arrive, not
    // hold the loaded floats (these layouts spilled 16–728 bytes before the packs were fenced by barriers)
    ...RNN_CELLS.map((cell) => {
      const hidden = largestPersistentHidden(cell, H100_SXM, "fp16");
      return {
        cell,
        what: `with fp16 weights at the largest hidden (${hidden})`,
        plan: planRnnLayer(cell, hidden, H100_SXM, "fp16"),
      };
    }),
  ];
  const sample = (c: Omit<RnnNvccCase, "sample">) =>
    (c.cell === "lstm" && c.what.startsWith("at the largest hidden")) ||
    c.what.includes("clustered") ||
    (c.cell === "lstm" && c.what.startsWith("at hidden 640")) ||
    (c.cell === "gru" && c.what.startsWith("with fp16"));
  return cases.map((c) => ({ ...c, sample: sample(c) }));
}

const nvcc = spawnSync("nvcc", ["--version"], { encoding: "utf8" });
const noNvcc = nvcc.status === 0 ? false : "nvcc is not on PATH";
const run = promisify(execFile);

/**
 * Compiles each source in `dir` with nvcc for sm_90 (-Xptxas -v), as many at once as there are cores, and returns
 * ptxas's report of each, in order; a failed compile throws naming the file with nvcc's message.
 */
export async function compileForSm90(dir: string, units: readonly { file: string; src: string }[]): Promise<string[]> {
  const out: string[] = new Array(units.length);
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < units.length; i = next++) {
      const { file, src } = units[i]!;
      writeFileSync(join(dir, `${file}.cu`), src);
      const args = ["-arch=sm_90", "-std=c++17", "-cubin", "-Xptxas", "-v", "-o", `${file}.cubin`, `${file}.cu`];
      try {
        const { stdout, stderr } = await run("nvcc", args, { cwd: dir, maxBuffer: 1 << 24 });
        out[i] = stdout + stderr;
      } catch (e) {
        const err = e as { stderr?: string; message: string };
        throw new Error(`nvcc failed for ${file}:\n${err.stderr ?? err.message}`);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(availableParallelism(), units.length)) }, worker));
  return out;
}

/** A suite that compiles every case's four builds with nvcc for sm_90 and checks ptxas's report (skipped without). */
export function describeRnnCompile(title: string, cases: readonly RnnNvccCase[]): void {
  describe(title, () => {
    test("there are cases", () => assert.ok(cases.length > 0));
    for (const { cell, what, plan } of cases) {
      test(`${cell}: forward and backward ${what} compile for sm_90 with no spill`, { skip: noNvcc }, async () => {
        assert.ok(plan.fits);
        if (!plan.fits) return;
        const dir = mkdtempSync(join(tmpdir(), "vpps-rnn-"));
        try {
          // the builds with deferred cells (launches of one replica over more than two tiles) too
          const sources = [
            ["forward", "forward", forwardKernelSource(plan.forward)],
            ["forward", "forward-pipelined", forwardKernelSource(plan.forward, { pipelinedForward: true })],
            ["backward", "backward", backwardKernelSource(plan.backward)],
            ["backward", "backward-deferred", backwardKernelSource(plan.backward, { deferredBackward: true })],
          ] as const;
          if (what.includes("clustered")) {
            for (const [, file, src] of sources) assert.match(src, /__cluster_dims__\(2, 1, 1\)/, `${file} clustered`);
          }
          const reports = await compileForSm90(
            dir,
            sources.map(([, file, src]) => ({ file, src })),
          );
          for (const [i, [kind, file]] of sources.entries()) {
            const report = parsePtxasReport(reports[i]!).find((f) => f.name.includes(`rnn_${kind}`));
            assert.ok(report, `no ptxas report for rnn_${kind} (${cell} ${file}):\n${reports[i]}`);
            assertNoSpills(report);
            const expected = kind === "forward" ? plan.forward : plan.backward;
            assert.ok(
              report.registers <= schedulerRegisterLimit(H100_SXM, expected.threads),
              `${report.registers} registers`,
            );
          }
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      });
    }
  });
}
