import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { formatPlan, verifyPlan } from "../src/engines/autobatch/check.js";
import { AutobatchCpuEngine } from "../src/engines/autobatch/cpu-batched.js";
import { type BatchPlan, type BatchStrategy, planBatches } from "../src/engines/autobatch/plan.js";
import { CpuEngine } from "../src/engines/cpu.js";
import type { Engine } from "../src/engines/engine.js";
import { ComputationGraph, type Expression } from "../src/graph/graph.js";
import { opName } from "../src/graph/opcodes.js";
import { ParameterCollection } from "../src/model/parameters.js";
import {
  add,
  affine,
  batchSignature,
  concat,
  input,
  logistic,
  lookup,
  lstmCell,
  matVec,
  pickNegLogSoftmax,
  pickRange,
  sum,
  tanh,
} from "../src/ops/index.js";
import { SimpleSGDTrainer } from "../src/optim/trainers.js";
import {
  buildRandomGraph,
  buildTreeLstmBatch,
  type RandomTree,
  randomModel,
  randomTrees,
  treeLstmModel,
} from "./random-graph.js";

const STRATEGIES: readonly BatchStrategy[] = ["depth", "agenda"];

/** The plan as [op name, node ids] per batch, for exact comparisons. */
function batches(plan: BatchPlan): [string, number[]][] {
  const out: [string, number[]][] = [];
  for (let b = 0; b < plan.batchCount; b++) {
    const ids = Array.from(plan.nodes.subarray(plan.batchStart[b]!, plan.batchStart[b + 1]!));
    out.push([opName(plan.batchOp[b]!), ids]);
  }
  return out;
}

const ids = (...es: Expression[]): number[] => es.map((e) => e.id);

function assertValid(g: ComputationGraph, plan: BatchPlan): void {
  const problem = verifyPlan(g, plan);
  assert.equal(problem, null, `${problem}\n${formatPlan(g, plan)}`);
}

/** Two identical two-word Tree-LSTM trees, built by hand so every node has a name. */
function twoTinyTrees() {
  const H = 2;
  const pc = new ParameterCollection({ seed: 7 });
  const E = pc.addLookupParameters(5, 3, undefined, "E");
  const W = pc.addParameters([3 * H, 3], undefined, "W");
  const b = pc.addParameters(3 * H, undefined, "b");
  const U = pc.addParameters([3 * H, 2 * H], undefined, "U");
  const b1 = pc.addParameters(3 * H, undefined, "b1");
  const Uf1 = pc.addParameters([H, H], undefined, "Uf1");
  const Uf2 = pc.addParameters([H, H], undefined, "Uf2");
  const bf = pc.addParameters(H, undefined, "bf");
  const Wo = pc.addParameters([3, H], undefined, "Wo");
  const bo = pc.addParameters(3, undefined, "bo");
  const cg = new ComputationGraph();
  const leaf = (w: number) => {
    const x = lookup(cg, E, w);
    const a = affine([b, W, x]);
    const hc = lstmCell(a, []);
    const h = pickRange(hc, 0, H);
    const c = pickRange(hc, H, 2 * H);
    const o = affine([bo, Wo, h]);
    return { x, a, hc, h, c, o, loss: pickNegLogSoftmax(o, 1) };
  };
  const tree = () => {
    const l = leaf(1);
    const r = leaf(2);
    const hh = concat([l.h, r.h]);
    const au = affine([b1, U, hh]);
    const af1 = affine([bf, Uf1, l.h]);
    const af2 = affine([bf, Uf2, r.h]);
    const gates = concat([au, af1, af2]);
    const hc = lstmCell(gates, [l.c, r.c]);
    const h = pickRange(hc, 0, H);
    const c = pickRange(hc, H, 2 * H);
    const o = affine([bo, Wo, h]);
    return { l, r, hh, au, af1, af2, gates, hc, h, c, o, loss: pickNegLogSoftmax(o, 0) };
  };
  const t = tree();
  const u = tree();
  const total = sum([t.l.loss, t.r.loss, t.loss, u.l.loss, u.r.loss, u.loss]);
  return { cg, t, u, total };
}

