/**
 * Packed batches of variable-length sequences, as PyTorch's PackedSequence (enforce_sorted): the sequences sorted by
 * decreasing length, batchSizes[t] = number of sequences longer than t, and x [N, width] with the rows of step t
 * contiguous — sequence b's row at step t is offset(t) + b. Users who hold a list of sequences in their own order
 * pack it here; the permutation comes back so that outputs and final states can be returned in that order.
 */
import type { Buf } from "../ops/common.js";
import { checkBatchSizes, lengthsOf, stepOffsets } from "../ops/recurrent.js";
import { RnnArgumentError } from "./spec.js";

export { lengthsOf, stepOffsets };

/** A packed batch of rows of `width` floats. */
export interface PackedSequence<T extends Buf = Float32Array> {
  /** [N, width], N = Σ batchSizes. */
  readonly data: T;
  /** Non-increasing, batchSizes[0] = B (the number of sequences), length T (the longest sequence's length). */
  readonly batchSizes: Int32Array;
  readonly width: number;
}

/** Checks a packed batch (batchSizes valid, data of N·width floats, width as expected); returns N. */
export function checkPacked(p: PackedSequence<Buf>, where: string, name: string, width?: number): number {
  if (typeof p !== "object" || p === null || !(p.batchSizes instanceof Int32Array)) {
    throw new RnnArgumentError(
      `${where}: argument '${name}' must be a packed batch {data, batchSizes: Int32Array, width} or a list of sequences`,
    );
  }
  let n: number;
  try {
    n = checkBatchSizes(p.batchSizes, `${where}: ${name}`);
  } catch (e) {
    throw new RnnArgumentError((e as Error).message);
  }
  if (width !== undefined && p.width !== width) {
    throw new RnnArgumentError(`${where}: argument '${name}' has rows of width ${p.width}; expected ${width}`);
  }
  if (p.data.length !== n * p.width) {
    throw new RnnArgumentError(
      `${where}: argument '${name}' has ${p.data.length} values; batchSizes give N = ${n} rows of ${p.width} = ${n * p.width}`,
    );
  }
  return n;
}

/** The order that sorts sequences by decreasing length (stable: equal lengths keep their order). */
export interface SortOrder {
  /** sortedIndices[b] = the original index of the sequence at sorted position b (PyTorch's `sorted_indices`). */
  readonly sortedIndices: Int32Array;
  /** unsortedIndices[i] = the sorted position of original sequence i (PyTorch's `unsorted_indices`). */
  readonly unsortedIndices: Int32Array;
}

/** The stable sort of sequences by decreasing length. */
export function sortByLength(lengths: ArrayLike<number>): SortOrder {
  const idx = Array.from({ length: lengths.length }, (_, i) => i);
  idx.sort((a, b) => lengths[b]! - lengths[a]! || a - b);
  const sortedIndices = Int32Array.from(idx);
  const unsortedIndices = new Int32Array(idx.length);
  for (let b = 0; b < idx.length; b++) unsortedIndices[idx[b]!] = b;
  return { sortedIndices, unsortedIndices };
}

/** A packed batch made from a list of sequences, with the order it sorted them in. */
export interface Packed<T extends Buf> extends SortOrder {
  readonly packed: PackedSequence<T>;
  /** Lengths in the original order. */
  readonly lengths: Int32Array;
}

/**
 * Packs `sequences` (sequence i is [len_i, width], row-major, len_i ≥ 1), sorting them by decreasing length
 * (stable). The data array has the sequences' type (Float32Array unless they are all Float64Array).
 */
export function packSequences<T extends Buf>(
  sequences: readonly T[],
  width: number,
  where = "packSequences",
): Packed<T> {
  if (!Array.isArray(sequences) || sequences.length === 0) {
    throw new RnnArgumentError(
      `${where}: argument 'sequences' must be a non-empty list of sequences; got ${String(sequences)}`,
    );
  }
  const lengths = new Int32Array(sequences.length);
  for (let i = 0; i < sequences.length; i++) {
    const s = sequences[i] as unknown;
    if (!(s instanceof Float32Array || s instanceof Float64Array)) {
      throw new RnnArgumentError(
        `${where}: sequences[${i}] must be a Float32Array or Float64Array of len·${width} values`,
      );
    }
    if (s.length === 0 || s.length % width !== 0) {
      throw new RnnArgumentError(
        `${where}: sequences[${i}] has ${s.length} values; expected a positive multiple of the row width ${width}`,
      );
    }
    lengths[i] = s.length / width;
  }
  const order = sortByLength(lengths);
  const T = lengths[order.sortedIndices[0]!]!;
  const batchSizes = new Int32Array(T);
  for (let t = 0; t < T; t++) {
    let b = 0;
    while (b < sequences.length && lengths[order.sortedIndices[b]!]! > t) b++;
    batchSizes[t] = b;
  }
  const off = stepOffsets(batchSizes);
  const N = off[T]!;
  const f64 = sequences.every((s) => s instanceof Float64Array);
  const data = (f64 ? new Float64Array(N * width) : new Float32Array(N * width)) as T;
  for (let t = 0; t < T; t++) {
    for (let b = 0; b < batchSizes[t]!; b++) {
      const s = sequences[order.sortedIndices[b]!]!;
      data.set(s.subarray(t * width, (t + 1) * width), (off[t]! + b) * width);
    }
  }
  return { packed: { data, batchSizes, width }, lengths, ...order };
}

/**
 * The sequences of a packed batch, each [len_b, width]: in sorted order, or in the original order when the
 * `unsortedIndices` that packSequences returned are given.
 */
export function unpackSequences<T extends Buf>(packed: PackedSequence<T>, unsortedIndices?: Int32Array): T[] {
  const { data, batchSizes, width } = packed;
  const off = stepOffsets(batchSizes);
  const len = lengthsOf(batchSizes);
  const Ctor = data.constructor as new (n: number) => T;
  const sorted: T[] = [];
  for (let b = 0; b < len.length; b++) {
    const s = new Ctor(len[b]! * width);
    for (let t = 0; t < len[b]!; t++) s.set(data.subarray((off[t]! + b) * width, (off[t]! + b + 1) * width), t * width);
    sorted.push(s);
  }
  return unsortedIndices ? Array.from(unsortedIndices, (pos) => sorted[pos]!) : sorted;
}

/**
 * States [K, B, H] (h0/c0/hn/cn with K = L·D) with their batch axis permuted: out[k, b] = states[k, perm[b]].
 * With sortedIndices this takes states in the original order to the sorted order; with unsortedIndices, back.
 */
export function permuteStates<T extends Buf>(states: T, hidden: number, perm: Int32Array): T {
  const B = perm.length;
  const out = new (states.constructor as new (n: number) => T)(states.length);
  const K = states.length / (B * hidden);
  for (let k = 0; k < K; k++) {
    for (let b = 0; b < B; b++) {
      const from = (k * B + perm[b]!) * hidden;
      out.set(states.subarray(from, from + hidden), (k * B + b) * hidden);
    }
  }
  return out;
}
