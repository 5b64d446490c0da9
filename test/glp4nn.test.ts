// GLP4NN without a GPU: the levels of a graph chunk the eager engine dispatches over the pool (levels.ts); the
// fork/join check that keeps one stream where a level's pool does not pay (level-glp.ts), worked by hand; the Table 5
// layers of the benchmark against the paper; `--streams` and `--explain` on the command line, refused in one line.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { LAYER_CHOICES, layerKey, selectLayers, TABLE5 } from "../src/bench/glp4nn/layers.js";
import { layerGeometry } from "../src/conv/layer.js";
import { MAX_EAGER_STREAMS, parseStreams } from "../src/engines/eager/engine.js";
import { forwardWorks } from "../src/engines/eager/kernel-table.js";
import { levelStreams, levelTimeUs, REQUIRED_GAIN } from "../src/engines/eager/level-glp.js";
import { chunkLevels } from "../src/engines/eager/levels.js";
import { checkEngineOptions } from "../src/engines/registry.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { ParameterCollection } from "../src/model/parameters.js";
import { input, matVec, parameter, pickRange, sum, tanh } from "../src/ops/index.js";
import { cli } from "./cli-harness.js";

describe("the levels of a graph chunk", () => {
  test("a node's level is one past its highest argument in the chunk; only working nodes are listed", () => {
    const pc = new ParameterCollection({ seed: 1 });
    const W = pc.addParameters([3, 3], undefined, "W");
    const cg = new ComputationGraph();
    const x = input(cg, [1, 2, 3]); // 0 (no work)
    const w = parameter(cg, W); // parameter node (no work)
    const a = tanh(matVec(w, x)); // matVec level 1, tanh level 2
    const b = tanh(matVec(w, x)); // the same levels: independent of a
    const c = tanh(pickRange(a, 0, 2)); // pickRange is a view (no work) at level 3, its tanh at 4
    const s = sum([a, b]); // level 3
    const all = chunkLevels(cg, 0, s.id);
    const works = chunkLevels(cg, 0, s.id, forwardWorks);
    assert.equal(all.count, 5);
    const levelOf = (L: typeof works, id: number) => {
      for (let k = 0; k < L.count; k++) {
        for (let q = L.starts[k]!; q < L.starts[k + 1]!; q++) if (L.nodes[q] === id) return k;
      }
      return -1;
    };
    assert.equal(levelOf(works, x.id), -1, "an input queues no work");
    assert.equal(levelOf(works, a.id), levelOf(works, b.id), "independent nodes share a level");
    assert.equal(levelOf(works, s.id), levelOf(works, a.id) + 1);
    assert.equal(levelOf(works, c.id), levelOf(works, a.id) + 2, "after the view of a");
    const level1 = [...works.nodes.subarray(works.starts[1]!, works.starts[2]!)];
    assert.deepEqual(level1, [a.id - 1, b.id - 1], "the two products, in node order");
    // a later chunk: arguments before `from` are done, so the chunk's nodes start at level 0
    const later = chunkLevels(cg, s.id, s.id, forwardWorks);
    assert.deepEqual([...later.nodes], [s.id]);
    assert.equal(later.count, 1);
  });
});

