// A graph reads the parameters of one ParameterCollection, and an engine computes only graphs of its own collection:
// nodes name parameters by index, so a graph of collection B on an engine of collection A would compute with A's
// weights and update them. Every engine that runs here is tried; the GPU engines' own tests are
// in test/gpu/collections.test.ts.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { AutobatchCpuEngine } from "../src/engines/autobatch/cpu-batched.js";
import { AutobatchGpuEngine } from "../src/engines/autobatch/gpu-engine.js";
import { CpuEngine } from "../src/engines/cpu.js";
import type { Engine } from "../src/engines/engine.js";
import { createEngine } from "../src/engines/registry.js";
import { CollectionMismatchError, ComputationGraph, type Expression, NO_COLLECTION } from "../src/graph/graph.js";
import { type LookupParameter, type Parameter, ParameterCollection } from "../src/model/parameters.js";
import { affine, input, lookup, matVec, parameter, pickNegLogSoftmax, tanh } from "../src/ops/index.js";
import { SimpleSGDTrainer } from "../src/optim/trainers.js";
import { EmulatedAutobatchDevice } from "./autobatch-emulator.js";

interface Model {
  pc: ParameterCollection;
  W: Parameter;
  b: Parameter;
  E: LookupParameter;
}

/** The same model shape twice: index k is a parameter in both, so only the collection tells them apart. */
function model(seed: number): Model {
  const pc = new ParameterCollection({ seed });
  return {
    pc,
    W: pc.addParameters([3, 4], undefined, "W"),
    b: pc.addParameters(3, { kind: "const", value: 0.1 }, "b"),
    E: pc.addLookupParameters(5, 4, undefined, "E"),
  };
}

const lossOf = (cg: ComputationGraph, m: Model): Expression =>
  pickNegLogSoftmax(tanh(affine([m.b, m.W, lookup(cg, m.E, 2)])), 1);

/** Every engine this machine runs without a GPU (the GPU autobatch engine on its emulated device). */
const ENGINES: readonly [string, (pc: ParameterCollection) => Engine][] = [
  ["cpu", (pc) => new CpuEngine(pc)],
  ["cpu f64", (pc) => new CpuEngine(pc, { precision: "f64" })],
  ["autobatch (CPU, depth)", (pc) => new AutobatchCpuEngine(pc, { strategy: "depth" })],
  ["autobatch (CPU, agenda)", (pc) => createEngine("autobatch", pc, { device: "cpu" })],
  ["autobatch (GPU, emulated)", (pc) => new AutobatchGpuEngine(pc, {}, new EmulatedAutobatchDevice(pc, 1 << 21))],
];

/** The message names the engine, the parameter, the graph's collection and the engine's. */
function foreign(engine: string, p: { name: string }, graphPc: ParameterCollection, enginePc: ParameterCollection) {
  return (e: unknown) => {
    assert.ok(e instanceof CollectionMismatchError, `a CollectionMismatchError, got ${String(e)}`);
    assert.match(e.message, new RegExp(`^${engine} engine: the graph reads parameter '${p.name}' of `));
    assert.match(e.message, new RegExp(`ParameterCollection #${graphPc.id},`));
    assert.match(e.message, new RegExp(`made for ParameterCollection #${enginePc.id} \\('W', 'b', 'E'\\)`));
    assert.doesNotMatch(e.message, /\n/);
    return true;
  };
}

