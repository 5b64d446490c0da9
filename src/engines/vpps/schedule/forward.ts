/**
 * Forward instructions of the VPPS scheduler, per op (kernel-table.ts maps ops to them; scheduler.ts walks the
 * levels, steps.ts keeps the steps, loads and dependencies). A product becomes an entry of its matrix's list on the
 * matrix's holders; any other instruction goes to the least-loaded processor of the step.
 */
import type { ComputationGraph } from "../../../graph/graph.js";
import { Op } from "../../../graph/opcodes.js";
import { type BatchLayout, PLACEMENT } from "../plan/layout.js";
import { floatBits, MAX_INSTRUCTION_WORDS, NONE, Opcode } from "../script/format.js";
import type { Emitter } from "./backward.js";

/** y = W·x: an entry of W's list in this step. */
export function matVecForward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void {
  const s = g.argStart[i]!;
  product(E, L, i, E.matrixOf(g, i, g.args[s]!), g.args[s + 1]!, L.value[i]!, -1, false);
}

/**
 * y = b + Σ Wₖ·xₖ: with one product, an entry of W's list that adds b; with several, one entry per product into
 * the node's temporaries, summed with b in the next step (affineSum).
 */
export function affineForward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void {
  const args = g.args;
  const s = g.argStart[i]!;
  const count = g.argCount[i]!;
  if (count === 3) {
    product(E, L, i, E.matrixOf(g, i, args[s + 1]!), args[s + 2]!, L.value[i]!, args[s]!, false);
  } else {
    const len = g.rows[i]! * g.cols[i]!;
    const temp = L.temp[i]!;
    for (let k = 1; k < count; k += 2) {
      const m = E.matrixOf(g, i, args[s + k]!);
      product(E, L, i, m, args[s + k + 1]!, temp + ((k - 1) >> 1) * len, -1, true);
    }
  }
}

/**
 * y = (b) + W_m·x, one entry of matrix m's list in this step, for node i: y is i's value, or with several
 * products (`toTemp`) one of its temporaries.
 */
function product(E: Emitter, L: BatchLayout, i: number, m: number, x: number, y: number, b: number, toTemp: boolean) {
  const t = E.t;
  const bias = b >= 0 ? L.value[b]! : NONE;
  t.listEntry(Opcode.MatVec, m, 3, y, L.value[x]!, bias, 0, t.valueBuffer(x), b >= 0 ? t.valueBuffer(b) : -1);
  if (toTemp) t.wroteTemp(i, -(m + 1));
  else t.wroteValue(i, -(m + 1));
}

