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

// ---- Tree-LSTM batches --------------------------------------------------------------------------------------------

/** A binary tree: a leaf has a word; an internal node has two children. Every node has a sentiment label. */
export interface RandomTree {
  readonly label: number;
  readonly word: number;
  readonly left: RandomTree | null;
  readonly right: RandomTree | null;
}

/** A random binary bracketing of `words` leaves. */
export function randomTree(rs: RandomStream, words: number, vocab: number, classes: number): RandomTree {
  if (words === 1) return { label: rs.int(classes), word: rs.int(vocab), left: null, right: null };
  const split = 1 + rs.int(words - 1);
  const left = randomTree(rs, split, vocab, classes);
  const right = randomTree(rs, words - split, vocab, classes);
  return { label: rs.int(classes), word: -1, left, right };
}

/** `count` random trees of `minWords … maxWords` leaves (the SST average is about 19 words). */
export function randomTrees(
  seed: number,
  count: number,
  opts: { minWords?: number; maxWords?: number; vocab?: number; classes?: number } = {},
): RandomTree[] {
  const rs = new RandomStream(deriveKey(seed, "trees"));
  const lo = opts.minWords ?? 10;
  const hi = opts.maxWords ?? 28;
  return Array.from({ length: count }, () =>
    randomTree(rs, lo + rs.int(hi - lo + 1), opts.vocab ?? 50, opts.classes ?? 5),
  );
}

export interface TreeLstmModel {
  readonly params: ParameterCollection;
  readonly hidden: number;
  readonly E: LookupParameter;
  readonly W: Parameter;
  readonly b: Parameter;
  readonly U: Parameter;
  readonly b1: Parameter;
  readonly Uf1: Parameter;
  readonly Uf2: Parameter;
  readonly bf: Parameter;
  readonly Wo: Parameter;
  readonly bo: Parameter;
}

export function treeLstmModel(
  seed: number,
  opts: { hidden?: number; embed?: number; vocab?: number; classes?: number } = {},
): TreeLstmModel {
  const H = opts.hidden ?? 4;
  const D = opts.embed ?? 3;
  const C = opts.classes ?? 5;
  const params = new ParameterCollection({ seed });
  const u = { kind: "uniform", scale: 0.5 } as const;
  return {
    params,
    hidden: H,
    E: params.addLookupParameters(opts.vocab ?? 50, D, u, "E"),
    W: params.addParameters([3 * H, D], undefined, "W"),
    b: params.addParameters(3 * H, u, "b"),
    U: params.addParameters([3 * H, 2 * H], undefined, "U"),
    b1: params.addParameters(3 * H, u, "b1"),
    Uf1: params.addParameters([H, H], undefined, "Uf1"),
    Uf2: params.addParameters([H, H], undefined, "Uf2"),
    bf: params.addParameters(H, u, "bf"),
    Wo: params.addParameters([C, H], undefined, "Wo"),
    bo: params.addParameters(C, u, "bo"),
  };
}

/**
 * The Tree-LSTM of the VPPS benchmark over a batch of trees, one super-graph: leaves
 * `lstmCell(affine([b, W, E[w]]), [])`, internal nodes `lstmCell([affine([b1, U, [h1; h2]]); affine([bf, Uf1, h1]);
 * affine([bf, Uf2, h2])], [c1, c2])`, h and c split off with `pickRange`, a softmax loss at every node, all summed.
 */
export function buildTreeLstmBatch(cg: ComputationGraph, m: TreeLstmModel, trees: readonly RandomTree[]): Expression {
  const H = m.hidden;
  const losses: Expression[] = [];
  const encode = (t: RandomTree): { h: Expression; c: Expression } => {
    let hc: Expression;
    if (t.left === null || t.right === null) {
      hc = lstmCell(affine([m.b, m.W, lookup(cg, m.E, t.word)]), []);
    } else {
      const l = encode(t.left);
      const r = encode(t.right);
      const gates = concat([
        affine([m.b1, m.U, concat([l.h, r.h])]),
        affine([m.bf, m.Uf1, l.h]),
        affine([m.bf, m.Uf2, r.h]),
      ]);
      hc = lstmCell(gates, [l.c, r.c]);
    }
    const h = pickRange(hc, 0, H);
    const c = pickRange(hc, H, 2 * H);
    losses.push(pickNegLogSoftmax(affine([m.bo, m.Wo, h]), t.label));
    return { h, c };
  };
  for (const t of trees) encode(t);
  return sum(losses);
}
