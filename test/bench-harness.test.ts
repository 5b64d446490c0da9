import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { cpuSlug, deviceSlug } from "../src/bench/device.js";
import { runPlot } from "../src/bench/diagnostics/plot.js";
import { checkFirstLoss } from "../src/bench/first-loss.js";
import { BENCH_MODELS, benchModel } from "../src/bench/models/index.js";
import { configsOf } from "../src/bench/throughput/config.js";
import { engineSpecs } from "../src/bench/throughput/engines.js";
import { runThroughput } from "../src/bench/throughput/suite.js";
import { cudaAvailable } from "../src/cuda/index.js";
import { CpuEngine } from "../src/engines/cpu.js";
import type { Expression } from "../src/graph/graph.js";
import { MODELS } from "../src/models/registry.js";

const bin = join(import.meta.dirname, "..", "bin", "vpps.js");
const ROOT = join(import.meta.dirname, "..");

function vpps(...args: string[]): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [bin, ...args], { encoding: "utf8", timeout: 120_000 });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

/** A few SST-format trees: the suite's data without depending on the data set beside the repository. */
function treeFile(): string {
  const dir = mkdtempSync(join(tmpdir(), "vpps-bench-data-"));
  const file = join(dir, "train.txt");
  writeFileSync(
    file,
    [
      "(3 (2 (2 The) (2 Rock)) (4 (3 (2 is) (4 destined)) (2 .)))",
      "(1 (2 not) (1 (0 awful) (2 .)))",
      "(2 word)",
      "(4 (4 (4 (4 (3 a) (2 b)) (1 c)) (0 d)) (2 e))",
      "(0 (1 x) (2 (3 y) (4 (0 z) (1 (2 The) (3 unseen)))))",
      "(3 (2 (2 Rock) (2 Rock)) (2 (2 .) (2 not)))",
    ].join("\n"),
  );
  return file;
}

const treeLstmBench = benchModel("treelstm");

describe("vpps bench: options", () => {
  test("--help lists the suites (every registered model's throughput suite), and each suite its options", () => {
    const top = vpps("bench", "--help");
    assert.equal(top.code, 0, top.stderr);
    for (const suite of [...MODELS.map((m) => m.name), "vpps", "autobatch", "eager", "cpu", "plot"]) {
      assert.match(top.stdout, new RegExp(`\\n  ${suite}\\b`));
    }
    const t = vpps("bench", "treelstm", "--help");
    assert.equal(t.code, 0, t.stderr);
    for (const o of ["--data", "--engines", "--batches", "--hidden", "--sentences", "--quick", "--workers", "--out"]) {
      assert.match(t.stdout, new RegExp(o));
    }
    const v = vpps("bench", "vpps", "--help");
    for (const d of ["timing", "host", "gap", "timeline", "profile", "trace", "tiles", "threads"]) {
      assert.match(v.stdout, new RegExp(`\\n  ${d}\\b`));
    }
  });

  test("a bad option is one line with where the help is, exit status 2, no stack trace", () => {
    for (const [args, message] of [
      [["--batches", "0"], /--batches: '0' is not a whole number ≥ 1/],
      [["--engines", "gpu"], /--engines: 'gpu' is not one of eager, .*cpu/],
      [["--hidden", "x"], /--hidden: expected a whole number ≥ 1; got 'x'/],
      [["--workers", "-1"], /--workers: expected a whole number ≥ 0; got '-1'/],
      [["--data", "/no/such/file"], /--data: '\/no\/such\/file' does not exist/],
      [["--bogus"], /unknown option '--bogus'/],
    ] as const) {
      const r = vpps("bench", "treelstm", ...args);
      assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
      const lines = r.stderr.trim().split("\n");
      assert.equal(lines.length, 1, r.stderr);
      assert.match(lines[0]!, /^vpps: /);
      assert.match(lines[0]!, message);
      assert.match(lines[0]!, /\(see vpps bench treelstm --help\)$/);
    }
    const unknown = vpps("bench", "nope");
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /unknown command 'nope'/);
    const diag = vpps("bench", "vpps", "timing", "--cell", "x");
    assert.equal(diag.code, 2);
    assert.match(diag.stderr, /--cell: expected one of fused, ops, both; got 'x'/);
  });

  test("a bench task names each batch's items by index, and the dynamic models' nets have a worker graph builder", () => {
    for (const bm of BENCH_MODELS) {
      const task = bm.load(undefined, 50);
      for (const [size, k] of [
        [1, 0],
        [4, 3],
        [8, 7],
        [64, 2],
      ] as const) {
        const items = task.batch(size, k);
        assert.deepEqual(
          Array.from(task.indices(size, k), (i) => task.batch(task.items, 0)[i]),
          items,
          `${bm.name} batch ${k} of ${size}`,
        );
      }
      const net = task.net(bm.sizes[0]!, bm.variants[0]!.name);
      assert.equal(net.workerBuilder !== undefined, bm.name !== "cnn", `${bm.name}: a worker graph builder`);
    }
  });

  test("vpps bench vpps profile --model: the six dynamic models (not LeNet); without a GPU one line", () => {
    const help = vpps("bench", "vpps", "profile", "--help");
    assert.equal(help.code, 0, help.stderr);
    assert.match(help.stdout, /--model <name>/);
    for (const name of ["cnn", "nope"]) {
      const bad = vpps("bench", "vpps", "profile", "--model", name);
      assert.equal(bad.code, 2, bad.stderr);
      assert.match(
        bad.stderr,
        new RegExp(`--model: expected one of treelstm, bilstm, bilstm-char, td-rnn, td-lstm, rvnn; got '${name}'`),
      );
    }
    if (!cudaAvailable().ok) {
      const r = vpps("bench", "vpps", "profile", "--model", "td-rnn");
      assert.equal(r.code, 1, r.stderr);
      assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
      assert.match(r.stderr, /^vpps: vpps bench vpps profile --model td-rnn: this benchmark needs an NVIDIA GPU/);
    }
  });
});

