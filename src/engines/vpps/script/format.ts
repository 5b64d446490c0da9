/**
 * THE VPPS script format, in one place: opcodes, their operands, the encoder and `disassemble()`.
 *
 * An instruction is a 4-byte preamble followed by 4-byte operands (paper §III-B1, CISC style):
 *   preamble = opcode (bits 0-7) | n << 8 (bits 8-31),
 * where n is the tensor length for vector instructions, the matrix index for matrix instructions and the barrier
 * index for signal/wait. Operands are float offsets into the one device pool (32 bits: 16 GiB addressable),
 * `NONE` where an optional operand is absent, or small integers (counts, labels, keys, float bit patterns).
 * Variadic instructions carry a count `k` among their fixed operands, followed by `k` repeated groups.
 *
 * Memory conventions every producer of scripts must keep (the CUDA kernel and the emulator rely on them):
 * - gradient regions of the pool are zero at launch (all gradient writes are atomic accumulations `+=`);
 * - value regions are written once (plain stores) before any consumer reads them, ordered by signal/wait when
 *   producer and consumer run on different processors;
 * - barrier counters are zero at launch.
 *
 * The whole batch is one `Uint32Array`: `ctas + 1` prefix sums (word offsets of each processor's script, relative to
 * the end of this header), the scripts back to back, then the shared operand table: matrix instructions name a
 * list of entries there (offsets relative to the table's start, word `prefix[ctas]` after the header), so that one
 * instruction per holder and step covers every product of that matrix in the step. The kernel stages each
 * processor's script into shared memory in chunks; no instruction may be longer than `MAX_INSTRUCTION_WORDS`.
 */

/** Sentinel operand: an optional pool offset that is absent (e.g. no bias, no gradient wanted). */
export const NONE = 0xffffffff;

/** Longest instruction in words; variadic instructions longer than this are split by the scheduler. */
export const MAX_INSTRUCTION_WORDS = 64;

/** Largest `n` the 24-bit field of the preamble holds. */
export const MAX_PREAMBLE_N = 0xffffff;

