import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { CpuEngine } from "../src/engines/cpu.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { ParameterCollection } from "../src/model/parameters.js";
import { loadParameters, saveParameters } from "../src/model/safetensors.js";
import { concat, input, lookup, matVec, pickNegLogSoftmax } from "../src/ops/index.js";
import { AdamTrainer, makeTrainer, SimpleSGDTrainer } from "../src/optim/trainers.js";
import { deriveKey, RandomStream, randomU32, randomUniform } from "../src/util/random.js";

describe("the counter-based generator", () => {
  test("is a pure function of (key, counter) and looks uniform", () => {
    assert.equal(randomU32(7, 123), randomU32(7, 123));
    assert.notEqual(randomU32(7, 123), randomU32(8, 123));
    let mean = 0;
    const n = 20000;
    for (let k = 0; k < n; k++) mean += randomUniform(42, k);
    mean /= n;
    assert.ok(Math.abs(mean - 0.5) < 0.01, `mean ${mean}`);
    assert.notEqual(deriveKey(1, "init"), deriveKey(1, "shuffle"));
    const a = new RandomStream(5).shuffle([1, 2, 3, 4, 5, 6, 7, 8]);
    const b = new RandomStream(5).shuffle([1, 2, 3, 4, 5, 6, 7, 8]);
    assert.deepEqual(a, b);
  });
});

describe("parameters", () => {
  test("initialisation is repeatable from the seed and Glorot-scaled", () => {
    const a = new ParameterCollection({ seed: 3 }).addParameters([20, 30]);
    const b = new ParameterCollection({ seed: 3 }).addParameters([20, 30]);
    const c = new ParameterCollection({ seed: 4 }).addParameters([20, 30]);
    assert.deepEqual(a.value, b.value);
    assert.notDeepEqual(a.value, c.value);
    const s = Math.sqrt(6 / 50);
    assert.ok(a.value.every((x) => Math.abs(x) <= s));
    assert.ok(a.value.some((x) => Math.abs(x) > s / 2));
    const bias = new ParameterCollection().addParameters(5);
    assert.ok(
      bias.value.every((x) => x === 0),
      "vectors start at zero",
    );
  });

  test("bad shapes and duplicate names are refused", () => {
    const pc = new ParameterCollection();
    assert.throws(() => pc.addParameters([2, 0]), /addParameters: cols must be a positive integer; got 0/);
    assert.throws(() => pc.addParameters([2, 3, 4]), /shape must be \[n\] or \[rows, cols\]/);
    pc.addParameters(3, undefined, "b");
    assert.throws(() => pc.addParameters(3, undefined, "b"), /a parameter named 'b' already exists/);
  });

  test("save and load as safetensors round-trips values; mismatches are named", () => {
    const dir = mkdtempSync(join(tmpdir(), "vpps-st-"));
    const make = (seed: number) => {
      const pc = new ParameterCollection({ seed });
      pc.addParameters([4, 3], undefined, "W");
      pc.addParameters(4, { kind: "uniform", scale: 1 }, "b");
      pc.addLookupParameters(6, 3, undefined, "E");
      return pc;
    };
    const a = make(1);
    const path = join(dir, "m.safetensors");
    saveParameters(a, path, { epoch: "2" });
    const b = make(2);
    const meta = loadParameters(b, path);
    assert.equal(meta.epoch, "2");
    for (let k = 0; k < a.all.length; k++) assert.deepEqual(b.all[k]!.value, a.all[k]!.value);
    const other = new ParameterCollection();
    other.addParameters([3, 4], undefined, "W");
    assert.throws(() => loadParameters(other, path), /tensor 'W' has shape \[4,3\]; the model expects \[3,4\]/);
    const missing = new ParameterCollection();
    missing.addParameters(2, undefined, "zzz");
    assert.throws(() => loadParameters(missing, path), /no tensor named 'zzz'/);
    writeFileSync(join(dir, "bad.safetensors"), "xx");
    assert.throws(() => loadParameters(a, join(dir, "bad.safetensors")), /not a safetensors file/);
  });
});

