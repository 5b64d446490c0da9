// GLP4NN on a GPU (docs/GLP4NN.md): CUDA graphs by stream capture (a pool's fork and join captured, replayed; a cuBLAS
// call's kernels read from its graph without running it); Table 5 layers at a small batch through ConvLayer — one
// stream, 4 lanes, and 4 lanes captured as one CUDA graph give y, dx, dW, db bit for bit; the analyser's choices for
// direct and graph launches printed (`--explain`); the eager engine's levels on the pool (`streams: N` and "auto")
// train a Tree-LSTM to the same losses and weights bit for bit, and print what the analyser chose and why.
// Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { benchModel } from "../../src/bench/models/index.js";
import { analyseConvLayer, callFootprints, confirmPools, neighbourPools } from "../../src/conv/glp.js";
import { ConvLayer, type ConvLayerShape } from "../../src/conv/layer.js";
import { CudaGraph, cudaAvailable, karg } from "../../src/cuda/index.js";
import { GpuContext } from "../../src/cuda/runtime/context.js";
import { EagerEngine } from "../../src/engines/eager/engine.js";
import { captureFootprint, explainChoice, hardwareQueues, loadSolver } from "../../src/glp4nn/index.js";
import { ComputationGraph } from "../../src/graph/graph.js";
import { makeTrainer } from "../../src/optim/trainers.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const MiB = 1024 ** 2;
const bits = (a: Float32Array) => new Uint32Array(a.buffer, a.byteOffset, a.length);

const FILL = `extern "C" __global__ void fill_add(float* y, float v, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] += v;
}`;

describe("CUDA graphs by stream capture", { skip }, () => {
  test("a fork to 3 pool lanes and the join, captured once and replayed 5 times, adds 5 times", () => {
    const ctx = GpuContext.open({ poolBytes: 16 * MiB });
    try {
      const { fill_add } = ctx.kernels("vpps_graph_test.cu", FILL, ["fill_add"] as const).kernels;
      const pool = ctx.streamPool(3);
      const n = 3 * 4096;
      const y = ctx.pool.alloc(n, "y");
      ctx.pool.fill(y, n, 0, ctx.stream.handle);
      const graph = CudaGraph.capture(ctx.stream, () => {
        pool.fork(ctx.stream, 3);
        for (let k = 0; k < 3; k++) {
          fill_add.launch({ grid: 16, block: 256, stream: pool.lane(k, 3).stream }, [
            karg.ptr(ctx.pool.ptr(y) + 4 * k * 4096),
            karg.f32(k + 1),
            karg.i32(4096),
          ]);
        }
        pool.join(ctx.stream, 3);
      });
      try {
        const before = ctx.download(ctx.pool.ptr(y), new Float32Array(n));
        assert.ok(
          before.every((v) => v === 0),
          "capture records and does not run",
        );
        assert.ok(graph.nodeCount() >= 3, `nodes: ${graph.nodeCount()}`);
        for (let r = 0; r < 5; r++) graph.launch();
        const out = ctx.download(ctx.pool.ptr(y), new Float32Array(n));
        for (let k = 0; k < 3; k++) assert.equal(out[k * 4096 + 17], 5 * (k + 1), `lane ${k}'s part`);
        const kernels = graph.kernelNodes();
        assert.equal(kernels.length, 3, "three kernel nodes");
        assert.deepEqual([...kernels[0]!.grid, ...kernels[0]!.block], [16, 1, 1, 256, 1, 1]);
      } finally {
        graph.destroy();
      }
    } finally {
      ctx.dispose();
    }
  });

  test("a cuBLAS GEMM's kernels read from its captured graph: function, registers, grid, occupancy", () => {
    const ctx = GpuContext.open({ poolBytes: 64 * MiB });
    try {
      const [m, n, k] = [96, 3025, 363];
      const A = ctx.pool.alloc(m * k, "A");
      const B = ctx.pool.alloc(k * n, "B");
      const C = ctx.pool.alloc(m * n, "C");
      const gemm = () =>
        ctx.cublas.sgemmRowMajor(ctx.cublasHandle, {
          m,
          n,
          k,
          A: ctx.pool.ptr(A),
          B: ctx.pool.ptr(B),
          C: ctx.pool.ptr(C),
        });
      gemm(); // cuBLAS's first call loads its kernels
      ctx.synchronize();
      const shapes = captureFootprint(ctx.stream, gemm);
      console.log(`cublasSgemm ${m}×${n}×${k}: ${JSON.stringify(shapes)}`);
      assert.ok(shapes !== undefined && shapes.length >= 1, "at least one kernel node");
      for (const s of shapes) {
        assert.ok(s.blocks >= 1 && s.threadsPerBlock >= 32, `grid ${s.blocks} × ${s.threadsPerBlock}`);
        assert.ok(s.registersPerThread > 0 && s.registersPerThread <= 255, `registers ${s.registersPerThread}`);
        assert.ok((s.blocksPerSm ?? 0) >= 1, `occupancy ${s.blocksPerSm}`);
      }
    } finally {
      ctx.dispose();
    }
  });
});

const LAYERS: readonly ConvLayerShape[] = [
  { name: "CIFAR10 conv1 (N 8)", n: 8, c: 3, hw: 32, f: 32, k: 5, s: 1, p: 2 },
  { name: "CaffeNet conv4 (N 6)", n: 6, c: 384, hw: 13, f: 384, k: 3, s: 1, p: 1 },
  { name: "GoogLeNet conv_2 (N 8, 1×1)", n: 8, c: 832, hw: 7, f: 32, k: 1, s: 1, p: 0 },
];

