// TD-RNN, TD-LSTM and RvNN on every engine this machine runs without a GPU, against the CPU engine: the batched CPU
// engine (depth, agenda), the GPU autobatch engine on its emulated device (depth, agenda) and VPPS on its emulator —
// node by node (values, gradients: a pyramid node read by two parents must get both), every parameter gradient, and
// the weights after SGD and Adam steps. VPPS runs these models unchanged (no op or graph shape it refuses), so it is
// checked here like the Tree-LSTM: several plans, tiles, many processor interleavings.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type DeviceModel, H100_SXM } from "../src/cuda/hw/device-model.js";
import { AutobatchCpuEngine } from "../src/engines/autobatch/cpu-batched.js";
import { AutobatchGpuEngine } from "../src/engines/autobatch/gpu-engine.js";
import type { BatchStrategy } from "../src/engines/autobatch/plan.js";
import { CpuEngine } from "../src/engines/cpu.js";
import type { Engine } from "../src/engines/engine.js";
import { createModelLayout } from "../src/engines/vpps/plan/layout.js";
import { type PlanOptions, planVpps } from "../src/engines/vpps/plan/plan.js";
import { VppsScheduler } from "../src/engines/vpps/schedule/scheduler.js";
import { emulateBatch } from "../src/engines/vpps/script/emulate-batch.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { onChipMatrices } from "../src/model/parameters.js";
import { makeTrainer } from "../src/optim/trainers.js";
import { EmulatedAutobatchDevice } from "./autobatch-emulator.js";
import { CPU_SIDE_ENGINES, compareWithCpu, scaleTolerance } from "./op-suite.js";
import { SENTENCE_MODELS, type SentenceCase } from "./sentence-cases.js";
import { referenceSgdBatch, tensorDifference } from "./vpps-reference.js";
import { adamTrajectories } from "./vpps-trajectories.js";

const STRATEGIES: readonly BatchStrategy[] = ["depth", "agenda"];
/** A small GPU: few CTAs, so matrices spread over several slots of each CTA and processors share work. */
const SMALL: DeviceModel = { ...H100_SXM, name: "small test GPU", smCount: 3 };

/** Sizes per model: TD-RNN's embedding is its hidden size. */
const sizes = (name: string): [number, number] => (name === "td-rnn" ? [5, 5] : [4, 3]);

describe("every CPU-side engine equals the CPU engine, node by node", () => {
  for (const { name, make } of SENTENCE_MODELS) {
    for (const engine of CPU_SIDE_ENGINES) {
      test(`${name}: ${engine.name}`, async () => {
        const [h, e] = sizes(name);
        assert.equal(await compareWithCpu(() => make(3, h, e), engine), "");
      });
    }
    test(`${name}: a batch of one one-word sentence (the composition weights unused), every engine`, async () => {
      const [h, e] = sizes(name);
      const one = () => {
        const c = make(2, h, e);
        return { params: c.params, build: (cg: ComputationGraph) => c.build(cg, [2]) };
      };
      for (const engine of CPU_SIDE_ENGINES) assert.equal(await compareWithCpu(one, engine), "", engine.name);
    });
  }
});

/** |a − e| ≤ 1e-4 · max(|e|, the tensor's largest |e|). */
function assertClose(actual: Float32Array, expected: Float32Array, what: string): void {
  const k = scaleTolerance(1e-4).values(actual, expected);
  if (k >= 0) assert.fail(`${what}: element ${k} is ${actual[k]}, expected ${expected[k]}`);
}

describe("training steps: the autobatch engines' losses and updated weights equal the CPU engine's", () => {
  const engines: { name: string; make: (c: SentenceCase) => Engine }[] = [
    ...STRATEGIES.map((s) => ({
      name: `autobatch CPU (${s})`,
      make: (c: SentenceCase) => new AutobatchCpuEngine(c.params, { strategy: s }),
    })),
    ...STRATEGIES.map((s) => ({
      name: `autobatch GPU (${s}, emulated device)`,
      make: (c: SentenceCase) =>
        new AutobatchGpuEngine(c.params, { strategy: s }, new EmulatedAutobatchDevice(c.params)),
    })),
  ];
  for (const { name, make } of SENTENCE_MODELS) {
    for (const optimizer of ["sgd", "adam"] as const) {
      test(`${name}, ${optimizer}: 3 batches`, () => {
        const [h, e] = sizes(name);
        const batches = [
          [0, 1, 2],
          [3, 4],
          [5, 0, 3],
        ];
        for (const engine of engines) {
          const ref = make(4, h, e);
          const got = make(4, h, e);
          const cpu = new CpuEngine(ref.params);
          const other = engine.make(got);
          const tR = makeTrainer(optimizer, { learningRate: 0.05, clipThreshold: 1 });
          const tG = makeTrainer(optimizer, { learningRate: 0.05, clipThreshold: 1 });
          const cgR = new ComputationGraph();
          const cgG = new ComputationGraph();
          for (const [k, batch] of batches.entries()) {
            cgR.renew();
            cgG.renew();
            const lR = ref.build(cgR, batch);
            const lG = got.build(cgG, batch);
            const a = other.forwardScalar(lG);
            const b = cpu.forwardScalar(lR);
            assert.ok(Math.abs(a - b) <= 1e-5 * Math.abs(b), `${engine.name}: loss of batch ${k}: ${a} vs ${b}`);
            cpu.backward(lR);
            other.backward(lG);
            cpu.update(tR);
            other.update(tG);
          }
          other.syncToHost();
          for (const p of ref.params.all) {
            assertClose(got.params.get(p.name).value, p.value, `${engine.name}, ${optimizer}: '${p.name}'`);
          }
          other.dispose();
        }
      });
    }
  }
});