describe("the eager engine's fork/join check (level-glp.ts), by hand", () => {
  test("kernels shorter than a launch: one stream; long kernels: the pool; a narrow level: the event cost wins", () => {
    // 100 nodes of 2 µs kernels, 4 µs launches: host-bound (400 µs); on 4 streams (100 + 8) · 4 = 432 µs
    assert.equal(levelTimeUs(100, 2, 4, 1), 400);
    assert.equal(levelTimeUs(100, 2, 4, 4), 432);
    assert.equal(levelStreams(4, 100, 2, 4), 1);
    // 100 nodes of 40 µs: 4000 µs on one stream; on 4, max(108 · 4, 1000) = 1000 µs
    assert.equal(levelTimeUs(100, 40, 4, 4), 1000);
    assert.equal(levelStreams(4, 100, 40, 4), 4);
    // 2 nodes of 10 µs, 4 µs launches, 2 streams: max((2 + 4) · 4, 10) = 24 µs against 20 µs on one
    assert.equal(levelStreams(2, 2, 10, 4), 1);
    // the analyser's 1 stays 1
    assert.equal(levelStreams(1, 100, 40, 4), 1);
    // a gain under 20% is not taken: 100 nodes of 1 µs, 0.8 µs launches: one stream 100 µs, 2 streams
    // max(104 · 0.8, 50) = 83.2 µs (16.8% faster); with 0.7 µs launches 72.8 µs (27.2% faster) is taken
    assert.equal(REQUIRED_GAIN, 0.2);
    assert.ok(Math.abs(levelTimeUs(100, 1, 0.8, 2) - 83.2) < 1e-9);
    assert.equal(levelStreams(2, 100, 1, 0.8), 1);
    assert.equal(levelStreams(2, 100, 1, 0.7), 2);
    // an H100 case, Tree-LSTM batch 128: 97 nodes of 5.54 µs, 4.75 µs launches: predicted 10.8% faster on
    // 2 streams, measured 4.0% slower: one stream now
    assert.equal(levelStreams(2, 97, 5.54, 4.75), 1);
  });
});

describe("Table 5 (the benchmark's layers)", () => {
  test("16 layers with the paper's N, C, H/W, F, K, S, P; output sides by Caffe's rounding", () => {
    assert.equal(TABLE5.length, 16);
    const row = (name: string) => TABLE5.find((l) => l.name === name)!;
    assert.deepEqual(
      { ...row("CaffeNet conv1") },
      { net: "CaffeNet", name: "CaffeNet conv1", n: 256, c: 3, hw: 227, f: 96, k: 11, s: 4, p: 0 },
    );
    assert.deepEqual(
      { ...row("GoogLeNet conv_2") },
      { net: "GoogLeNet", name: "GoogLeNet conv_2", n: 32, c: 832, hw: 7, f: 32, k: 1, s: 1, p: 0 },
    );
    assert.deepEqual(
      { ...row("Siamese conv2") },
      { net: "Siamese", name: "Siamese conv2", n: 64, c: 20, hw: 12, f: 50, k: 5, s: 1, p: 0 },
    );
    assert.equal(layerGeometry(row("CaffeNet conv1")).ho, 55);
    assert.equal(layerGeometry(row("CIFAR10 conv2")).ho, 16);
    assert.equal(layerGeometry(row("Siamese conv1")).ho, 24);
    assert.equal(layerGeometry(row("CaffeNet conv4")).ho, 13);
    assert.deepEqual(
      selectLayers(["CaffeNet-conv2", "googlenet"]).map((l) => l.name),
      ["CaffeNet conv2", ...TABLE5.filter((l) => l.net === "GoogLeNet").map((l) => l.name)],
    );
    assert.equal(layerKey("GoogLeNet-conv_3"), layerKey("googlenet conv 3"));
    assert.equal(LAYER_CHOICES.length, 4 + 16);
  });
});

