import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { promisify } from "node:util";
import { syntheticTrees } from "../src/data/synthetic.js";
import { formatTree } from "../src/data/tree.js";
import { readSafetensors } from "../src/model/safetensors.js";

const run = promisify(execFile);
const bin = join(import.meta.dirname, "..", "bin", "vpps.js");

/** Runs the command; asynchronous, so that the suites' tests run theirs at once, a core each. */
async function vpps(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [bin, ...args], { encoding: "utf8", timeout: 120_000 });
    return { code: 0, stdout, stderr };
  } catch (e) {
    const r = e as { code?: number | string; stdout?: string; stderr?: string };
    return { code: typeof r.code === "number" ? r.code : -1, stdout: r.stdout ?? "", stderr: r.stderr ?? "" };
  }
}

/** Tests of a suite at once, as many as there are cores (each mostly waits for its `vpps` process). */
const atOnce = { concurrency: availableParallelism() };

describe("the vpps command line", atOnce, () => {
  test("--help lists the commands and train treelstm's options", async () => {
    const top = await vpps("--help");
    assert.equal(top.code, 0);
    assert.match(top.stdout, /train/);
    assert.match(top.stdout, /info/);
    const h = await vpps("train", "treelstm", "--help");
    for (const o of ["--data", "--epochs", "--batch", "--hidden", "--embed", "--lr", "--optimizer", "--seed"]) {
      assert.match(h.stdout, new RegExp(o));
    }
    for (const o of ["--engine", "--max-sentences", "--json", "--out", "--cell", "--device"]) {
      assert.match(h.stdout, new RegExp(o));
    }
  });

  test("bad option values are refused with the option's name", async () => {
    const r = await vpps("train", "treelstm", "--batch", "0");
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /--batch must be a positive integer; got '0'/);
    const e = await vpps("train", "treelstm", "--engine", "gpu");
    assert.match(e.stderr, /--engine must be one of cpu, eager, autobatch, vpps; got 'gpu'/);
  });

  test("a data directory without train.txt is named", async () => {
    const dir = mkdtempSync(join(tmpdir(), "vpps-cli-"));
    const r = await vpps("train", "treelstm", "--data", dir);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^vpps: --data .*: no train\.txt there/m);
  });

  test("a malformed tree file is reported with file:line:column, without a stack trace", async () => {
    const dir = mkdtempSync(join(tmpdir(), "vpps-cli-"));
    writeFileSync(join(dir, "train.txt"), "(3 (2 a) (2 b))\n(3 (2 a) (2 b)\n");
    writeFileSync(join(dir, "dev.txt"), "(3 (2 a) (2 b))\n");
    const r = await vpps("train", "treelstm", "--data", dir);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /train\.txt:2:\d+: /);
    assert.doesNotMatch(r.stderr, /at .*\.ts:\d+/);
  });

  test("trains on the synthetic task with --json and writes checkpoints", async () => {
    const out = mkdtempSync(join(tmpdir(), "vpps-out-"));
    const r = await vpps(
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

  test("a GPU engine on a machine without a GPU says what is missing and what to use", async () => {
    for (const engine of ["eager", "autobatch", "vpps"]) {
      const r = await vpps(
        "train",
        "treelstm",
        "--engine",
        engine,
        "--max-sentences",
        "10",
        "--hidden",
        "4",
        "--embed",
        "4",
      );
      if (r.code === 0) continue; // a machine with a GPU runs it
      assert.equal(r.code, 1);
      assert.match(r.stderr, new RegExp(`^vpps: the '${engine}' engine needs .*(libcuda|GPU).*Use --`, "m"));
      assert.doesNotMatch(r.stderr, /at .*\.ts:\d+/);
    }
  });

  test("vpps plan treelstm prints the weight distribution; a model too large for registers keeps matrices off chip", async () => {
    const r = await vpps("plan", "treelstm", "--hidden", "128", "--embed", "128", "--gpu", "h200");
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /VPPS plan for NVIDIA H200/);
    for (const m of ["W_iou", "U_iou", "U_f1", "U_f2", "W_out"]) assert.match(r.stdout, new RegExp(`^${m} `, "m"));
    // --transposed: the copies Wᵀ after the plan matrices, without a gradient of their own
    const t = await vpps("plan", "treelstm", "--gpu", "h100", "--ctas-per-sm", "1", "--rpw", "2", "--transposed");
    assert.equal(t.code, 0, t.stderr);
    assert.match(t.stdout, /^U_iou\.T +512x768 .* none \(copy\)$/m);
    assert.doesNotMatch(r.stdout, /\.T /, "no copies without --transposed");
    const big = await vpps("plan", "treelstm", "--hidden", "2048", "--embed", "2048");
    assert.equal(big.code, 0, big.stderr);
    assert.match(big.stdout, /^U_iou +6144x4096 +off chip .* device$/m);
    assert.match(big.stdout, /^ {2}U_iou: off chip: needed for the rest to fit/m);
    // --off-chip forces matrices off chip; a name the model has not is refused in one line listing the valid ones
    const forced = await vpps("plan", "treelstm", "--off-chip", "U_f1,W_out");
    assert.equal(forced.code, 0, forced.stderr);
    assert.match(forced.stdout, /^ {2}U_f1: off chip: forced \(offChip\)$/m);
    assert.match(forced.stdout, /^ {2}U_f2: registers: fits$/m);
    const wrong = await vpps("plan", "treelstm", "--off-chip", "U_f3");
    assert.equal(wrong.code, 1);
    assert.match(
      wrong.stderr,
      /^vpps: VPPS: offChip names 'U_f3', which is not a weight matrix of this model; the matrices are W_iou, U_iou, U_f1, U_f2, W_out \(or "all"\)\n$/,
    );
  });

  test("--resume continues a run: with SGD, 1 epoch + 1 resumed equals 2 epochs straight", async () => {
    const common = ["--hidden", "6", "--embed", "6", "--max-sentences", "120", "--optimizer", "sgd", "--lr", "0.05"];
    const a = mkdtempSync(join(tmpdir(), "vpps-a-"));
    const b = mkdtempSync(join(tmpdir(), "vpps-b-"));
    assert.equal((await vpps("train", "treelstm", ...common, "--epochs", "2", "--out", a)).code, 0);
    assert.equal((await vpps("train", "treelstm", ...common, "--epochs", "1", "--out", b)).code, 0);
    const r = await vpps("train", "treelstm", ...common, "--epochs", "2", "--resume", b);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /resuming from .*epoch-1\.safetensors after epoch 1/);
    // the files differ in their metadata (timings, paths): every tensor must be equal
    assert.deepEqual(
      readSafetensors(join(b, "epoch-2.safetensors")).tensors,
      readSafetensors(join(a, "epoch-2.safetensors")).tensors,
    );
    const missing = await vpps("train", "treelstm", "--resume", mkdtempSync(join(tmpdir(), "vpps-c-")));
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /--resume .*: no state\.json there/);
  });
});