describe("VPPS on its emulator: loss, gradients and updated weights of the CPU engine", () => {
  const plans: { name: string; plan: PlanOptions; device: DeviceModel; tileEntries?: number }[] = [
    { name: "1 CTA/SM, rpw 1", plan: { ctasPerSm: 1, rowsPerWarp: 1 }, device: SMALL },
    {
      name: "2 CTAs/SM, rpw 2, transposed copies",
      plan: { ctasPerSm: 2, rowsPerWarp: 2, transposed: true },
      device: SMALL,
    },
    { name: "tiles (tileEntries 2)", plan: { ctasPerSm: 1, rowsPerWarp: 1 }, device: SMALL, tileEntries: 2 },
    { name: "gradients by GEMM", plan: { ctasPerSm: 1, rowsPerWarp: 1, gradients: "gemm" }, device: SMALL },
    { name: "132 CTAs (H100 grid)", plan: { ctasPerSm: 1, rowsPerWarp: 1 }, device: H100_SXM },
  ];
  for (const { name, make } of SENTENCE_MODELS) {
    test(`${name}, SGD with clipping: ${plans.length} plans, random and greedy interleavings`, () => {
      const [h, e] = sizes(name);
      const c = make(6, h, e);
      const cg = new ComputationGraph();
      const loss = c.build(cg);
      const ref = referenceSgdBatch(c.params, loss, 0.1, 1);
      const values = c.params.all.map((p) => p.value);
      let stalls = 0;
      for (const p of plans) {
        const model = createModelLayout(c.params.all, planVpps(onChipMatrices(c.params), p.device, p.plan));
        const opts = { exportGradients: true, ...(p.tileEntries !== undefined ? { tileEntries: p.tileEntries } : {}) };
        const sched = new VppsScheduler(model, opts).schedule(cg, loss);
        for (const [seed, interleaving] of [
          [1, "random"],
          [2, "random"],
          [1, "greedy"],
        ] as const) {
          const got = emulateBatch(model, sched, cg, values, { seed, interleaving, learningRate: 0.1, clip: 1 });
          stalls += got.stats.stalls;
          const where = `${p.name}, ${interleaving} seed ${seed}`;
          assert.ok(Math.abs(got.loss - ref.loss) <= 1e-5 * Math.max(1, ref.loss), `${where}: loss ${got.loss}`);
          for (const [i, q] of c.params.all.entries()) {
            const step = (v: Float32Array) => Float32Array.from(v, (x, k) => x - q.value[k]!);
            const d =
              tensorDifference(`gradient of ${q.name}`, ref.gradients[i]!, got.gradients[i]!) ||
              tensorDifference(`update of ${q.name}`, step(ref.values[i]!), step(got.values[i]!));
            assert.equal(d, "", where);
          }
        }
      }
      assert.ok(stalls > 0, "no processor ever waited: the interleavings did not test the barriers");
    });

    test(`${name}: a graph snapshot (what the schedule workers read) schedules to the same script`, () => {
      const [h, e] = sizes(name);
      const c = make(6, h, e);
      const cg = new ComputationGraph();
      const loss = c.build(cg);
      const model = createModelLayout(c.params.all, planVpps(onChipMatrices(c.params), SMALL, { rowsPerWarp: 1 }));
      const direct = new VppsScheduler(model, {}).schedule(cg, loss);
      const copy = ComputationGraph.fromSnapshot(cg.snapshot(), c.params.all);
      const viaSnapshot = new VppsScheduler(model, {}).schedule(copy, copy.expression(loss.id));
      assert.deepEqual(viaSnapshot.script, direct.script);
      assert.equal(viaSnapshot.barriers, direct.barriers);
    });

    test(`${name}: 3 Adam steps (kernel update, and tiles)`, () => {
      const [h, e] = sizes(name);
      const c = make(7, h, e);
      const batches = [
        [0, 1, 2],
        [3, 4],
        [5, 0, 3],
      ];
      const graphs = (k: number) => {
        const cg = new ComputationGraph();
        return { cg, loss: c.build(cg, batches[k]) };
      };
      const loose = { count: 0, total: 0 };
      for (const tileEntries of [undefined, 2]) {
        const out = adamTrajectories(
          c.params,
          graphs,
          SMALL,
          { ctasPerSm: 1, rowsPerWarp: 1 },
          1,
          0.01,
          3,
          loose,
          tileEntries,
        );
        assert.deepEqual(out.slice(0, 3), [], `tileEntries ${tileEntries ?? "default"}`);
      }
      assert.ok(loose.count <= 0.01 * loose.total, `${loose.count} of ${loose.total} steps compared loosely`);
    });
  }
});
