/**
 * Backward and update instructions of the VPPS scheduler (scheduler.ts walks the levels; steps.ts keeps the
 * steps, loads and dependencies). Every gradient write is an atomic accumulation into storage zeroed before
 * the launch, so instructions of one step may add into the same gradient from different processors in any order.
 */
import type { ComputationGraph } from "../../../graph/graph.js";
import { Op, opName } from "../../../graph/opcodes.js";
import { type BatchLayout, type ModelLayout, PLACEMENT } from "../plan/layout.js";
import { momentLayout } from "../runtime/moments.js";
import { floatBits, NONE, Opcode } from "../script/format.js";
import type { ScheduleOptions } from "./scheduler.js";
import type { StepTracker } from "./steps.js";

/** What the backward and update emitters need of the scheduler (scheduler.ts VppsScheduler). */
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
  /** Per cell node: the concatenation its lstm instruction also stores h into, or -1; and h's offset there. */
  readonly fusedConcat: Int32Array;
  readonly fusedOffset: Int32Array;
  /** Per plan matrix: 1 when its gradient lives in registers, 0 for the GEMM strategy. */
  readonly registerGrad: Uint8Array;
  matrixOf(g: ComputationGraph, i: number, w: number): number;
}

const gradOrNone = (L: BatchLayout, node: number): number => (L.needGrad[node] === 1 ? L.grad[node]! : NONE);

/** Whether the product W_m·x of node i has backward work in the kernel (x̄, b̄ or a register gradient). */
function productHasWork(E: Emitter, L: BatchLayout, m: number, x: number, b: number): boolean {
  return E.registerGrad[m] === 1 || L.needGrad[x] === 1 || (b >= 0 && L.needGrad[b] === 1);
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

export function emitBackward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number, collected: Int32Array): void {
  const op = g.op[i]!;
  // inputs, parameters, lookups and pickRanges: gradients accumulate directly in the argument's (or parameter's)
  // storage; every op below has arguments
  if (op === Op.Input || op === Op.Parameter || op === Op.Lookup || op === Op.PickRange) return;
  const t = E.t;
  const args = g.args;
  const s = g.argStart[i]!;
  const a0 = args[s]!;
  switch (op) {
    case Op.MatVec:
      productBackward(E, g, L, i, E.matrixOf(g, i, a0), args[s + 1]!, -1, collected);
      return;
    case Op.Affine: {
      const count = g.argCount[i]!;
      for (let k = 1; k < count; k += 2) {
        productBackward(E, g, L, i, E.matrixOf(g, i, args[s + k]!), args[s + k + 1]!, k === 1 ? a0 : -1, collected);
      }
      return;
    }
    case Op.Concat:
      accumulate(E, g, L, i, g.argCount[i]!, PLACEMENT.inConcat);
      return;
    case Op.Sum:
    case Op.Add:
      accumulate(E, g, L, i, g.argCount[i]!, PLACEMENT.gradOfSum);
      return;
    case Op.Sub:
      // only the first argument may share the node's gradient (plan/layout.ts); the second accumulates −ȳ
      accumulate(E, g, L, i, 2, PLACEMENT.gradOfSum);
      return;
    case Op.CMul: {
      const b = args[s + 1]!;
      const len = g.rows[i]! * g.cols[i]!;
      const q = t.leastLoaded(5 * len);
      t.needGrad(q, i);
      t.needValue(q, a0);
      t.needValue(q, b);
      const value = L.value;
      t.writer.ins5(q, Opcode.CMulBwd, len, gradOrNone(L, a0), gradOrNone(L, b), L.grad[i]!, value[a0]!, value[b]!);
      if (L.needGrad[a0] === 1) t.wroteGrad(a0, q);
      if (L.needGrad[b] === 1) t.wroteGrad(b, q);
      return;
    }
    case Op.Tanh:
    case Op.Logistic:
    case Op.Relu: {
      const len = g.rows[i]! * g.cols[i]!;
      const q = t.leastLoaded(3 * len);
      t.needGrad(q, i);
      const code = op === Op.Tanh ? Opcode.TanhBwd : op === Op.Logistic ? Opcode.LogisticBwd : Opcode.ReluBwd;
      // tanh and σ differentiate from their output, relu from its input (as the reference does)
      const from = op === Op.Relu ? a0 : i;
      t.needValue(q, from);
      t.writer.ins3(q, code, len, L.grad[a0]!, L.grad[i]!, L.value[from]!);
      t.wroteGrad(a0, q);
      return;
    }
    case Op.Dropout: {
      const len = g.rows[i]! * g.cols[i]!;
      const q = t.leastLoaded(2 * len);
      t.needGrad(q, i);
      const bits = floatBits(g.auxF[i]!);
      t.writer.ins5(q, Opcode.DropoutBwd, len, L.grad[a0]!, L.grad[i]!, g.aux[i]! >>> 0, g.aux2[i]! >>> 0, bits);
      t.wroteGrad(a0, q);
      return;
    }
    case Op.PickNegLogSoftmax: {
      const classes = g.rows[a0]!;
      const q = t.leastLoaded(2 * classes);
      t.needGrad(q, i);
      t.needValue(q, a0);
      t.writer.ins4(q, Opcode.PickNlsBwd, classes, L.grad[a0]!, L.grad[i]!, L.value[a0]!, g.aux[i]!);
      t.wroteGrad(a0, q);
      return;
    }
    case Op.LstmCell:
      lstmBackward(E, g, L, i);
      return;
    default:
      throw new Error(`vpps: no VPPS backward instruction for op '${opName(op)}' (${g.describe(i)})`);
  }
}

