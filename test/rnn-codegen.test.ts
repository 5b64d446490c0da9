// The persistent RNN kernels' code generation pieces without a GPU: the cell table (one file per cell, rendered by
// both kernel templates) and the named parameter tables the templates and the launches share.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { H100_SXM } from "../src/cuda/hw/device-model.js";
import { gatesOf, RNN_CELLS } from "../src/ops/recurrent.js";
import {
  CELLS,
  forwardKernelSource,
  kernelArgs,
  PERSISTENT_BACKWARD_PARAMS,
  PERSISTENT_FORWARD_PARAMS,
  STEPWISE_BACKWARD_PARAMS,
  STEPWISE_FORWARD_PARAMS,
  savedFloats,
  stepwiseKernelSource,
} from "../src/rnn/codegen/index.js";
import { paramTable, renderParams } from "../src/rnn/codegen/params.js";
import { planRnnLayer } from "../src/rnn/plan/index.js";

describe("the cell table", () => {
  test("one entry per cell, under its own name; saved floats are gates + state + h(t−1) per unit", () => {
    assert.deepEqual(Object.keys(CELLS).sort(), [...RNN_CELLS].sort());
    for (const cell of RNN_CELLS) {
      assert.equal(CELLS[cell].name, cell);
      const G = gatesOf(cell);
      assert.equal(savedFloats(cell, 8, 3), (G === 1 ? 1 : G + 2) * 8 * 3, cell);
    }
    assert.equal(CELLS.lstm.state?.name, "c");
    assert.equal(CELLS.gru.state, undefined);
  });
});

describe("parameter tables", () => {
  const tables = {
    PERSISTENT_FORWARD_PARAMS,
    PERSISTENT_BACKWARD_PARAMS,
    STEPWISE_FORWARD_PARAMS,
    STEPWISE_BACKWARD_PARAMS,
  };

  test("names are unique and every table is rendered into its kernel's signature", () => {
    for (const [what, t] of Object.entries(tables)) {
      assert.equal(t.names.size, t.params.length, `${what}: a name twice`);
    }
    const p = planRnnLayer("lstm", 512, H100_SXM);
    if (!p.fits) throw new Error(p.reason);
    assert.ok(forwardKernelSource(p.forward).includes(`(\n${renderParams(PERSISTENT_FORWARD_PARAMS)}) {`));
    const step = stepwiseKernelSource("gru", 256);
    assert.ok(step.includes(`(\n${renderParams(STEPWISE_FORWARD_PARAMS)}) {`));
    assert.ok(step.includes(`(\n${renderParams(STEPWISE_BACKWARD_PARAMS)}) {`));
  });

  test("a launch's record comes out in the table's order, packed as each type says", () => {
    const t = paramTable([
      ["const float* __restrict__ x", "int n"],
      ["float* y", "float a"],
    ]);
    assert.deepEqual(kernelArgs(t, { a: 2.5, y: 4096, n: 7, x: 8192 }, "k"), [
      { type: "u64", value: 8192 },
      { type: "i32", value: 7 },
      { type: "u64", value: 4096 },
      { type: "f32", value: 2.5 },
    ]);
    assert.equal(renderParams(t), "    const float* __restrict__ x, int n,\n    float* y, float a");
  });

  test("a missing or unknown name is refused by name", () => {
    const t = paramTable([["float* y", "int n"]]);
    assert.throws(() => kernelArgs(t, { y: 1 } as never, "k"), /k: parameter 'n' has no value/);
    assert.throws(() => kernelArgs(t, { y: 1, n: 2, m: 3 } as never, "k"), /k: no parameter 'm'/);
    assert.throws(() => paramTable([["double z"]]), /parameter 'z' has type 'double'/);
  });
});
