/**
 * Random Tree-LSTM batches shaped like the VPPS benchmark's (trees of about 19 words, a softmax loss at every node, all
 * summed), built from plain ops: what `vpps bench autobatch plan` plans, and what the autobatch tests run. Everything
 * is a pure function of the seed (the project's counter-based generator).
 */
import type { ComputationGraph, Expression } from "../graph/graph.js";
import { type LookupParameter, type Parameter, ParameterCollection } from "../model/parameters.js";
import { affine, concat, lookup, lstmCell, pickNegLogSoftmax, pickRange, sum } from "../ops/index.js";
import { deriveKey, RandomStream } from "../util/random.js";

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
