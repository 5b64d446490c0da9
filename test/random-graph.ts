/**
 * Seeded generators of graphs for testing engines against the CPU reference (and for planning benchmarks):
 * random DAGs over vectors that use every op, and Tree-LSTM batches shaped like the VPPS benchmark's.
 * Everything is a pure function of the seed (the project's counter-based generator), so a failure reproduces.
 */
import type { ComputationGraph, Expression } from "../src/graph/graph.js";
import { type LookupParameter, type Parameter, ParameterCollection } from "../src/model/parameters.js";
import {
  add,
  affine,
  cmul,
  concat,
  dropout,
  input,
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
import { deriveKey, RandomStream } from "../src/util/random.js";

// ---- random DAGs --------------------------------------------------------------------------------------------------

/** Vector lengths the random model has weights for. */
const DIMS = [2, 3, 4] as const;
/** Hidden size of the random model's LSTM cells (gates (3 + k)·H, output [h; c] of 2H = 4). */
const CELL_H = 2;
const VARIANTS = 2;

/** The parameters random graphs draw from: shared weights, so that many nodes have equal batching signatures. */
export interface RandomModel {
  readonly params: ParameterCollection;
  /** W[o][i][variant]: matrices [o, i] for o, i in DIMS. */
  readonly W: ReadonlyMap<string, Parameter>;
  readonly bias: ReadonlyMap<string, Parameter>;
  /** Gate weights of cells with k = 0, 1, 2 children, per input length: "k:i". */
  readonly gateW: ReadonlyMap<string, Parameter>;
  readonly gateB: readonly Parameter[];
  /** Two square matrices summed into a non-parameter weight (matVec of a computed matrix). */
  readonly sumA: Parameter;
  readonly sumB: Parameter;
  readonly vec: readonly Parameter[];
  readonly tables: readonly LookupParameter[];
}

export function randomModel(seed: number): RandomModel {
  const params = new ParameterCollection({ seed });
  const u = { kind: "uniform", scale: 0.8 } as const;
  const W = new Map<string, Parameter>();
  const bias = new Map<string, Parameter>();
  for (const o of DIMS) {
    for (let v = 0; v < VARIANTS; v++) bias.set(`${o}:${v}`, params.addParameters(o, u, `b${o}_${v}`));
    for (const i of DIMS) {
      for (let v = 0; v < VARIANTS; v++) W.set(`${o}:${i}:${v}`, params.addParameters([o, i], u, `W${o}x${i}_${v}`));
    }
  }
  const gateW = new Map<string, Parameter>();
  const gateB: Parameter[] = [];
  for (let k = 0; k <= 2; k++) {
    gateB.push(params.addParameters((3 + k) * CELL_H, u, `gb${k}`));
    for (const i of DIMS) gateW.set(`${k}:${i}`, params.addParameters([(3 + k) * CELL_H, i], u, `gW${k}_${i}`));
  }
  const sumA = params.addParameters([3, 3], u, "sumA");
  const sumB = params.addParameters([3, 3], u, "sumB");
  const vec = DIMS.map((n) => params.addParameters(n, u, `v${n}`));
  const tables = [params.addLookupParameters(7, 3, u, "E3"), params.addLookupParameters(5, 4, u, "E4")];
  return { params, W, bias, gateW, gateB, sumA, sumB, vec, tables };
}

export interface RandomGraphOptions {
  seed: number;
  /** Independent-looking subgraphs; instances t and t + programs share their structure (so they batch). */
  instances?: number;
  /** Distinct structures among the instances. */
  programs?: number;
  /** Random ops per instance. */
  steps?: number;
  /** Probability that an argument is taken from an earlier instance (links the instances into one DAG). */
  crossLinks?: number;
}

const pick = <T>(rs: RandomStream, xs: readonly T[]): T => xs[rs.int(xs.length)]!;

/**
 * Adds a random DAG to `cg` and returns its scalar loss: the sum of `pickNegLogSoftmax` losses over some of the
 * vectors. Every op appears: inputs, lookups, parameter vectors, matVec/affine on shared weights (and on a computed
 * matrix), add/sub/cmul, tanh/logistic/relu/dropout, concat/pickRange, lstmCell with 0–2 children, sum. Some nodes
 * do not reach the loss (as in real models, where an engine must not touch their gradients).
 */
export function buildRandomGraph(cg: ComputationGraph, m: RandomModel, opts: RandomGraphOptions): Expression {
  const instances = opts.instances ?? 6;
  const programs = opts.programs ?? 2;
  const steps = opts.steps ?? 24;
  const cross = opts.crossLinks ?? 0.1;
  const global: Expression[] = [];
  const losses: Expression[] = [];
  for (let t = 0; t < instances; t++) {
    // structure from (seed, program), values and labels from (seed, instance)
    const rs = new RandomStream(deriveKey(opts.seed, "structure", t % programs));
    const rv = new RandomStream(deriveKey(opts.seed, "values", t));
    const pool: Expression[] = [];
    const ofLen = (n: number): Expression | undefined => {
      const r = rs.uniform(); // drawn always, so that instances of one program consume the stream alike
      const useGlobal = global.length > 0 && r < cross;
      const src = useGlobal ? global : pool;
      const c = src.filter((e) => e.rows === n);
      return c.length > 0 ? pick(rs, c) : undefined;
    };
    const any = (ok: (e: Expression) => boolean): Expression | undefined => {
      const c = pool.filter(ok);
      return c.length > 0 ? pick(rs, c) : undefined;
    };
    for (const n of DIMS)
      pool.push(
        input(
          cg,
          Array.from({ length: n }, () => 2 * rv.uniform() - 1),
        ),
      );
    pool.push(lookup(cg, m.tables[0]!, rv.int(7)), lookup(cg, m.tables[1]!, rv.int(5)));
    const v = rs.int(DIMS.length);
    pool.push(add(parameter(cg, m.vec[v]!), pool[v]!));
    for (let s = 0; s < steps; s++) {
      const kind = rs.int(10);
      const x = ofLen(pick(rs, DIMS));
      if (x === undefined) continue;
      const i = x.rows;
      const o = pick(rs, DIMS);
      const W = (out: number, inp: number) => m.W.get(`${out}:${inp}:${rs.int(VARIANTS)}`)!;
      let y: Expression | undefined;
      switch (kind) {
        case 0:
          y = matVec(W(o, i), x);
          break;
        case 1: {
          const x2 = ofLen(pick(rs, DIMS));
          const computedBias = rs.uniform() < 0.25 ? ofLen(o) : undefined;
          const b = computedBias ?? m.bias.get(`${o}:${rs.int(VARIANTS)}`)!;
          y = x2 ? affine([b, W(o, i), x, W(o, x2.rows), x2]) : affine([b, W(o, i), x]);
          break;
        }
        case 2: {
          const z = ofLen(i) ?? x;
          const f = pick(rs, [add, sub, cmul]);
          y = f(x, z);
          break;
        }
        case 3:
          y = rs.uniform() < 0.25 ? dropout(x, 0.3) : pick(rs, [tanh, logistic, relu])(x);
          break;
        case 4: {
          const z = any((e) => e.rows <= 4) ?? x;
          y = concat(rs.uniform() < 0.5 ? [x, z] : [z, x, z]);
          break;
        }
        case 5: {
          const src = any((e) => e.rows >= 3) ?? x;
          const len = 1 + rs.int(src.rows - 1);
          const start = rs.int(src.rows - len + 1);
          y = pickRange(src, start, start + len);
          break;
        }
        case 6: {
          const k = rs.int(3);
          const cs: Expression[] = [];
          for (let j = 0; j < k; j++) cs.push(ofLen(CELL_H) ?? pickRange(x, 0, CELL_H));
          const gates = affine([m.gateB[k]!, m.gateW.get(`${k}:${i}`)!, x]);
          const hc = lstmCell(gates, cs);
          pool.push(hc, pickRange(hc, CELL_H, 2 * CELL_H));
          y = pickRange(hc, 0, CELL_H);
          break;
        }
        case 7:
          y = i === 3 ? matVec(sum([parameter(cg, m.sumA), m.sumB]), x) : tanh(x);
          break;
        case 8: {
          const z = ofLen(i) ?? x;
          y = sum(rs.uniform() < 0.5 ? [x, z] : [x, z, x]);
          break;
        }
        default:
          losses.push(pickNegLogSoftmax(x, rv.int(i)));
      }
      if (y !== undefined) pool.push(y);
    }
    const outs = pool.filter((e) => e.rows >= 2);
    const nLoss = 1 + rs.int(3);
    for (let k = 0; k < nLoss; k++) {
      const e = outs[outs.length - 1 - rs.int(Math.min(outs.length, 4))]!;
      losses.push(pickNegLogSoftmax(e, rv.int(e.rows)));
    }
    global.push(...pool);
  }
  return sum(losses);
}

// ---- Tree-LSTM batches (src/bench/random-trees.ts: `vpps bench autobatch plan` plans them too) ----------------------

export {
  buildTreeLstmBatch,
  type RandomTree,
  randomTree,
  randomTrees,
  type TreeLstmModel,
  treeLstmModel,
} from "../src/bench/random-trees.js";

// ---- random graphs for VPPS (every op the script supports, matrices of awkward widths) ------------------------------------------------------------------------------

/** Weights of a random VPPS graph: 4 matrices with shapes from VPPS_DIMS, one bias per size, a lookup table. */
export interface RandomVppsModel {
  mats: Parameter[];
  vecs: Parameter[];
  table: LookupParameter;
}

/** Vector sizes of random VPPS graphs: 33 is wider than a warp (a column guard and a second chunk). */
const VPPS_DIMS = [3, 5, 8, 33];

/** A random model for VPPS graphs (parameter values from the seed). */
export function randomVppsModel(seed: number): { pc: ParameterCollection; build: RandomVppsModel } {
  const pc = new ParameterCollection({ seed });
  const r = new RandomStream(seed);
  const mats: Parameter[] = [];
  for (let k = 0; k < 4; k++)
    mats.push(pc.addParameters([VPPS_DIMS[r.int(4)]!, VPPS_DIMS[r.int(4)]!], undefined, `W${k}`));
  const vecs = VPPS_DIMS.map((d) => pc.addParameters(d, { kind: "uniform", scale: 0.5 }, `b${d}`));
  const table = pc.addLookupParameters(10, VPPS_DIMS[r.int(3)]!, undefined, "E");
  return { pc, build: { mats, vecs, table } };
}

/** A random graph using every op the VPPS script supports; the loss is a sum of softmax losses over its nodes. */
export function buildRandomVppsGraph(cg: ComputationGraph, m: RandomVppsModel, seed: number): Expression {
  const r = new RandomStream(seed * 7919 + 1);
  cg.dropoutKey = seed;
  const exprs: Expression[] = [];
  const ofSize = (n: number) => exprs.filter((e) => e.size === n);
  const pick = <T>(xs: readonly T[]): T | undefined => (xs.length === 0 ? undefined : xs[r.int(xs.length)]);
  const values = (n: number) => Array.from({ length: n }, () => 2 * r.uniform() - 1);
  for (const d of VPPS_DIMS) exprs.push(input(cg, values(d)));
  for (let k = 0; k < 3; k++) exprs.push(lookup(cg, m.table, r.int(m.table.rows)));
  for (const v of m.vecs) if (r.int(2) === 0) exprs.push(parameter(cg, v));
  for (let step = 0; step < 45; step++) {
    const a = pick(exprs)!;
    const same = pick(ofSize(a.size))!;
    switch (r.int(13)) {
      case 0: {
        const W = pick(m.mats)!;
        const x = pick(ofSize(W.cols));
        if (x) exprs.push(matVec(W, x));
        break;
      }
      case 1: {
        const W = pick(m.mats)!;
        const x = pick(ofSize(W.cols));
        const b = r.int(2) === 0 ? m.vecs[VPPS_DIMS.indexOf(W.rows)]! : pick(ofSize(W.rows));
        if (!x || !b) break;
        const W2 = pick(m.mats.filter((w) => w.rows === W.rows && w !== W));
        const x2 = W2 ? pick(ofSize(W2.cols)) : undefined;
        exprs.push(W2 && x2 && r.int(2) === 0 ? affine([b, W, x, W2, x2]) : affine([b, W, x]));
        break;
      }
      case 2:
        if (a.size + same.size <= 40) exprs.push(concat([a, same, ...(r.int(2) === 0 ? [pick(exprs)!] : [])]));
        break;
      case 3: {
        if (a.size < 2) break;
        const s = r.int(a.size - 1);
        exprs.push(pickRange(a, s, s + 1 + r.int(a.size - s - 1)));
        break;
      }
      case 4:
        exprs.push(add(a, same));
        break;
      case 5:
        exprs.push(sub(a, same));
        break;
      case 6:
        exprs.push(cmul(a, same));
        break;
      case 7:
        exprs.push([tanh, logistic, relu][r.int(3)]!(a));
        break;
      case 8:
        exprs.push(dropout(a, 0.3));
        break;
      case 9:
        exprs.push(sum([a, same, ...(r.int(2) === 0 ? [same] : [])]));
        break;
      case 10:
      case 11: {
        const H = pick([3, 5, 8])!;
        const k = r.int(3);
        const part = () =>
          pick(ofSize(H)) ??
          pickRange(pick(exprs.filter((e) => e.size >= H)) ?? concat([a, a, a, a, a, a, a, a]), 0, H);
        const gates = pick(ofSize((3 + k) * H)) ?? concat(Array.from({ length: 3 + k }, part));
        const hc = lstmCell(gates, Array.from({ length: k }, part));
        exprs.push(hc, pickRange(hc, 0, H), pickRange(hc, H, 2 * H));
        break;
      }
      case 12:
        if (a.size > 1) exprs.push(pickNegLogSoftmax(a, r.int(a.size)));
        break;
    }
  }
  const losses: Expression[] = exprs
    .slice(-6)
    .filter((e) => e.size > 1)
    .map((e) => pickNegLogSoftmax(e, r.int(e.size)));
  for (let k = 0; k < 6; k++) {
    const e = pick(exprs.filter((x) => x.size > 1))!;
    losses.push(pickNegLogSoftmax(e, r.int(e.size)));
  }
  for (const e of exprs) if (e.size === 1 && e.op !== 0) losses.push(e);
  return sum(losses);
}
