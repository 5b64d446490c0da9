// The op × engine suite on a real GPU: every op's cases (test/op-cases.ts) on the eager engine, the GPU autobatch
// engine (both strategies, products by our GEMM kernels and by cuBLAS) and VPPS (the graphs it runs), each against
// the CPU engine node by node (test/op-suite.ts). Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { cudaAvailable } from "../../src/cuda/index.js";
import { OP_COUNT, type Op, opName } from "../../src/graph/opcodes.js";
import { OP_CASES } from "../op-cases.js";
import { assertRefuses, compareWithCpu } from "../op-suite.js";
import { GPU_ENGINES as ENGINES } from "./engines.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

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
