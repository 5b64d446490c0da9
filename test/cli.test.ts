import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";

const bin = join(import.meta.dirname, "..", "bin", "vpps.js");

function vpps(...args: string[]): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [bin, ...args], { encoding: "utf8", timeout: 120_000 });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

describe("the vpps command line", () => {
  test("--help lists the commands and train treelstm's options", () => {
    const top = vpps("--help");
    assert.equal(top.code, 0);
    assert.match(top.stdout, /train/);
    assert.match(top.stdout, /info/);
    const h = vpps("train", "treelstm", "--help");
    for (const o of ["--data", "--epochs", "--batch", "--hidden", "--embed", "--lr", "--optimizer", "--seed"]) {
      assert.match(h.stdout, new RegExp(o));
    }
    for (const o of ["--engine", "--max-sentences", "--json", "--out", "--cell", "--device"]) {
      assert.match(h.stdout, new RegExp(o));
    }
  });

  test("bad option values are refused with the option's name", () => {
    const r = vpps("train", "treelstm", "--batch", "0");
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /--batch must be a positive integer; got '0'/);
    const e = vpps("train", "treelstm", "--engine", "gpu");
    assert.match(e.stderr, /--engine must be one of cpu, eager, autobatch, vpps; got 'gpu'/);
  });

  test("a data directory without train.txt is named", () => {
    const dir = mkdtempSync(join(tmpdir(), "vpps-cli-"));
    const r = vpps("train", "treelstm", "--data", dir);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^vpps: --data .*: no train\.txt there/m);
  });

  test("a malformed tree file is reported with file:line:column, without a stack trace", () => {
    const dir = mkdtempSync(join(tmpdir(), "vpps-cli-"));
    writeFileSync(join(dir, "train.txt"), "(3 (2 a) (2 b))\n(3 (2 a) (2 b)\n");
    writeFileSync(join(dir, "dev.txt"), "(3 (2 a) (2 b))\n");
    const r = vpps("train", "treelstm", "--data", dir);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /train\.txt:2:\d+: /);
    assert.doesNotMatch(r.stderr, /at .*\.ts:\d+/);
  });

  test("trains on the synthetic task with --json and writes checkpoints", () => {
    const out = mkdtempSync(join(tmpdir(), "vpps-out-"));
    const r = vpps(
      "train",
      "treelstm",
      "--hidden",
      "8",
      "--embed",
      "8",
      "--epochs",
      "2",
      "--max-sentences",
      "200",
      "--lr",
      "0.02",
      "--json",
      "--out",
      out,
    );
    assert.equal(r.code, 0, r.stderr);
    const summary = JSON.parse(r.stdout.trim()) as { epochs: { devAccuracy: number; trainLoss: number }[] };
    assert.equal(summary.epochs.length, 2);
    assert.ok(summary.epochs[1]!.trainLoss < summary.epochs[0]!.trainLoss, "the loss goes down");
    assert.ok(existsSync(join(out, "epoch-2.safetensors")));
    const state = JSON.parse(readFileSync(join(out, "state.json"), "utf8")) as { vocabulary: string[] };
    assert.equal(state.vocabulary[0], "<unk>");
    assert.match(r.stderr, /epoch 2\/2/, "progress goes to stderr");
  });

  test("a GPU engine on a machine without a GPU says what is missing and what to use", () => {
    for (const engine of ["eager", "autobatch", "vpps"]) {
      const r = vpps("train", "treelstm", "--engine", engine, "--max-sentences", "10", "--hidden", "4", "--embed", "4");
      if (r.code === 0) continue; // a machine with a GPU runs it
      assert.equal(r.code, 1);
      assert.match(r.stderr, new RegExp(`^vpps: the '${engine}' engine needs .*(libcuda|GPU).*Use --`, "m"));
      assert.doesNotMatch(r.stderr, /at .*\.ts:\d+/);
    }
  });

  test("vpps plan treelstm prints the weight distribution, and refuses a model too large for registers", () => {
    const r = vpps("plan", "treelstm", "--hidden", "128", "--embed", "128", "--gpu", "h200");
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /VPPS plan for NVIDIA H200/);
    for (const m of ["W_iou", "U_iou", "U_f1", "U_f2", "W_out"]) assert.match(r.stdout, new RegExp(`^${m} `, "m"));
    // --transposed: the copies Wᵀ after the plan matrices, without a gradient of their own
    const t = vpps("plan", "treelstm", "--gpu", "h100", "--ctas-per-sm", "1", "--rpw", "2", "--transposed");
    assert.equal(t.code, 0, t.stderr);
    assert.match(t.stdout, /^U_iou\.T +512x768 .* none \(copy\)$/m);
    assert.doesNotMatch(r.stdout, /\.T /, "no copies without --transposed");
    const big = vpps("plan", "treelstm", "--hidden", "2048", "--embed", "2048");
    assert.equal(big.code, 1);
    assert.match(big.stderr, /does not fit in the registers/);
    assert.match(big.stderr, /could stay off chip/);
  });

  test("--resume continues a run: with SGD, 1 epoch + 1 resumed equals 2 epochs straight", () => {
    const common = ["--hidden", "6", "--embed", "6", "--max-sentences", "120", "--optimizer", "sgd", "--lr", "0.05"];
    const a = mkdtempSync(join(tmpdir(), "vpps-a-"));
    const b = mkdtempSync(join(tmpdir(), "vpps-b-"));
    assert.equal(vpps("train", "treelstm", ...common, "--epochs", "2", "--out", a).code, 0);
    assert.equal(vpps("train", "treelstm", ...common, "--epochs", "1", "--out", b).code, 0);
    const r = vpps("train", "treelstm", ...common, "--epochs", "2", "--resume", b);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /resuming from .*epoch-1\.safetensors after epoch 1/);
    assert.deepEqual(readFileSync(join(b, "epoch-2.safetensors")), readFileSync(join(a, "epoch-2.safetensors")));
    const missing = vpps("train", "treelstm", "--resume", mkdtempSync(join(tmpdir(), "vpps-c-")));
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /--resume .*: no state\.json there/);
  });
});
