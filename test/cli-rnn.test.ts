// `vpps plan rnn` and `vpps bench rnn` without a GPU: the largest layers per cell (fp32 and --precision fp16), one
// layer's layout, a refusal with the largest that fits, bad options in one line (status 2), cuDNN reference files
// checked line by line.

import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { readCudnnRows, rnnBenchMarkdown } from "../src/bench/rnn-report.js";
import { cli, hasTrace, tempDir } from "./cli-harness.js";

test("vpps plan rnn prints the largest layer of every cell for the H100", async () => {
  const r = await cli("plan", "rnn");
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /rnn-tanh hidden 2304/);
  assert.match(r.stdout, /lstm {5}hidden 1152/);
  const j = await cli("plan", "rnn", "--json");
  assert.deepEqual(JSON.parse(j.stdout).largest, { "rnn-tanh": 2304, "rnn-relu": 2304, lstm: 1152, gru: 1312 });
});

test("vpps plan rnn --precision fp16: the fp16 largest sizes, and the layouts of a layer only fp16 fits", async () => {
  const r = await cli("plan", "rnn", "--precision", "fp16");
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /, fp16 weights:\n/);
  assert.match(r.stdout, /rnn-tanh hidden 3168/);
  assert.match(r.stdout, /lstm {5}hidden 1568/);
  assert.match(r.stdout, /gru {6}hidden 1792/);
  const j = JSON.parse((await cli("plan", "rnn", "--precision", "fp16", "--json")).stdout);
  assert.equal(j.precision, "fp16");
  assert.deepEqual(j.largest, { "rnn-tanh": 3168, "rnn-relu": 3168, lstm: 1568, gru: 1792 });
  assert.equal(JSON.parse((await cli("plan", "rnn", "--json")).stdout).precision, "fp32");
  const fits = await cli("plan", "rnn", "--cell", "lstm", "--hidden", "1568", "--precision", "fp16");
  assert.equal(fits.code, 0, fits.stderr);
  assert.match(fits.stdout, /lstm, hidden 1568, fp16 weights on NVIDIA H100 SXM: fits \(largest: 1568\)/);
  assert.match(fits.stdout, /forward +131 CTAs/);
  const js = JSON.parse(
    (await cli("plan", "rnn", "--cell", "gru", "--hidden", "1792", "--precision", "fp16", "--json")).stdout,
  );
  assert.equal(js.precision, "fp16");
  assert.equal(js.plans[0].plan.fits, true);
  assert.equal(js.plans[0].plan.forward.precision, "fp16");
  // the same layer in fp32 does not fit, and the refusal names the option that makes it fit
  const fp32 = await cli("plan", "rnn", "--cell", "lstm", "--hidden", "1568");
  assert.match(
    fp32.stdout,
    /fp32 weights on .*: does not fit — .*the largest that fits is hidden 1152; it fits with fp16 weights \(--precision fp16, largest 1568\)/,
  );
  const none = await cli("plan", "rnn", "--cell", "lstm", "--hidden", "2048", "--precision", "fp16");
  assert.match(none.stdout, /fp16 weights on .*: does not fit — .*the largest that fits is hidden 1568\n$/);
});