describe("the vpps command line from the registries", atOnce, () => {
  test("--help lists the models; train, eval and plan have a command per model", async () => {
    const top = await vpps("--help");
    assert.equal(top.code, 0);
    const help = top.stdout.replace(/\s+/g, " "); // commander wraps lines
    assert.match(help, /Models: treelstm \(Tree-LSTM\)/);
    assert.match(help, /Engines: cpu \(reference\), eager, autobatch \(DyNet-style\), vpps \(persistent kernel\)/);
    for (const command of ["train", "eval", "plan"]) {
      const h = await vpps(command, "--help");
      assert.equal(h.code, 0);
      assert.match(h.stdout, /treelstm \[options\]/, `${command} --help`);
    }
    const e = await vpps("eval", "treelstm", "--help");
    for (const o of ["--run", "--data", "--engine", "--device", "--json"]) assert.match(e.stdout, new RegExp(o));
  });

  test("vpps plan plans from the shapes alone: a model far too large to allocate is refused at once", async () => {
    const t0 = performance.now();
    // W_iou alone would be 3 × 20000 × 20000 floats (4.8 GB)
    const r = await vpps("plan", "treelstm", "--hidden", "20000", "--embed", "20000");
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^vpps: VPPS: the model's weight matrices hold \d+ floats, more than the 4294967296/m);
    assert.ok(performance.now() - t0 < 30_000, "no weights were allocated");
  });

  test("vpps eval reports a saved run's root accuracy on a file, equal to training's; errors are one line", async () => {
    const data = mkdtempSync(join(tmpdir(), "vpps-eval-data-"));
    writeFileSync(join(data, "train.txt"), `${syntheticTrees(150, 21).map(formatTree).join("\n")}\n`);
    writeFileSync(join(data, "dev.txt"), `${syntheticTrees(40, 22).map(formatTree).join("\n")}\n`);
    const out = mkdtempSync(join(tmpdir(), "vpps-eval-run-"));
    const common = ["--hidden", "6", "--embed", "6", "--cell", "ops", "--epochs", "2", "--lr", "0.02"];
    const t = await vpps("train", "treelstm", "--data", data, ...common, "--json", "--out", out);
    assert.equal(t.code, 0, t.stderr);
    const trained = JSON.parse(t.stdout.trim()) as { epochs: { devAccuracy: number }[] };

    const r = await vpps("eval", "treelstm", "--run", out, "--data", join(data, "dev.txt"), "--json");
    assert.equal(r.code, 0, r.stderr);
    const result = JSON.parse(r.stdout.trim()) as {
      model: string;
      epoch: number;
      examples: number;
      metrics: { rootAccuracy: number };
    };
    assert.equal(result.model, "treelstm");
    assert.equal(result.epoch, 2);
    assert.equal(result.examples, 40);
    assert.equal(result.metrics.rootAccuracy, trained.epochs[1]!.devAccuracy, "the run's last dev accuracy");
    const text = await vpps("eval", "treelstm", "--run", out, "--data", join(data, "train.txt"));
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /^data: .*train\.txt: 150 trees; engine cpu$/m);
    assert.match(text.stdout, /^root accuracy \d+\.\d\d%$/m);

    const oneLine = async (args: string[], message: RegExp) => {
      const e = await vpps("eval", "treelstm", ...args);
      assert.equal(e.code, 1, `${args.join(" ")}: ${e.stderr}`);
      assert.match(e.stderr.trim(), message);
      assert.equal(e.stderr.trim().split("\n").length, 1, e.stderr);
    };
    await oneLine(["--run", out, "--data", join(data, "none.txt")], /^vpps: --data .*none\.txt: no such file$/);
    await oneLine(["--run", out, "--data", data], /^vpps: --data .*: is a directory; give one file of trees/);
    await oneLine(["--run", data, "--data", join(data, "dev.txt")], /^vpps: --run .*: no state\.json there/);
    writeFileSync(join(data, "bad.txt"), "(3 (2 a) (2 b)\n");
    await oneLine(["--run", out, "--data", join(data, "bad.txt")], /^vpps: .*bad\.txt:1:\d+: /);
    const state = JSON.parse(readFileSync(join(out, "state.json"), "utf8")) as Record<string, unknown>;
    writeFileSync(join(out, "state.json"), JSON.stringify({ ...state, model: "rvnn" }));
    await oneLine(
      ["--run", out, "--data", join(data, "dev.txt")],
      /^vpps: --run .*: the run trained model 'rvnn', not 'treelstm'$/,
    );
    writeFileSync(join(out, "state.json"), JSON.stringify({ ...state, options: { hidden: 7, embed: 6, cell: "ops" } }));
    await oneLine(
      ["--run", out, "--data", join(data, "dev.txt")],
      // the checkpoint's identity records the run's shape
      /^vpps: .*epoch-2\.safetensors belongs to another run than the state\.json beside it: its hidden is 6, the run's 7/,
    );
  });
});
