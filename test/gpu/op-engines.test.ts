// The op × engine suite on a real GPU: every op's cases (test/op-cases.ts) on the eager engine, the GPU autobatch
// engine (both strategies, products by our GEMM kernels and by cuBLAS) and VPPS (the graphs it runs), each against
// the CPU engine node by node (test/op-suite.ts). Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { cudaAvailable } from "../../src/cuda/index.js";
import { AutobatchGpuEngine, type GemmMode } from "../../src/engines/autobatch/gpu-engine.js";
import { refusesOp } from "../../src/engines/autobatch/kernel-table.js";
import type { BatchStrategy } from "../../src/engines/autobatch/plan.js";
import { EagerEngine } from "../../src/engines/eager/engine.js";
import { Vpps } from "../../src/engines/vpps/vpps.js";
import { OP_COUNT, type Op, opName } from "../../src/graph/opcodes.js";
import { OP_CASES } from "../op-cases.js";
import {
  assertRefuses,
  compareWithCpu,
  type EngineUnderTest,
  elementTolerance,
  engineRun,
  firstRefused,
  scaleTolerance,
  vppsMatrices,
  vppsRefuses,
  vppsTolerance,
} from "../op-suite.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const MiB = 1024 ** 2;
const cacheDir = process.env["VPPS_TEST_CACHE"] ?? join(tmpdir(), "vpps-test-kernels");

/** The eager engine: |a − e| ≤ 1e-4 (1 + |e|) per element; touched rows in the CPU engine's order. */
const eager: EngineUnderTest = {
  name: "eager",
  tolerance: elementTolerance(1e-4),
  touchedInOrder: true,
  run(params, cg, loss) {
    const e = new EagerEngine(params, { poolBytes: 256 * MiB });
    return engineRun(e, cg, loss, {
      parameterGradient: (i) => e.device.readGradient(i),
      touchedRows: (i) => e.device.touchedRows(i),
    });
  },
};

function autobatch(strategy: BatchStrategy, gemm: GemmMode): EngineUnderTest {
  return {
    name: `autobatch GPU (${strategy}, ${gemm})`,
    tolerance: scaleTolerance(1e-4),
    refuses: (c) => firstRefused(c, refusesOp),
    run(params, cg, loss) {
      const e = new AutobatchGpuEngine(params, { strategy, gemm, poolBytes: 256 * MiB });
      return engineRun(e, cg, loss, {
        parameterGradient: (i) => e.device.readGradient(i),
        touchedRows: (i) => e.device.touchedRows(i),
      });
    },
  };
}

/** VPPS with one plan (rpw 1, one CTA per SM, no transposed copies): loss and parameter gradients. */
const vpps: EngineUnderTest = {
  name: "VPPS",
  tolerance: vppsTolerance(1e-4, 1e-9),
  skip: (c) => c.notOnVpps,
  refuses: vppsRefuses,
  async run(params, cg, loss) {
    vppsMatrices(params);
    const v = await Vpps.create(params, {
      cacheDir,
      exportGradients: true,
      poolBytes: 256 * MiB,
      name: "op_suite",
      training: { learningRate: 0.05, clip: 0 },
      variants: { rowsPerWarp: 1, ctasPerSm: 1, transposed: false },
      host: { scheduleWorkers: 0 },
    });
    try {
      v.fb(cg, loss);
      const value = await v.syncLatestLoss();
      const gradients = v.gradients();
      return { loss: value, parameterGradient: (i) => gradients[i]!, dispose: () => v.dispose() };
    } catch (e) {
      v.dispose();
      throw e;
    }
  },
};

const ENGINES: readonly EngineUnderTest[] = [
  eager,
  autobatch("depth", "kernels"),
  autobatch("agenda", "kernels"),
  autobatch("depth", "cublas"),
  autobatch("agenda", "cublas"),
  vpps,
];

for (let op = 0; op < OP_COUNT; op++) {
  describe(`op ${opName(op)} on the GPU engines`, { skip }, () => {
    for (const c of OP_CASES[op as Op]) {
      for (const engine of ENGINES) {
        const refused = engine.refuses?.(c);
        if (refused !== undefined) {
          test(`${c.name}: ${engine.name} refuses it, naming op ${opName(refused)}`, () =>
            assertRefuses(c, engine, refused));
          continue;
        }
        test(`${c.name}: ${engine.name} equals the CPU engine`, { skip: engine.skip?.(c) ?? false }, async () => {
          assert.equal(await compareWithCpu(c.make, engine), "");
        });
      }
    }
  });
}