test("vpps plan rnn --cell lstm --hidden N: the two kernels' layouts, or the refusal with the largest that fits", async () => {
  const fits = await cli("plan", "rnn", "--cell", "lstm", "--hidden", "1152");
  assert.equal(fits.code, 0, fits.stderr);
  assert.match(fits.stdout, /forward +128 CTAs × 256 threads, 9 units per CTA/);
  assert.match(fits.stdout, /backward +128 CTAs/);
  // one replica over more than one tile of 4 sequences: the backward's pipelined loop, and only there; over more
  // than two tiles the forward's too
  assert.match(
    fits.stdout,
    /batch {2}16: 1 × 128 CTAs, 9 units per CTA; forward: pipelined tile loop; backward: pipelined tile loop/,
  );
  assert.match(fits.stdout, /batch {3}4: 1 × 128 CTAs, 9 units per CTA\n/);
  const small = await cli("plan", "rnn", "--cell", "lstm", "--hidden", "256", "--json");
  const launches = JSON.parse(small.stdout).plans[0].launches as {
    batch: number;
    replicas: number;
    pipelinedForward: boolean;
    pipelinedBackward: boolean;
  }[];
  for (const l of launches) {
    assert.equal(l.pipelinedBackward, l.replicas === 1 && l.batch > 4, `batch ${l.batch}`);
    assert.equal(l.pipelinedForward, l.replicas === 1 && l.batch > 8, `batch ${l.batch}`);
  }
  assert.ok(launches.some((l) => l.replicas > 1 && !l.pipelinedBackward));
  const big = await cli("plan", "rnn", "--cell", "lstm", "--hidden", "2048");
  assert.equal(big.code, 0);
  assert.match(big.stdout, /does not fit — .*the largest that fits is hidden 1152/);
  const h200 = await cli("plan", "rnn", "--cell", "gru", "--hidden", "512", "--gpu", "h200");
  assert.match(h200.stdout, /NVIDIA H200: fits/);
});

