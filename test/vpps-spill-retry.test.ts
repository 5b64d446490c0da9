// A VPPS kernel that spills is planned again with registers kept free and recompiled, never refused
// (src/engines/vpps/codegen/spill-retry.ts): the sequence of plans the retry walks, and, compiled with nvcc
// (-Xptxas -v, as test/vpps-codegen.test.ts does), the six models at the paper's sizes end with a kernel of zero
// spill bytes — the BiLSTM tagger with characters, whose first plan spills, after one plan more.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { promisify } from "node:util";
import { parsePtxasReport } from "../src/cuda/compile/ptxas-report.js";
import { H100_SXM } from "../src/cuda/hw/device-model.js";
import { KernelSpillError } from "../src/cuda/index.js";
import { plansFor, variantSource } from "../src/engines/vpps/codegen/compile.js";
import {
  MAX_SPILL_REPLANS,
  moreFrugalPlan,
  planAfterSpill,
  planUntilNoSpill,
  SPILL_HEADROOM_STEP,
} from "../src/engines/vpps/codegen/spill-retry.js";
import { resolveOptions } from "../src/engines/vpps/options.js";
import type { VppsPlan } from "../src/engines/vpps/plan/plan.js";
import { onChipMatrices } from "../src/model/parameters.js";
import { MODELS } from "../src/models/registry.js";

const run = promisify(execFile);
const NVCC = process.env["NVCC"] ?? "nvcc";

/** The six models' variant plans at the paper's sizes (their tasks' defaults), as `Vpps.create` plans them. */
function paperPlans(): { model: string; plans: VppsPlan[] }[] {
  const o = resolveOptions({});
  return MODELS.filter((t) => t.name !== "cnn").map((task) => ({
    model: task.name,
    plans: plansFor(onChipMatrices(task.parameterShapes(task.defaults as never, 1000)), H100_SXM, o.variants),
  }));
}

describe("planned again after a spill", () => {
  test("each plan keeps more registers free, and its kernel differs from the one before; the last is undefined", () => {
    for (const { model, plans } of paperPlans()) {
      for (const first of plans) {
        const seen = new Set<string>();
        let plan: VppsPlan | undefined = first;
        let steps = 0;
        while (plan !== undefined) {
          const o = resolveOptions({ name: model.replace("-", "_") });
          const { name, source } = variantSource(plan, o);
          assert.ok(!seen.has(name), `${model}: ${name} tried twice`);
          seen.add(name);
          // the same variant: grid and rows per warp, every matrix's rows held
          assert.equal(plan.ctasPerSm, first.ctasPerSm);
          assert.equal(plan.rowsPerWarp, first.rowsPerWarp);
          assert.deepEqual(
            plan.matrices.map((m) => m.partitions.reduce((n, p) => n + p.rowCount, 0)),
            first.matrices.map((m) => m.rows),
          );
          assert.ok(plan.weightRegs + plan.gradientRegs <= plan.budget.forParameters, name);
          if (steps > 0) assert.match(source, /kept free after a spill/, name);
          const next = moreFrugalPlan(plan, "auto");
          if (next !== undefined) {
            assert.ok(next.budget.headroom >= plan.budget.headroom + SPILL_HEADROOM_STEP, name);
            assert.ok(next.weightRegs + next.gradientRegs <= plan.weightRegs + plan.gradientRegs, name);
          }
          plan = next;
          steps++;
          assert.ok(steps < 64, `${model}: no end to the plans`);
        }
      }
    }
  });

  test("the policy: a spill is planned again (one line each) at most MAX_SPILL_REPLANS times, other errors pass", () => {
    const first = paperPlans().find((p) => p.model === "bilstm-char")!.plans[0]!;
    const spill = (p: VppsPlan) =>
      new KernelSpillError(`k${p.budget.headroom}: spilled`, `k${p.budget.headroom}`, 255, 8);
    const lines: string[] = [];
    const tried: number[] = [];
    const done = planUntilNoSpill(
      first,
      "auto",
      (p) => {
        tried.push(p.budget.headroom);
        if (tried.length < 3) throw spill(p);
        return "loaded";
      },
      (l) => lines.push(l),
    );
    assert.equal(done.result, "loaded");
    assert.equal(tried.length, 3);
    assert.equal(done.plan.budget.headroom, tried[2]);
    assert.equal(lines.length, 2);
    assert.match(lines[0]!, /^vpps: k0: ptxas spilled 8 bytes per thread; planned again with \d+ registers/);
    // every try spills: the last spill is thrown, saying how often it was planned
    assert.throws(
      () =>
        planUntilNoSpill(
          first,
          "auto",
          (p) => {
            throw spill(p);
          },
          () => {},
        ),
      (e: unknown) =>
        e instanceof KernelSpillError && new RegExp(`planned ${MAX_SPILL_REPLANS + 1} time`).test(e.message),
    );
    assert.throws(
      () =>
        planUntilNoSpill(
          first,
          "auto",
          () => {
            throw new RangeError("not a spill");
          },
          () => {},
        ),
      RangeError,
    );
    assert.throws(() => planAfterSpill(first, MAX_SPILL_REPLANS, "auto", spill(first), () => {}), KernelSpillError);
  });
});