/** Gradients of a cell with k children into its gates and its children's memories, on one processor. */
function lstmBackward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void {
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
  // h̄ also from the parent's concatenation, when the forward stored h there (scheduler.ts concat)
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

/**
 * The end of the script, from step `s`: the squared gradient norm (for clipping), the register gradients exported
 * when asked, when the host updates or for Adam, then — when the kernel updates — a grid-wide barrier and the SGD or
 * Adam steps. Returns the number of steps (barrier counters) used.
 *
 * Adam follows the AdamTrainer: every dense parameter moves, used in the batch or not (an unused one has no gradient
 * slot: g = NONE, its moments decay), and of the lookup tables only the touched rows. The register-held matrices are
 * updated by `adam.master` over their master copy with the gradients their holders exported before the grid
 * barrier, in pieces of at most one partition placed like any other instruction.
 */
export function emitUpdate(E: Emitter, L: BatchLayout, s: number): number {
  const t = E.t;
  const w = t.writer;
  const kernelUpdate = E.update === "kernel";
  const adam = kernelUpdate && E.options.optimizer === "adam";
  const clip = kernelUpdate && (E.options.clip ?? true);
  const acc = clip ? L.normOffset : NONE;
  const params = E.model.params;
  const rows = L.lookupRows;
  const imported = t.wbarTiles > 0;
  if (imported) {
    // tile.wbar instructions added W̄ into the gradient buffer: all of them finish before the holders fold it in
    t.gridBarrier(s);
    s++;
  }
  t.startStep(s);
  if (imported) {
    for (const q of E.registerGradCtas) {
      t.touch(q);
      w.insN(q, Opcode.ImportGrads, 0, [], 0);
    }
  }
  if (clip) {
    for (let p = 0; p < params.length; p++) {
      if (L.paramGrad[p]! < 0) continue;
      const size = params[p]!.rows * params[p]!.cols;
      const q = t.leastLoaded(size);
      t.needGrad(q, L.paramNode[p]!);
      w.ins2(q, Opcode.Norm2, size, acc, L.paramGrad[p]!);
    }
    for (let r = 0; r < rows.offset.length; r++) {
      const size = params[rows.table[r]!]!.cols;
      const q = t.leastLoaded(size);
      t.needGrad(q, rows.node[r]!);
      w.ins2(q, Opcode.Norm2, size, acc, rows.offset[r]!);
    }
    for (const q of E.registerGradCtas) {
      t.touch(q);
      w.ins1(q, Opcode.GradNorm2, 0, acc);
    }
  }
  if (E.options.exportGradients === true || !kernelUpdate || adam) {
    for (const q of E.registerGradCtas) {
      t.touch(q);
      w.insN(q, Opcode.ExportGrads, 0, [], 0);
    }
  }
  t.endStep();
  if (!kernelUpdate) return s + 1;
  // Every gradient is complete and every read of a parameter done: only now may parameters change.
  t.gridBarrier(s + 1);
  t.startStep(s + 2);
  if (adam) {
    const model = E.model;
    const mo = momentLayout(model);
    // pieces of a long vector go to different processors (Adam reads and writes four floats per element)
    const piece = 8192;
    for (let p = 0; p < params.length; p++) {
      if (model.matrixOf[p]! >= 0 || params[p]!.kind !== "dense") continue;
      const size = params[p]!.rows * params[p]!.cols;
      const at = model.paramOffset[p]!;
      const g = L.paramGrad[p]!;
      for (let o = 0; o < size; o += piece) {
        const n = Math.min(piece, size - o);
        const q = t.leastLoaded(2 * n);
        w.ins5(q, Opcode.Adam, n, at + o, g >= 0 ? g + o : NONE, mo.modelM + at + o, mo.modelV + at + o, acc);
      }
    }
    for (let r = 0; r < rows.offset.length; r++) {
      const table = rows.table[r]!;
      const cols = params[table]!.cols;
      const at = model.paramOffset[table]! + rows.row[r]! * cols;
      w.ins5(t.leastLoaded(2 * cols), Opcode.Adam, cols, at, rows.offset[r]!, mo.modelM + at, mo.modelV + at, acc);
    }
    for (const m of model.plan.matrices) {
      for (const part of m.partitions) {
        const at = m.masterOffset + part.firstRow * m.cols;
        const n = part.rowCount * m.cols;
        w.ins5(t.leastLoaded(2 * n), Opcode.AdamMaster, n, at, at, mo.masterM + at, mo.masterV + at, acc);
      }
    }
    return s + 3;
  }
  for (let p = 0; p < params.length; p++) {
    if (L.paramGrad[p]! < 0) continue;
    const size = params[p]!.rows * params[p]!.cols;
    w.ins3(t.leastLoaded(size), Opcode.Sgd, size, E.model.paramOffset[p]!, L.paramGrad[p]!, acc);
  }
  for (let r = 0; r < rows.offset.length; r++) {
    const table = rows.table[r]!;
    const cols = params[table]!.cols;
    const at = E.model.paramOffset[table]! + rows.row[r]! * cols;
    w.ins3(t.leastLoaded(cols), Opcode.Sgd, cols, at, rows.offset[r]!, acc);
  }
  for (const q of E.registerGradCtas) {
    t.touch(q);
    w.ins1(q, Opcode.UpdateRegs, 0, acc);
  }
  return s + 3;
}