export enum Opcode {
  /** Stop: the rest of this processor's script is empty. */
  End = 0,
  /** Release: bump barrier counter n once all of this CTA's earlier writes are visible GPU-wide. */
  Signal = 1,
  /** Acquire: spin until barrier counter n reaches `count` (bounded; on timeout the kernel reports an error). */
  Wait = 2,
  /** For each table entry (y, x, b): y[r] = (b ? b[r] : 0) + W_n[r]·x for the rows of matrix n this CTA holds. */
  MatVec = 3,
  /** For each entry (ȳ, x, x̄, b̄): x̄ += W_nᵀ·ȳ (atomics), W̄_n += ȳ·xᵀ (in registers, if kept there), b̄ += ȳ. */
  MatVecBwd = 4,
  /** y = x */
  Copy = 5,
  /** y = a + b */
  Add = 6,
  /** y = a − b */
  Sub = 7,
  /** y = a ⊙ b */
  CMul = 8,
  /** y = tanh(x) */
  Tanh = 9,
  /** y = σ(x) */
  Logistic = 10,
  /** y = max(0, x) */
  Relu = 11,
  /** y += x (atomic; gradients) */
  Acc = 12,
  /** y −= x (atomic; gradients) */
  AccNeg = 13,
  /** y = Σⱼ xⱼ over k operands (y may be among them: long sums are chained on one processor) */
  Sum = 14,
  /** y[i] = the float whose bits are `bits` (seeds the loss gradient with 1) */
  Set = 15,
  /** ā += ȳ⊙b, b̄ += ȳ⊙a (either target may be NONE) */
  CMulBwd = 16,
  /** x̄ += ȳ⊙(1 − y²) */
  TanhBwd = 17,
  /** x̄ += ȳ⊙y⊙(1 − y) */
  LogisticBwd = 18,
  /** x̄ += ȳ⊙[x > 0] */
  ReluBwd = 19,
  /** y = x⊙m/(1 − p), m[i] = uniform(key, base + i) ≥ p (the counter-based generator of src/util/random.ts) */
  Dropout = 20,
  /** x̄ += ȳ⊙m/(1 − p), the same mask */
  DropoutBwd = 21,
  /**
   * out = [h; c] of a cell with k children, n = H: c = σ(i)tanh(u) + Σ σ(fⱼ)cⱼ, h = σ(o)tanh(c); h also to h2 unless
   * NONE (the cell's slot in its parent's concatenation, which then needs no copy)
   */
  LstmCell = 22,
  /**
   * Gradients of LstmCell into gates and children's memories (atomics); h̄ is outbar's plus hbar2's unless NONE (the
   * gradient of the concatenation slot the forward wrote h2 into, which then needs no acc)
   */
  LstmCellBwd = 23,
  /** loss = −log softmax(x)[label], n = classes */
  PickNls = 24,
  /** x̄ += ℓ̄·(softmax(x) − onehot(label)) */
  PickNlsBwd = 25,
  /** acc += Σ g² (for gradient clipping) */
  Norm2 = 26,
  /** acc += Σ W̄² over this CTA's register gradients */
  GradNorm2 = 27,
  /** p −= lr·s·g, s = the clipping scale from acc (1 when acc is NONE or clipping is off) */
  Sgd = 28,
  /** W −= lr·s·W̄ for this CTA's register-gradient partitions, then write W back to the master copy */
  UpdateRegs = 29,
  /** Write this CTA's register gradients W̄ to the gradient buffer (same layout as the master copy) */
  ExportGrads = 30,
  /**
   * Adam on n elements of the pool: g ← s·g (0 when g is NONE), m ← β1·m + (1 − β1)·g, v ← β2·v + (1 − β2)·g²,
   * p ← p − lr·(m/c1) / (√(v/c2) + ε); m and v are offsets from the kernel's `moments` base (moments.ts)
   */
  Adam = 31,
  /**
   * Adam on n elements of the register-held matrices: as `adam`, with p an offset in the master copy, g one in the
   * gradient buffer (written by the holders' export.grads before the update's grid barrier)
   */
  AdamMaster = 32,
  /**
   * A forward tile of a long list, from the master copy (any processor may run it): for the `count` ≤ TILE.entries
   * entries (y, x, b) at `list`, y[r] = (b ? b[r] : 0) + W_n[r]·x for the rows r in [r0, r0 + TILE.rows)
   */
  Tile = 33,
  /**
   * x̄ of a tile of a long backward list, from the master copy: for `count` ≤ TILE.entries entries (ȳ, x, x̄, b̄),
   * x̄[c] += Σ_r W_n[r][c]·ȳ[r] (atomics) for the columns c in [c0, c0 + TILE.cols) and the rows r in
   * [r0, r0 + TILE.xbarRows) (a tall matrix's rows are split over several tiles); entries with x̄ NONE add nothing
   */
  TileXbar = 34,
  /**
   * W̄ of a tile of a long backward list: for `count` ≤ TILE.wbarEntries entries (ȳ, x, x̄, b̄), G[r][c] += Σ_e ȳ[r]·x[c]
   * (atomics into the gradient buffer, master layout) for r in [r0, r0 + TILE.rows), c in [c0, c0 + TILE.cols);
   * the tile with c0 = 0 also adds b̄[r] += ȳ[r] of every entry whose b̄ is not NONE
   */
  TileWbar = 35,
  /**
   * W̄ += the gradient buffer's rows of this CTA's register-gradient partitions (what tile.wbar accumulated there;
   * after a grid barrier), so that clipping, update and export see the whole gradient
   */
  ImportGrads = 36,
  /**
   * For each table entry (y, x, b): y[r] += (b ? b[r] : 0) + W_n[r]·x (atomics) for the rows of matrix n this CTA
   * holds. With n a transposed copy (plan.ts `transposed`: Wᵀ of a register-held matrix, its rows are W's columns)
   * this is the x̄ += Wᵀ·ȳ of a short backward list as a forward-style product: each x̄ element is summed by one
   * warp and added once, instead of every holder of W adding a partial sum of all of x̄.
   */
  MatVecAcc = 37,
  /**
   * Load this CTA's partitions of the transposed copies from the master copy into their registers. The scheduler
   * puts it where the backward pass begins, so that the transposed read overlaps the loss and the first backward
   * steps instead of delaying every CTA's first forward instruction.
   */
  LoadTransposed = 38,
}

/**
 * Shapes of the tile instructions: a forward tile covers up to `entries` list entries and `rows` rows of the
 * matrix; an x̄ tile up to `entries` entries, `cols` columns and `xbarRows` rows (the sum's range); a W̄ tile covers
 * `rows` × `cols` of the gradient over up to `wbarEntries` entries.
 */
export const TILE = { entries: 64, rows: 64, cols: 64, wbarEntries: 256, xbarRows: 256 } as const;

/** What the 24-bit field of an opcode's preamble means. */
export type PreambleField = "length" | "matrix" | "barrier" | "hidden" | "classes" | "unused";

export interface OpcodeInfo {
  readonly opcode: Opcode;
  /** Lower-case mnemonic for disassembly and the CUDA `case` comments. */
  readonly mnemonic: string;
  readonly n: PreambleField;
  /** Names of the fixed operands, in order; one of them is `k` for variadic instructions. */
  readonly fixed: readonly string[];
  /** Names of each repeated group (k groups follow the fixed operands). */
  readonly repeated: readonly string[];
}

