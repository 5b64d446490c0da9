/**
 * Golden hashes of what VPPS produces for fixed Tree-LSTM batches: the encoded scripts, their disassembly and the
 * generated CUDA, for the fused and the ops cell, SGD and Adam, every plan variant (rpw, CTAs per SM, with and
 * without transposed copies, register and GEMM gradients) and the instrumented kernel specs. Written on the code
 * before the first restructuring; a refactoring must leave every hash as it is. After a deliberate change of
 * the output, rewrite the file with VPPS_GOLDEN_WRITE=1 and say why in the commit.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { describe, test } from "node:test";
import {
  ComputationGraph,
  createModelLayout,
  disassemble,
  enumeratePlans,
  generateKernelSource,
  H100_SXM,
  kernelName,
  syntheticTrees,
  TreeLstmModel,
  Vocabulary,
  VppsScheduler,
} from "./golden/vpps-api.js";

const FILE = new URL("./golden/vpps-hashes.json", import.meta.url);
const sha = (data: string | Uint8Array) => createHash("sha256").update(data).digest("hex").slice(0, 24);

function matrices(model: TreeLstmModel) {
  return model.params.all
    .filter((p) => p.kind === "dense" && p.isMatrix)
    .map((p) => ({ name: p.name, rows: p.rows, cols: p.cols }));
}

function computeHashes(): Record<string, string> {
  const out: Record<string, string> = {};
  const put = (key: string, hash: string) => {
    assert.ok(!(key in out), `two cases share the key '${key}'`);
    out[key] = hash;
  };
  const specs = [{ model: "treelstm" }, { model: "treelstm", profile: true }, { model: "treelstm", trace: true }];
  for (const cell of ["fused", "ops"] as const) {
    for (const [H, E] of [
      [64, 48],
      [256, 256],
    ] as const) {
      const model = new TreeLstmModel({ vocabSize: 60, embed: E, hidden: H, seed: 7, cell });
      const plans = (["auto", "gemm"] as const).flatMap((g) =>
        [false, true].flatMap((t) => enumeratePlans(matrices(model), H100_SXM, g, t).map((plan) => ({ g, t, plan }))),
      );
      for (const { g, t, plan } of plans) {
        const planKey = `${cell} H${H} E${E} ${g} cta${plan.ctasPerSm} rpw${plan.rowsPerWarp} ${t ? `t${plan.transposed.length}` : "plain"}`;
        if (cell === "fused") {
          for (const spec of specs) {
            put(`cuda ${planKey} ${kernelName(plan, spec)}`, sha(generateKernelSource(plan, spec)));
          }
        }
        if (H !== 64) continue; // scripts: the small model (all plans), fast enough for every run
        const layout = createModelLayout(model.params.all, plan);
        for (const optimizer of ["sgd", "adam"] as const) {
          for (const batch of [1, 8]) {
            const trees = syntheticTrees(batch, 11 + batch);
            const vocab = Vocabulary.fromTrees(trees);
            const cg = new ComputationGraph();
            const loss = model.buildBatchLoss(cg, trees, vocab);
            const s = new VppsScheduler(layout, { optimizer, exportGradients: false }).schedule(cg, loss);
            const key = `${planKey} ${optimizer} b${batch}`;
            put(`script ${key}`, sha(new Uint8Array(s.script.buffer, s.script.byteOffset, s.script.byteLength)));
            put(`disasm ${key}`, sha(disassemble(s.script, plan.ctas)));
          }
        }
      }
    }
  }
  return out;
}

describe("VPPS golden output (scripts, disassembly, CUDA)", () => {
  test("every hash equals the one recorded on the old code", () => {
    const got = computeHashes();
    if (process.env["VPPS_GOLDEN_WRITE"] === "1") {
      writeFileSync(FILE, `${JSON.stringify(got, null, 2)}\n`); // as biome formats it
      return;
    }
    const want = JSON.parse(readFileSync(FILE, "utf8")) as Record<string, string>;
    assert.ok(Object.keys(want).length > 50, "the recorded file lists the cases");
    assert.deepEqual(Object.keys(got).sort(), Object.keys(want).sort(), "the same cases");
    const differ = Object.keys(want).filter((k) => got[k] !== want[k]);
    assert.deepEqual(differ, [], `${differ.length} outputs changed, first: ${differ[0]}`);
  });
});