test("bad options of plan rnn and bench rnn: one line, status 2, no trace", async () => {
  for (const args of [
    ["plan", "rnn", "--hidden", "abc"],
    ["plan", "rnn", "--cell", "lstmx"],
    ["plan", "rnn", "--gpu", "a100"],
    ["plan", "rnn", "--precision", "fp8"],
    ["plan", "rnn", "--precision", "FP16"],
    ["bench", "rnn", "--precision", "half"],
    ["bench", "rnn", "--cells", "foo"],
    ["bench", "rnn", "--batch", "0"],
    ["bench", "rnn", "--steps", "-3"],
  ]) {
    const r = await cli(...args);
    assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
    assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
    assert.ok(!hasTrace(r.stderr));
    if (args.includes("--precision")) assert.match(r.stderr, /--precision: expected one of fp32, fp16; got '/);
  }
});

test("vpps plan rnn says which kernels run as CTA pairs with multicast loads", async () => {
  const big = await cli("plan", "rnn", "--cell", "lstm", "--hidden", "1152");
  assert.match(big.stdout, /forward .*; clusters of 2 CTAs sharing each step's loads \(multicast\)/);
  const small = await cli("plan", "rnn", "--cell", "rnn-tanh", "--hidden", "1152");
  assert.doesNotMatch(small.stdout, /clusters of 2/);
});

test("vpps bench rnn (--phases too) without a GPU: one line saying why, status 1, no trace", async (t) => {
  const { cudaAvailable } = await import("../src/cuda/index.js");
  if (cudaAvailable().ok) {
    t.skip("a GPU is present: test/gpu runs the benchmark");
    return;
  }
  const help = await cli("bench", "rnn", "--help");
  assert.match(help.stdout, /--phases/);
  assert.match(help.stdout, /--precision <p>/);
  const r = await cli("bench", "rnn", "--cells", "lstm", "--hidden", "64", "--batch", "1", "--phases");
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /vpps bench rnn: this benchmark needs an NVIDIA GPU/);
  assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
  assert.ok(!hasTrace(r.stderr));
});

test("cuDNN's JSON lines are read and tabled beside ours; a bad line names the file and line", () => {
  const dir = tempDir("vpps-rnn-ref-");
  const file = join(dir, "cudnn.jsonl");
  writeFileSync(
    file,
    `${JSON.stringify({ system: "cudnn", cell: "lstm", hidden: 1152, batch: 4, steps: 256, precision: "fp32", forwardMs: 4.5, forwardBackwardMs: 16.5 })}\n`,
  );
  const rows = readCudnnRows(file);
  const md = rnnBenchMarkdown(
    "GPU",
    [
      {
        cell: "lstm",
        hidden: 1152,
        batch: 4,
        steps: 256,
        precision: "fp32",
        fits: true,
        path: "persistent",
        forwardMs: 1.5,
        forwardBackwardMs: 5.5,
        recurrentMs: 1,
        recurrentForwardBackwardMs: 2.75,
        perStepUs: 3.9,
        recurrentTflops: 10,
        layout: { unitsPerCta: 9, ctas: 128, replicas: 1 },
      },
    ],
    rows,
  );
  assert.match(
    md,
    /\| lstm \| 1152 \| 4 \| 128 × 1 \| 1\.000 \| 3\.90 \| 10\.00 \| 2\.750 \| 1\.500 \| 5\.500 \| 4\.500 \| 16\.500 \| 3\.00 \| 3\.00 \| – \|/,
  );
  assert.match(md, /input size = hidden, fp32; /);
  const half = rnnBenchMarkdown(
    "GPU",
    [{ cell: "gru", hidden: 1792, batch: 1, steps: 8, precision: "fp16", fits: true, path: "persistent" }],
    [],
  );
  assert.match(half, /input size = hidden, ours with W_hh stored as fp16 in registers \(fp32 arithmetic\); /);
  writeFileSync(file, "{not json}\n");
  assert.throws(
    () => readCudnnRows(file),
    new RegExp(`${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}:1: not a JSON line`),
  );
});

test("vpps plan rnn refuses what training refuses, with a finite reason: a hidden size not a multiple of 4, a layer too wide for a CTA's threads", async () => {
  for (const cell of ["rnn-tanh", "lstm", "gru"]) {
    for (const hidden of [30, 1150, 1151, 2303]) {
      const r = await cli("plan", "rnn", "--cell", cell, "--hidden", String(hidden));
      assert.equal(r.code, 0, r.stderr);
      const below = hidden - (hidden % 4);
      assert.match(
        r.stdout,
        new RegExp(
          `hidden ${hidden}, fp32 weights on .*: does not fit — hidden ${hidden} is not a multiple of 4 .*the nearest that are: ${below} and ${below + 4}`,
        ),
      );
    }
  }
  for (const hidden of [40000, 65536, 400000]) {
    const r = await cli("plan", "rnn", "--cell", "lstm", "--hidden", String(hidden));
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /does not fit — .*threads, more than a CTA's 1024; the largest that fits is hidden 1152/);
    assert.doesNotMatch(r.stdout, /Infinity|NaN/);
  }
});

test("vpps bench rnn --density: --ladder, --largest, --backward and --torch need it, sparse layers are fp32; one line each, no trace", async () => {
  for (const [args, code, re] of [
    [["bench", "rnn", "--ladder"], 2, /--ladder, --largest, --backward and --torch apply with --density/],
    [["bench", "rnn", "--torch", "x.jsonl"], 2, /--ladder, --largest, --backward and --torch apply with --density/],
    [["bench", "rnn", "--largest"], 2, /apply with --density/],
    [["bench", "rnn", "--density", "0"], 2, /--density: expected kept fractions of W_hh in \(0, 1\]/],
    [["bench", "rnn", "--density", "10%", "--precision", "fp16"], 2, /sparse layers hold fp32 values/],
  ] as const) {
    const r = await cli(...args);
    assert.equal(r.code, code, `${args.join(" ")}: ${r.stderr}`);
    assert.match(r.stderr, re);
    assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
    assert.ok(!hasTrace(r.stderr));
  }
});

test("the sparse benchmark's report: speed-ups over the dense layer and PyTorch's rows of the same shape, the ladder", async () => {
  const { sparseRnnBenchMarkdown, parseTorchSparseRows } = await import("../src/bench/rnn-sparse.js");
  const base = { cell: "rnn-tanh", hidden: 1792, batch: 4, steps: 256 } as const;
  const layout = {
    batchTile: 1,
    threads: 224,
    threadsPerRowGroup: 4,
    rowsPerThread: 1,
    pairsPerThread: 50,
    ctas: 33,
    replicas: 1,
    ctasPerSm: 1,
  };
  const rows = [
    { ...base, density: null, rung: "dense", recurrentMs: 0.72 },
    { ...base, density: 0.1, rung: "naive", ladder: true, recurrentMs: 0.9 },
    { ...base, density: 0.1, rung: "wide-loads", ladder: true, recurrentMs: 0.6, layout: { ...layout, batchTile: 4 } },
    { ...base, density: 0.1, rung: "bank-aware", ladder: true, recurrentMs: 0.5 },
    { ...base, density: 0.1, rung: "lamport", ladder: true, recurrentMs: 0.42 },
    { ...base, density: 0.1, rung: "lamport", recurrentMs: 0.36, backwardRecurrentMs: 0.8, maxError: 3e-7 },
    { ...base, hidden: 5920, density: 0.1, rung: "lamport", recurrentMs: 1.2, maxError: 1.5e-6 },
    {
      ...base,
      hidden: 2304,
      density: 0.1,
      rung: "lamport",
      reason: "its output differs from the CPU reference",
      maxError: 0.5,
    },
    { ...base, density: 0.3, rung: "lamport", reason: "does not fit here" },
  ] as const;
  const torch = parseTorchSparseRows(
    [
      { hidden: 1792, batch: 4, steps: 256, density: null, impl: "cublas", ms: 2.16 },
      { hidden: 1792, batch: 4, steps: 256, density: 0.1, impl: "cusparse", ms: 7.2 },
      { hidden: 1792, batch: 4, steps: 256, density: 0.05, impl: "cusparse", ms: 5 },
    ]
      .map((r) => JSON.stringify(r))
      .join("\n\n"),
  );
  const md = sparseRnnBenchMarkdown("NVIDIA H100", rows, torch, { "rnn-tanh/0.1": 5920 });
  assert.match(md, /Largest sparse layers \(training, batch 4\): rnn-tanh 10%: 5920\./);
  // dense 0.72 / 0.36 = 2×; cuBLAS 2.16 / 0.36 = 6×; cuSPARSE (the 10% row, not the 5%) 7.2 / 0.36 = 20×
  assert.match(
    md,
    /\| rnn-tanh \| 1792 \| 4 \| 10% \| 0\.720 \| 0\.360 \| 2\.00× \| 0\.800 \| 2\.160 \| 6\.00× \| 7\.200 \| 20\.00× \|/,
  );
  // a size with no dense row and no PyTorch row
  assert.match(md, /\| rnn-tanh \| 5920 \| 4 \| 10% \| — \| 1\.200 \| — \| — \| — \| — \| — \| — \|/);
  // the ladder at the widest tile, then the production launch (the rule's)
  assert.match(md, /\| rnn-tanh \| 1792 \| 4 \| 10% \| 4 \| 0\.900 \| 0\.600 \| 0\.500 \| 0\.420 \| 0\.360 \|/);
  assert.match(md, /- rnn-tanh 1792 batch 4 30% lamport: does not fit here/);
  // the check against the CPU reference: the worst of the checked rows, and the ones without a check counted
  assert.match(
    md,
    /Checked: 2 timed launches' outputs .* largest max \|Δ\| 1\.50e-6 \(limit 0\.001\); 5 not checked \(W_hh past 67,108,864 weights\)\./,
  );
  assert.match(md, /\| rnn-tanh \| 2304 \| 4 \| 10% \| — \| wrong output \|/);
  assert.match(md, /- rnn-tanh 2304 batch 4 10% lamport: its output differs from the CPU reference/);
});

test("the sparse benchmark's check: W_hh of a row list, dense; the largest difference, NaN as infinite", async () => {
  const { denseOfRows, maxAbsDiff } = await import("../src/bench/rnn-sparse.js");
  const m = {
    rows: 2,
    cols: 3,
    start: Uint32Array.of(0, 2, 3),
    index: Uint32Array.of(2, 0, 1),
    value: Float32Array.of(0.5, -1, 2),
  };
  assert.deepEqual([...denseOfRows(m)], [-1, 0, 0.5, 0, 2, 0]);
  assert.equal(maxAbsDiff([1, 2, 3], [1, 2.5, 2], 3), 1);
  assert.equal(maxAbsDiff([1, 2, 3], [1, 2.5, 2], 2), 0.5);
  assert.equal(maxAbsDiff([Number.NaN, 0], [0, 0], 2), Number.POSITIVE_INFINITY);
  assert.equal(maxAbsDiff([0, Number.NaN], [0, 0], 2), Number.POSITIVE_INFINITY);
});
