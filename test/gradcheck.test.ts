// The fused cell against its composition from plain ops. Every op's own gradient check against float64 finite
// differences is in the op × engine suite (test/op-engines.test.ts, cases in test/op-cases.ts).

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { CpuEngine } from "../src/engines/cpu.js";
import { ComputationGraph, type Expression } from "../src/graph/graph.js";
import { type Parameter, ParameterCollection } from "../src/model/parameters.js";
import {
  add,
  cmul,
  concat,
  logistic,
  lstmCell,
  matVec,
  parameter,
  pickNegLogSoftmax,
  pickRange,
  tanh,
} from "../src/ops/index.js";

/** A collection with one vector per entry of `dims`, uniformly random in ±1 (seeded). */
function vectors(seed: number, ...dims: number[]): { pc: ParameterCollection; ps: Parameter[] } {
  const pc = new ParameterCollection({ seed });
  const ps = dims.map((n, k) => pc.addParameters(n, { kind: "uniform", scale: 1 }, `v${k}`));
  return { pc, ps };
}

/** The unfused composition of lstmCell from plain ops: the function the fused op must equal. */
function lstmCellFromOps(gates: Expression, cs: Expression[], H: number): Expression {
  const gate = (j: number) => pickRange(gates, j * H, (j + 1) * H);
  let c = cmul(logistic(gate(0)), tanh(gate(2)));
  cs.forEach((cj, j) => {
    c = add(c, cmul(logistic(gate(3 + j)), cj));
  });
  const h = cmul(logistic(gate(1)), tanh(c));
  return concat([h, c]);
}

describe("fused cells equal their unfused composition", () => {
  for (const k of [0, 1, 2]) {
    test(`lstmCell k=${k}: values and gradients`, () => {
      const H = 5;
      const { pc, ps } = vectors(20 + k, (3 + k) * H, ...new Array<number>(k).fill(H));
      const W = pc.addParameters([7, 2 * H], undefined, "Wout");
      const run = (fused: boolean) => {
        const engine = new CpuEngine(pc);
        const cg = new ComputationGraph();
        const gates = parameter(cg, ps[0]!);
        const cs = ps.slice(1).map((p) => parameter(cg, p));
        const out = fused ? lstmCell(gates, cs) : lstmCellFromOps(gates, cs, H);
        const l = pickNegLogSoftmax(matVec(W, out), 3);
        const value = engine.value(out);
        pc.zeroGradients();
        engine.backward(l);
        const grads = pc.all.map((p) => Float32Array.from(p.grad));
        pc.zeroGradients();
        return { value, grads, nodes: cg.size };
      };
      const a = run(true);
      const b = run(false);
      assert.ok(a.nodes < b.nodes, "the fused cell should use fewer nodes");
      for (let i = 0; i < a.value.length; i++) assert.ok(Math.abs(a.value[i]! - b.value[i]!) < 1e-6, `value ${i}`);
      a.grads.forEach((g, p) => {
        for (let i = 0; i < g.length; i++) {
          assert.ok(Math.abs(g[i]! - b.grads[p]![i]!) < 1e-5, `gradient of ${pc.all[p]!.name}[${i}]`);
        }
      });
    });
  }
});