async function nvccVersion(): Promise<string | undefined> {
  try {
    const { stdout } = await run(NVCC, ["--version"]);
    return stdout.trim().split("\n").pop();
  } catch {
    return undefined;
  }
}

describe("every model at the paper's sizes compiles without spills after the retry (nvcc -Xptxas -v)", async () => {
  const version = await nvccVersion();
  if (version === undefined) {
    test("nvcc", { skip: `nvcc not found (tried '${NVCC}'): cannot compile the generated CUDA here` }, () => {});
    return;
  }

  test(`the first variant of each of the six models (the one the JIT plans again when all spill) — ${version}`, async () => {
    // rounds: every model's current plan compiled at once (two translation units), then the spilled ones again
    let current = paperPlans().map(({ model, plans }) => ({ model, plan: plans[0]!, replans: 0 }));
    const done: string[] = [];
    const notices: string[] = [];
    const dir = await mkdtemp(join(tmpdir(), "vpps-spill-"));
    try {
      for (let round = 0; current.length > 0; round++) {
        assert.ok(round <= MAX_SPILL_REPLANS, "more rounds than replans");
        const kernels = current.map((c) => ({ ...c, ...variantSource(c.plan, resolveOptions({ name: c.model })) }));
        const units = [kernels.filter((_, i) => i % 2 === 0), kernels.filter((_, i) => i % 2 === 1)].filter(
          (u) => u.length > 0,
        );
        const logs = await Promise.all(
          units.map(async (u, k) => {
            const file = join(dir, `round${round}-unit${k}.cu`);
            await writeFile(file, u.map((x, i) => `namespace k${i} {\n${x.source}\n}`).join("\n"));
            const args = ["-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", join(dir, `r${round}u${k}.cubin`), file];
            const { stdout, stderr } = await run(NVCC, args, { maxBuffer: 1 << 24 });
            return stdout + stderr;
          }),
        );
        const reports = new Map(parsePtxasReport(logs.join("\n")).map((r) => [r.name, r]));
        const next: typeof current = [];
        for (const k of kernels) {
          const r = reports.get(k.name);
          assert.ok(r, `no ptxas report for ${k.name}`);
          const local = r.stackFrameBytes + r.spillStoreBytes + r.spillLoadBytes;
          if (local === 0) {
            assert.ok(r.registers <= k.plan.budget.limitPerThread, `${k.name}: ${r.registers} registers`);
            done.push(`${k.model}: ${k.name}, ${r.registers} registers, planned again ${k.replans} time(s)`);
            continue;
          }
          const spill = new KernelSpillError(`${k.name}: spilled`, k.name, r.registers, local);
          // throws (failing the test) when nothing more frugal is left
          const plan = planAfterSpill(k.plan, k.replans, "auto", spill, (l) => notices.push(l));
          next.push({ model: k.model, plan, replans: k.replans + 1 });
        }
        current = next;
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    console.log(`${notices.join("\n")}\nwithout spills:\n  ${done.join("\n  ")}`);
    assert.equal(done.length, 6);
  });
});
