// The memory estimate on a GPU: a GPU engine's activations are the device's, so a batch whose largest examples'
// graph (values and gradients) with the weights, gradients and Adam's moments exceeds the GPU's memory is refused in
// one line naming the GPU and the largest batch (or example) that fits — before any device allocation, instead of a
// CUDA out-of-memory error mid-epoch. Real processes (bin/vpps.js). Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { cudaAvailable, getDriver, queryDeviceProperties } from "../../src/cuda/index.js";
import { syntheticTrees } from "../../src/data/synthetic.js";
import { formatTree, type TreeNode } from "../../src/data/tree.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const bin = join(import.meta.dirname, "..", "..", "bin", "vpps.js");

function longTree(n: number): TreeNode {
  let t: TreeNode = { label: 2, word: "w0", children: [] };
  for (let i = 1; i < n; i++)
    t = { label: 2, word: null, children: [t, { label: 2, word: `w${i % 50}`, children: [] }] };
  return t;
}

describe("the memory estimate against the GPU's memory", { skip }, () => {
  test("one 100,000-word sentence at --hidden 2048 on eager: one line naming the GPU and the example", () => {
    const gpu = queryDeviceProperties(getDriver(), 0);
    const dir = mkdtempSync(join(tmpdir(), "vpps-gpu-mem-"));
    const lines = syntheticTrees(30, 5).map(formatTree);
    lines.splice(6, 0, formatTree(longTree(100_000))); // training example #7
    writeFileSync(join(dir, "train.txt"), `${lines.join("\n")}\n`);
    writeFileSync(join(dir, "dev.txt"), `${syntheticTrees(10, 6).map(formatTree).join("\n")}\n`);
    // ~200k nodes x ~(3+1+1+1+…)·2048 floats x 8 bytes: far beyond any GPU's memory
    const t0 = Date.now();
    const r = spawnSync(
      process.execPath,
      [
        bin,
        "train",
        "treelstm",
        "--data",
        dir,
        "--engine",
        "eager",
        "--hidden",
        "2048",
        "--embed",
        "256",
        "--epochs",
        "1",
        "--batch",
        "4",
      ],
      { encoding: "utf8", timeout: 300_000 },
    );
    assert.equal(r.status, 1, r.stderr);
    const err = r.stderr.trim().split("\n");
    assert.equal(err.length, 1, r.stderr);
    assert.match(
      err[0]!,
      new RegExp(
        `^vpps: the run needs about .* of weights, .* of activations of the largest batch of 4 — more than the memory limit, .* \\(the engines' device pool of GPU 0, ${gpu.name.replace(/[()[\]]/g, ".")}: .*\\); the largest training example alone \\(#7, .*\\) does not fit`,
      ),
    );
    console.log(`refused in ${Date.now() - t0} ms: ${err[0]}`);
  });
});
