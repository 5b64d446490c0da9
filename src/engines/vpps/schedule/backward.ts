/**
 * Backward and update instructions of the VPPS scheduler, the backward ones per op (kernel-table.ts maps ops to
 * them; scheduler.ts walks the levels; steps.ts keeps the steps, loads and dependencies). Every gradient write is an
 * atomic accumulation into storage zeroed before the launch, so instructions of one step may add into the same
 * gradient from different processors in any order.
 */
import type { ComputationGraph } from "../../../graph/graph.js";
import { Op } from "../../../graph/opcodes.js";
import { type BatchLayout, type ModelLayout, PLACEMENT } from "../plan/layout.js";
import { floatBits, NONE, Opcode } from "../script/format.js";
import type { ScheduleOptions } from "./scheduler.js";
import type { StepTracker } from "./steps.js";

/** What the forward, backward and update emitters need of the scheduler (scheduler.ts VppsScheduler). */
export interface Emitter {
  readonly t: StepTracker;
  readonly model: ModelLayout;
  readonly options: ScheduleOptions;
  readonly update: "kernel" | "host";
  /** CTAs holding a partition whose gradient lives in registers. */
  readonly registerGradCtas: Int32Array;
  /** Scratch for variadic operands. */
  readonly operands: Uint32Array;
  /** W̄ entries held back to the end of the backward pass (this file). */
  readonly deferred: DeferredWbar;
  /**
   * Per cell node of the batch: the CTA (-1: not scheduled yet), step and script word of its lstm instruction's h2
   * operand (forward.ts lstmForward, concatForward).
   */
  readonly cellCta: Int32Array;
  readonly cellStep: Int32Array;
  readonly cellWord: Int32Array;
  /** Per cell node: the concatenation its lstm instruction also stores h into, or -1; and h's offset there. */
  readonly fusedConcat: Int32Array;
  readonly fusedOffset: Int32Array;
  /** Per plan matrix: 1 when its gradient lives in registers, 0 for the GEMM strategy or off chip. */
  readonly registerGrad: Uint8Array;
  /** Per plan matrix: 1 when it stays off chip (its products are tiles, its W̄ in the gradient buffer). */
  readonly offChip: Uint8Array;
  matrixOf(g: ComputationGraph, i: number, w: number): number;
}

const gradOrNone = (L: BatchLayout, node: number): number => (L.needGrad[node] === 1 ? L.grad[node]! : NONE);

/** Whether the product W_m·x of node i has backward work in the kernel (x̄, b̄ or a register gradient). */
function productHasWork(E: Emitter, L: BatchLayout, m: number, x: number, b: number): boolean {
  return E.registerGrad[m] === 1 || E.offChip[m] === 1 || L.needGrad[x] === 1 || (b >= 0 && L.needGrad[b] === 1);
}

/**
 * Counts the backward matrix work of node i (a matVec or affine) into counts[base + m], so that placing its level's
 * other instructions sees it.
 */
export function countBackward(
  E: Emitter,
  g: ComputationGraph,
  L: BatchLayout,
  i: number,
  counts: Int32Array,
  base: number,
): void {
  const op = g.op[i]!;
  const args = g.args;
  const s = g.argStart[i]!;
  const count = g.argCount[i]!;
  for (let k = op === Op.Affine ? 1 : 0; k < count; k += 2) {
    const m = E.matrixOf(g, i, args[s + k]!);
    const b = op === Op.Affine && k === 1 ? args[s]! : -1;
    if (productHasWork(E, L, m, args[s + k + 1]!, b)) counts[base + m]!++;
  }
}

/**
 * x̄ += Wᵀȳ (and W̄ += ȳxᵀ, b̄ += ȳ) on the holders of m; for a GEMM-strategy matrix, also collects ȳ and x. When m
 * has a transposed copy and this step's list of m stays on its holders, x̄ is a matvec.acc entry of the copy
 * instead (one warp sums each element and adds it once) and the holders' entry only accumulates W̄ and b̄, which
 * nothing reads before the update: the next level waits for the copy's holders only.
 */
