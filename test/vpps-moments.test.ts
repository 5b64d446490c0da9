// Continuing Adam on VPPS from saved moments: `momentsBufferOf` lays per-parameter moments out as
// the kernel keeps them (plan/moments.ts), the exact inverse of `momentsOfParameters`, for register-held matrices
// (master copy), vectors and lookup tables (model region). The device upload is tested in test/gpu/runs.test.ts.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { H100_SXM } from "../src/cuda/hw/device-model.js";
import { createModelLayout } from "../src/engines/vpps/plan/layout.js";
import { momentLayout, momentsBufferOf, momentsOfParameters } from "../src/engines/vpps/plan/moments.js";
import { planVpps } from "../src/engines/vpps/plan/plan.js";
import { onChipMatrices } from "../src/model/parameters.js";
import { TreeLstmModel } from "../src/models/treelstm/model.js";

describe("VPPS Adam moments from per-parameter arrays", () => {
  test("momentsBufferOf is the inverse of momentsOfParameters (matrices, vectors, lookup tables)", () => {
    const net = new TreeLstmModel({ vocabSize: 30, embed: 48, hidden: 64, seed: 7 });
    const pc = net.params;
    const model = createModelLayout(pc.all, planVpps(onChipMatrices(pc), H100_SXM, { rowsPerWarp: 1 }));
    const kinds = new Set(pc.all.map((p) => (model.matrixOf[p.index]! >= 0 ? "register matrix" : p.kind)));
    assert.deepEqual([...kinds].sort(), ["dense", "lookup", "register matrix"]);
    const given = pc.all.map((p, i) => ({
      m: Float32Array.from({ length: p.value.length }, (_, k) => i + k / 1000),
      v: Float32Array.from({ length: p.value.length }, (_, k) => i + 1 + k / 7),
    }));
    const buffer = momentsBufferOf(model, given);
    assert.equal(buffer.length, momentLayout(model).floats);
    assert.deepEqual(momentsOfParameters(model, buffer), given);
    // a parameter without moments (never updated) is zero there
    const partial = momentsBufferOf(model, [undefined, ...given.slice(1)]);
    const back = momentsOfParameters(model, partial);
    assert.ok(back[0]!.m.every((x) => x === 0) && back[0]!.v.every((x) => x === 0));
    assert.deepEqual(back.slice(1), given.slice(1));
    assert.throws(
      () => momentsBufferOf(model, [{ m: new Float32Array(1), v: new Float32Array(1) }]),
      /VPPS moments of parameter #0: expected \d+ values each; got 1 and 1/,
    );
  });
});