const info = (
  opcode: Opcode,
  mnemonic: string,
  n: PreambleField,
  fixed: readonly string[],
  repeated: readonly string[] = [],
): OpcodeInfo => ({ opcode, mnemonic, n, fixed, repeated });

/** Operand layout of every opcode, indexed by opcode. Generated CUDA and the emulator both follow this table. */
export const OPCODES: readonly OpcodeInfo[] = [
  info(Opcode.End, "end", "unused", []),
  info(Opcode.Signal, "signal", "barrier", []),
  info(Opcode.Wait, "wait", "barrier", ["count"]),
  info(Opcode.MatVec, "matvec", "matrix", ["list", "count"]),
  info(Opcode.MatVecBwd, "matvec.bwd", "matrix", ["list", "count"]),
  info(Opcode.Copy, "copy", "length", ["y", "x"]),
  info(Opcode.Add, "add", "length", ["y", "a", "b"]),
  info(Opcode.Sub, "sub", "length", ["y", "a", "b"]),
  info(Opcode.CMul, "cmul", "length", ["y", "a", "b"]),
  info(Opcode.Tanh, "tanh", "length", ["y", "x"]),
  info(Opcode.Logistic, "logistic", "length", ["y", "x"]),
  info(Opcode.Relu, "relu", "length", ["y", "x"]),
  info(Opcode.Acc, "acc", "length", ["y", "x"]),
  info(Opcode.AccNeg, "acc.neg", "length", ["y", "x"]),
  info(Opcode.Sum, "sum", "length", ["y", "k"], ["x"]),
  info(Opcode.Set, "set", "length", ["y", "bits"]),
  info(Opcode.CMulBwd, "cmul.bwd", "length", ["abar", "bbar", "ybar", "a", "b"]),
  info(Opcode.TanhBwd, "tanh.bwd", "length", ["xbar", "ybar", "y"]),
  info(Opcode.LogisticBwd, "logistic.bwd", "length", ["xbar", "ybar", "y"]),
  info(Opcode.ReluBwd, "relu.bwd", "length", ["xbar", "ybar", "x"]),
  info(Opcode.Dropout, "dropout", "length", ["y", "x", "key", "base", "prob"]),
  info(Opcode.DropoutBwd, "dropout.bwd", "length", ["xbar", "ybar", "key", "base", "prob"]),
  info(Opcode.LstmCell, "lstm", "hidden", ["out", "gates", "h2", "k"], ["c"]),
  info(Opcode.LstmCellBwd, "lstm.bwd", "hidden", ["outbar", "out", "gates", "gatesbar", "hbar2", "k"], ["c", "cbar"]),
  info(Opcode.PickNls, "picknls", "classes", ["loss", "x", "label"]),
  info(Opcode.PickNlsBwd, "picknls.bwd", "classes", ["xbar", "lossbar", "x", "label"]),
  info(Opcode.Norm2, "norm2", "length", ["acc", "g"]),
  info(Opcode.GradNorm2, "gradnorm2", "unused", ["acc"]),
  info(Opcode.Sgd, "sgd", "length", ["p", "g", "acc"]),
  info(Opcode.UpdateRegs, "update.regs", "unused", ["acc"]),
  info(Opcode.ExportGrads, "export.grads", "unused", []),
  info(Opcode.Adam, "adam", "length", ["p", "g", "m", "v", "acc"]),
  info(Opcode.AdamMaster, "adam.master", "length", ["p", "g", "m", "v", "acc"]),
  info(Opcode.Tile, "tile", "matrix", ["list", "count", "r0"]),
  info(Opcode.TileXbar, "tile.xbar", "matrix", ["list", "count", "c0", "r0"]),
  info(Opcode.TileWbar, "tile.wbar", "matrix", ["list", "count", "r0", "c0"]),
  info(Opcode.ImportGrads, "import.grads", "unused", []),
  info(Opcode.MatVecAcc, "matvec.acc", "matrix", ["list", "count"]),
  info(Opcode.LoadTransposed, "load.t", "unused", []),
];

export const OPCODE_COUNT = OPCODES.length;

/** Words of one table entry of a list instruction, and their names. */
export const LIST_ENTRIES: Readonly<Partial<Record<Opcode, readonly string[]>>> = {
  [Opcode.MatVec]: ["y", "x", "b"],
  [Opcode.MatVecBwd]: ["ybar", "x", "xbar", "bbar"],
  [Opcode.Tile]: ["y", "x", "b"],
  [Opcode.TileXbar]: ["ybar", "x", "xbar", "bbar"],
  [Opcode.TileWbar]: ["ybar", "x", "xbar", "bbar"],
  [Opcode.MatVecAcc]: ["y", "x", "b"],
};