describe("Table 5 layers through ConvLayer: lanes and CUDA graphs change nothing; the analyser's choices", {
  skip,
}, () => {
  for (const L of LAYERS) {
    test(`${L.name}: 1 stream, 4 lanes direct, 4 lanes as a CUDA graph: y, dx, dW, db bit for bit`, async () => {
      const ctx = GpuContext.open({ poolBytes: 16 * MiB });
      const layer = ConvLayer.open(L, ctx);
      try {
        const one = layer.runner(1);
        layer.iteration(one);
        const ref = layer.results();
        const four = layer.runner(4);
        layer.iteration(four);
        const direct = layer.results();
        layer.iteration(four); // warm before the capture
        const graph = CudaGraph.capture(ctx.stream, () => layer.iteration(four));
        try {
          graph.launch();
          graph.launch();
          const replayed = layer.results();
          for (const key of ["y", "dx", "dW", "db"]) {
            assert.deepEqual(bits(direct[key]!), bits(ref[key]!), `${key} on 4 lanes differs from one stream`);
            assert.deepEqual(bits(replayed[key]!), bits(ref[key]!), `${key} replayed from the graph differs`);
          }
        } finally {
          graph.destroy();
        }
        const solver = await loadSolver();
        const footprints = callFootprints(layer, one);
        console.log(`${L.name}: cuBLAS kernels read: ${[...footprints.keys()].join(", ")}`);
        for (const mode of ["direct", "graph"] as const) {
          const a = analyseConvLayer(layer, one, { mode, solver, connections: hardwareQueues(), footprints });
          for (const c of [a.forward, a.backward]) if (c !== undefined) console.log(explainChoice(c));
          assert.ok(a.forwardPool >= 1 && a.forwardPool <= 128 && a.backwardPool >= 1 && a.backwardPool <= 128);
          assert.ok(a.measuredLaunchUs > 0 && a.measuredLaunchUs < 1000, `launch ${a.measuredLaunchUs} µs`);
          assert.deepEqual(a.unknown, [], "every cuBLAS call's kernels read from a captured graph");
          // the timed confirmation: the analyser's pools and their neighbours, each timed; the choice among them
          const runners = new Map<number, ReturnType<typeof layer.runner>>([[1, one]]);
          const runnerOf = (k: number) => {
            if (!runners.has(k)) runners.set(k, layer.runner(k, { threads: mode === "graph" ? 1 : undefined }));
            return runners.get(k)!;
          };
          const c = confirmPools(layer, a, { runnerOf, iterations: 2 });
          console.log(c.text);
          assert.ok(neighbourPools(a.forwardPool, L.n, a.hostThreads).includes(c.forwardPool), "a forward neighbour");
          assert.ok(
            neighbourPools(a.backwardPool, L.n, a.hostThreads).includes(c.backwardPool),
            "a backward neighbour",
          );
          assert.ok(c.trials.length >= 2 && c.trials.every((t) => t.ms > 0), "each candidate timed");
          for (const [k, r] of runners) if (k !== 1) r.dispose();
        }
        four.dispose();
        one.dispose();
      } finally {
        layer.dispose();
        ctx.dispose();
      }
    });
  }
});

describe("the eager engine's levels on the pool: Tree-LSTM training", { skip }, () => {
  test("batches of 16 trees: streams 1 (twice), 4 and auto give the same losses and weights bit for bit; auto explains", async () => {
    const task = benchModel("treelstm").load(undefined, 256);
    const solver = await loadSolver();
    const train = (streams: number | "auto") => {
      const net = task.net({ hidden: 64, embed: 64 }, "fused");
      let explained = "";
      const e = new EagerEngine(net.params, {
        poolBytes: 256 * MiB,
        streams,
        solver,
        explain: (t) => {
          explained += `${t}\n`;
        },
      });
      try {
        const trainer = makeTrainer("sgd", { learningRate: 0.05 });
        const cg = new ComputationGraph();
        const losses: number[] = [];
        for (let b = 0; b < 6; b++) {
          cg.renew();
          const loss = net.batchLoss(cg, task.batch(16, b));
          losses.push(e.forwardScalar(loss));
          e.backward(loss);
          e.update(trainer);
        }
        e.syncToHost();
        const weights = net.params.all.map((p) => Float32Array.from(p.value));
        return { losses, weights, explained, choice: e.levelChoice };
      } finally {
        e.dispose();
      }
    };
    const one = train(1);
    // one stream twice first: a run-to-run difference (float atomics in the lookup-gradient scatter or the clipping
    // norm) is then told apart from one the pool makes
    for (const streams of [1, 4, "auto"] as const) {
      const other = train(streams);
      const which = streams === 1 ? "a second run on one stream" : `streams ${streams}`;
      assert.deepEqual(other.losses, one.losses, `losses on ${which}`);
      other.weights.forEach((w, i) => {
        assert.deepEqual(bits(w), bits(one.weights[i]!), `parameter ${i} on ${which}`);
      });
      if (streams === "auto") {
        console.log(other.explained);
        assert.ok(other.choice !== undefined, "the analyser chose within the first batches");
        assert.ok(other.choice.streams >= 1 && other.choice.launchUs > 0);
        assert.match(other.explained, /eager engine: \d+ stream\(s\)/);
      }
    }
  });
});
