import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { CpuEngine } from "../src/engines/cpu.js";
import { ComputationGraph, type Expression } from "../src/graph/graph.js";
import { type Parameter, ParameterCollection } from "../src/model/parameters.js";
import {
  add,
  affine,
  cmul,
  concat,
  dropout,
  logistic,
  lookup,
  lstmCell,
  matVec,
  parameter,
  pickNegLogSoftmax,
  pickRange,
  relu,
  sub,
  sum,
  tanh,
} from "../src/ops/index.js";
import { gradientCheck } from "./helpers.js";

/** A collection with one vector per entry of `dims`, uniformly random in ±1 (seeded). */
function vectors(seed: number, ...dims: number[]): { pc: ParameterCollection; ps: Parameter[] } {
  const pc = new ParameterCollection({ seed });
  const ps = dims.map((n, k) => pc.addParameters(n, { kind: "uniform", scale: 1 }, `v${k}`));
  return { pc, ps };
}

function expectGradientsMatch(pc: ParameterCollection, build: (cg: ComputationGraph) => Expression): void {
  const { checked, mismatches } = gradientCheck(pc, build);
  assert.ok(checked > 0, "no gradient element was checked");
  assert.deepEqual(mismatches.slice(0, 5), [], `${mismatches.length} of ${checked} gradient elements differ`);
}

const loss = (y: Expression, label = 1): Expression => pickNegLogSoftmax(y, label);

describe("gradient checks against float64 central differences", () => {
  test("matVec", () => {
    const pc = new ParameterCollection({ seed: 3 });
    const W = pc.addParameters([3, 4], undefined, "W");
    const x = pc.addParameters(4, { kind: "uniform", scale: 1 }, "x");
    expectGradientsMatch(pc, (cg) => loss(matVec(W, parameter(cg, x))));
  });

  test("affine with two products", () => {
    const pc = new ParameterCollection({ seed: 4 });
    const b = pc.addParameters(3, { kind: "uniform", scale: 1 }, "b");
    const W1 = pc.addParameters([3, 4], undefined, "W1");
    const W2 = pc.addParameters([3, 2], undefined, "W2");
    const x1 = pc.addParameters(4, { kind: "uniform", scale: 1 }, "x1");
    const x2 = pc.addParameters(2, { kind: "uniform", scale: 1 }, "x2");
    expectGradientsMatch(pc, (cg) => loss(affine([b, W1, parameter(cg, x1), W2, parameter(cg, x2)]), 2));
  });

  test("concat and pickRange", () => {
    const { pc, ps } = vectors(5, 2, 3);
    expectGradientsMatch(pc, (cg) => loss(pickRange(concat([parameter(cg, ps[0]!), ps[1]!]), 1, 5), 0));
  });

  for (const [name, f] of [
    ["add", add],
    ["sub", sub],
    ["cmul", cmul],
  ] as const) {
    test(name, () => {
      const { pc, ps } = vectors(6, 4, 4);
      expectGradientsMatch(pc, (cg) => loss(f(parameter(cg, ps[0]!), ps[1]!), 3));
    });
  }

  for (const [name, f] of [
    ["tanh", tanh],
    ["logistic", logistic],
    ["relu", relu],
  ] as const) {
    test(name, () => {
      const { pc, ps } = vectors(7, 6);
      // keep relu's inputs away from its kink, where the derivative is undefined
      const v = ps[0]!.value;
      for (let k = 0; k < v.length; k++) if (Math.abs(v[k]!) < 0.05) v[k] = 0.3;
      expectGradientsMatch(pc, (cg) => loss(f(parameter(cg, ps[0]!)), 2));
    });
  }

  test("dropout (a fixed mask for a fixed key)", () => {
    const { pc, ps } = vectors(8, 16);
    expectGradientsMatch(pc, (cg) => {
      cg.dropoutKey = 1234;
      return loss(dropout(tanh(parameter(cg, ps[0]!)), 0.4), 5);
    });
  });

  test("pickNegLogSoftmax for every label", () => {
    const { pc, ps } = vectors(9, 5);
    for (let label = 0; label < 5; label++) expectGradientsMatch(pc, (cg) => loss(parameter(cg, ps[0]!), label));
  });

  test("sum (esum) of three vectors", () => {
    const { pc, ps } = vectors(10, 4, 4, 4);
    expectGradientsMatch(pc, (cg) => loss(sum([parameter(cg, ps[0]!), ps[1]!, tanh(parameter(cg, ps[2]!))]), 0));
  });

  test("lookup with a row used twice (sparse, accumulated)", () => {
    const pc = new ParameterCollection({ seed: 11 });
    const E = pc.addLookupParameters(5, 3, { kind: "uniform", scale: 1 }, "E");
    expectGradientsMatch(pc, (cg) => loss(concat([lookup(cg, E, 1), lookup(cg, E, 3), lookup(cg, E, 1)]), 4));
  });

  test("reused node: gradients accumulate over both uses", () => {
    const { pc, ps } = vectors(12, 4);
    expectGradientsMatch(pc, (cg) => {
      const y = tanh(parameter(cg, ps[0]!));
      return loss(cmul(add(y, y), y), 1);
    });
  });

  for (const k of [0, 1, 2, 3]) {
    test(`lstmCell with ${k} children (${["leaf", "LSTM step", "binary Tree-LSTM node", "3-ary node"][k]})`, () => {
      const H = 3;
      const { pc, ps } = vectors(13 + k, (3 + k) * H, ...new Array<number>(k).fill(H));
      expectGradientsMatch(pc, (cg) =>
        loss(
          lstmCell(
            parameter(cg, ps[0]!),
            ps.slice(1).map((p) => parameter(cg, p)),
          ),
          4,
        ),
      );
    });
  }
});

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