function productBackward(
  E: Emitter,
  g: ComputationGraph,
  L: BatchLayout,
  i: number,
  m: number,
  x: number,
  b: number,
  collected: Int32Array,
): void {
  const t = E.t;
  const gy = L.grad[i]!;
  if (E.offChip[m] === 1) {
    offChipBackward(E, g, L, i, m, x, b);
    return;
  }
  if (productHasWork(E, L, m, x, b)) {
    let gx = gradOrNone(L, x);
    const gb = b >= 0 ? gradOrNone(L, b) : NONE;
    const copy = gx === NONE ? -1 : t.transposedFor(m);
    if (copy >= 0) {
      t.listEntry(Opcode.MatVecAcc, copy, 3, gx, gy, NONE, 0, t.gradBuffer(i), -1);
      t.wroteGrad(x, -(copy + 1));
      // W̄ and a parameter's b̄: nothing reads them before the update, so they wait for the end of the backward
      // pass (the b̄ of a computed bias is read by its producer's backward: that entry stays in this step)
      if (gb === NONE || g.op[b] === Op.Parameter) {
        E.deferred.push(m, gy, L.value[x]!, b, gb, t.gradBuffer(i), t.valueBuffer(x));
        return;
      }
      gx = NONE;
    }
    t.listEntry(Opcode.MatVecBwd, m, 4, gy, L.value[x]!, gx, gb, t.gradBuffer(i), t.valueBuffer(x));
    if (gx !== NONE) t.wroteGrad(x, -(m + 1));
    if (gb !== NONE) t.wroteGrad(b, -(m + 1));
  }
  if (E.registerGrad[m] === 0) gemmRows(E, L, i, m, x, collected);
}

/**
 * The backward of W_m·x for an off-chip matrix m, whose products are all tiles over the master copy: x̄ += Wᵀȳ as an
 * entry of this step's list (x̄ tiles only), W̄ += ȳxᵀ held back to the step after the backward pass, where all of
 * the batch's entries of m form one list of W̄ tiles into the gradient buffer (per level, the W̄ tiles of a large
 * matrix would be thousands of tiles of a few entries each). A parameter's b̄ goes with the W̄ tiles (the c0 = 0
 * tiles add it); a computed bias's b̄, which its producer's backward reads in a later step of the backward pass,
 * is added here by an elementwise acc (b̄ += ȳ).
 */
function offChipBackward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number, m: number, x: number, b: number) {
  const t = E.t;
  const gy = L.grad[i]!;
  const gx = gradOrNone(L, x);
  let gb = b >= 0 ? gradOrNone(L, b) : NONE;
  if (gx !== NONE) {
    t.listEntry(Opcode.MatVecBwd, m, 4, gy, L.value[x]!, gx, NONE, t.gradBuffer(i), t.valueBuffer(x));
    t.wroteGrad(x, -(m + 1));
  }
  if (gb !== NONE && g.op[b] !== Op.Parameter) {
    const rows = E.model.plan.matrices[m]!.rows;
    const q = t.leastLoaded(3 * rows);
    t.needGrad(q, i);
    t.writer.ins2(q, Opcode.Acc, rows, gb, gy);
    t.wroteGrad(b, q);
    gb = NONE;
  }
  E.deferred.push(m, gy, L.value[x]!, b, gb, t.gradBuffer(i), t.valueBuffer(x));
}

/**
 * The W̄ (and b̄) entries of products whose x̄ ran on a transposed copy: held back during the backward pass, where
 * they would sit on the critical path (a holder of W also runs cells, whose next one would wait behind them), and
 * emitted as one step after it (`emit`), where long lists become tiles over every CTA.
 */
export class DeferredWbar {
  private words = new Int32Array(7 * 256);
  private length = 0;
  /** Entries per plan matrix, while emitting. */
  private counts = new Int32Array(0);

  push(m: number, gy: number, x: number, b: number, gb: number, gyBuffer: number, xBuffer: number): void {
    if (this.length + 7 > this.words.length) {
      const w = new Int32Array(this.words.length * 2);
      w.set(this.words);
      this.words = w;
    }
    // one call per product of the backward pass: plain stores, no array per entry
    const w = this.words;
    const k = this.length;
    w[k] = m;
    w[k + 1] = gy;
    w[k + 2] = x;
    w[k + 3] = b;
    w[k + 4] = gb;
    w[k + 5] = gyBuffer;
    w[k + 6] = xBuffer;
    this.length = k + 7;
  }

