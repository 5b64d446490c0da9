// The command line with the sentence models (td-rnn, td-lstm, rvnn): train with and without --data, eval of a saved
// run, bench through the throughput harness, and one-line errors. Tiny sizes and one epoch: each run is a process.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { promisify } from "node:util";

const bin = join(import.meta.dirname, "..", "bin", "vpps.js");
const MODELS = ["td-rnn", "td-lstm", "rvnn"] as const;

const run = promisify(execFile);

/** Runs the command; asynchronous, so that the suite's tests run theirs at once, a core each. */
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

/** SST beside the repository when present; else a few trees in its format (the commands must work on both). */
function sstDir(): string {
  const shared = join(import.meta.dirname, "..", "..", "shared", "data", "sst");
  if (existsSync(join(shared, "train.txt"))) return shared;
  const dir = mkdtempSync(join(tmpdir(), "vpps-sst-"));
  const trees = [
    "(3 (2 (2 The) (2 Rock)) (4 (3 (2 is) (4 destined)) (2 .)))",
    "(1 (2 not) (1 (0 awful) (2 .)))",
    "(2 word)",
    "(4 (4 (4 (4 (3 a) (2 b)) (1 c)) (0 d)) (2 e))",
  ];
  writeFileSync(join(dir, "train.txt"), `${trees.join("\n")}\n`);
  writeFileSync(join(dir, "dev.txt"), `${trees.slice(1).join("\n")}\n(0 (1 x) (2 (3 y) (2 .)))\n`);
  return dir;
}

const tiny = ["--hidden", "6", "--embed", "6", "--epochs", "1", "--json"];

describe("vpps train|eval|bench with td-rnn, td-lstm and rvnn", atOnce, () => {
  test("--help lists the models, with their sizes", async () => {
    const r = await vpps("train", "--help");
    assert.equal(r.code, 0, r.stderr);
    for (const m of MODELS) assert.match(r.stdout, new RegExp(`\\n  ${m}\\b`));
  });

  for (const model of MODELS) {
    test(`${model}: trains on the synthetic task without --data`, async () => {
      const r = await vpps("train", model, ...tiny, "--max-sentences", "40");
      assert.equal(r.code, 0, r.stderr);
      const summary = JSON.parse(r.stdout.trim()) as { data: string; epochs: { devMetrics: object }[] };
      assert.match(summary.data, /^synthetic sentiment (sentences|trees) \(no --data given\)$/);
      assert.deepEqual(Object.keys(summary.epochs[0]!.devMetrics), ["rootAccuracy"]);
    });

    test(`${model}: trains on SST with --data and --out; eval of the run on dev.txt reports its dev accuracy`, async () => {
      const data = sstDir();
      const out = mkdtempSync(join(tmpdir(), `vpps-${model}-`));
      const r = await vpps(
        "train",
        model,
        ...tiny,
        "--data",
        data,
        "--max-sentences",
        "20",
        "--batch",
        "8",
        "--out",
        out,
      );
      assert.equal(r.code, 0, r.stderr);
      const summary = JSON.parse(r.stdout.trim()) as { epochs: { devAccuracy: number }[] };
      const state = JSON.parse(readFileSync(join(out, "state.json"), "utf8"));
      assert.equal(state.model, model);
      assert.deepEqual(state.options, { hidden: 6, embed: 6, labels: 5 });
      const e = await vpps("eval", model, "--run", out, "--data", join(data, "dev.txt"), "--json");
      assert.equal(e.code, 0, e.stderr);
      const result = JSON.parse(e.stdout.trim()) as { metrics: { rootAccuracy: number }; examples: number };
      assert.equal(result.metrics.rootAccuracy, summary.epochs[0]!.devAccuracy);
      assert.ok(result.examples > 0);
    });
  }

  test("bad input is one line: TD-RNN's sizes, a malformed tree file (file:line:column)", async () => {
    const sizes = await vpps("train", "td-rnn", "--hidden", "8", "--embed", "6", "--max-sentences", "4");
    assert.equal(sizes.code, 1);
    assert.match(sizes.stderr, /^vpps: td-rnn: the embedding size \(6\) must equal the hidden size \(8\)/);
    assert.equal(sizes.stderr.trim().split("\n").length, 1, sizes.stderr);
    const dir = mkdtempSync(join(tmpdir(), "vpps-bad-"));
    writeFileSync(join(dir, "train.txt"), "(3 (2 a) (2 b))\n(3 (2 (2 a)) (2 b))\n");
    writeFileSync(join(dir, "dev.txt"), "(3 (2 a) (2 b))\n");
    const bad = await vpps("train", "rvnn", "--data", dir);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /^vpps: .*train\.txt:2:\d+: non-binary node/);
    assert.doesNotMatch(bad.stderr, /at .*\.ts:\d+/);
  });

  test("vpps bench td-lstm runs the throughput harness (loss checked against the CPU engine first)", async () => {
    const out = mkdtempSync(join(tmpdir(), "vpps-bench-"));
    const r = await vpps(
      "bench",
      "td-lstm",
      ...["--engines", "cpu,autobatch-agenda-cpu", "--batches", "1,2", "--sentences", "4", "--hidden", "8"],
      ...["--data", join(sstDir(), "dev.txt"), "--out", out],
    );
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /\| batch \| cpu \| agenda, CPU \|/);
    const json = JSON.parse(readFileSync(join(out, "td-lstm.json"), "utf8"));
    assert.equal(json.benchmark, "td-lstm");
    assert.deepEqual(
      json.runs.map((x: { engine: string; status: string }) => `${x.engine} ${x.status}`),
      ["cpu timed", "autobatch-agenda-cpu timed"],
    );
  });
});
