import { MAX_INSTRUCTION_WORDS, MAX_PREAMBLE_N, OPCODES, Opcode, preamble } from "./format.js";

/**
 * Builds all processors' scripts of one batch. Instructions are appended per processor; a signal is reserved at
 * the end of each step a processor takes part in and kept only if a consumer on another processor turned out to
 * need it (known later), and each wait's count is patched at `finish()` to the number of signals kept for its
 * barrier. Reused across batches: every buffer keeps its capacity, so a batch allocates nothing once warm (the
 * host path runs per batch, at up to ~10⁵ instructions).
 */
export class ScriptWriter {
  private bufs: Uint32Array[];
  private readonly lens: Int32Array;
  private sigCta: Int32Array = new Int32Array(256);
  private sigPos: Int32Array = new Int32Array(256);
  private sigBarrier: Int32Array = new Int32Array(256);
  private sigKeep: Uint8Array = new Uint8Array(256);
  private signals = 0;
  private waitCta: Int32Array = new Int32Array(256);
  private waitPos: Int32Array = new Int32Array(256);
  private waitBarrier: Int32Array = new Int32Array(256);
  private waits = 0;
  private table: Uint32Array = new Uint32Array(4096);
  private tableLength = 0;
  /** finish() scratch: kept signals per barrier, dropped signals per processor, their positions grouped by CTA. */
  private kept = new Uint32Array(256);
  private readonly cutStart: Int32Array;
  private cutPos = new Int32Array(256);

  constructor(readonly ctas: number) {
    this.bufs = Array.from({ length: ctas }, () => new Uint32Array(1024));
    this.lens = new Int32Array(ctas);
    this.cutStart = new Int32Array(ctas + 1);
  }

  reset(): void {
    this.lens.fill(0);
    this.signals = 0;
    this.waits = 0;
    this.tableLength = 0;
  }

  /** Appends `count` words of `entries` to the shared table; returns their offset in the table. */
  appendTable(entries: Uint32Array, count: number): number {
    const at = this.tableLength;
    if (at + count > this.table.length) {
      const grown = new Uint32Array(Math.max(at + count, this.table.length * 2));
      grown.set(this.table.subarray(0, at));
      this.table = grown;
    }
    const t = this.table;
    // short lists are the common case at small batches; a loop beats creating a subarray view for them
    if (count <= 64) for (let k = 0; k < count; k++) t[at + k] = entries[k]!;
    else t.set(entries.subarray(0, count), at);
    this.tableLength = at + count;
    return at;
  }

  /** Words written so far for processor `cta`. */
  length(cta: number): number {
    return this.lens[cta]!;
  }

  /** Processor `cta`'s buffer with room for `words` more words (grown by doubling; kept across batches). */
  private room(cta: number, words: number): Uint32Array {
    const b = this.bufs[cta]!;
    const need = this.lens[cta]! + words;
    if (need <= b.length) return b;
    const grown = new Uint32Array(Math.max(need, b.length * 2));
    grown.set(b.subarray(0, this.lens[cta]!));
    this.bufs[cta] = grown;
    return grown;
  }

  /**
   * Overwrites word `at` of processor `cta`'s script (a position `length(cta)` gave, before `finish`): an operand
   * the scheduler learns only later (an lstm's h2).
   */
  patch(cta: number, at: number, value: number): void {
    if (at < 0 || at >= this.lens[cta]!) throw new RangeError(`ScriptWriter.patch: word ${at} of processor ${cta}`);
    this.bufs[cta]![at] = value >>> 0;
  }

  ins1(cta: number, op: Opcode, n: number, a: number): void {
    const b = this.room(cta, 2);
    const p = this.lens[cta]!;
    b[p] = preambleFast(op, n);
    b[p + 1] = a;
    this.lens[cta] = p + 2;
  }

  ins2(cta: number, op: Opcode, n: number, a: number, c: number): void {
    const b = this.room(cta, 3);
    const p = this.lens[cta]!;
    b[p] = preambleFast(op, n);
    b[p + 1] = a;
    b[p + 2] = c;
    this.lens[cta] = p + 3;
  }

  ins3(cta: number, op: Opcode, n: number, a: number, c: number, d: number): void {
    const b = this.room(cta, 4);
    const p = this.lens[cta]!;
    b[p] = preambleFast(op, n);
    b[p + 1] = a;
    b[p + 2] = c;
    b[p + 3] = d;
    this.lens[cta] = p + 4;
  }

