// The command line on a real GPU: a VPPS model that does not fit the GPU's registers is refused by
// `vpps train --engine vpps` in one line (the plan's VppsPlanError, raised in `new VppsEngine`), not a stack trace;
// `--device cuda:N` of a GPU that is not there is one line too; `vpps plan --gpu device` plans for this GPU and
// refuses the same model. Real processes (bin/vpps.js), as a user runs them. Skipped, with the reason printed,
// without a GPU.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, test } from "node:test";
import { cudaAvailable } from "../../src/cuda/index.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const bin = join(import.meta.dirname, "..", "..", "bin", "vpps.js");

function vpps(...args: string[]): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [bin, ...args], { encoding: "utf8", timeout: 300_000 });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

describe("vpps on a GPU: refusals in one line", { skip }, () => {
  test("vpps train treelstm --engine vpps --hidden 1536 trains: the matrices registers cannot hold stay off chip", () => {
    const r = vpps(
      "train",
      "treelstm",
      "--engine",
      "vpps",
      "--hidden",
      "1536",
      "--max-sentences",
      "8",
      "--epochs",
      "1",
    );
    assert.equal(r.code, 0, r.stderr);
    assert.ok(!/^\s+at /m.test(r.stderr), `a stack trace: ${r.stderr}`);
    assert.match(r.stderr, /loss \d+\.\d+/);
  });

  test("vpps plan treelstm --gpu device --hidden 1536 plans the same model with U_iou and U_f1 off chip, status 0", () => {
    const r = vpps("plan", "treelstm", "--gpu", "device", "--hidden", "1536");
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^U_iou +4608x3072 +off chip/m);
    assert.match(r.stdout, /U_iou: off chip: needed for the rest to fit/);
    const fits = vpps("plan", "treelstm", "--gpu", "device", "--hidden", "256");
    assert.equal(fits.code, 0, fits.stderr);
    assert.doesNotMatch(fits.stdout, /off chip: needed/);
  });

  test("--device cuda:99 (no such GPU) is one line for every GPU engine", () => {
    for (const engine of ["eager", "autobatch", "vpps"]) {
      const r = vpps("train", "treelstm", "--engine", engine, "--device", "cuda:99", "--hidden", "8", "--embed", "8");
      assert.notEqual(r.code, 0, r.stderr);
      assert.ok(!/^\s+at /m.test(r.stderr), `${engine}: a stack trace: ${r.stderr}`);
      assert.equal(r.stderr.trim().split("\n").length, 1, `${engine}: ${r.stderr}`);
      assert.match(r.stderr, /^vpps: /);
    }
  });
});
