/**
 * The taggers' BiLSTMs as one `rnn` graph op over a packed batch (`--rnn persistent`): every sequence of the batch
 * (the sentences, or the spelled words' characters) sorted by decreasing length and packed as PyTorch's
 * PackedSequence, both directions in one node, y = [f | b] per packed row ([N, 2H]). The per-step formulation
 * (`lstmSequence`, `--rnn steps`) builds an affine and a cell per word instead.
 *
 * Parameters: the same names and shapes as the per-step formulation, but the gate rows of Wx, Wh and b are in
 * PyTorch's order [i; f; g; o] (the op's), not ours [i; o; u; f], and b is the op's b_ih (no b_hh: cuDNN's single
 * bias). `swapGateOrder` converts a matrix or bias between the two; docs/MODELS.md says so.
 */
import type { ComputationGraph, Expression } from "../../graph/graph.js";
import { applyMask, pruneByMagnitude } from "../../ops/prune.js";
import { rnn } from "../../ops/recurrent-op.js";
import { sortByLength, stepOffsets } from "../../rnn/index.js";
import type { LstmWeights } from "./model.js";

/** How the taggers run their LSTMs: an affine and a cell per word, or one `rnn` op per batch. */
export type TaggerRnn = "steps" | "persistent";
export const TAGGER_RNNS: readonly TaggerRnn[] = ["steps", "persistent"];

/** Where each position of a batch of sequences goes in the packed batch (PyTorch's PackedSequence, sorted). */
export interface Packing {
  /** Sequences still running at each step (non-increasing). */
  readonly batchSizes: Int32Array;
  /** rows[s][t]: the packed row of position t of sequence s (in the order the sequences were given). */
  readonly rows: readonly Int32Array[];
  /** N: the number of packed rows (every position of every sequence). */
  readonly total: number;
}

/** The packing of sequences of these lengths (each ≥ 1): sorted by decreasing length, stable, then time-major. */
export function packLengths(lengths: readonly number[]): Packing {
  const { sortedIndices } = sortByLength(lengths);
  const T = lengths[sortedIndices[0]!]!;
  const batchSizes = new Int32Array(T);
  for (let t = 0; t < T; t++) {
    let b = 0;
    while (b < lengths.length && lengths[sortedIndices[b]!]! > t) b++;
    batchSizes[t] = b;
  }
  const off = stepOffsets(batchSizes);
  const rows = lengths.map((n) => new Int32Array(n));
  for (let b = 0; b < lengths.length; b++) {
    const s = sortedIndices[b]!;
    for (let t = 0; t < lengths[s]!; t++) rows[s]![t] = off[t]! + b;
  }
  return { batchSizes, rows, total: off[T]! };
}

/** Lays out per-position values in packed order: out[rows[s][t]] = value(s, t). */
export function packValues(p: Packing, value: (s: number, t: number) => number): number[] {
  const out = new Array<number>(p.total);
  p.rows.forEach((r, s) => {
    for (let t = 0; t < r.length; t++) out[r[t]!] = value(s, t);
  });
  return out;
}

/**
 * A forward and a backward LSTM over the packed batch x (its rows [N, in], or their N·in values as a vector) as one
 * rnn op: y = [f | b] per packed row, [N, 2H]. With `density` < 1 (`--density`) each W_hh is pruned by magnitude,
 * row-balanced: the op derives the masks from the current weights in every forward. The taggers prune their initial
 * weights (`pruneInitialWeights`), so the mask the op derives never changes: a pruned weight is zero and its
 * gradient is zero under every optimiser the trainers offer, and a checkpoint needs only the weights.
 */
export function packedBiLstm(
  x: Expression,
  batchSizes: Int32Array,
  forward: LstmWeights,
  backward: LstmWeights,
  density = 1,
): Expression {
  return rnn(
    x,
    batchSizes,
    "lstm",
    [
      { W_ih: forward.Wx, W_hh: forward.Wh, b_ih: forward.b },
      { W_ih: backward.Wx, W_hh: backward.Wh, b_ih: backward.b },
    ],
    { density, pruning: "row-balanced" },
  );
}

/**
 * Prunes the LSTMs' initial W_hh in place to `density`, row-balanced by magnitude (the op's own pruning): the pruned
 * weights become 0. The op re-derives its mask from the weights at every forward; with the pruned weights at 0 (and
 * their gradients 0: the op's gradient is masked) every later mask is this one, so a GPU engine keeps its sparse
 * kernels' pairs and only refills their values (re-deriving a mask that moves with every update would pack and order
 * the pairs again for each batch). Density 1 leaves the weights as they are.
 */
export function pruneInitialWeights(lstms: readonly LstmWeights[], density: number): void {
  if (density >= 1) return;
  for (const { Wh } of lstms) {
    Wh.value.set(applyMask(Wh.value, pruneByMagnitude(Wh.value, Wh.rows, Wh.cols, density, "row-balanced")));
  }
}

/** Node ids of `g` in packed order as rows [N, dim] (a concat of vectors, each a row, read as the rnn's x). */
export function packedNodes(cg: ComputationGraph, p: Packing, node: (s: number, t: number) => number): Expression[] {
  return packValues(p, node).map((id) => cg.expression(id));
}

/**
 * Reorders the gate blocks of an LSTM matrix or bias ([4H, cols] row-major, or [4H]) between our order [i; o; u; f]
 * and PyTorch's [i; f; g; o] (u = g): blocks 0, 3, 2, 1. The map is its own inverse.
 */
export function swapGateOrder(values: Float32Array, hidden: number): Float32Array {
  const block = values.length / 4;
  if (!Number.isInteger(block) || block % hidden !== 0) {
    throw new Error(`swapGateOrder: ${values.length} values are not 4 gate blocks of ${hidden} rows`);
  }
  const out = new Float32Array(values.length);
  const order = [0, 3, 2, 1];
  for (let k = 0; k < 4; k++) out.set(values.subarray(order[k]! * block, (order[k]! + 1) * block), k * block);
  return out;
}
