// What VPPS cannot do reaches the user as one line naming the op or the barrier and what to do — a UserError, which
// the command line prints as `vpps: <message>` without a stack trace (src/cli/main.ts): an op without VPPS
// instructions, refused by the scheduler (the emulator path: the scheduler is what the schedule workers run), and a
// barrier timeout decoded from a kernel's status block. (On a GPU: test/gpu/vpps.test.ts times a barrier out for
// real, test/gpu/vpps-cli.test.ts refuses --rnn persistent from the command line.)

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { GRID_ERRORS } from "../src/codegen/grid-barrier.js";
import { H100_SXM } from "../src/cuda/hw/device-model.js";
import { createModelLayout } from "../src/engines/vpps/plan/layout.js";
import { planVpps } from "../src/engines/vpps/plan/plan.js";
import { decodeKernelStatus, VppsKernelError } from "../src/engines/vpps/runtime/pipeline.js";
import { refusal, refusedOps } from "../src/engines/vpps/schedule/kernel-table.js";
import { VppsScheduler } from "../src/engines/vpps/schedule/scheduler.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { type Op, opName, UnsupportedOpError } from "../src/graph/opcodes.js";
import { onChipMatrices, ParameterCollection } from "../src/model/parameters.js";
import { affineRows, lookupRows, pickNegLogSoftmaxRows } from "../src/ops/rows.js";
import { parameter } from "../src/ops/structure.js";
import { isUserError } from "../src/util/errors.js";

const oneLine = (m: string) => !m.includes("\n");

describe("VPPS's errors are one line", () => {
  test("an op VPPS has no instructions for (the row-batch ops) is refused by the scheduler, naming the op and what to do", () => {
    const pc = new ParameterCollection({ seed: 1 });
    const E = pc.addLookupParameters(10, 8, undefined, "E");
    const W = pc.addParameters([5, 8], undefined, "W");
    const b = pc.addParameters([5], undefined, "b");
    const model = createModelLayout(pc.all, planVpps(onChipMatrices(pc), H100_SXM));
    const cg = new ComputationGraph();
    const x = lookupRows(cg, E, [1, 2, 3]);
    const loss = pickNegLogSoftmaxRows(affineRows(parameter(cg, b), parameter(cg, W), x), [0, 4, 2]);
    assert.throws(
      () => new VppsScheduler(model, {}).schedule(cg, loss),
      (e: unknown) =>
        e instanceof UnsupportedOpError &&
        isUserError(e) &&
        oneLine(e.message) &&
        /^vpps: op 'lookupRows' is not supported: .*--rnn steps for VPPS/.test(e.message),
    );
  });

  test("every op VPPS refuses is refused in one line naming it and the engine or formulation to use instead", () => {
    const refused = refusedOps();
    const names: string[] = [];
    for (let op = 0; op < refused.length; op++) {
      if (refused[op] !== 1) continue;
      const e = refusal(op as Op);
      names.push(opName(op as Op));
      assert.ok(isUserError(e) && oneLine(e.message), e.message);
      assert.match(e.message, new RegExp(`op '${opName(op as Op)}' is not supported: .*(--engine \\w+|--rnn steps)`));
    }
    assert.ok(names.includes("rnn") && names.includes("conv2d") && names.includes("lookupRows"), names.join());
  });

  test("a barrier timeout decoded from the status block names the processor and barrier, and says what to do", () => {
    const status = [GRID_ERRORS.barrierTimeout, 17, 42, 3, 4, 900];
    const e = decodeKernelStatus(status, "vpps_model_cta1_rpw1", 7);
    assert.ok(e instanceof VppsKernelError);
    assert.ok(isUserError(e), "printed as one line by the command line, not as a bug with its trace");
    assert.ok(oneLine(e.message), e.message);
    assert.match(e.message, /processor \(CTA\) 17 timed out waiting on barrier 42 .* expected 4 signals, saw 3/);
    assert.match(e.message, /run it with the GPU to itself .* VPPS_DUMP=<dir>/);
  });
});
