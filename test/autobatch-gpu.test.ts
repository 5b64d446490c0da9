// The GPU autobatch engine without a GPU: its kernel source (compiled with nvcc when present), and the whole engine —
// record tables, offsets, scratch layout, launches per batch, region growth — run on an emulated device that
// executes each command with its kernel's meaning, compared with the CPU engine. Also createEngine's choices.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { cudaAvailable } from "../src/cuda/index.js";
import { AutobatchCpuEngine } from "../src/engines/autobatch/cpu-batched.js";
import { AUTOBATCH_KERNEL_NAMES, autobatchKernelSource } from "../src/engines/autobatch/cuda-kernels.js";
import { AutobatchGpuEngine } from "../src/engines/autobatch/gpu-engine.js";
import type { BatchStrategy } from "../src/engines/autobatch/plan.js";
import { CpuEngine } from "../src/engines/cpu.js";
import { createEngine, EngineUnavailableError } from "../src/engines/index.js";
import { ComputationGraph, type Expression } from "../src/graph/graph.js";
import { ParameterCollection } from "../src/model/parameters.js";
import { concat, input, lookup, matVec, pickNegLogSoftmax, sum, tanh } from "../src/ops/index.js";
import { makeTrainer } from "../src/optim/trainers.js";
import { EmulatedAutobatchDevice, wideCase } from "./autobatch-emulator.js";
import { expectedLaunches } from "./autobatch-launches.js";
import { compareWithCpu, emulatedAutobatchEngine, scaleTolerance } from "./op-suite.js";
import { buildRandomGraph, buildTreeLstmBatch, randomModel, randomTrees, treeLstmModel } from "./random-graph.js";

const STRATEGIES: readonly BatchStrategy[] = ["depth", "agenda"];
const nvcc = spawnSync("nvcc", ["--version"], { encoding: "utf8" });
const noNvcc = nvcc.status === 0 ? false : "nvcc is not on PATH";

