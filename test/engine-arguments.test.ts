// The engines' entry points refuse what is not an expression (or, for a loss, not a scalar one) with one ShapeError
// line naming the method and the argument, instead of a TypeError from inside.
// Every engine that runs here is tried; VPPS's entry points (trainStep, forwardScalar, backward, Vpps.fb) call the
// same checks, tried here directly and on a GPU in test/gpu/collections.test.ts.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { AutobatchCpuEngine } from "../src/engines/autobatch/cpu-batched.js";
import { AutobatchGpuEngine } from "../src/engines/autobatch/gpu-engine.js";
import { CpuEngine } from "../src/engines/cpu.js";
import { type Engine, requireExpression, requireScalar } from "../src/engines/engine.js";
import { ComputationGraph, ShapeError } from "../src/graph/graph.js";
import { ParameterCollection } from "../src/model/parameters.js";
import { input, tanh } from "../src/ops/index.js";
import { EmulatedAutobatchDevice } from "./autobatch-emulator.js";

const ENGINES: readonly [string, (pc: ParameterCollection) => Engine][] = [
  ["cpu", (pc) => new CpuEngine(pc)],
  ["autobatch (CPU)", (pc) => new AutobatchCpuEngine(pc)],
  ["autobatch (GPU, emulated)", (pc) => new AutobatchGpuEngine(pc, {}, new EmulatedAutobatchDevice(pc, 1 << 21))],
];

// biome-ignore lint/suspicious/noExplicitAny: JavaScript callers pass anything
const bad = (v: unknown): any => v;

describe("engines refuse a non-expression and a loss that is not a scalar", () => {
  for (const [label, make] of ENGINES) {
    test(label, () => {
      const pc = new ParameterCollection({ seed: 1 });
      pc.addParameters([2, 2], undefined, "W");
      const engine = make(pc);
      try {
        const cg = new ComputationGraph();
        const v = tanh(input(cg, [1, 2, 3]));
        const cases: [() => unknown, string][] = [
          [() => engine.forward(bad(undefined)), "forward: argument 'e' must be an Expression; got undefined"],
          [() => engine.value(bad(3)), "value: argument 'e' must be an Expression; got 3"],
          [() => engine.forwardScalar(bad(null)), "forwardScalar: argument 'e' must be an Expression; got null"],
          [() => engine.forwardScalar(v), "forwardScalar: argument 'e' has shape [3]; expected a scalar"],
          [
            () => engine.backward(bad("loss")),
            `backward: argument 'loss' must be an Expression; got the string "loss"`,
          ],
          [() => engine.backward(v), "backward: argument 'loss' has shape [3]; expected a scalar"],
          [() => engine.gradient(bad({})), "gradient: argument 'e' must be an Expression; got an object"],
        ];
        for (const [call, message] of cases) {
          assert.throws(call, (e: unknown) => e instanceof ShapeError && e.message === message, message);
        }
        // and still computes
        assert.equal(engine.value(v).length, 3);
      } finally {
        engine.dispose();
      }
    });
  }

  test("the checks VPPS's entry points call", () => {
    const cg = new ComputationGraph();
    const v = input(cg, [1, 2]);
    assert.throws(() => requireScalar(bad(undefined), "trainStep", "loss"), {
      name: "ShapeError",
      message: "trainStep: argument 'loss' must be an Expression; got undefined",
    });
    assert.throws(() => requireScalar(v, "Vpps.fb", "loss"), {
      message: "Vpps.fb: argument 'loss' has shape [2]; expected a scalar",
    });
    requireExpression(v, "forward", "e");
    requireScalar(input(cg, [1]), "trainStep", "loss");
  });
});
