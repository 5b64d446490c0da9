// The six models' first VPPS variants at the paper's sizes through the spill retry under nvcc: which `npm test`
// compiles (a sample: the BiLSTM tagger with characters, whose first plan holds the most parameter registers and
// spills, then is planned again — test/vpps-spill-retry.test.ts) and which the exhaustive sweep does (the other five
// models, test/sweeps/vpps-spill-retry.test.ts, `npm run test:sweeps`), and the check both make: compiled with
// nvcc -Xptxas -v, each spilling kernel planned again until its kernel has zero local bytes, within the budget.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { promisify } from "node:util";
import { parsePtxasReport } from "../src/cuda/compile/ptxas-report.js";
import { H100_SXM } from "../src/cuda/hw/device-model.js";
import { KernelSpillError } from "../src/cuda/index.js";
import { plansFor, variantSource } from "../src/engines/vpps/codegen/compile.js";
import { MAX_SPILL_REPLANS, moreFrugalPlan, planAfterSpill } from "../src/engines/vpps/codegen/spill-retry.js";
import { resolveOptions } from "../src/engines/vpps/options.js";
import type { VppsPlan } from "../src/engines/vpps/plan/plan.js";
import { onChipMatrices } from "../src/model/parameters.js";
import { MODELS } from "../src/models/registry.js";

const run = promisify(execFile);
const NVCC = process.env["NVCC"] ?? "nvcc";

/** The six models' variant plans at the paper's sizes (their tasks' defaults), as `Vpps.create` plans them. */
export function paperPlans(): { model: string; plans: VppsPlan[] }[] {
  const o = resolveOptions({});
  return MODELS.filter((t) => t.name !== "cnn").map((task) => ({
    model: task.name,
    plans: plansFor(onChipMatrices(task.parameterShapes(task.defaults as never, 1000)), H100_SXM, o.variants),
  }));
}

/** `npm test`'s sample: the model whose first variant is compiled (and planned again) in `npm test`. */
export const SPILL_RETRY_SAMPLE = "bilstm-char";

async function nvccVersion(): Promise<string | undefined> {
  try {
    const { stdout } = await run(NVCC, ["--version"]);
    return stdout.trim().split("\n").pop();
  } catch {
    return undefined;
  }
}

/**
 * A suite that compiles the first variant of each of `models` with nvcc for sm_90, plans each spilling one again
 * (as the JIT does) and compiles it again, until every kernel has no stack frame and no spill (skipped without nvcc).
 * `ahead`: how many plans of each model's retry chain to compile per round (more keeps the cores busy when few
 * models are compiled; the chain is checked to be the one the retry walks).
 */
export function describeSpillRetryCompile(title: string, models: readonly string[], ahead = 1): void {
  describe(title, async () => {
    const version = await nvccVersion();
    if (version === undefined) {
      test("nvcc", { skip: `nvcc not found (tried '${NVCC}'): cannot compile the generated CUDA here` }, () => {});
      return;
    }

    test(`the first variant of ${models.join(", ")} (the one the JIT plans again when all spill) — ${version}`, async () => {
      const all = paperPlans();
      assert.deepEqual(
        models.filter((m) => !all.some((p) => p.model === m)),
        [],
        "models that are not among the six",
      );
      // rounds: each model's current plan and, with `ahead` > 1, the plans the retry would walk to next (it is
      // deterministic: moreFrugalPlan), compiled at once a translation unit per core; the spilled ones go again
      let current = all
        .filter(({ model }) => models.includes(model))
        .map(({ model, plans }) => ({ model, plan: plans[0]!, replans: 0 }));
      const done: string[] = [];
      const notices: string[] = [];
      const dir = await mkdtemp(join(tmpdir(), "vpps-spill-"));
      try {
        for (let round = 0; current.length > 0; round++) {
          assert.ok(round <= MAX_SPILL_REPLANS, "more rounds than replans");
          const kernels = current.flatMap((c) => {
            const chain = [c];
            for (let p = moreFrugalPlan(c.plan, "auto"); p !== undefined && chain.length < ahead; ) {
              chain.push({ model: c.model, plan: p, replans: c.replans + chain.length });
              p = moreFrugalPlan(p, "auto");
            }
            return chain.map((k) => ({ ...k, ...variantSource(k.plan, resolveOptions({ name: k.model })) }));
          });
          const count = Math.max(1, Math.min(availableParallelism(), 4, kernels.length));
          const units = Array.from({ length: count }, (_, u) => kernels.filter((_, i) => i % count === u));
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
          for (const c of current) {
            // walk the model's chain as the JIT would: compile, and on a spill plan again
            let k = kernels.find((x) => x.model === c.model && x.replans === c.replans);
            while (k !== undefined) {
              const r = reports.get(k.name);
              assert.ok(r, `no ptxas report for ${k.name}`);
              const local = r.stackFrameBytes + r.spillStoreBytes + r.spillLoadBytes;
              if (local === 0) {
                assert.ok(r.registers <= k.plan.budget.limitPerThread, `${k.name}: ${r.registers} registers`);
                done.push(`${k.model}: ${k.name}, ${r.registers} registers, planned again ${k.replans} time(s)`);
                break;
              }
              const spill = new KernelSpillError(`${k.name}: spilled`, k.name, r.registers, local);
              // throws (failing the test) when nothing more frugal is left
              const plan = planAfterSpill(k.plan, k.replans, "auto", spill, (l) => notices.push(l));
              const replans = k.replans + 1;
              k = kernels.find((x) => x.model === c.model && x.replans === replans);
              if (k === undefined) next.push({ model: c.model, plan, replans });
              else assert.equal(k.name, variantSource(plan, resolveOptions({ name: c.model })).name, "compiled ahead");
            }
          }
          current = next;
        }
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
      console.log(`${notices.join("\n")}\nwithout spills:\n  ${done.join("\n  ")}`);
      assert.equal(done.length, models.length);
    });
  });
}