  ins4(cta: number, op: Opcode, n: number, a: number, c: number, d: number, e: number): void {
    const b = this.room(cta, 5);
    const p = this.lens[cta]!;
    b[p] = preambleFast(op, n);
    b[p + 1] = a;
    b[p + 2] = c;
    b[p + 3] = d;
    b[p + 4] = e;
    this.lens[cta] = p + 5;
  }

  ins5(cta: number, op: Opcode, n: number, a: number, c: number, d: number, e: number, f: number): void {
    const b = this.room(cta, 6);
    const p = this.lens[cta]!;
    b[p] = preambleFast(op, n);
    b[p + 1] = a;
    b[p + 2] = c;
    b[p + 3] = d;
    b[p + 4] = e;
    b[p + 5] = f;
    this.lens[cta] = p + 6;
  }

  /** An instruction with any operand list (variadic ones); refuses one longer than `MAX_INSTRUCTION_WORDS`. */
  insN(cta: number, op: Opcode, n: number, operands: ArrayLike<number>, count = operands.length): void {
    if (count + 1 > MAX_INSTRUCTION_WORDS) {
      throw new RangeError(
        `VPPS script: ${OPCODES[op]!.mnemonic} has ${count + 1} words; at most ${MAX_INSTRUCTION_WORDS}`,
      );
    }
    const b = this.room(cta, count + 1);
    let p = this.lens[cta]!;
    b[p++] = preambleFast(op, n);
    for (let k = 0; k < count; k++) b[p++] = operands[k]!;
    this.lens[cta] = p;
  }

  /** Signals reserved so far (the next slot). */
  get signalCount(): number {
    return this.signals;
  }

  /** Reserves a signal on `barrier` at this point of `cta`'s script; returns its slot for `keep()`. */
  reserveSignal(cta: number, barrier: number): number {
    const s = this.signals;
    if (s === this.sigCta.length) this.growSignals();
    const b = this.room(cta, 1);
    const p = this.lens[cta]!;
    this.sigCta[s] = cta;
    this.sigPos[s] = p;
    this.sigBarrier[s] = barrier;
    this.sigKeep[s] = 0;
    b[p] = preambleFast(Opcode.Signal, barrier);
    this.lens[cta] = p + 1;
    this.signals = s + 1;
    return s;
  }

  /**
   * ins2(cta, op, n, a, c) followed by reserveSignal(cta, barrier), in one call: a list instruction and its signal on
   * each holder of a matrix, what every step costs per holder (at small batches most of the scheduling).
   */
  ins2Signal(cta: number, op: Opcode, n: number, a: number, c: number, barrier: number): number {
    const s = this.signals;
    if (s === this.sigCta.length) this.growSignals();
    const b = this.room(cta, 4);
    const p = this.lens[cta]!;
    b[p] = preambleFast(op, n);
    b[p + 1] = a;
    b[p + 2] = c;
    b[p + 3] = preambleFast(Opcode.Signal, barrier);
    this.lens[cta] = p + 4;
    this.sigCta[s] = cta;
    this.sigPos[s] = p + 3;
    this.sigBarrier[s] = barrier;
    this.sigKeep[s] = 0;
    this.signals = s + 1;
    return s;
  }

  private growSignals(): void {
    const s = this.signals;
    this.sigCta = grow(this.sigCta);
    this.sigPos = grow(this.sigPos);
    this.sigBarrier = grow(this.sigBarrier);
    const k = new Uint8Array(s * 2);
    k.set(this.sigKeep);
    this.sigKeep = k;
  }

  keep(slot: number): void {
    this.sigKeep[slot] = 1;
  }

  /** A wait on `barrier`; its count becomes the number of kept signals of that barrier. */
  wait(cta: number, barrier: number): void {
    const w = this.waits;
    if (w === this.waitCta.length) {
      this.waitCta = grow(this.waitCta);
      this.waitPos = grow(this.waitPos);
      this.waitBarrier = grow(this.waitBarrier);
    }
    this.ins1(cta, Opcode.Wait, barrier, 0);
    this.waitCta[w] = cta;
    this.waitPos[w] = this.lens[cta]! - 1;
    this.waitBarrier[w] = barrier;
    this.waits = w + 1;
  }