describe("autobatch planning on hand-built graphs", () => {
  test("two identical trees, depth strategy: one batch per (depth, signature)", () => {
    const { cg, t, u, total } = twoTinyTrees();
    const plan = planBatches(cg, total.id, "depth");
    assertValid(cg, plan);
    const leaves = [t.l, t.r, u.l, u.r];
    const all = <K extends keyof (typeof leaves)[0]>(k: K) => ids(...leaves.map((l) => l[k] as Expression));
    assert.deepEqual(batches(plan), [
      ["lookup", all("x")],
      ["affine", all("a")],
      ["lstmCell", all("hc")],
      ["pickRange", all("h")],
      ["pickRange", all("c")],
      ["affine", all("o")],
      ["concat", ids(t.hh, u.hh)],
      ["affine", ids(t.af1, u.af1)],
      ["affine", ids(t.af2, u.af2)],
      ["pickNegLogSoftmax", all("loss")],
      ["affine", ids(t.au, u.au)],
      ["concat", ids(t.gates, u.gates)],
      ["lstmCell", ids(t.hc, u.hc)],
      ["pickRange", ids(t.h, u.h)],
      ["pickRange", ids(t.c, u.c)],
      ["affine", ids(t.o, u.o)],
      ["pickNegLogSoftmax", ids(t.loss, u.loss)],
      ["sum", ids(total)],
    ]);
    assert.equal(plan.stats.batches, 18);
    assert.equal(plan.stats.matrixBatches, 6);
    assert.equal(plan.stats.parameters, 9, "dense parameter nodes are loaded, not batched");
    assert.equal(plan.stats.nodes + plan.stats.parameters, total.id + 1);
  });

  test("two identical trees, agenda strategy: deferred products merge the output layer of all levels", () => {
    const { cg, t, u, total } = twoTinyTrees();
    const plan = planBatches(cg, total.id, "agenda");
    assertValid(cg, plan);
    const leaves = [t.l, t.r, u.l, u.r];
    const all = <K extends keyof (typeof leaves)[0]>(k: K) => ids(...leaves.map((l) => l[k] as Expression));
    assert.deepEqual(batches(plan), [
      ["lookup", all("x")],
      ["affine", all("a")],
      ["lstmCell", all("hc")],
      // equal average depth (h and c pickRange alike): the earlier signature first
      ["pickRange", all("h")],
      // concat (average depth 4) before pickRange c (4.67); products wait while either is ready
      ["concat", ids(t.hh, u.hh)],
      ["pickRange", all("c")],
      // only products are ready: lowest average depth first (Uf1, Uf2: 4; U: 5; Wo: 5.67)
      ["affine", ids(t.af1, u.af1)],
      ["affine", ids(t.af2, u.af2)],
      ["affine", ids(t.au, u.au)],
      ["concat", ids(t.gates, u.gates)],
      ["lstmCell", ids(t.hc, u.hc)],
      ["pickRange", ids(t.h, u.h)],
      ["pickRange", ids(t.c, u.c)],
      ["affine", [...all("o"), ...ids(t.o, u.o)]],
      ["pickNegLogSoftmax", [...all("loss"), ...ids(t.loss, u.loss)]],
      ["sum", ids(total)],
    ]);
    assert.equal(plan.stats.batches, 16);
    assert.equal(plan.stats.maxBatchSize, 6);
  });

  test("agenda defers a matVec group while elementwise work is ready; depth runs it twice", () => {
    const pc = new ParameterCollection({ seed: 1 });
    const W = pc.addParameters([2, 2], undefined, "W");
    const cg = new ComputationGraph();
    const xs = [input(cg, [1, 2]), input(cg, [3, 4])];
    const direct = xs.map((x) => matVec(W, x)); // depth 1: ready right after the inputs
    const squashed = xs.map((x) => tanh(x)); // depth 1
    const indirect = squashed.map((s) => matVec(W, s)); // depth 2
    const sums = xs.map((_, k) => add(direct[k]!, indirect[k]!));
    const total = sum(sums.map((s) => pickNegLogSoftmax(s, 0)));
    const agenda = planBatches(cg, total.id, "agenda");
    assertValid(cg, agenda);
    assert.deepEqual(batches(agenda).slice(0, 4), [
      ["input", ids(...xs)],
      ["tanh", ids(...squashed)],
      ["matVec", ids(...direct, ...indirect)],
      ["add", ids(...sums)],
    ]);
    assert.equal(agenda.stats.batches, 6);
    const depth = planBatches(cg, total.id, "depth");
    assertValid(cg, depth);
    assert.deepEqual(batches(depth).slice(0, 4), [
      ["input", ids(...xs)],
      ["matVec", ids(...direct)],
      ["tanh", ids(...squashed)],
      ["matVec", ids(...indirect)],
    ]);
    assert.equal(depth.stats.batches, 7);
    assert.equal(depth.stats.matrixBatches, 2);
  });

  test("agenda runs the ready group of lowest average depth first", () => {
    const cg = new ComputationGraph();
    const a = input(cg, [1, 2]);
    const b = input(cg, [3, 4, 5]);
    const deep = logistic(tanh(tanh(b))); // logistic on [3] has average depth 3 …
    const early = logistic(a); // … logistic on [2] depth 1, but it is another signature
    const t = tanh(a); // tanh on [2]: average depth 1
    const l2 = logistic(tanh(tanh(tanh(input(cg, [1, 1]))))); // raises logistic [2]'s average depth to 2.5
    const total = sum([
      pickNegLogSoftmax(deep, 0),
      pickNegLogSoftmax(early, 0),
      pickNegLogSoftmax(t, 0),
      pickNegLogSoftmax(l2, 0),
    ]);
    const plan = planBatches(cg, total.id, "agenda");
    assertValid(cg, plan);
    const order = batches(plan).map(([op, ns]) => `${op}${ns.map((i) => `#${i}`).join("")}`);
    const pos = (e: Expression) => order.findIndex((s) => s.includes(`#${e.id}`));
    assert.ok(pos(t) < pos(early), `tanh[2] (average depth 1.75) before logistic[2] (2.5):\n${formatPlan(cg, plan)}`);
    assert.equal(order[pos(early)], `logistic#${early.id}#${l2.id}`, "logistic[2] waits for the deeper one");
  });

  test("incremental plans: nodes before `from` count as computed", () => {
    const { cg, t, total } = twoTinyTrees();
    for (const s of STRATEGIES) {
      const first = planBatches(cg, t.hh.id, s);
      assertValid(cg, first);
      const rest = planBatches(cg, total.id, s, t.hh.id + 1);
      assertValid(cg, rest);
      assert.equal(first.stats.nodes + first.stats.parameters + rest.stats.nodes + rest.stats.parameters, total.id + 1);
    }
  });

  test("bad arguments are rejected with the value and the allowed range", () => {
    const { cg, total } = twoTinyTrees();
    const n = cg.size;
    assert.equal(total.id, n - 1);
    assert.throws(
      () => planBatches(cg, n, "depth"),
      new RegExp(`upTo = ${n} is not a node of the graph \\(it has ${n} nodes\\)`),
    );
    assert.throws(() => planBatches(cg, 3, "depth", 4), /from = 4 must be an integer in \[0, upTo = 3\]/);
    assert.throws(
      () => planBatches(cg, 3, "greedy" as BatchStrategy),
      /strategy must be "depth" or "agenda"; got "greedy"/,
    );
    const pc = new ParameterCollection();
    assert.throws(() => new AutobatchCpuEngine(pc, { strategy: "x" as BatchStrategy }), /got "x"/);
  });
});

/** Interned signature ids and `batchSignature` strings name the same groups: equal ids ⇔ equal strings. */
function assertSignaturesAgree(g: ComputationGraph, plan: BatchPlan, what: string): void {
  const byId = new Map<number, string>();
  const byString = new Map<string, number>();
  for (let b = 0; b < plan.batchCount; b++) {
    const id = plan.batchSignature[b]!;
    for (let p = plan.batchStart[b]!; p < plan.batchStart[b + 1]!; p++) {
      const str = batchSignature(g, plan.nodes[p]!);
      assert.equal(byId.get(id) ?? str, str, `${what}: signature id ${id} names '${byId.get(id)}' and '${str}'`);
      assert.equal(byString.get(str) ?? id, id, `${what}: '${str}' has ids ${byString.get(str)} and ${id}`);
      byId.set(id, str);
      byString.set(str, id);
    }
  }
  assert.equal(plan.stats.signatures, byId.size, `${what}: signature count`);
}

describe("autobatch signatures", () => {
  test("near-miss nodes at one depth: grouped exactly as batchSignature strings say", () => {
    const pc = new ParameterCollection({ seed: 4 });
    const W = pc.addParameters([2, 2], undefined, "W");
    const W2 = pc.addParameters([2, 2], undefined, "W2");
    const V = pc.addParameters([2, 3], undefined, "V");
    const b0 = pc.addParameters(2, undefined, "b0");
    const b1 = pc.addParameters(2, undefined, "b1");
    const cg = new ComputationGraph();
    const x = input(cg, [1, 2]);
    const y = input(cg, [3, 4]);
    const z = input(cg, [5, 6, 7]);
    const c2 = input(cg, [0.5, 0.25]);
    const g6 = input(cg, [1, 2, 3, 4, 5, 6]);
    const g8 = input(cg, [1, 2, 3, 4, 5, 6, 7, 8]);
    const nodes = [
      affine([b0, W, x]),
      affine([b0, W, y]), // same as the first
      affine([b1, W, x]), // another bias parameter
      affine([c2, W, x]), // a computed bias …
      affine([y, W, x]), // … any computed bias is the same
      affine([b0, W2, x]), // another weight
      affine([b0, W, x, V, z]), // two products
      affine([b0, V, z, W, x]), // the same products in the other order
      matVec(W, x),
      matVec(W2, y),
      matVec(W, y), // same as W·x
      concat([x, z]),
      concat([z, x]),
      concat([y, z]), // same as [x; z]
      pickRange(z, 0, 2),
      pickRange(z, 1, 3),
      pickRange(g6, 0, 2),
      lstmCell(g6, []),
      lstmCell(g8, [c2]),
      sum([x, y]),
      sum([x, y, x]),
      pickNegLogSoftmax(x, 0),
      pickNegLogSoftmax(y, 1),
      pickNegLogSoftmax(z, 0),
      tanh(x),
      tanh(z),
      logistic(x),
      lookup(cg, pc.addLookupParameters(4, 2, undefined, "E"), 1),
    ];
    const total = sum(nodes.map((e) => pickNegLogSoftmax(concat([e, x]), 0)));
    for (const s of STRATEGIES) {
      const plan = planBatches(cg, total.id, s);
      assertValid(cg, plan);
      assertSignaturesAgree(cg, plan, s);
    }
    const plan = planBatches(cg, total.id, "depth");
    const distinct = new Set(nodes.map((e) => batchSignature(cg, e.id)));
    assert.equal(distinct.size, nodes.length - 5, "five nodes share a signature with an earlier one");
    const together = (a: Expression, b: Expression): boolean => {
      for (let k = 0; k < plan.batchCount; k++) {
        const inBatch = plan.nodes.subarray(plan.batchStart[k]!, plan.batchStart[k + 1]!);
        if (inBatch.includes(a.id)) return inBatch.includes(b.id);
      }
      return false;
    };
    assert.ok(together(nodes[0]!, nodes[1]!) && together(nodes[3]!, nodes[4]!) && together(nodes[21]!, nodes[22]!));
    assert.ok(!together(nodes[0]!, nodes[2]!) && !together(nodes[6]!, nodes[7]!) && !together(nodes[11]!, nodes[12]!));
  });
});

describe("autobatch planning on random graphs", () => {
  test("plans are valid, and interned signatures agree with batchSignature strings", () => {
    for (let seed = 1; seed <= 12; seed++) {
      const m = randomModel(seed);
      const cg = new ComputationGraph();
      const loss = buildRandomGraph(cg, m, { seed, instances: 5, steps: 30, programs: 2 });
      for (const s of STRATEGIES) {
        const plan = planBatches(cg, loss.id, s);
        assertValid(cg, plan);
        assertSignaturesAgree(cg, plan, `seed ${seed} ${s}`);
        const mid = loss.id >> 1;
        assertValid(cg, planBatches(cg, loss.id, s, mid));
      }
    }
  });

  test("agenda needs fewer GEMMs than depth on random graphs, and no more launches on Tree-LSTM batches", () => {
    // On random DAGs paths of unequal length meet, and deferred products collect columns from several depths.
    let depthGemms = 0;
    let agendaGemms = 0;
    for (let seed = 1; seed <= 6; seed++) {
      const m = randomModel(seed);
      const cg = new ComputationGraph();
      const loss = buildRandomGraph(cg, m, { seed, instances: 8, steps: 30, programs: 2 });
      depthGemms += planBatches(cg, loss.id, "depth").stats.matrixBatches;
      agendaGemms += planBatches(cg, loss.id, "agenda").stats.matrixBatches;
    }
    assert.ok(agendaGemms < depthGemms, `GEMM batches: agenda ${agendaGemms}, depth ${depthGemms}`);
    // In a Tree-LSTM every level adds the same chain of ops, so depth is a function of tree height and the agenda
    // (which runs the output layer with each level, its average depth being lower than U's) finds the same batches.
    const m = treeLstmModel(3);
    const cg = new ComputationGraph();
    const loss = buildTreeLstmBatch(cg, m, randomTrees(3, 16));
    const depth = planBatches(cg, loss.id, "depth");
    const agenda = planBatches(cg, loss.id, "agenda");
    assertValid(cg, depth);
    assertValid(cg, agenda);
    assert.ok(
      agenda.stats.batches <= depth.stats.batches,
      `agenda ${agenda.stats.batches}, depth ${depth.stats.batches}`,
    );
    assert.ok(agenda.stats.meanBatchSize > 50, `16 trees of 10–28 words: mean batch ${agenda.stats.meanBatchSize}`);
  });
});

// ---- engines against the CPU reference ----------------------------------------------------------------------------

interface Outcome {
  loss: number;
  grads: Float32Array[];
  touched: number[][];
}

function runEngine(
  make: () => { params: ParameterCollection; build: (cg: ComputationGraph) => Expression },
  engine: (p: ParameterCollection) => Engine,
): Outcome {
  const { params, build } = make();
  const cg = new ComputationGraph();
  const loss = build(cg);
  const e = engine(params);
  const value = e.forwardScalar(loss);
  e.backward(loss);
  return {
    loss: value,
    grads: params.all.map((p) => Float32Array.from(p.grad)),
    touched: params.all.map((p) => (p.kind === "lookup" ? [...p.touchedRows].sort((a, b) => a - b) : [])),
  };
}

/**
 * Gradients agree to 1e-5 relative to each parameter's largest gradient element (summation order differs, so
 * elements near zero may differ more than 1e-5 of themselves); `elementwise` additionally bounds each element by a
 * relative tolerance of its own (f64 mode, where only the final rounding to float32 differs).
 */
function assertSameOutcome(ref: Outcome, got: Outcome, what: string, elementwise?: number): void {
  assert.equal(got.loss, ref.loss, `${what}: loss`);
  assert.deepEqual(got.touched, ref.touched, `${what}: touched lookup rows`);
  ref.grads.forEach((g, pi) => {
    let scale = 0;
    for (const x of g) scale = Math.max(scale, Math.abs(x));
    for (let k = 0; k < g.length; k++) {
      const diff = Math.abs(got.grads[pi]![k]! - g[k]!);
      const tol = Math.max(1e-5 * scale, elementwise === undefined ? 0 : elementwise * Math.abs(g[k]!)) + 1e-30;
      if (diff > tol) {
        assert.fail(`${what}: gradient of parameter ${pi} [${k}] is ${got.grads[pi]![k]}, reference ${g[k]}`);
      }
    }
  });
}

function randomCase(seed: number) {
  return () => {
    const m = randomModel(seed);
    return { params: m.params, build: (cg: ComputationGraph) => buildRandomGraph(cg, m, { seed, steps: 28 }) };
  };
}

function treeCase(seed: number, trees: RandomTree[]) {
  return () => {
    const m = treeLstmModel(seed, { hidden: 3, embed: 4, vocab: 20 });
    return { params: m.params, build: (cg: ComputationGraph) => buildTreeLstmBatch(cg, m, trees) };
  };
}

describe("AutobatchCpuEngine against CpuEngine", () => {
  test("random graphs: equal loss (bit for bit), gradients and touched rows, both strategies", () => {
    for (let seed = 1; seed <= 10; seed++) {
      const make = randomCase(seed);
      const ref = runEngine(make, (p) => new CpuEngine(p));
      for (const strategy of STRATEGIES) {
        assertSameOutcome(
          ref,
          runEngine(make, (p) => new AutobatchCpuEngine(p, { strategy })),
          `seed ${seed} ${strategy}`,
        );
      }
      const ref64 = runEngine(make, (p) => new CpuEngine(p, { precision: "f64" }));
      for (const strategy of STRATEGIES) {
        const got = runEngine(make, (p) => new AutobatchCpuEngine(p, { strategy, precision: "f64" }));
        assertSameOutcome(ref64, got, `seed ${seed} ${strategy} f64`, 3e-7);
      }
    }
  });

  test("Tree-LSTM batches: equal loss and gradients, both strategies", () => {
    for (let seed = 1; seed <= 4; seed++) {
      const make = treeCase(seed, randomTrees(seed, 6, { minWords: 1, maxWords: 9, vocab: 20 }));
      const ref = runEngine(make, (p) => new CpuEngine(p));
      for (const strategy of STRATEGIES) {
        assertSameOutcome(
          ref,
          runEngine(make, (p) => new AutobatchCpuEngine(p, { strategy })),
          `trees ${seed} ${strategy}`,
        );
      }
    }
  });

  test("incremental forward, node values and gradients, launch counts, update", () => {
    const make = treeCase(5, randomTrees(5, 3, { minWords: 2, maxWords: 6, vocab: 20 }));
    const a = make();
    const b = make();
    const cga = new ComputationGraph();
    const cgb = new ComputationGraph();
    const la = a.build(cga);
    const lb = b.build(cgb);
    const ref = new CpuEngine(a.params);
    const eng = new AutobatchCpuEngine(b.params, { strategy: "agenda" });
    const mid = cgb.expression(lb.id >> 1);
    // an early node first: the later forward plans only the rest, and backward plans [0, loss] afresh
    assert.deepEqual(eng.value(mid), ref.value(cga.expression(mid.id)));
    const firstPlan = eng.lastForwardPlan!;
    assert.equal(firstPlan.upTo, mid.id);
    assert.equal(eng.forwardScalar(lb), ref.forwardScalar(la));
    assert.equal(eng.lastForwardPlan!.from, mid.id + 1);
    ref.backward(la);
    eng.backward(lb);
    assert.equal(eng.lastBackwardPlan!.from, 0);
    assert.equal(eng.forwardBatches, firstPlan.batchCount + eng.lastForwardPlan!.batchCount);
    assert.ok(eng.backwardBatches > 0 && eng.backwardBatches <= eng.lastBackwardPlan!.batchCount);
    for (const id of [mid.id, lb.id - 1, 3]) {
      const g0 = ref.gradient(cga.expression(id));
      const g1 = eng.gradient(cgb.expression(id));
      for (let k = 0; k < g0.length; k++)
        assert.ok(Math.abs(g0[k]! - g1[k]!) <= 1e-5 * (1 + Math.abs(g0[k]!)), `node ${id}`);
    }
    // the trainer sees the same gradients, so the updated parameters agree too
    ref.update(new SimpleSGDTrainer({ learningRate: 0.5 }));
    eng.update(new SimpleSGDTrainer({ learningRate: 0.5 }));
    a.params.all.forEach((p, pi) => {
      const q = b.params.all[pi]!;
      for (let k = 0; k < p.value.length; k++)
        assert.ok(Math.abs(p.value[k]! - q.value[k]!) <= 1e-6, `${p.name}[${k}]`);
    });
    // a renewed graph starts a fresh plan
    cgb.renew();
    const l2 = b.build(cgb);
    eng.forward(l2);
    assert.equal(eng.lastForwardPlan!.from, 0);
  });

  test("backward of an inner loss leaves unreached lookups untouched", () => {
    const pc = new ParameterCollection({ seed: 2 });
    const E = pc.addLookupParameters(6, 2, undefined, "E");
    const W = pc.addParameters([3, 2], undefined, "W");
    for (const strategy of STRATEGIES) {
      const cg = new ComputationGraph();
      const used = lookup(cg, E, 1);
      const unused = lookup(cg, E, 4);
      const inner = pickNegLogSoftmax(matVec(W, used), 2);
      const outer = sum([inner, pickNegLogSoftmax(matVec(W, unused), 0)]);
      const eng = new AutobatchCpuEngine(pc, { strategy });
      eng.forward(outer);
      eng.backward(inner);
      assert.deepEqual(E.touchedRows, [1], strategy);
      assert.ok(E.grad[2] !== 0 && E.grad[8] === 0 && E.grad[9] === 0);
      pc.zeroGradients();
    }
  });
});