describe("an engine refuses a graph of another ParameterCollection", () => {
  for (const [label, make] of ENGINES) {
    test(label, () => {
      const a = model(1);
      const b = model(2);
      const engine = make(a.pc);
      const name = engine.name;
      const before = a.pc.all.map((p) => Float32Array.from(p.value));
      try {
        const cg = new ComputationGraph();
        const loss = lossOf(cg, b);
        // every entry point that takes a graph refuses it, before computing anything
        assert.throws(() => engine.forward(loss), foreign(name, b.W, b.pc, a.pc));
        assert.throws(() => engine.forwardScalar(loss), foreign(name, b.W, b.pc, a.pc));
        assert.throws(() => engine.value(loss), foreign(name, b.W, b.pc, a.pc));
        assert.throws(() => engine.backward(loss), foreign(name, b.W, b.pc, a.pc));
        engine.update(new SimpleSGDTrainer({ learningRate: 1 }));
        engine.syncToHost();
        for (const [k, p] of a.pc.all.entries())
          assert.deepEqual(p.value, before[k], `${p.name} of the engine's collection`);
        for (const p of b.pc.all)
          assert.ok(
            p.grad.every((x) => x === 0),
            `${p.name}: no gradient`,
          );

        // the engine's own collection still trains, on the same graph object once renewed
        cg.renew();
        const own = lossOf(cg, a);
        const l0 = engine.forwardScalar(own);
        assert.ok(Number.isFinite(l0));
        engine.backward(own);
        engine.update(new SimpleSGDTrainer({ learningRate: 1 }));
        engine.syncToHost();
        assert.notDeepEqual(a.pc.all[0]!.value, before[0], "W of the engine's collection was updated");

        // a graph that reads no parameter belongs to no collection: any engine computes it
        cg.renew();
        assert.deepEqual(engine.value(tanh(input(cg, [0, 0]))), Float32Array.of(0, 0));
      } finally {
        engine.dispose();
      }
    });
  }

  test("a graph whose only parameter is a lookup table of another collection", () => {
    const a = model(1);
    const b = model(2);
    const engine = new CpuEngine(a.pc);
    const cg = new ComputationGraph();
    assert.throws(() => engine.value(lookup(cg, b.E, 0)), foreign("cpu", b.E, b.pc, a.pc));
  });

  test("checkGraph (what VPPS calls in fb) refuses the graph and accepts its own", () => {
    const a = model(1);
    const b = model(2);
    const cg = new ComputationGraph();
    lossOf(cg, b);
    assert.throws(() => a.pc.checkGraph(cg, "vpps"), foreign("vpps", b.W, b.pc, a.pc));
    b.pc.checkGraph(cg, "vpps");
    cg.renew();
    a.pc.checkGraph(cg, "vpps");
  });
});

describe("a graph reads the parameters of one collection", () => {
  test("a parameter of a second collection is refused when it is added, naming both", () => {
    const a = model(1);
    const b = model(2);
    const cg = new ComputationGraph();
    const x = input(cg, [1, 2, 3, 4]);
    matVec(a.W, x);
    const size = cg.size;
    // b.W has a.W's index: the graph's cache of parameter nodes must not hand back a.W's node
    assert.throws(
      () => matVec(b.W, x),
      (e: unknown) =>
        e instanceof CollectionMismatchError &&
        e.message ===
          `graph: parameter 'W' is of ParameterCollection #${b.pc.id}, but this graph already reads ` +
            `ParameterCollection #${a.pc.id} (parameter 'W'); a graph reads the parameters of one collection, the ` +
            "one its engine was made for",
    );
    assert.throws(() => parameter(cg, b.b), CollectionMismatchError);
    assert.throws(() => lookup(cg, b.E, 0), CollectionMismatchError);
    assert.equal(cg.size, size, "no node was added");
    assert.equal(cg.collection, a.pc.id);
  });

  test("renew forgets the collection", () => {
    const a = model(1);
    const b = model(2);
    const cg = new ComputationGraph();
    assert.equal(cg.collection, NO_COLLECTION);
    lookup(cg, a.E, 0);
    assert.equal(cg.collection, a.pc.id);
    cg.renew();
    assert.equal(cg.collection, NO_COLLECTION);
    parameter(cg, b.W);
    assert.equal(cg.collection, b.pc.id);
  });

  test("every collection has its own id, and each parameter carries it", () => {
    const a = model(1);
    const b = model(1);
    assert.notEqual(a.pc.id, b.pc.id);
    assert.ok(a.pc.id >= 1 && b.pc.id >= 1);
    for (const p of a.pc.all) assert.equal(p.collection, a.pc.id);
  });

  test("a parameter without a collection id is refused by name", () => {
    const cg = new ComputationGraph();
    const fake = { index: 0, name: "hand-made", rows: 2, cols: 2, kind: "dense", collection: 0 } as const;
    assert.throws(() => parameter(cg, fake), /parameter 'hand-made' has no collection id \(got 0\)/);
  });

  test("a snapshot keeps the collection, and is rebuilt only with that collection's parameters", () => {
    const a = model(1);
    const b = model(2);
    const cg = new ComputationGraph();
    lossOf(cg, a);
    const snap = cg.snapshot();
    const g = ComputationGraph.fromSnapshot(snap, a.pc.all);
    assert.equal(g.collection, a.pc.id);
    assert.throws(
      () => ComputationGraph.fromSnapshot(snap, b.pc.all),
      (e: unknown) =>
        e instanceof CollectionMismatchError &&
        new RegExp(`reads ParameterCollection #${a.pc.id}; .* is of ParameterCollection #${b.pc.id}`).test(e.message),
    );
    assert.throws(() => b.pc.checkGraph(ComputationGraph.fromSnapshot(snap), "vpps"), CollectionMismatchError);
  });
});