/** Words of the instruction starting at `words[at]` (preamble included). */
export function instructionWords(words: ArrayLike<number>, at: number): number {
  const desc = OPCODES[words[at]! & 0xff];
  if (desc === undefined) throw new Error(`VPPS script: unknown opcode ${words[at]! & 0xff} at word ${at}`);
  const fixed = 1 + desc.fixed.length;
  if (desc.repeated.length === 0) return fixed;
  const k = words[at + 1 + desc.fixed.indexOf("k")]!;
  return fixed + k * desc.repeated.length;
}

export function preamble(opcode: Opcode, n: number): number {
  if (!Number.isInteger(n) || n < 0 || n > MAX_PREAMBLE_N) {
    throw new RangeError(`VPPS script: ${OPCODES[opcode]!.mnemonic}: n must be in [0, ${MAX_PREAMBLE_N}]; got ${n}`);
  }
  return (opcode | (n << 8)) >>> 0;
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The bit pattern of a float32, for operands such as `Set`'s value and `Dropout`'s probability. */
export function floatBits(x: number): number {
  f32[0] = x;
  return u32[0]!;
}

export function bitsFloat(bits: number): number {
  u32[0] = bits >>> 0;
  return f32[0]!;
}

function operandText(name: string, v: number): string {
  if (v === NONE) return `${name}=-`;
  if (name === "prob" || name === "bits") return `${name}=${bitsFloat(v)}`;
  return `${name}=${v}`;
}

/** One instruction as text, e.g. `tanh n=8 y=1024 x=512`; list entries are shown when `table` is given. */
export function disassembleInstruction(words: ArrayLike<number>, at: number, table = -1): string {
  const pre = words[at]!;
  const desc = OPCODES[pre & 0xff];
  if (desc === undefined) return `??? opcode ${pre & 0xff}`;
  const n = pre >>> 8;
  const field = {
    length: `n=${n}`,
    matrix: `m=${n}`,
    barrier: `bar=${n}`,
    hidden: `H=${n}`,
    classes: `n=${n}`,
    unused: "",
  };
  const parts = [desc.mnemonic, field[desc.n]];
  for (const [i, name] of desc.fixed.entries()) parts.push(operandText(name, words[at + 1 + i]!));
  if (desc.repeated.length > 0) {
    const k = words[at + 1 + desc.fixed.indexOf("k")]!;
    let p = at + 1 + desc.fixed.length;
    for (let g = 0; g < k; g++)
      for (const name of desc.repeated) parts.push(operandText(`${name}${g + 1}`, words[p++]!));
  }
  const entry = LIST_ENTRIES[desc.opcode];
  if (entry !== undefined && table >= 0) {
    const list = table + words[at + 1]!;
    const count = words[at + 2]!;
    for (let e = 0; e < Math.min(count, 4); e++) {
      parts.push(`[${entry.map((name, k) => operandText(name, words[list + e * entry.length + k]!)).join(" ")}]`);
    }
    if (count > 4) parts.push("...");
  }
  return parts.filter((s) => s !== "").join(" ");
}

/** A whole batch script (header + all processors' scripts) as text, one processor after the other. */
export function disassemble(script: Uint32Array, ctas: number): string {
  const lines: string[] = [];
  const header = ctas + 1;
  const table = header + script[ctas]!;
  for (let c = 0; c < ctas; c++) {
    const begin = script[c]!;
    const end = script[c + 1]!;
    lines.push(`processor ${c}: ${end - begin} words`);
    for (let at = header + begin; at < header + end; ) {
      lines.push(`  ${String(at - header - begin).padStart(6)}  ${disassembleInstruction(script, at, table)}`);
      at += instructionWords(script, at);
    }
  }
  return lines.join("\n");
}

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
    if (s === this.sigCta.length) {
      this.sigCta = grow(this.sigCta);
      this.sigPos = grow(this.sigPos);
      this.sigBarrier = grow(this.sigBarrier);
      const k = new Uint8Array(s * 2);
      k.set(this.sigKeep);
      this.sigKeep = k;
    }
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
    const ctas = this.ctas;
    if (this.kept.length < barriers) this.kept = new Uint32Array(Math.max(barriers, 2 * this.kept.length));
    const kept = this.kept;
    kept.fill(0, 0, barriers);
    // Unkept signals grouped by processor with a counting sort; slots are in script order within each processor.
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
    // cutStart[c] now ends processor c's cuts; its start is cutStart[c - 1] (0 for c = 0)
    const { waitCta, waitPos, waitBarrier, bufs } = this;
    for (let w = 0; w < this.waits; w++) bufs[waitCta[w]!]![waitPos[w]!] = kept[waitBarrier[w]!]!;
    const header = ctas + 1;
    let total = 0;
    for (let c = 0; c < ctas; c++) total += this.lens[c]!;
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
    return out;
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
