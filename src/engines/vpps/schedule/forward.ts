/**
 * Forward instructions of the VPPS scheduler, per op (kernel-table.ts maps ops to them; scheduler.ts walks the
 * levels, steps.ts keeps the steps, loads and dependencies). A product becomes an entry of its matrix's list on the
 * matrix's holders; any other instruction goes to the least-loaded processor of the step.
 *
 * Nodes are view ids of the batch's level order, whose records (plan/level-order.ts: R at NODE_WORDS·node + N_…)
 * hold what the emitters read of a node.
 */
import { Op } from "../../../graph/opcodes.js";
import { PLACEMENT } from "../plan/layout.js";
import {
  N_ARG_COUNT,
  N_ARG_START,
  N_AUX,
  N_COLS,
  N_FLAGS,
  N_OP,
  N_ROWS,
  N_TEMP,
  N_VALUE,
  NODE_WORDS,
} from "../plan/level-order.js";
import { floatBits, MAX_INSTRUCTION_WORDS, NONE, Opcode } from "../script/format.js";
import type { Emitter } from "./backward.js";

/** The value offset of view node x. */
const valueAt = (R: Int32Array, x: number): number => R[NODE_WORDS * x + N_VALUE]!;

/** The elements of view node x (rows × cols). */
const sizeAt = (R: Int32Array, x: number): number => R[NODE_WORDS * x + N_ROWS]! * R[NODE_WORDS * x + N_COLS]!;

/** y = W·x: an entry of W's list in this step. */
export function matVecForward(E: Emitter, i: number): void {
  const { R, args } = E.V;
  const s = R[NODE_WORDS * i + N_ARG_START]!;
  product(E, R, i, E.matrixOf(i, args[s]!), args[s + 1]!, R[NODE_WORDS * i + N_VALUE]!, -1, false);
}

/**
 * y = b + Σ Wₖ·xₖ: with one product, an entry of W's list that adds b; with several, one entry per product into
 * the node's temporaries, summed with b in the next step (affineSum).
 */
export function affineForward(E: Emitter, i: number): void {
  const { R, args } = E.V;
  const r = NODE_WORDS * i;
  const s = R[r + N_ARG_START]!;
  const count = R[r + N_ARG_COUNT]!;
  if (count === 3) {
    product(E, R, i, E.matrixOf(i, args[s + 1]!), args[s + 2]!, R[r + N_VALUE]!, args[s]!, false);
  } else {
    const len = R[r + N_ROWS]! * R[r + N_COLS]!;
    const temp = R[r + N_TEMP]!;
    for (let k = 1; k < count; k += 2) {
      const m = E.matrixOf(i, args[s + k]!);
      product(E, R, i, m, args[s + k + 1]!, temp + ((k - 1) >> 1) * len, -1, true);
    }
  }
}

/**
 * y = (b) + W_m·x, one entry of matrix m's list in this step, for node i: y is i's value, or with several
 * products (`toTemp`) one of its temporaries.
 */
function product(E: Emitter, R: Int32Array, i: number, m: number, x: number, y: number, b: number, toTemp: boolean) {
  const t = E.t;
  const bias = b >= 0 ? valueAt(R, b) : NONE;
  t.listEntry(Opcode.MatVec, m, 3, y, valueAt(R, x), bias, 0, t.valueBuffer(x), b >= 0 ? t.valueBuffer(b) : -1);
  if (toTemp) t.wroteTemp(i, -(m + 1));
  else t.wroteValue(i, -(m + 1));
}

/** y = b + Σ temporaries, for an affine transform with several products (the step after the products). */
export function affineSum(E: Emitter, i: number): void {
  const { R, args } = E.V;
  const r = NODE_WORDS * i;
  const terms = (R[r + N_ARG_COUNT]! - 1) / 2;
  const len = R[r + N_ROWS]!;
  const b = args[R[r + N_ARG_START]!]!;
  const t = E.t;
  const q = t.leastLoaded((terms + 2) * len);
  t.needValue(q, b);
  t.needTemp(q, i);
  const ops = E.operands;
  ops[0] = R[r + N_VALUE]!;
  ops[1] = terms + 1;
  ops[2] = valueAt(R, b);
  for (let k = 0; k < terms; k++) ops[3 + k] = R[r + N_TEMP]! + k * len;
  t.writer.insN(q, Opcode.Sum, len, ops, 3 + terms);
  t.wroteValue(i, q);
}

