/**
 * The GPU engines as the op × engine suite's adapters (test/op-suite.ts `EngineUnderTest`): eager, the GPU autobatch
 * engine (both strategies, products by our GEMM kernels and by cuBLAS) and VPPS with one plan, each with its
 * tolerance against the CPU engine. Used by test/gpu/op-engines.test.ts and the model tests in test/gpu/.
 */
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AutobatchGpuEngine, type GemmMode } from "../../src/engines/autobatch/gpu-engine.js";
import { refusesOp } from "../../src/engines/autobatch/kernel-table.js";
import type { BatchStrategy } from "../../src/engines/autobatch/plan.js";
import { EagerEngine } from "../../src/engines/eager/engine.js";
import { EAGER_KERNELS } from "../../src/engines/eager/kernel-table.js";
import { Vpps } from "../../src/engines/vpps/vpps.js";
import { isUnsupported } from "../../src/graph/opcodes.js";
import {
  type EngineUnderTest,
  elementTolerance,
  engineRun,
  firstRefused,
  scaleTolerance,
  vppsMatrices,
  vppsRefuses,
  vppsTolerance,
} from "../op-suite.js";

const MiB = 1024 ** 2;
export const cacheDir = process.env["VPPS_TEST_CACHE"] ?? join(tmpdir(), "vpps-test-kernels");

/** The eager engine: |a − e| ≤ 1e-4 (1 + |e|) per element; touched rows in the CPU engine's order. */
export const eager: EngineUnderTest = {
  name: "eager",
  tolerance: elementTolerance(1e-4),
  touchedInOrder: true,
  refuses: (c) => firstRefused(c, (op) => isUnsupported(EAGER_KERNELS[op]!)),
  run(params, cg, loss) {
    const e = new EagerEngine(params, { poolBytes: 256 * MiB });
    return engineRun(e, cg, loss, {
      parameterGradient: (i) => e.device.readGradient(i),
      touchedRows: (i) => e.device.touchedRows(i),
    });
  },
};

export function autobatch(strategy: BatchStrategy, gemm: GemmMode): EngineUnderTest {
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
export const vpps: EngineUnderTest = {
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

export const GPU_ENGINES: readonly EngineUnderTest[] = [
  eager,
  autobatch("depth", "kernels"),
  autobatch("agenda", "kernels"),
  autobatch("depth", "cublas"),
  autobatch("agenda", "cublas"),
  vpps,
];