describe("vpps bench bilstm --rnn (the taggers' formulation)", () => {
  /** A tiny CPU run of `vpps bench bilstm` with these model flags: its output and the JSON it wrote. */
  const tinyRun = (...flags: string[]) => {
    const out = mkdtempSync(join(tmpdir(), "vpps-bench-bilstm-"));
    const r = vpps(
      "bench",
      "bilstm",
      ...flags,
      ...["--engines", "cpu", "--batches", "4", "--sentences", "4", "--hidden", "16", "--out", out],
    );
    assert.equal(r.code, 0, r.stderr);
    return { r, json: JSON.parse(readFileSync(join(out, "bilstm.json"), "utf8")) };
  };

  test("--rnn persistent times the batch-level path, says so and records it; a bad value is one line", () => {
    const { r, json } = tinyRun("--rnn", "persistent");
    assert.match(r.stdout, /; --rnn persistent\n/);
    // a batch of the persistent path is six work nodes (and parameters and inputs), not nodes per word
    assert.match(r.stdout, /cpu +batch +4: .*, 18 nodes,/);
    assert.deepEqual(json.options.modelOptions, { rnn: "persistent" });
    const bad = vpps("bench", "bilstm", "--rnn", "fused");
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /^vpps: --rnn: expected one of steps, persistent; got 'fused'/);
  });

  test("--density prunes each W_hh as vpps train does, says so and records it; a bad value is one line", () => {
    const { r, json } = tinyRun("--rnn", "persistent", "--density", "0.25");
    assert.match(r.stdout, /; --rnn persistent; --density 0.25\n/);
    assert.deepEqual(json.options.modelOptions, { rnn: "persistent", density: 0.25 });
    const bad = vpps("bench", "bilstm", "--rnn", "persistent", "--density", "0");
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /^vpps: --density must be a number in \(0, 1\]; got '0'/);
  });
});

