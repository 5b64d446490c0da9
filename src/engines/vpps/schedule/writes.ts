/**
 * Who wrote which buffer in which step of the batch: what the scheduler reads to place waits (steps.ts).
 *
 * Buffers are storage roots (plan/layout.ts): a node's value and gradient storage, and an affine node's
 * temporaries. A write is (step, who), who a CTA or, as `-(m + 1)`, the holders of matrix m; a buffer keeps its
 * writes newest first.
 */
import type { BatchLayout } from "../plan/layout.js";

/**
 * The node records of WriteLog.rec: NODE_WORDS words per node at these offsets, the buffer ids of its value and
 * gradient storage, then the (newest write, next older) pairs of its own value and gradient buffers.
 */
const NODE_WORDS = 6;
const R_VALUE_BUFFER = 0;
const R_GRAD_BUFFER = 1;
const R_VALUE_WRITE = 2;
const R_GRAD_WRITE = 4;

/**
 * A write (step, who) as one positive word: who + WHO_BIAS in the low WHO_BITS bits (who is a CTA, or -(m + 1) for
 * the holders of matrix m, m < 32), step + 1 above (so that 0 means "no write").
 */
const WHO_BITS = 12;
const WHO_BIAS = 64;
/** Steps a batch may have, and CTAs a plan may have, in the packed writes. */
export const MAX_STEPS = (1 << (31 - WHO_BITS)) - 2;
export const MAX_WRITER_CTAS = (1 << WHO_BITS) - WHO_BIAS - 1;

export function packWrite(step: number, who: number): number {
  return ((step + 1) << WHO_BITS) | (who + WHO_BIAS);
}

export function writeStep(w: number): number {
  return (w >>> WHO_BITS) - 1;
}

export function writeWho(w: number): number {
  return (w & ((1 << WHO_BITS) - 1)) - WHO_BIAS;
}

/**
 * Per node of the batch, NODE_WORDS words of `rec` at NODE_WORDS·node: the buffer ids of its value and gradient
 * storage (-1: storage nobody writes in the batch), then the writes of its own value and gradient buffers when it
 * is a storage root. A buffer id is the offset in `rec` of the buffer's newest write: `NODE_WORDS·root +
 * R_VALUE_WRITE` (or R_GRAD_WRITE), and `NODE_WORDS·n + 2·node` for an affine node's temporaries.
 *
 * A write record is 2 words: the write packed as by `packWrite` (0 when nobody wrote the buffer in this batch),
 * and the offset in `wr` of the next older write or -1. Older writes are 2 words each in `wr` (packed write, next
 * older or -1).
 *
 * Why per node: the scheduler visits nodes level by level, which at batch 64-128 jumps across megabytes, so
 * that "who wrote what this node reads" cost two dependent cache misses (the node's storage root, then a table of
 * writes indexed by root, then 16 bytes per buffer with an epoch). Here most nodes are their own root and one line
 * answers it; the table is rebuilt by one sequential pass per batch. (Copying more of the node's facts into the
 * record, op, arguments, offsets, cost as much in that pass as it saved in misses.)
 */
export class WriteLog {
  private records = new Int32Array(0);
  private tempBase = 0;
  private older: Int32Array = new Int32Array(2 * 1024);
  private olderLength = 0;

  /** The node records (see the class comment); read by the scheduler's dependency walks. */
  get rec(): Int32Array {
    return this.records;
  }

  /** The older writes (see the class comment). */
  get wr(): Int32Array {
    return this.older;
  }

  /** Prepares for a batch of `nodes` nodes laid out as `L`: no buffer written yet. */
  begin(L: BatchLayout, nodes: number): void {
    const words = NODE_WORDS * nodes + 2 * nodes;
    if (this.records.length < words) this.records = new Int32Array(2 * words);
    const rec = this.records;
    const { valueRoot, gradRoot } = L;
    for (let i = 0, at = 0; i < nodes; i++, at += NODE_WORDS) {
      const v = valueRoot[i]!;
      const gr = gradRoot[i]!;
      rec[at + R_VALUE_BUFFER] = v < 0 ? -1 : NODE_WORDS * v + R_VALUE_WRITE;
      rec[at + R_GRAD_BUFFER] = gr < 0 ? -1 : NODE_WORDS * gr + R_GRAD_WRITE;
      rec[at + R_VALUE_WRITE] = 0; // nothing written yet
      rec[at + R_GRAD_WRITE] = 0;
    }
    this.tempBase = NODE_WORDS * nodes;
    rec.fill(0, this.tempBase, words);
    this.olderLength = 0;
  }

  /** Buffer ids (offsets in `rec`) of a node's value and gradient storage (-1: storage nobody writes in the batch). */
  valueBuffer(node: number): number {
    return this.records[NODE_WORDS * node + R_VALUE_BUFFER]!;
  }

  gradBuffer(node: number): number {
    return this.records[NODE_WORDS * node + R_GRAD_BUFFER]!;
  }

  /** The buffer id of an affine node's temporaries. */
  tempBuffer(node: number): number {
    return this.tempBase + 2 * node;
  }

  /** Records that `who` (a CTA, or -(m+1) for the holders of matrix m) wrote buffer `at` in step `step`. */
  wrote(at: number, who: number, step: number): void {
    if (at < 0) return;
    const bw = this.records;
    const w = packWrite(step, who);
    const newest = bw[at]!;
    if (newest === w) return; // already recorded
    if (newest !== 0) {
      // the newest write so far moves to the list of older ones
      let wr = this.older;
      const e = this.olderLength;
      if (e === wr.length) this.older = wr = grow(wr);
      wr[e] = newest;
      wr[e + 1] = bw[at + 1]!;
      this.olderLength = e + 2;
      bw[at + 1] = e;
    } else {
      bw[at + 1] = -1;
    }
    bw[at] = w;
  }
}

function grow(a: Int32Array): Int32Array {
  const b = new Int32Array(a.length * 2);
  b.set(a);
  return b;
}
