/**
 * The matrix products of one step, collected per matrix until the step ends (steps.ts flushes them as one list
 * instruction per holder, or as tiles): each list's entry words (script/format.ts LIST_ENTRIES), the buffers its
 * entries read (for the waits), and its opcode. Kept across steps and batches (grow-only).
 */
import type { Opcode } from "../script/format.js";

export class StepLists {
  /** Per matrix: this step's entry words and how many. */
  readonly words: Uint32Array[];
  readonly length: Int32Array;
  /** Per matrix: the buffers (writes.ts ids) its entries read, and how many. */
  readonly reads: Int32Array[];
  readonly readCount: Int32Array;
  /** Per matrix: the list's opcode. */
  readonly op: Int32Array;
  /** The matrices with a list in this step, in the order they got one. */
  readonly listed: Int32Array;
  listedCount = 0;

  constructor(matrices: number) {
    this.words = Array.from({ length: matrices }, () => new Uint32Array(1024));
    this.length = new Int32Array(matrices);
    this.reads = Array.from({ length: matrices }, () => new Int32Array(512));
    this.readCount = new Int32Array(matrices);
    this.op = new Int32Array(matrices);
    this.listed = new Int32Array(matrices);
  }

  /** Adds one product of matrix m (entry words e0..e3, `count` of them; buffers read r0, r1). */
  add(
    op: Opcode,
    m: number,
    count: number,
    e0: number,
    e1: number,
    e2: number,
    e3: number,
    r0: number,
    r1: number,
  ): void {
    const len = this.length[m]!;
    let reads = this.readCount[m]!;
    if (len === 0 && reads === 0) this.listed[this.listedCount++] = m;
    this.op[m] = op;
    let words = this.words[m]!;
    if (len + count > words.length) {
      const w = new Uint32Array(words.length * 2);
      w.set(words);
      this.words[m] = words = w;
    }
    words[len] = e0;
    words[len + 1] = e1;
    words[len + 2] = e2;
    if (count > 3) words[len + 3] = e3;
    this.length[m] = len + count;
    let r = this.reads[m]!;
    if (reads + 2 > r.length) {
      const grown = new Int32Array(r.length * 2);
      grown.set(r);
      this.reads[m] = r = grown;
    }
    r[reads++] = r0;
    r[reads++] = r1;
    this.readCount[m] = reads;
  }

  /** Matrix m's list was flushed: empty again. */
  clear(m: number): void {
    this.length[m] = 0;
    this.readCount[m] = 0;
  }
}