describe("vpps bench treelstm on the CPU", () => {
  test("a tiny run prints the table and writes the JSON, the tables and the plot to --out", () => {
    const out = mkdtempSync(join(tmpdir(), "vpps-bench-out-"));
    const r = vpps(
      "bench",
      "treelstm",
      ...["--engines", "cpu,autobatch-agenda-cpu", "--batches", "1,2", "--sentences", "4", "--hidden", "16"],
      ...["--data", treeFile(), "--out", out],
    );
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /\| batch \| cpu \| agenda, CPU \|/);
    for (const f of ["treelstm.json", "treelstm.md", "treelstm.svg"]) assert.ok(existsSync(join(out, f)), f);
    assert.match(readFileSync(join(out, "treelstm.md"), "utf8"), /\| batch \| cpu \|/);
    assert.match(readFileSync(join(out, "treelstm.svg"), "utf8"), /^<svg [\s\S]*>agenda, CPU</);

    const json = JSON.parse(readFileSync(join(out, "treelstm.json"), "utf8"));
    for (const k of ["benchmark", "command", "date", "device", "machine", "data", "trees", "vocabulary"]) {
      assert.ok(k in json, k);
    }
    for (const k of ["options", "models", "method", "runs", "rows", "speedup", "targets"]) assert.ok(k in json, k);
    assert.equal(json.benchmark, "treelstm");
    assert.match(json.command, /^vpps bench treelstm --engines cpu,autobatch-agenda-cpu/);
    assert.match(json.device, /cores\)$/);
    assert.deepEqual(json.models[0].batches, [1, 2]);
    assert.equal(json.rows.length, 4);
    for (const row of json.rows) {
      for (const k of [
        "engine",
        "hidden",
        "embed",
        "batch",
        "sentencesPerSecond",
        "msPerBatch",
        "repeats",
        "nodesPerBatch",
        "planBatches",
        "kernelsPerBatch",
        "cublasCallsPerBatch",
        "copiesPerBatch",
        "launchesPerBatch",
        "profile",
        "issueCost",
      ]) {
        assert.ok(k in row, k);
      }
      assert.ok(row.sentencesPerSecond > 0);
    }
    const run = json.runs[0];
    for (const k of ["engine", "hidden", "embed", "cell", "batches", "status", "reason", "firstBatchLoss", "memory"]) {
      assert.ok(k in run, k);
    }
    assert.deepEqual(
      json.runs.map((x: { engine: string; status: string }) => `${x.engine} ${x.status}`),
      ["cpu timed", "autobatch-agenda-cpu timed"],
    );
    assert.equal(json.runs[1].firstBatchLoss.relativeError, 0);
  });

  test("an engine whose first loss is off the CPU engine's is not timed, with a line saying so", async (t) => {
    /** Trains like the CPU engine but reports a first loss 1% too high. */
    class WrongLossEngine extends CpuEngine {
      override forwardScalar(e: Expression): number {
        return super.forwardScalar(e) * 1.01;
      }
    }
    const out = mkdtempSync(join(tmpdir(), "vpps-bench-out-"));
    const errors: string[] = [];
    t.mock.method(console, "error", (line: string) => errors.push(line));
    t.mock.method(console, "log", () => {});
    const specs = [
      ...engineSpecs(treeLstmBench),
      {
        id: "wrong",
        label: "wrong",
        kind: "baseline" as const,
        onGpu: false,
        variant: "fused",
        open: (params: ConstructorParameters<typeof CpuEngine>[0]) => ({
          engine: new WrongLossEngine(params),
          gpu: null,
        }),
      },
    ];
    const status = await runThroughput(treeLstmBench, {
      dataFile: treeFile(),
      engines: ["cpu", "wrong"],
      batches: [1],
      hidden: [8],
      sentences: 2,
      quick: false,
      out,
      command: "test",
      specs,
    });
    assert.equal(status, 1);
    assert.ok(
      errors.some((l) =>
        /^wrong \(hidden 8, embedding 8\): first-batch loss .* differs from the CPU engine's .*not timing it$/.test(l),
      ),
      errors.join("\n"),
    );
    const json = JSON.parse(readFileSync(join(out, "treelstm.json"), "utf8"));
    const wrong = json.runs.find((r: { engine: string }) => r.engine === "wrong");
    assert.equal(wrong.status, "wrong-loss");
    assert.ok(wrong.firstBatchLoss.relativeError > 1e-3);
    assert.deepEqual(
      json.rows.map((r: { engine: string }) => r.engine),
      ["cpu"],
    );
  });
});

