/**
 * Lending a graph's node arrays to another thread (ComputationGraph.lend / fromLent, what SchedulePool.post does): the
 * rebuilt graph is the graph, and nothing the lender does while the loan is out — renewing and building other
 * graphs, growing, adding nodes after the lent ones — changes what the borrower reads; released arrays are reused.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ComputationGraph } from "../src/graph/graph.js";
import { input, tanh } from "../src/ops/index.js";
import { buildRandomVppsGraph, randomVppsModel } from "./random-graph.js";

const ARRAYS = ["op", "rows", "cols", "argStart", "argCount", "aux", "aux2", "auxF", "depth", "valueOffset"] as const;

/** Every field a borrower reads, as plain data (the parameters in use apart). */
function fields(g: ComputationGraph, n = g.size) {
  const out: Record<string, unknown> = {
    size: n,
    argsSize: n === g.size ? g.argsSize : g.argStart[n - 1]! + g.argCount[n - 1]!,
    valueSize: n === g.size ? g.valueSize : g.valueOffset[n],
    inputs: Array.from(g.inputData.subarray(0, g.inputSize)),
    training: g.training,
    dropoutKey: g.dropoutKey,
    generation: g.generation,
    collection: g.collection,
  };
  for (const k of ARRAYS) out[k] = Array.from(g[k].subarray(0, n));
  out.args = Array.from(g.args.subarray(0, out.argsSize as number));
  return out;
}

function borrow(cg: ComputationGraph, n = cg.size) {
  const loan = cg.lend(n);
  const inputs = Float32Array.from(cg.inputData.subarray(0, cg.inputSize));
  return {
    loan,
    read: (params?: Parameters<typeof ComputationGraph.fromLent>[2]) =>
      ComputationGraph.fromLent(loan.graph, inputs, params),
  };
}

describe("graph loans", () => {
  test("fromLent rebuilds the graph: every field, the parameters in use, a prefix of the nodes", () => {
    const m = randomVppsModel(5);
    const cg = new ComputationGraph();
    buildRandomVppsGraph(cg, m.build, 3);
    const want = fields(cg);
    const b = borrow(cg);
    const g = b.read(m.pc.all);
    assert.deepEqual(fields(g), want);
    assert.deepEqual(Object.keys(g.parameters), Object.keys(cg.parameters), "the parameters in use");
    for (const k of Object.keys(cg.parameters).map(Number)) assert.equal(g.parameters[k], m.pc.all[k]);
    assert.throws(() => g.renew(), /cannot renew a graph rebuilt from a snapshot/);
    assert.throws(() => tanh(g.expression(0)), /cannot add a node to/);
    assert.throws(() => g.lend(), /cannot lend a graph rebuilt from a snapshot/);
    const half = Math.floor(cg.size / 2);
    assert.deepEqual(fields(borrow(cg, half).read()), fields(cg, half));
    assert.throws(() => cg.lend(cg.size + 1), /node count .* is outside/);
  });

  test("renewing, rebuilding and growing while a loan is out leave the lent nodes as they were", () => {
    const m = randomVppsModel(6);
    const cg = new ComputationGraph();
    buildRandomVppsGraph(cg, m.build, 1);
    const want = fields(cg);
    const b = borrow(cg);
    // nodes added after the lent ones, without a renew, are not the borrower's
    tanh(cg.expression(0));
    assert.deepEqual(fields(b.read()), want);
    cg.renew();
    buildRandomVppsGraph(cg, m.build, 2);
    assert.deepEqual(fields(b.read()), want, "a renewed graph builds in other arrays");
    // grow far past the capacity (node and argument arrays) while the loan is out
    const x = input(cg, [1, 2, 3]);
    let y = x;
    for (let k = 0; k < 5000; k++) y = tanh(y);
    assert.deepEqual(fields(b.read()), want, "growing copies into new arrays");
    assert.equal(cg.size > 5000, true);
    b.loan.release();
    b.loan.release(); // a second release does nothing
  });

  test("released arrays are reused by the next renewal; arrays still lent are not", () => {
    const m = randomVppsModel(7);
    const cg = new ComputationGraph();
    buildRandomVppsGraph(cg, m.build, 1);
    const first = borrow(cg);
    const firstBuffer = cg.rows.buffer;
    cg.renew();
    assert.notEqual(cg.rows.buffer, firstBuffer, "lent arrays are left alone");
    buildRandomVppsGraph(cg, m.build, 2);
    const second = borrow(cg);
    const secondBuffer = cg.rows.buffer;
    first.loan.release();
    cg.renew();
    assert.equal(cg.rows.buffer, firstBuffer, "the released arrays come back");
    buildRandomVppsGraph(cg, m.build, 3);
    assert.notEqual(cg.rows.buffer, secondBuffer);
    second.loan.release();
    cg.renew();
    assert.equal(cg.rows.buffer, firstBuffer, "arrays not lent are kept at renew");
  });
});
