// The VPPS kernels of the Tree-LSTM under nvcc: which kernels there are, which of them `npm test` compiles (a sample:
// the tightest of each kind, where a spill shows first) and the check both it and the exhaustive sweep
// (test/sweeps/vpps-kernels.test.ts, `npm run test:sweeps`) make: ptxas reports no stack frame, no spill, and no more
// registers than the plan's budget.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { promisify } from "node:util";
import { assertNoSpills, parsePtxasReport } from "../src/cuda/compile/ptxas-report.js";
import { H100_SXM } from "../src/cuda/hw/device-model.js";
import { tileMode } from "../src/engines/vpps/codegen/staging.js";
import { generateKernelSource, kernelName } from "../src/engines/vpps/codegen/template.js";
import { enumeratePlans, type MatrixSpec, planVpps, type VppsPlan } from "../src/engines/vpps/plan/plan.js";

const run = promisify(execFile);

/** The Tree-LSTM model's matrices exactly as the lead builds the model (vectors and E stay off chip). */
export function treeLstm(H: number, E: number): MatrixSpec[] {
  return [
    { name: "W_iou", rows: 3 * H, cols: E },
    { name: "U_iou", rows: 3 * H, cols: 2 * H },
    { name: "U_f1", rows: H, cols: H },
    { name: "U_f2", rows: H, cols: H },
    { name: "W_out", rows: 5, cols: H },
  ];
}

export const TREE_LSTM_SIZES = [128, 256, 512].flatMap((H) => [128, 256].map((E) => ({ H, E })));

/** The Tree-LSTM plans that get transposed copies when asked for them (Vpps option `transposed`). */
export function transposedTreeLstmPlans(): VppsPlan[] {
  return TREE_LSTM_SIZES.flatMap(({ H, E }) => enumeratePlans(treeLstm(H, E), H100_SXM, "auto", true)).filter(
    (p) => p.transposed.length > 0,
  );
}

export interface TreeLstmKernel {
  readonly plan: VppsPlan;
  readonly name: string;
  readonly source: string;
  /** In `npm test`'s sample. */
  readonly sample: boolean;
}

/** Parameter registers a plan holds: the higher, the nearer ptxas is to spilling. */
const held = (p: VppsPlan) => p.weightRegs + p.gradientRegs;

/**
 * Every kernel of the sweep: every Tree-LSTM plan (H 128/256/512, E 128/256, every valid rows per warp and CTAs per
 * SM), per hidden size the plan with transposed copies that leaves the fewest registers free (copies add load.t and
 * matvec.acc, and take registers), and the profiled and traced builds of a tight plan. The sample: the plain plan and
 * the transposed plan that hold the most parameter registers, and the two instrumented builds.
 */