  /** Emits the held-back entries in step s (returns the next step; s itself when there are none). */
  emit(E: Emitter, s: number): number {
    if (this.length === 0) return s;
    const t = E.t;
    const w = this.words;
    t.startStep(s);
    t.wbarStep = true; // off-chip matrices' lists make their W̄ tiles here
    if (this.counts.length < E.registerGrad.length) this.counts = new Int32Array(E.registerGrad.length);
    const counts = this.counts;
    for (let k = 0; k < this.length; k += 7) counts[w[k]!]!++;
    for (let m = 0; m < counts.length; m++) {
      if (counts[m]! > 0) t.preloadMatrix(m, counts[m]!);
      counts[m] = 0;
    }
    for (let k = 0; k < this.length; k += 7) {
      const m = w[k]!;
      const gb = w[k + 4]! >>> 0;
      t.listEntry(Opcode.MatVecBwd, m, 4, w[k + 1]! >>> 0, w[k + 2]! >>> 0, NONE, gb, w[k + 5]!, w[k + 6]!);
      if (gb !== NONE) t.wroteGrad(w[k + 3]!, -(m + 1));
    }
    t.endStep();
    t.wbarStep = false;
    this.length = 0;
    return s + 1;
  }
}

/** For a GEMM-strategy matrix, the rows of Ȳ and X for W̄ = ȲᵀX, one GEMM after the kernel (nothing in the script reads them). */
function gemmRows(E: Emitter, L: BatchLayout, i: number, m: number, x: number, collected: Int32Array): void {
  const t = E.t;
  const mp = E.model.plan.matrices[m]!;
  const j = collected[m]!++;
  const q = t.leastLoaded(2 * (mp.rows + mp.cols));
  t.needGrad(q, i);
  t.needValue(q, x);
  t.writer.ins2(q, Opcode.Copy, mp.rows, L.collectY[m]! + j * mp.rows, L.grad[i]!);
  t.writer.ins2(q, Opcode.Copy, mp.cols, L.collectX[m]! + j * mp.cols, L.value[x]!);
}

/** Whether pickRange node `a` is the h of a cell whose lstm instruction stores it into concatenation c at `off`. */
function isFused(E: Emitter, g: ComputationGraph, a: number, c: number, off: number): boolean {
  const cell = g.args[g.argStart[a]!]!;
  return E.fusedConcat[cell] === c && E.fusedOffset[cell] === off && g.aux[a] === 0;
}

/** Accumulates ȳ (or −ȳ for sub's b) into the arguments of a sum-like node that do not share its gradient. */
function accumulate(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number, count: number, shared: number): void {
  const t = E.t;
  const op = g.op[i]!;
  const { args, rows, cols } = g;
  const { needGrad, placed, grad } = L;
  const s = g.argStart[i]!;
  // only a concat needs every argument's length (for the offsets): reading it for the others costs a cache miss
  const concat = op === Op.Concat;
  let off = 0;
  for (let k = 0; k < count; k++) {
    const a = args[s + k]!;
    // h of a cell that stored it into this concatenation: the cell's lstm.bwd reads this gradient slice itself
    const fused = concat && g.op[a] === Op.PickRange && isFused(E, g, a, i, off);
    if (needGrad[a] === 1 && placed[a] !== shared && !fused) {
      const len = rows[a]! * cols[a]!;
      const q = t.leastLoaded(3 * len);
      t.needGrad(q, i);
      const code = op === Op.Sub && k === 1 ? Opcode.AccNeg : Opcode.Acc;
      t.writer.ins2(q, code, len, grad[a]!, grad[i]! + (concat ? off : 0));
      t.wroteGrad(a, q);
    }
    if (concat) off += rows[a]! * cols[a]!;
  }
}

/** x̄ += Wᵀȳ (and W̄, a register-held one) of W·x. */
export function matVecBackward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number, collected: Int32Array) {
  const s = g.argStart[i]!;
  productBackward(E, g, L, i, E.matrixOf(g, i, g.args[s]!), g.args[s + 1]!, -1, collected);
}

/** Each product's backward; the bias's gradient with the first. */
export function affineBackward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number, collected: Int32Array) {
  const args = g.args;
  const s = g.argStart[i]!;
  const count = g.argCount[i]!;
  for (let k = 1; k < count; k += 2) {
    productBackward(E, g, L, i, E.matrixOf(g, i, args[s + k]!), args[s + k + 1]!, k === 1 ? args[s]! : -1, collected);
  }
}

/** Each part's slice of ȳ into the part's gradient, where the part does not live inside the concatenation. */
export function concatBackward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void {
  accumulate(E, g, L, i, g.argCount[i]!, PLACEMENT.inConcat);
}

/** ȳ into each argument's gradient (add, sum), where the argument does not share the node's gradient. */
export function sumBackward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void {
  accumulate(E, g, L, i, g.argCount[i]!, PLACEMENT.gradOfSum);
}

/** ȳ into a's gradient, −ȳ into b's: only the first argument may share the node's gradient (plan/layout.ts). */
export function subBackward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void {
  accumulate(E, g, L, i, 2, PLACEMENT.gradOfSum);
}