describe("trainers", () => {
  function setup() {
    const pc = new ParameterCollection({ seed: 9 });
    const W = pc.addParameters([3, 4], undefined, "W");
    const E = pc.addLookupParameters(10, 2, undefined, "E");
    const engine = new CpuEngine(pc);
    const cg = new ComputationGraph();
    const build = () => {
      cg.renew();
      return pickNegLogSoftmax(matVec(W, concat([lookup(cg, E, 2), lookup(cg, E, 7)])), 1);
    };
    return { pc, W, E, engine, build };
  }

  test("SGD is w ← w − η g, and only touched lookup rows change", () => {
    const { pc, W, E, engine, build } = setup();
    const w0 = Float32Array.from(W.value);
    const e0 = Float32Array.from(E.value);
    engine.backward(build());
    const g = Float32Array.from(W.grad);
    assert.deepEqual([...E.touchedRows].sort(), [2, 7]);
    new SimpleSGDTrainer({ learningRate: 0.5, clipThreshold: 0 }).update(pc);
    for (let k = 0; k < g.length; k++) assert.ok(Math.abs(W.value[k]! - (w0[k]! - 0.5 * g[k]!)) < 1e-7);
    for (let r = 0; r < 10; r++) {
      const changed = E.value[2 * r] !== e0[2 * r] || E.value[2 * r + 1] !== e0[2 * r + 1];
      assert.equal(changed, r === 2 || r === 7, `row ${r}`);
    }
    assert.ok(
      W.grad.every((x) => x === 0),
      "gradients are zeroed after the update",
    );
    assert.deepEqual(E.touchedRows, []);
  });

  test("clipping rescales gradients to the threshold norm", () => {
    const { pc, engine, build } = setup();
    engine.backward(build());
    const t = new SimpleSGDTrainer({ learningRate: 1, clipThreshold: 1e-3 });
    const s = t.clipScale(pc);
    assert.ok(s < 1 && s > 0);
    let sq = 0;
    for (const p of pc.all) for (const x of p.grad) sq += (x * s) ** 2;
    assert.ok(Math.abs(Math.sqrt(sq) - 1e-3) < 1e-7);
  });

  test("Adam's first step moves each weight by about η against its gradient's sign", () => {
    const { pc, W, engine, build } = setup();
    const w0 = Float32Array.from(W.value);
    engine.backward(build());
    const g = Float32Array.from(W.grad);
    new AdamTrainer({ learningRate: 0.01, clipThreshold: 0 }).update(pc);
    for (let k = 0; k < g.length; k++) {
      if (Math.abs(g[k]!) < 1e-6) continue;
      assert.ok(Math.abs(W.value[k]! - (w0[k]! - 0.01 * Math.sign(g[k]!))) < 1e-4);
    }
  });

  test("training reduces a loss; unknown optimizers are named", () => {
    const { engine, build } = setup();
    const t = makeTrainer("adam", { learningRate: 0.05 });
    const first = engine.forwardScalar(build());
    for (let k = 0; k < 50; k++) {
      const l = build();
      engine.forwardScalar(l);
      engine.backward(l);
      engine.update(t);
    }
    assert.ok(engine.forwardScalar(build()) < first / 4);
    assert.throws(() => makeTrainer("rmsprop", { learningRate: 1 }), /unknown optimizer 'rmsprop'; choose sgd or adam/);
  });

  test("input values reach the graph and a wrong-sized learning rate is refused", () => {
    const cg = new ComputationGraph();
    const x = input(cg, [1.5, -2]);
    assert.deepEqual(Array.from(new CpuEngine(new ParameterCollection()).value(x)), [1.5, -2]);
    assert.throws(() => new SimpleSGDTrainer({ learningRate: 0 }), /learning rate must be positive/);
  });
});