/** y = [x₁; x₂; …]: a copy for each argument not computed in place, each on the least-loaded processor. */
export function concatForward(E: Emitter, i: number): void {
  const t = E.t;
  const { R, args } = E.V;
  const r = NODE_WORDS * i;
  const y = R[r + N_VALUE]!;
  const s = R[r + N_ARG_START]!;
  const count = R[r + N_ARG_COUNT]!;
  let off = 0;
  for (let k = 0; k < count; k++) {
    const a = args[s + k]!;
    const ra = NODE_WORDS * a;
    const al = R[ra + N_ROWS]! * R[ra + N_COLS]!;
    // h of a cell scheduled in this batch: its lstm instruction stores h here too (its h2), no copy
    const cell = R[ra + N_OP] === Op.PickRange && R[ra + N_AUX] === 0 ? args[R[ra + N_ARG_START]!]! : -1;
    if (cell >= 0 && R[NODE_WORDS * cell + N_OP] === Op.LstmCell && 2 * al === sizeAt(R, cell)) {
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
    if (R[ra + N_FLAGS]! >> 1 !== PLACEMENT.inConcat) {
      const q = t.leastLoaded(2 * al);
      t.needValue(q, a);
      t.writer.ins2(q, Opcode.Copy, al, y + off, R[ra + N_VALUE]!);
      t.wroteValue(i, q);
    }
    off += al;
  }
}

/** y = a ∘ b elementwise, instruction `code` (add, sub, cmul), on one processor. */
export function binaryForward(code: Opcode) {
  return (E: Emitter, i: number): void => {
    const t = E.t;
    const { R, args } = E.V;
    const r = NODE_WORDS * i;
    const s = R[r + N_ARG_START]!;
    const a = args[s]!;
    const b = args[s + 1]!;
    const len = R[r + N_ROWS]! * R[r + N_COLS]!;
    const q = t.leastLoaded(3 * len);
    t.needValue(q, a);
    t.needValue(q, b);
    t.writer.ins3(q, code, len, R[r + N_VALUE]!, valueAt(R, a), valueAt(R, b));
    t.wroteValue(i, q);
  };
}

/** y = f(x) elementwise, instruction `code` (tanh, logistic, relu), on one processor. */
export function unaryForward(code: Opcode) {
  return (E: Emitter, i: number): void => {
    const t = E.t;
    const { R, args } = E.V;
    const r = NODE_WORDS * i;
    const x = args[R[r + N_ARG_START]!]!;
    const len = R[r + N_ROWS]! * R[r + N_COLS]!;
    const q = t.leastLoaded(2 * len);
    t.needValue(q, x);
    t.writer.ins2(q, code, len, R[r + N_VALUE]!, valueAt(R, x));
    t.wroteValue(i, q);
  };
}

/** y = x ⊙ m / (1 − p), the mask from (key, base) and the counter-based generator. */
export function dropoutForward(E: Emitter, i: number): void {
  const t = E.t;
  const { R, args, graph, order } = E.V;
  const r = NODE_WORDS * i;
  const x = args[R[r + N_ARG_START]!]!;
  const len = R[r + N_ROWS]! * R[r + N_COLS]!;
  const q = t.leastLoaded(2 * len);
  t.needValue(q, x);
  // the probability and the counter base are not in the records (dropout alone has them): the graph's, by graph id
  const gi = order[i]!;
  const bits = floatBits(graph!.auxF[gi]!);
  t.writer.ins5(
    q,
    Opcode.Dropout,
    len,
    R[r + N_VALUE]!,
    valueAt(R, x),
    R[r + N_AUX]! >>> 0,
    graph!.aux2[gi]! >>> 0,
    bits,
  );
  t.wroteValue(i, q);
}

/** loss = −log softmax(x)[label] on one processor. */
export function pickNlsForward(E: Emitter, i: number): void {
  const t = E.t;
  const { R, args } = E.V;
  const r = NODE_WORDS * i;
  const x = args[R[r + N_ARG_START]!]!;
  const classes = R[NODE_WORDS * x + N_ROWS]!;
  const q = t.leastLoaded(classes);
  t.needValue(q, x);
  t.writer.ins3(q, Opcode.PickNls, classes, R[r + N_VALUE]!, valueAt(R, x), R[r + N_AUX]!);
  t.wroteValue(i, q);
}

/** y = Σ xⱼ on one processor, chained in pieces that fit an instruction (y joins each later piece). */
export function sumForward(E: Emitter, i: number): void {
  const { R, args } = E.V;
  const r = NODE_WORDS * i;
  const count = R[r + N_ARG_COUNT]!;
  const s = R[r + N_ARG_START]!;
  const len = R[r + N_ROWS]! * R[r + N_COLS]!;
  const t = E.t;
  const q = t.leastLoaded((count + 1) * len);
  const y = R[r + N_VALUE]!;
  const room = MAX_INSTRUCTION_WORDS - 3;
  const ops = E.operands;
  let k = 0;
  let first = true;
  while (k < count) {
    let c = 0;
    ops[0] = y;
    if (!first) ops[2 + c++] = y;
    while (k < count && c < room) {
      const a = args[s + k++]!;
      t.needValue(q, a);
      ops[2 + c++] = valueAt(R, a);
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
export function lstmForward(E: Emitter, i: number): void {
  const t = E.t;
  const { R, args } = E.V;
  const r = NODE_WORDS * i;
  const s = R[r + N_ARG_START]!;
  const a0 = args[s]!;
  const k = R[r + N_AUX]!;
  const H = R[r + N_ROWS]! >> 1; // [h; c] is a column of 2H
  const q = t.leastLoaded((5 + 2 * k) * H);
  const ops = E.operands;
  ops[0] = R[r + N_VALUE]!;
  ops[1] = valueAt(R, a0);
  ops[2] = NONE; // h2: patched by concatForward when the parent's concatenation takes h from here
  ops[3] = k;
  t.needValue(q, a0);
  for (let j = 0; j < k; j++) {
    const c = args[s + 1 + j]!;
    t.needValue(q, c);
    ops[4 + j] = valueAt(R, c);
  }
  E.cellCta[i] = q;
  E.cellStep[i] = t.step;
  E.cellWord[i] = t.writer.length(q) + 3; // preamble, out, gates, h2
  t.writer.insN(q, Opcode.LstmCell, H, ops, 4 + k);
  t.wroteValue(i, q);
}