  /**
   * The batch script: prefix sums of the processors' lengths, then their scripts without unkept signals, then the
   * table. Written into `into(words)` when given (e.g. a pinned upload buffer of at least `words` words; the
   * result is a view of its first `words`), else into a new array.
   */
  finish(barriers: number, into?: (words: number) => Uint32Array): Uint32Array {
    // Each loop over the signals, waits or words is a method of its own: finish runs once per batch, and V8 would
    // optimise a loop inside it by on-stack replacement, keep that code, and deoptimise it in every later batch on
    // the code after the loop (the allocation below, which had not run when it was compiled).
    const cuts = this.groupCuts(barriers);
    this.patchWaits();
    const header = this.ctas + 1;
    let total = 0;
    for (let c = 0; c < this.ctas; c++) total += this.lens[c]!;
    const words = header + total - cuts + this.tableLength;
    let out: Uint32Array;
    if (into === undefined) out = uninitialisedWords(words);
    else {
      const given = into(words);
      if (given.length < words) {
        throw new RangeError(`VPPS script: the batch needs ${words} words; the buffer given holds ${given.length}`);
      }
      out = given.subarray(0, words);
    }
    this.copyOut(out);
    return out;
  }

  /**
   * Counts the kept signals per barrier (into `kept`) and groups the unkept ones' positions by processor with a
   * counting sort (cutPos; slots are in script order within each processor, and cutStart[c] ends processor c's
   * cuts, which start at cutStart[c - 1], 0 for c = 0); returns how many are cut.
   */
  private groupCuts(barriers: number): number {
    const ctas = this.ctas;
    if (this.kept.length < barriers) this.kept = new Uint32Array(Math.max(barriers, 2 * this.kept.length));
    const kept = this.kept;
    kept.fill(0, 0, barriers);
    const cutStart = this.cutStart;
    cutStart.fill(0);
    const { sigKeep, sigCta, sigPos, sigBarrier } = this;
    const signals = this.signals;
    let cuts = 0;
    for (let s = 0; s < signals; s++) {
      if (sigKeep[s] === 1) kept[sigBarrier[s]!]!++;
      else {
        cutStart[sigCta[s]! + 1]!++;
        cuts++;
      }
    }
    for (let c = 0; c < ctas; c++) cutStart[c + 1]! += cutStart[c]!;
    if (this.cutPos.length < cuts) this.cutPos = new Int32Array(Math.max(cuts, 2 * this.cutPos.length));
    const cutPos = this.cutPos;
    for (let s = 0; s < signals; s++) if (sigKeep[s] === 0) cutPos[cutStart[sigCta[s]!]!++] = sigPos[s]!;
    return cuts;
  }

  /** Each wait's count: the kept signals of its barrier. */
  private patchWaits(): void {
    const { waitCta, waitPos, waitBarrier, bufs, kept } = this;
    for (let w = 0; w < this.waits; w++) bufs[waitCta[w]!]![waitPos[w]!] = kept[waitBarrier[w]!]!;
  }

  /** The header, every processor's script without its cut signals, then the table, into `out`. */
  private copyOut(out: Uint32Array): void {
    const { ctas, bufs, cutStart, cutPos } = this;
    const header = ctas + 1;
    let at = header;
    let k = 0;
    for (let c = 0; c < ctas; c++) {
      out[c] = at - header;
      const b = bufs[c]!;
      let from = 0;
      for (const end = cutStart[c]!; k < end; k++) {
        const pos = cutPos[k]!;
        at = copyWords(out, at, b, from, pos);
        from = pos + 1;
      }
      at = copyWords(out, at, b, from, this.lens[c]!);
    }
    out[ctas] = at - header;
    copyWords(out, at, this.table, 0, this.tableLength);
  }
}

/**
 * Copies src[from, to) to dst at `at`; returns the end. Runs of up to a few hundred words by hand: creating the
 * subarray view that `set` needs costs more than that many word copies.
 */
function copyWords(dst: Uint32Array, at: number, src: Uint32Array, from: number, to: number): number {
  const n = to - from;
  if (n <= 32) for (let k = 0; k < n; k++) dst[at + k] = src[from + k]!;
  else dst.set(src.subarray(from, to), at);
  return at + n;
}

/**
 * A new array of `words` words whose contents are undefined (finish() writes every word): skips the zeroing of a
 * new typed array, which at large batches is megabytes per batch.
 */
function uninitialisedWords(words: number): Uint32Array {
  const bytes = Buffer.allocUnsafeSlow(4 * words); // its own ArrayBuffer, offset 0
  return new Uint32Array(bytes.buffer, bytes.byteOffset, words);
}

/** `preamble` for the writer's hot path: one mask test instead of the integer and range checks. */
function preambleFast(opcode: Opcode, n: number): number {
  if ((n & MAX_PREAMBLE_N) !== n) return preamble(opcode, n); // throws the descriptive error
  return (opcode | (n << 8)) >>> 0;
}

function grow(a: Int32Array): Int32Array {
  const b = new Int32Array(a.length * 2);
  b.set(a);
  return b;
}
