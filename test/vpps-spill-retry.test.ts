// A VPPS kernel that spills is planned again with registers kept free and recompiled, never refused
// (src/engines/vpps/codegen/spill-retry.ts): the sequence of plans the retry walks, and, compiled with nvcc
// (-Xptxas -v, test/vpps-spill-nvcc.ts), the BiLSTM tagger with characters at the paper's sizes — whose first plan
// holds the most parameter registers of the six models and spills — ends with a kernel of zero spill bytes after one
// plan more. The other five models compile in the sweep (test/sweeps/vpps-spill-retry.test.ts, `npm run test:sweeps`).

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { KernelSpillError } from "../src/cuda/index.js";
import { variantSource } from "../src/engines/vpps/codegen/compile.js";
import {
  MAX_SPILL_REPLANS,
  moreFrugalPlan,
  planAfterSpill,
  planUntilNoSpill,
  SPILL_HEADROOM_STEP,
} from "../src/engines/vpps/codegen/spill-retry.js";
import { resolveOptions } from "../src/engines/vpps/options.js";
import type { VppsPlan } from "../src/engines/vpps/plan/plan.js";
import { describeSpillRetryCompile, paperPlans, SPILL_RETRY_SAMPLE } from "./vpps-spill-nvcc.js";

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
          // the same variant: grid and rows per warp, every matrix's rows held in registers, or the whole matrix off
          // chip (a re-plan with much headroom may move one there); a matrix once off chip stays off chip
          assert.equal(plan.ctasPerSm, first.ctasPerSm);
          assert.equal(plan.rowsPerWarp, first.rowsPerWarp);
          const current: VppsPlan = plan;
          assert.deepEqual(
            current.matrices.map((m) => m.partitions.reduce((n, p) => n + p.rowCount, 0)),
            first.matrices.map((m, i) => (current.offChip.includes(i) ? 0 : m.rows)),
          );
          for (const i of first.offChip)
            assert.ok(current.offChip.includes(i), `${name}: matrix ${i} came back on chip`);
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

describe("the spill retry under nvcc: npm test's sample and the sweep", () => {
  test("the sample is the model whose first variant holds the most parameter registers of the six", () => {
    const held = (p: VppsPlan) => p.weightRegs + p.gradientRegs;
    const firsts = paperPlans().map(({ model, plans }) => ({ model, held: held(plans[0]!) }));
    assert.equal(firsts.length, 6);
    const most = Math.max(...firsts.map((f) => f.held));
    const sample = firsts.find((f) => f.model === SPILL_RETRY_SAMPLE);
    assert.ok(sample, `${SPILL_RETRY_SAMPLE} is not among ${firsts.map((f) => f.model).join(", ")}`);
    assert.equal(sample.held, most, firsts.map((f) => `${f.model} ${f.held}`).join(", "));
  });
});

describeSpillRetryCompile(
  "the tightest model at the paper's sizes compiles without spills after the retry (nvcc -Xptxas -v): a sample",
  [SPILL_RETRY_SAMPLE],
  2, // its first plan and the one planned after its spill, at once
);
