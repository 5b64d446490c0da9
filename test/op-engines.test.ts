// The op × engine suite without a GPU: every op's cases (test/op-cases.ts) — the CPU engine's gradients against
// float64 finite differences, then every engine that runs here (the batched CPU engine, the GPU autobatch engine on
// its emulated device, VPPS on its emulator) against the CPU engine, node by node. test/gpu/op-engines.test.ts runs
// the same cases on the real GPU engines.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { CpuEngine } from "../src/engines/cpu.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { OP_COUNT, Op, opName } from "../src/graph/opcodes.js";
import { gradientCheck } from "./helpers.js";
import { DROPOUT_ELEMENTS, DROPOUT_P, OP_CASES } from "./op-cases.js";
import { assertRefuses, CPU_SIDE_ENGINES, compareWithCpu } from "./op-suite.js";

for (let op = 0; op < OP_COUNT; op++) {
  describe(`op ${opName(op)}`, () => {
    const cases = OP_CASES[op as Op];
    test("has cases", () => assert.ok(cases.length > 0));
    for (const c of cases) {
      if (c.gradcheck !== false) {
        test(`${c.name}: CPU gradients equal float64 finite differences`, () => {
          const { params, build } = c.make();
          const { checked, mismatches } = gradientCheck(params, build);
          assert.ok(checked > 0, "no gradient element was checked");
          assert.deepEqual(mismatches.slice(0, 5), [], `${mismatches.length} of ${checked} gradient elements differ`);
        });
      }
      for (const engine of CPU_SIDE_ENGINES) {
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

test(`dropout drops a fraction p = ${DROPOUT_P} of ${DROPOUT_ELEMENTS} elements`, () => {
  const c = OP_CASES[Op.Dropout].find((k) => k.gradcheck === false)!;
  const { params, build } = c.make();
  const cg = new ComputationGraph();
  const loss = build(cg);
  const cpu = new CpuEngine(params);
  cpu.forward(loss);
  const node = [...Array(cg.size).keys()].find((i) => cg.op[i] === Op.Dropout)!;
  const values = cpu.value(cg.expression(node));
  const dropped = values.filter((x) => x === 0).length;
  assert.ok(Math.abs(dropped / DROPOUT_ELEMENTS - DROPOUT_P) < 0.02, `dropped fraction ${dropped / DROPOUT_ELEMENTS}`);
});