/** ā += ȳ⊙b, b̄ += ȳ⊙a on one processor. */
export function cmulBackward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void {
  const t = E.t;
  const s = g.argStart[i]!;
  const a0 = g.args[s]!;
  const b = g.args[s + 1]!;
  const len = g.rows[i]! * g.cols[i]!;
  const q = t.leastLoaded(5 * len);
  t.needGrad(q, i);
  t.needValue(q, a0);
  t.needValue(q, b);
  const value = L.value;
  t.writer.ins5(q, Opcode.CMulBwd, len, gradOrNone(L, a0), gradOrNone(L, b), L.grad[i]!, value[a0]!, value[b]!);
  if (L.needGrad[a0] === 1) t.wroteGrad(a0, q);
  if (L.needGrad[b] === 1) t.wroteGrad(b, q);
}

/**
 * x̄ += ȳ⊙f'(…), instruction `code`, differentiating from the node's output (tanh, σ) or its input (relu), as the
 * reference does.
 */
export function unaryBackward(code: Opcode, from: "output" | "input") {
  return (E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void => {
    const t = E.t;
    const a0 = g.args[g.argStart[i]!]!;
    const len = g.rows[i]! * g.cols[i]!;
    const q = t.leastLoaded(3 * len);
    t.needGrad(q, i);
    const at = from === "input" ? a0 : i;
    t.needValue(q, at);
    t.writer.ins3(q, code, len, L.grad[a0]!, L.grad[i]!, L.value[at]!);
    t.wroteGrad(a0, q);
  };
}

/** x̄ += ȳ⊙m/(1 − p), the forward's mask. */
export function dropoutBackward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void {
  const t = E.t;
  const a0 = g.args[g.argStart[i]!]!;
  const len = g.rows[i]! * g.cols[i]!;
  const q = t.leastLoaded(2 * len);
  t.needGrad(q, i);
  const bits = floatBits(g.auxF[i]!);
  t.writer.ins5(q, Opcode.DropoutBwd, len, L.grad[a0]!, L.grad[i]!, g.aux[i]! >>> 0, g.aux2[i]! >>> 0, bits);
  t.wroteGrad(a0, q);
}

/** x̄ += ℓ̄·(softmax(x) − onehot(label)) on one processor. */
export function pickNlsBackward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void {
  const t = E.t;
  const a0 = g.args[g.argStart[i]!]!;
  const classes = g.rows[a0]!;
  const q = t.leastLoaded(2 * classes);
  t.needGrad(q, i);
  t.needValue(q, a0);
  t.writer.ins4(q, Opcode.PickNlsBwd, classes, L.grad[a0]!, L.grad[i]!, L.value[a0]!, g.aux[i]!);
  t.wroteGrad(a0, q);
}

/** Gradients of a cell with k children into its gates and its children's memories, on one processor. */
export function lstmBackward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void {
  const t = E.t;
  const { value, needGrad } = L;
  const args = g.args;
  const s = g.argStart[i]!;
  const a0 = args[s]!;
  const k = g.aux[i]!;
  const H = (g.rows[i]! * g.cols[i]!) / 2;
  const q = t.leastLoaded((8 + 3 * k) * H);
  t.needGrad(q, i);
  t.needValue(q, i);
  t.needValue(q, a0);
  const ops = E.operands;
  ops[0] = L.grad[i]!;
  ops[1] = value[i]!;
  ops[2] = value[a0]!;
  ops[3] = gradOrNone(L, a0);
  // h̄ also from the parent's concatenation, when the forward stored h there (forward.ts concatForward)
  const concat = E.fusedConcat[i]!;
  ops[4] = concat >= 0 && L.needGrad[concat] === 1 ? L.grad[concat]! + E.fusedOffset[i]! : NONE;
  if (ops[4] !== NONE) t.needGrad(q, concat);
  ops[5] = k;
  for (let j = 0; j < k; j++) {
    const c = args[s + 1 + j]!;
    t.needValue(q, c);
    ops[6 + 2 * j] = value[c]!;
    ops[7 + 2 * j] = gradOrNone(L, c);
  }
  t.writer.insN(q, Opcode.LstmCellBwd, H, ops, 6 + 2 * k);
  if (needGrad[a0] === 1) t.wroteGrad(a0, q);
  for (let j = 0; j < k; j++) {
    const c = args[s + 1 + j]!;
    if (needGrad[c] === 1) t.wroteGrad(c, q);
  }
}
