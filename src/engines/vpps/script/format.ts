/**
 * THE VPPS script format, in one place: opcodes with a comment each, their operand layout (the table the writer,
 * the disassembler, the emulator and the generated CUDA all follow), and the preamble and float-bits encodings.
 * The writer is writer.ts, the disassembler disassemble.ts, the emulator emulator.ts.
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
   * holds. With n a transposed copy (plan/types.ts `transposed`: Wᵀ of a register-held matrix, its rows are W's columns)
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
  /**
   * acc += Σ G² over n floats of the gradient buffer from offset g: the norm (for clipping) of an off-chip matrix's
   * gradient, which tile.wbar summed there
   */
  Norm2Grads = 39,
  /**
   * W −= lr·s·G on n elements of an off-chip matrix: p an offset in the master copy, g one in the gradient buffer
   * (s as for `sgd`)
   */
  SgdMaster = 40,
  /**
   * A forward tile over a slice of the columns, for a short list of an off-chip matrix: for the `count` < TILE.entries
   * entries (y, x, b), y[r] += (c0 = 0 and b ? b[r] : 0) + Σ_{c ∈ [c0, c0 + TILE.splitCols)} W_n[r][c]·x[c] (atomics)
   * for the rows r in [r0, r0 + TILE.rows); y is zeroed in step 0. Splitting the columns spreads a long row over
   * several processors: a full-width tile of a few entries is a chain of cols / 32 latency-bound chunks.
   */
  TileAcc = 41,
}

/**
 * Shapes of the tile instructions: a forward tile covers up to `entries` list entries and `rows` rows of the
 * matrix; an x̄ tile up to `entries` entries, `cols` columns and `xbarRows` rows (the sum's range); a W̄ tile covers
 * `rows` × `cols` of the gradient over up to `wbarEntries` entries.
 */
export const TILE = { entries: 64, rows: 64, cols: 64, wbarEntries: 256, xbarRows: 256, splitCols: 256 } as const;

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
  info(Opcode.Norm2Grads, "norm2.grads", "length", ["acc", "g"]),
  info(Opcode.SgdMaster, "sgd.master", "length", ["p", "g", "acc"]),
  info(Opcode.TileAcc, "tile.acc", "matrix", ["list", "count", "r0", "c0"]),
];

export const OPCODE_COUNT = OPCODES.length;

/** Words of one table entry of a list instruction, and their names. */
export const LIST_ENTRIES: Readonly<Partial<Record<Opcode, readonly string[]>>> = {
  [Opcode.MatVec]: ["y", "x", "b"],
  [Opcode.MatVecBwd]: ["ybar", "x", "xbar", "bbar"],
  [Opcode.Tile]: ["y", "x", "b"],
  [Opcode.TileAcc]: ["y", "x", "b"],
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
