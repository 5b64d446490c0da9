/**
 * Who wrote which buffer in which step of the batch: what the scheduler reads to place waits (steps.ts).
 *
 * Buffers are storage roots (plan/layout.ts): a node's value and gradient storage, and an affine node's
 * temporaries. A write is (step, who), who a CTA or, as `-(m + 1)`, the holders of matrix m; a buffer keeps its
 * writes newest first.
 */
import { type LevelOrder, N_GRAD_BUFFER, N_VALUE_BUFFER, NODE_WORDS } from "../plan/level-order.js";

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
 * The writes of every buffer of the batch, kept in the level order's node records (plan/level-order.ts): a buffer id
 * is the offset in `rec` of the buffer's newest write, `NODE_WORDS·root + N_VALUE_WRITE` (or N_GRAD_WRITE) for a
 * node's value (gradient) storage, and `tempBase + 2·node` for an affine node's temporaries. A node's record also
 * holds the buffer ids of its storage (N_VALUE_BUFFER, N_GRAD_BUFFER; -1 for storage nobody writes in the batch).
 *
 * A write record is 2 words: the write packed as by `packWrite` (0 when nobody wrote the buffer in this batch),
 * and the offset in `wr` of the next older write or -1. Older writes are 2 words each in `wr` (packed write, next
 * older or -1).
 *
 * Why in the node records: the scheduler visits nodes level by level, and "who wrote what this node reads" is a
 * lookup per argument; in the record it is on the line the scheduler reads for the argument's other facts, and the
 * layout initialises it while writing the record (no pass of its own).
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

  /** Prepares for the batch of level order V (whose layout set every node's writes to none): no temporary written. */
  begin(V: LevelOrder): void {
    this.records = V.R;
    this.tempBase = V.tempBase;
    V.R.fill(0, V.tempBase, V.tempBase + 2 * V.live);
    this.olderLength = 0;
  }

  /** Buffer ids (offsets in `rec`) of a node's value and gradient storage (-1: storage nobody writes in the batch). */
  valueBuffer(node: number): number {
    return this.records[NODE_WORDS * node + N_VALUE_BUFFER]!;
  }

  gradBuffer(node: number): number {
    return this.records[NODE_WORDS * node + N_GRAD_BUFFER]!;
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