describe("autobatch kernel source", () => {
  const source = autobatchKernelSource();

  test('every kernel name is defined once as an extern "C" __global__ function', () => {
    const all = [...source.matchAll(/__global__ void (\w+)\(/g)].map((m) => m[1]);
    assert.deepEqual(all.sort(), [...AUTOBATCH_KERNEL_NAMES].sort());
  });

  test("compiles with nvcc for sm_90 without stack frames or spills", { skip: noNvcc }, () => {
    const dir = mkdtempSync(join(tmpdir(), "vpps-autobatch-"));
    try {
      writeFileSync(join(dir, "ab.cu"), source);
      const r = spawnSync("nvcc", ["-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", join(dir, "ab.cubin"), "ab.cu"], {
        cwd: dir,
        encoding: "utf8",
      });
      assert.equal(r.status, 0, `nvcc failed:\n${r.stderr}`);
      const frames = [...`${r.stdout}${r.stderr}`.matchAll(/(\d+) bytes stack frame, (\d+) bytes spill stores/g)];
      assert.equal(frames.length, AUTOBATCH_KERNEL_NAMES.length);
      for (const f of frames) assert.deepEqual([f[1], f[2]], ["0", "0"]);
      assert.ok(readFileSync(join(dir, "ab.cubin")).length > 1000);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** |a − b| ≤ 1e-4 · max(|b|, scale) elementwise, scale = the largest |b| (the op suite's rule for this engine). */
function assertClose(actual: Float32Array, expected: Float32Array, what: string): void {
  const k = scaleTolerance(1e-4).values(actual, expected);
  if (k >= 0) assert.fail(`${what}: element ${k} is ${actual[k]}, expected ${expected[k]} (length ${actual.length})`);
}

interface Case {
  params: ParameterCollection;
  build: (cg: ComputationGraph) => Expression;
}

/**
 * The case on the CPU engine and on the emulated GPU engine (the op suite's comparison: loss, every node, every
 * parameter gradient, touched rows); returns the engine for inspection.
 */
async function compare(make: () => Case, strategy: BatchStrategy, what: string): Promise<AutobatchGpuEngine> {
  let engine: AutobatchGpuEngine | undefined;
  const d = await compareWithCpu(
    make,
    emulatedAutobatchEngine(strategy, (e) => {
      engine = e;
    }),
  );
  assert.equal(d, "", what);
  return engine!;
}

describe("GPU autobatch engine on an emulated device, against the CPU engine", () => {
  test("random graphs (every op, unreached nodes, computed weights and biases), both strategies", async () => {
    for (let seed = 1; seed <= 12; seed++) {
      for (const strategy of STRATEGIES) {
        await compare(
          () => {
            const m = randomModel(seed);
            return { params: m.params, build: (cg) => buildRandomGraph(cg, m, { seed, steps: 28 }) };
          },
          strategy,
          `seed ${seed} ${strategy}`,
        );
      }
    }
  });

  test("Tree-LSTM batches, both strategies", async () => {
    for (let seed = 1; seed <= 3; seed++) {
      const trees = randomTrees(seed, 5, { minWords: 1, maxWords: 9, vocab: 20 });
      for (const strategy of STRATEGIES) {
        await compare(
          () => {
            const m = treeLstmModel(seed, { hidden: 3, embed: 4, vocab: 20 });
            return { params: m.params, build: (cg) => buildTreeLstmBatch(cg, m, trees) };
          },
          strategy,
          `trees ${seed} ${strategy}`,
        );
      }
    }
  });

  test("batches wider than a block: 300-row products, 300-class softmax, H = 150 cells, a sum of 220", async () => {
    const gpu = await compare(() => wideCase(5), "agenda", "wide");
    const names = (gpu.device as EmulatedAutobatchDevice).log.map((c) => (c.kind === "kernel" ? c.name : c.kind));
    assert.ok(names.includes("ab_sum_wide"), "the loss is reduced by a block");
  });

  test("launches per batch: what the plan implies (products T + 2 forward, 2T + 2 backward, per-weight dW; views none)", () => {
    const trees = randomTrees(4, 4, { minWords: 2, maxWords: 8, vocab: 20 });
    for (const strategy of STRATEGIES) {
      const m = treeLstmModel(4, { hidden: 3, embed: 4, vocab: 20 });
      const dev = new EmulatedAutobatchDevice(m.params);
      const gpu = new AutobatchGpuEngine(m.params, { strategy }, dev);
      const cg = new ComputationGraph();
      const loss = buildTreeLstmBatch(cg, m, trees);
      gpu.forward(loss);
      const fwd = gpu.launchCounts();
      const plan = gpu.lastForwardPlan!;
      const expectF = expectedLaunches(cg, plan, "forward");
      assert.deepEqual(fwd, { ...expectF, copies: 1 }, `${strategy} forward`);
      gpu.backward(loss);
      const after = gpu.launchCounts();
      assert.equal(gpu.lastBackwardPlan, plan, "backward reuses the forward plan");
      const expectB = expectedLaunches(cg, plan, "backward", loss.id);
      assert.equal(after.kernels - fwd.kernels, expectB.kernels, `${strategy} backward kernels`);
      assert.equal(after.cublas - fwd.cublas, expectB.cublas, `${strategy} backward cuBLAS`);
      assert.equal(after.copies - fwd.copies, 3, "two memsets (zero, seed) and one table upload");
      console.log(
        `${strategy}: ${plan.batchCount} batches; forward ${expectF.kernels} kernels + ${expectF.cublas} GEMMs, ` +
          `backward ${expectB.kernels} + ${expectB.cublas}`,
      );
    }
  });

  test("incremental forward, a backward from an inner loss (gathers again), SGD and Adam steps", () => {
    for (const optimizer of ["sgd", "adam"] as const) {
      const trees = randomTrees(9, 4, { minWords: 2, maxWords: 7, vocab: 20 });
      const mR = treeLstmModel(9, { hidden: 4, embed: 3, vocab: 20 });
      const mG = treeLstmModel(9, { hidden: 4, embed: 3, vocab: 20 });
      const cpu = new CpuEngine(mR.params);
      const gpu = new AutobatchGpuEngine(mG.params, { strategy: "agenda" }, new EmulatedAutobatchDevice(mG.params));
      const tR = makeTrainer(optimizer, { learningRate: 0.05, clipThreshold: 1 });
      const tG = makeTrainer(optimizer, { learningRate: 0.05, clipThreshold: 1 });
      const cgR = new ComputationGraph();
      const cgG = new ComputationGraph();
      for (let step = 0; step < 3; step++) {
        cgR.renew();
        cgG.renew();
        const batch = trees.slice(step, step + 2);
        const lR = buildTreeLstmBatch(cgR, mR, batch);
        const lG = buildTreeLstmBatch(cgG, mG, batch);
        const mid = lG.id >> 1;
        assertClose(gpu.value(cgG.expression(mid)), cpu.value(cgR.expression(mid)), "the first half");
        const a = gpu.forwardScalar(lG);
        assert.equal(gpu.lastForwardPlan!.from, mid + 1, "the second forward plans only the rest");
        assert.ok(Math.abs(a - cpu.forwardScalar(lR)) <= 1e-4 * Math.abs(a), `loss at step ${step}`);
        cpu.backward(lR);
        gpu.backward(lG);
        assert.equal(gpu.lastBackwardPlan!.from, 0);
        cpu.update(tR);
        gpu.update(tG);
      }
      gpu.syncToHost();
      for (const p of mR.params.all) assertClose(mG.params.get(p.name).value, p.value, `${optimizer}: '${p.name}'`);
    }
  });

  test("an inner loss: unreached lookups are untouched, unreached products gathered again", () => {
    const pc = new ParameterCollection({ seed: 2 });
    const E = pc.addLookupParameters(6, 2, undefined, "E");
    const W = pc.addParameters([3, 2], undefined, "W");
    const dev = new EmulatedAutobatchDevice(pc);
    const gpu = new AutobatchGpuEngine(pc, { strategy: "depth" }, dev);
    const cg = new ComputationGraph();
    const inner = pickNegLogSoftmax(matVec(W, lookup(cg, E, 1)), 2);
    const outer = sum([inner, pickNegLogSoftmax(matVec(W, lookup(cg, E, 4)), 0)]);
    gpu.forward(outer);
    gpu.backward(inner);
    assert.deepEqual(gpu.device.touchedRows(E.index), [1]);
    const gE = dev.readGradient(E.index);
    assert.ok(gE[2] !== 0 && gE[8] === 0 && gE[9] === 0);
    // the matVec batch held both lookups; backward ran it for one, so its input was gathered again
    const gathers = dev.log.filter((c) => c.kind === "kernel" && c.name === "ab_copy_segments").length;
    assert.equal(gathers, 3, "lookup, product input (forward), product input (backward, one node)");
  });

  test("a pass larger than the aux area lays out a larger region and starts the graph again", async () => {
    // 400 products of one x of length 4096: few values, but 1.6 M gathered input floats (the aux area starts at 1 M)
    const make = (): Case => {
      const pc = new ParameterCollection({ seed: 3 });
      const W = pc.addParameters([1, 4096], { kind: "uniform", scale: 0.05 }, "W");
      const build = (cg: ComputationGraph) => {
        const x = tanh(
          input(
            cg,
            Float32Array.from({ length: 4096 }, (_, k) => Math.sin(k)),
          ),
        );
        const ys = Array.from({ length: 400 }, () => tanh(matVec(W, x)));
        return pickNegLogSoftmax(concat([sum(ys), tanh(x)]), 7);
      };
      return { params: pc, build };
    };
    const gpu = await compare(make, "agenda", "products larger than the aux area");
    const dev = gpu.device as EmulatedAutobatchDevice;
    // the first region; a larger one when the forward's gathered inputs overflow it; another when backward's
    // gradient scratch does (each time the graph is computed again, and the comparison above still holds)
    assert.equal(dev.regions, 3);
  });
});

describe("createEngine('autobatch')", () => {
  const available = cudaAvailable();
  const hasGpu = available.ok ? "this machine has a usable GPU" : false;

  test("--device cpu makes the batched CPU engine", () => {
    const pc = new ParameterCollection();
    pc.addParameters([2, 2]);
    const e = createEngine("autobatch", pc, { device: "cpu", batching: "depth" });
    assert.ok(e instanceof AutobatchCpuEngine);
    assert.equal((e as AutobatchCpuEngine).strategy, "depth");
  });

  test("without a GPU: names what is missing and suggests --device cpu", { skip: hasGpu }, () => {
    const pc = new ParameterCollection();
    pc.addParameters([2, 2]);
    for (const device of [undefined, "auto", "cuda:0"]) {
      assert.throws(
        () => createEngine("autobatch", pc, device === undefined ? {} : { device }),
        (e: unknown) => {
          assert.ok(e instanceof EngineUnavailableError, `got ${String(e)}`);
          assert.match(e.message, /the 'autobatch' engine needs a CUDA GPU/);
          assert.match(e.message, /libcuda\.so/);
          assert.match(e.message, /Use --device cpu \(the batched CPU engine\) or --engine cpu\.$/);
          return true;
        },
      );
    }
  });
});