/** y = b + Σ temporaries, for an affine transform with several products (the step after the products). */
export function affineSum(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void {
  const terms = (g.argCount[i]! - 1) / 2;
  const len = g.rows[i]!;
  const b = g.arg(i, 0);
  const t = E.t;
  const q = t.leastLoaded((terms + 2) * len);
  t.needValue(q, b);
  t.needTemp(q, i);
  const ops = E.operands;
  ops[0] = L.value[i]!;
  ops[1] = terms + 1;
  ops[2] = L.value[b]!;
  for (let k = 0; k < terms; k++) ops[3 + k] = L.temp[i]! + k * len;
  t.writer.insN(q, Opcode.Sum, len, ops, 3 + terms);
  t.wroteValue(i, q);
}

/** y = [x₁; x₂; …]: a copy for each argument not computed in place, each on the least-loaded processor. */
export function concatForward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void {
  const t = E.t;
  const { args, rows, cols } = g;
  const value = L.value;
  const placed = L.placed;
  const y = value[i]!;
  const s = g.argStart[i]!;
  const count = g.argCount[i]!;
  let off = 0;
  for (let k = 0; k < count; k++) {
    const a = args[s + k]!;
    const al = rows[a]! * cols[a]!;
    // h of a cell scheduled in this batch: its lstm instruction stores h here too (its h2), no copy
    const cell = g.op[a] === Op.PickRange && g.aux[a] === 0 ? args[g.argStart[a]!]! : -1;
    if (cell >= 0 && g.op[cell] === Op.LstmCell && 2 * al === rows[cell]! * cols[cell]!) {
      const q = E.cellCta[cell]!;
      if (q >= 0 && E.fusedConcat[cell] === -1) {
        t.writer.patch(q, E.cellWord[cell]!, y + off);
        t.wroteValueAt(i, E.cellStep[cell]!, q);
        E.fusedConcat[cell] = i;
        E.fusedOffset[cell] = off;
        off += al;
        continue;
      }
    }
    if (placed[a] !== PLACEMENT.inConcat) {
      const q = t.leastLoaded(2 * al);
      t.needValue(q, a);
      t.writer.ins2(q, Opcode.Copy, al, y + off, value[a]!);
      t.wroteValue(i, q);
    }
    off += al;
  }
}

/** y = a ∘ b elementwise, instruction `code` (add, sub, cmul), on one processor. */
export function binaryForward(code: Opcode) {
  return (E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void => {
    const t = E.t;
    const s = g.argStart[i]!;
    const a = g.args[s]!;
    const b = g.args[s + 1]!;
    const len = g.rows[i]! * g.cols[i]!;
    const q = t.leastLoaded(3 * len);
    t.needValue(q, a);
    t.needValue(q, b);
    t.writer.ins3(q, code, len, L.value[i]!, L.value[a]!, L.value[b]!);
    t.wroteValue(i, q);
  };
}

/** y = f(x) elementwise, instruction `code` (tanh, logistic, relu), on one processor. */
export function unaryForward(code: Opcode) {
  return (E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void => {
    const t = E.t;
    const x = g.args[g.argStart[i]!]!;
    const len = g.rows[i]! * g.cols[i]!;
    const q = t.leastLoaded(2 * len);
    t.needValue(q, x);
    t.writer.ins2(q, code, len, L.value[i]!, L.value[x]!);
    t.wroteValue(i, q);
  };
}

/** y = x ⊙ m / (1 − p), the mask from (key, base) and the counter-based generator. */
export function dropoutForward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void {
  const t = E.t;
  const x = g.args[g.argStart[i]!]!;
  const len = g.rows[i]! * g.cols[i]!;
  const q = t.leastLoaded(2 * len);
  t.needValue(q, x);
  const bits = floatBits(g.auxF[i]!);
  t.writer.ins5(q, Opcode.Dropout, len, L.value[i]!, L.value[x]!, g.aux[i]! >>> 0, g.aux2[i]! >>> 0, bits);
  t.wroteValue(i, q);
}

/** loss = −log softmax(x)[label] on one processor. */
export function pickNlsForward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void {
  const t = E.t;
  const x = g.args[g.argStart[i]!]!;
  const classes = g.rows[x]!;
  const q = t.leastLoaded(classes);
  t.needValue(q, x);
  t.writer.ins3(q, Opcode.PickNls, classes, L.value[i]!, L.value[x]!, g.aux[i]!);
  t.wroteValue(i, q);
}

/** y = Σ xⱼ on one processor, chained in pieces that fit an instruction (y joins each later piece). */
export function sumForward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void {
  const count = g.argCount[i]!;
  const len = g.rows[i]! * g.cols[i]!;
  const t = E.t;
  const q = t.leastLoaded((count + 1) * len);
  const y = L.value[i]!;
  const room = MAX_INSTRUCTION_WORDS - 3;
  const ops = E.operands;
  let k = 0;
  let first = true;
  while (k < count) {
    let c = 0;
    ops[0] = y;
    if (!first) ops[2 + c++] = y;
    while (k < count && c < room) {
      const a = g.arg(i, k++);
      t.needValue(q, a);
      ops[2 + c++] = L.value[a]!;
    }
    ops[1] = c;
    t.writer.insN(q, Opcode.Sum, len, ops, 2 + c);
    first = false;
  }
  t.wroteValue(i, q);
}

/**
 * [h; c] of a cell with k children on one processor. Where the instruction is (processor, step, the word of its h2
 * operand) is kept, so that the parent's concatenation can have the cell store h into it too (concatForward).
 */
export function lstmForward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void {
  const t = E.t;
  const value = L.value;
  const args = g.args;
  const s = g.argStart[i]!;
  const a0 = args[s]!;
  const k = g.aux[i]!;
  const H = g.rows[i]! >> 1; // [h; c] is a column of 2H
  const q = t.leastLoaded((5 + 2 * k) * H);
  const ops = E.operands;
  ops[0] = value[i]!;
  ops[1] = value[a0]!;
  ops[2] = NONE; // h2: patched by concatForward when the parent's concatenation takes h from here
  ops[3] = k;
  t.needValue(q, a0);
  for (let j = 0; j < k; j++) {
    const c = args[s + 1 + j]!;
    t.needValue(q, c);
    ops[4 + j] = value[c]!;
  }
  E.cellCta[i] = q;
  E.cellStep[i] = t.step;
  E.cellWord[i] = t.writer.length(q) + 3; // preamble, out, gates, h2
  t.writer.insN(q, Opcode.LstmCell, H, ops, 4 + k);
  t.wroteValue(i, q);
}