export function treeLstmKernels(): TreeLstmKernel[] {
  const kernel = (plan: VppsPlan, spec: { model: string; profile?: boolean; trace?: boolean }, sample = false) => ({
    plan,
    name: kernelName(plan, spec),
    source: generateKernelSource(plan, spec),
    sample,
  });
  const plain = TREE_LSTM_SIZES.flatMap(({ H, E }) =>
    enumeratePlans(treeLstm(H, E), H100_SXM).map((plan) => ({ plan, spec: { model: `treelstm_h${H}_e${E}` } })),
  );
  // per tile mode (two passes, one pass, fast: staging.ts), the plan holding the most parameter registers
  const tightestPlain = new Map<string, (typeof plain)[number]>();
  for (const k of plain) {
    const mode = JSON.stringify(tileMode(k.plan));
    const best = tightestPlain.get(mode);
    if (best === undefined || held(k.plan) > held(best.plan)) tightestPlain.set(mode, k);
  }
  const sampled = new Set(tightestPlain.values());
  const kernels: TreeLstmKernel[] = plain.map((k) => kernel(k.plan, k.spec, sampled.has(k)));
  const tightest = new Map<number, VppsPlan>();
  for (const plan of transposedTreeLstmPlans()) {
    const H = plan.matrices[2]!.rows;
    const used = (p: VppsPlan) => held(p) - p.budget.limitPerThread;
    const best = tightest.get(H);
    if (best === undefined || used(plan) > used(best)) tightest.set(H, plan);
  }
  const transposed = [...tightest.values()];
  const tightestTransposed = transposed.reduce((a, b) => (held(b) > held(a) ? b : a));
  for (const plan of transposed) {
    const spec = { model: `treelstm_t_h${plan.matrices[2]!.rows}_e${plan.matrices[0]!.cols}` };
    kernels.push(kernel(plan, spec, plan === tightestTransposed));
  }
  // the cycle-counting build (`profile: true`) and the timeline build (`trace: true`) of a tight plan
  const tight = planVpps(treeLstm(256, 256), H100_SXM, { ctasPerSm: 1, rowsPerWarp: 3 });
  kernels.push(kernel(tight, { model: "treelstm_profiled", profile: true }, true));
  kernels.push(kernel(tight, { model: "treelstm_traced", trace: true }, true));
  assert.equal(new Set(kernels.map((k) => k.name)).size, kernels.length, "kernel names must be unique");
  return kernels;
}

const NVCC = process.env["NVCC"] ?? "nvcc";

async function nvccVersion(): Promise<string | undefined> {
  try {
    const { stdout } = await run(NVCC, ["--version"]);
    return stdout.trim().split("\n").pop();
  } catch {
    return undefined;
  }
}

/** A suite that compiles `kernels` with nvcc for sm_90 and checks ptxas's report of each (skipped without nvcc). */
export function describeTreeLstmCompile(title: string, what: string, kernels: readonly TreeLstmKernel[]): void {
  describe(title, async () => {
    const version = await nvccVersion();
    if (version === undefined) {
      test("nvcc", { skip: `nvcc not found (tried '${NVCC}'): cannot compile the generated CUDA here` }, () => {});
      return;
    }
    test(`${what} (${kernels.length} kernels) — ${version}`, async () => {
      assert.ok(kernels.length > 0, "no kernels to compile");
      // One translation unit per core (each kernel in its own namespace) pays nvcc's front end once per core.
      const units = Math.max(1, Math.min(availableParallelism(), 4, kernels.length));
      const sources: string[][] = Array.from({ length: units }, () => []);
      for (const [i, k] of kernels.entries()) sources[i % units]!.push(`namespace plan${i} {\n${k.source}\n}`);
      const dir = await mkdtemp(join(tmpdir(), "vpps-codegen-"));
      try {
        const logs = await Promise.all(
          sources.map(async (parts, u) => {
            const file = join(dir, `unit${u}.cu`);
            await writeFile(file, parts.join("\n"));
            const args = ["-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", join(dir, `unit${u}.cubin`), file];
            try {
              const { stdout, stderr } = await run(NVCC, args, { maxBuffer: 1 << 24 });
              return stdout + stderr;
            } catch (e) {
              const err = e as { stderr?: string; message: string };
              throw new Error(`nvcc failed on ${file}: ${err.stderr ?? err.message}`);
            }
          }),
        );
        const reports = new Map(parsePtxasReport(logs.join("\n")).map((r) => [r.name, r]));
        const summary: string[] = [];
        for (const k of kernels) {
          const r = reports.get(k.name);
          assert.ok(r, `no ptxas report for ${k.name}`);
          assertNoSpills(r);
          assert.ok(r.registers <= k.plan.budget.limitPerThread, `${k.name}: ${r.registers} registers`);
          summary.push(`${k.name}: ${k.plan.weightRegs}+${k.plan.gradientRegs} parameter regs, ${r.registers} used`);
        }
        console.log(`compiled ${kernels.length} kernels without spills:\n  ${summary.join("\n  ")}`);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });
  });
}