describe("--streams and --explain", () => {
  test("parseStreams takes auto and 1 … 128; the registry refuses --streams for an engine without a pool", () => {
    assert.equal(parseStreams("auto"), "auto");
    assert.equal(parseStreams(" 8 "), 8);
    for (const bad of ["0", "129", "2.5", "", "x", "-1"]) {
      assert.throws(() => parseStreams(bad), /--streams must be auto or a whole number 1 … 128; got/);
    }
    assert.equal(MAX_EAGER_STREAMS, 128);
    assert.throws(
      () => checkEngineOptions("autobatch", { streams: "4" }),
      /--streams 4 sizes the eager engine's stream pool; the 'autobatch' engine does not use one/,
    );
    checkEngineOptions("eager", { streams: "auto" });
    checkEngineOptions("cpu", { streams: "1" });
  });

  test("the command line refuses a bad --streams, --streams on the cpu engine, --explain without auto: one line each", async () => {
    for (const [args, message] of [
      [["--streams", "zero"], /--streams must be auto or a whole number 1 … 128; got 'zero'/],
      [["--streams", "4"], /the 'cpu' engine does not use one/],
      [["--engine", "eager", "--streams", "2", "--explain"], /--explain prints GLP4NN's choice of streams/],
    ] as const) {
      const r = await cli("train", "treelstm", "--epochs", "1", ...args);
      assert.notEqual(r.code, 0, `${args.join(" ")} exits with an error`);
      const lines = r.stderr.trim().split("\n");
      assert.equal(lines.length, 1, `one line: ${r.stderr}`);
      assert.match(lines[0]!, message);
    }
  });
});

describe("vpps bench glp4nn's options", () => {
  test("--cnn-batches (the LeNet iteration) is in the help; a bad list is one line, before any GPU is asked for", async () => {
    const help = await cli("bench", "glp4nn", "--help");
    assert.equal(help.code, 0);
    assert.match(help.stdout, /--cnn-batches <list>\s+LeNet batch sizes for the whole training iteration/);
    const r = await cli("bench", "glp4nn", "--cnn-batches", "64,many");
    assert.notEqual(r.code, 0);
    const lines = r.stderr.trim().split("\n");
    assert.equal(lines.length, 1, `one line: ${r.stderr}`);
    assert.match(lines[0]!, /--cnn-batches/);
  });
});

describe("the benchmark's report (without a GPU: fake timings)", () => {
  test("tables with the done-when counts, a failed mode as a row, and the SVG per network", async () => {
    const { convTables, netPlot } = await import("../src/bench/glp4nn/suite.js");
    const timing = (ms: number) => ({ ms, minMs: ms, identical: true });
    const layer = TABLE5[0]!;
    const mode = (
      m: "direct" | "graph",
      one: number,
      glp: number,
      best: number,
      heldOut?: { glpMs: number; bestMs: number },
    ) => ({
      mode: m,
      oneStream: timing(one),
      glp: { forward: 4, backward: 2, timing: timing(glp) },
      model: { forward: 2, backward: 2, timing: timing((one + best) / 2) },
      trials: [],
      pools: { "1": timing(one), "2": timing((one + best) / 2), "4": timing(best) },
      best: { pool: 4, ms: best },
      ...(heldOut !== undefined ? { heldOut } : {}),
      launchUs: m === "direct" ? 4 : 0,
      measuredLaunchUs: 4,
      unknownCalls: [],
      explain: "",
    });
    const results = [
      { layer, output: { side: 32 }, modes: [mode("direct", 10, 7, 6.9), mode("graph", 10, 4, 4)], failed: [] },
      {
        layer: TABLE5[1]!,
        output: { side: 16 },
        // 8% over the best in the first pass; timed again apart from the selection, 2%
        modes: [mode("direct", 5, 5.4, 5, { glpMs: 5.1, bestMs: 5 })],
        failed: [{ mode: "graph" as const, error: "CudaError: cuGraphLaunch failed" }],
      },
    ];
    const md = convTables(results, ["direct", "graph"]).join("\n");
    assert.match(
      md,
      /\| CIFAR10 conv1 \| 100×3×32² → 32×32², 5\/1\/2 \| 10\.00 \| 4\/2 \| 7\.000 \| 1\.43× \| 4 \| 6\.900 \| 1\.45× \| 1\.4% \| \(is the best\) \| 2\/2 \| 22\.5% \| yes \|/,
    );
    assert.match(md, /\| 8\.0% \| 5\.100 \/ 5\.000: 2\.0% \|/);
    assert.match(
      md,
      /GLP4NN within 5% of the best fixed pool: 2 of 2 \(.*in the first pass: 1 of 2\); never more than 3% slower than one stream: 1 of 2; ≥ 1\.3× over one stream: 1 of 2/,
    );
    assert.match(md, /\| CIFAR10 conv2 \| failed: CudaError: cuGraphLaunch failed \|/);
    assert.match(md, /≥ 2× over one stream: 1 of 2/);
    assert.match(
      md,
      /the analyser's pools alone \(before the timed confirmation\) within 5% of the best fixed pool: 0 of 2/,
    );
    const svg = netPlot("CIFAR10", results, "NVIDIA H100 80GB HBM3");
    assert.match(svg, /^<svg/);
    assert.match(svg, /conv1 direct/);
  });
});
