/**
 * The taggers' BiLSTMs as one `rnn` graph op over a packed batch (`--rnn persistent`): every sequence of the batch
 * (the sentences, or the spelled words' characters) sorted by decreasing length and packed as PyTorch's
 * PackedSequence, both directions in one node, y = [f | b] per packed row. The per-step formulation
 * (`lstmSequence`, `--rnn steps`) builds an affine and a cell per word instead.
 *
 * Parameters: the same names and shapes as the per-step formulation, but the gate rows of Wx, Wh and b are in
 * PyTorch's order [i; f; g; o] (the op's), not ours [i; o; u; f], and b is the op's b_ih (no b_hh: cuDNN's single
 * bias). `swapGateOrder` converts a matrix or bias between the two; docs/MODELS.md says so.
 */
import { type ComputationGraph, Expression } from "../../graph/graph.js";
import { rnn } from "../../ops/recurrent-op.js";
import { concat } from "../../ops/structure.js";
import { sortByLength, stepOffsets } from "../../rnn/packed.js";
import type { LstmWeights } from "./model.js";

/** How the taggers run their LSTMs: an affine and a cell per word, or one `rnn` op per batch. */
export type TaggerRnn = "steps" | "persistent";
export const TAGGER_RNNS: readonly TaggerRnn[] = ["steps", "persistent"];

/** One BiLSTM over a batch of sequences: the op's node and, per sequence and position, its packed row. */
export interface PackedBiLstm {
  /** The rnn node: [N, 2H] as a vector, row n = [f; b] of packed row n. */
  readonly y: number;
  /** rows[s][t]: the packed row of position t of sequence s (in the order the sequences were given). */
  readonly rows: readonly Int32Array[];
  readonly hidden: number;
}

/** Runs a forward and a backward LSTM over `sequences` (node ids of their input vectors) as one rnn op. */
export function packedBiLstm(
  cg: ComputationGraph,
  forward: LstmWeights,
  backward: LstmWeights,
  sequences: readonly (readonly number[])[],
): PackedBiLstm {
  const lengths = sequences.map((s) => s.length);
  const { sortedIndices } = sortByLength(lengths);
  const T = lengths[sortedIndices[0]!]!;
  const batchSizes = new Int32Array(T);
  for (let t = 0; t < T; t++) {
    let b = 0;
    while (b < sequences.length && lengths[sortedIndices[b]!]! > t) b++;
    batchSizes[t] = b;
  }
  const off = stepOffsets(batchSizes);
  const rows = sequences.map((s) => new Int32Array(s.length));
  const packed: Expression[] = new Array(off[T]!);
  for (let b = 0; b < sequences.length; b++) {
    const s = sortedIndices[b]!;
    for (let t = 0; t < lengths[s]!; t++) {
      const row = off[t]! + b;
      rows[s]![t] = row;
      packed[row] = new Expression(cg, sequences[s]![t]!, cg.generation);
    }
  }
  const y = rnn(concat(packed), batchSizes, "lstm", [
    { W_ih: forward.Wx, W_hh: forward.Wh, b_ih: forward.b },
    { W_ih: backward.Wx, W_hh: backward.Wh, b_ih: backward.b },
  ]);
  return { y: y.id, rows, hidden: forward.hidden };
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