describe("vpps bench treelstm: the large Tree-LSTMs, VPPS with every matrix off chip", () => {
  test("--hidden 1024,1536 --batches 1,8,32 --engines …: the named engines at every size and batch; vpps-offchip opt-in", () => {
    const specs = engineSpecs(treeLstmBench);
    const offChip = specs.find((s) => s.id === "vpps-offchip");
    assert.ok(offChip && offChip.kind === "vpps" && offChip.offChip === "all" && offChip.variant === "fused");
    const engines = ["autobatch-agenda", "autobatch-agenda-cublas", "vpps-fused", "vpps-offchip"];
    const base = { command: "test", quick: false };
    const configs = configsOf(treeLstmBench, { ...base, hidden: [1024, 1536], batches: [1, 8, 32], engines }, specs);
    assert.deepEqual(
      configs.map((c) => [c.hidden, c.embed, c.batches, c.engines.map((e) => e.id)]),
      [
        [1024, 1024, [1, 8, 32], engines],
        [1536, 256, [1, 8, 32], engines],
      ],
    );
    // by default the suite is unchanged: vpps-offchip does not run, the other sizes run the sweep's engines
    const defaults = configsOf(treeLstmBench, base, specs);
    assert.ok(defaults.every((c) => c.engines.every((e) => e.id !== "vpps-offchip")));
    assert.deepEqual(
      defaults.slice(1).map((c) => [c.hidden, c.batches, c.engines.map((e) => e.id)]),
      [
        [128, [1, 8, 128], ["autobatch-agenda-cublas", "vpps-fused"]],
        [512, [1, 8, 128], ["autobatch-agenda-cublas", "vpps-fused"]],
      ],
    );
  });
});

describe("the harness's parts", () => {
  test("the first-loss check refuses an engine beyond the tolerance, and a NaN", () => {
    assert.equal(checkFirstLoss("e", { batch: 8, cpu: 500, loss: 500.1, tolerance: 1e-3 }).refusal, null);
    const off = checkFirstLoss("e", { batch: 8, cpu: 500, loss: 501, tolerance: 1e-3 });
    assert.match(off.refusal!, /^e: first-batch loss 501 differs from the CPU engine's 500 by 2\.00e-3 relative/);
    assert.equal(off.check.engine, 501);
    assert.notEqual(checkFirstLoss("e", { batch: 8, cpu: 1, loss: Number.NaN, tolerance: 1 }).refusal, null);
  });

  test("devices are named by their results folder", () => {
    assert.equal(deviceSlug("NVIDIA H100 80GB HBM3"), "h100");
    assert.equal(deviceSlug("NVIDIA H200"), "h200");
    assert.equal(cpuSlug("Intel(R) Xeon(R) Processor @ 2.50GHz", 2), "intel-xeon-2c");
    assert.equal(cpuSlug("AMD EPYC 7B13 64-Core Processor", 16), "amd-epyc-7b13-16c");
  });

  test("vpps bench plot redraws the committed H100 plot from its results, byte for byte", (t) => {
    t.mock.method(console, "log", () => {});
    const h100 = join(ROOT, "bench", "results", "h100");
    const dir = mkdtempSync(join(tmpdir(), "vpps-bench-plot-"));
    copyFileSync(join(h100, "treelstm.json"), join(dir, "treelstm.json"));
    assert.equal(runPlot(treeLstmBench, { device: "h100", dir }), 0);
    assert.equal(readFileSync(join(dir, "treelstm.svg"), "utf8"), readFileSync(join(h100, "treelstm.svg"), "utf8"));
  });
});
