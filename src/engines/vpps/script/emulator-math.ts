/**
 * The arithmetic of the emulator's cases that is more than a loop: the LSTM cell forward and backward (the
 * kernel's formulas, src/ops/cells.ts), the clipping factor, and the tile instructions' operand checks.
 */
import { sigmoid } from "../../../ops/elementwise.js";
import type { MatrixPlan, VppsPlan } from "../plan/plan.js";
import { NONE, OPCODES, type Opcode } from "./format.js";

/**
 * The matrix of a tile instruction, refusing what the kernel cannot run: an unknown matrix, or more entries than
 * its shared-memory staging holds (the scheduler must split longer lists).
 */
export function tileMatrix(
  plan: VppsPlan,
  op: Opcode,
  n: number,
  count: number,
  most: number,
  cta: number,
): MatrixPlan {
  const m = plan.matrices[n];
  if (m === undefined) {
    throw new Error(
      `VPPS emulator: processor ${cta}: ${mnemonic(op)} names matrix ${n}; the plan has ${plan.matrices.length}`,
    );
  }
  if (count > most) {
    throw new Error(`VPPS emulator: processor ${cta}: ${mnemonic(op)} m=${n} has ${count} entries; at most ${most}`);
  }
  return m;
}

/** [start, min(start + size, limit)) of a tile; a start at or past the limit is a scheduling error, not a no-op. */
export function tileRange(
  op: Opcode,
  name: string,
  start: number,
  size: number,
  limit: number,
  cta: number,
): [number, number] {
  if (start >= limit) {
    throw new Error(
      `VPPS emulator: processor ${cta}: ${mnemonic(op)} has ${name}=${start}; the matrix has ${limit} ${name === "r0" ? "rows" : "columns"}`,
    );
  }
  return [start, Math.min(start + size, limit)];
}

/** The reference trainer's clipping factor from the accumulated squared norm. */
export function clipScale(pool: Float32Array, acc: number, clip: number): number {
  if (acc === NONE || !(clip > 0)) return 1;
  const norm = Math.sqrt(pool[acc]!);
  return norm > clip ? clip / norm : 1;
}

export function lstmForward(
  pool: Float32Array,
  H: number,
  out: number,
  gt: number,
  h2: number,
  k: number,
  c: (j: number) => number,
): void {
  for (let r = 0; r < H; r++) {
    let cell = sigmoid(pool[gt + r]!) * Math.tanh(pool[gt + 2 * H + r]!);
    for (let j = 0; j < k; j++) cell += sigmoid(pool[gt + (3 + j) * H + r]!) * pool[c(j) + r]!;
    pool[out + H + r] = cell;
    pool[out + r] = sigmoid(pool[gt + H + r]!) * Math.tanh(cell);
    if (h2 !== NONE) pool[h2 + r] = pool[out + r]!;
  }
}

export function lstmBackward(
  pool: Float32Array,
  H: number,
  [outbar, out, gt, gbar, hbar2]: readonly number[],
  k: number,
  c: (j: number) => number,
  cbar: (j: number) => number,
): void {
  for (let r = 0; r < H; r++) {
    const tc = Math.tanh(pool[out! + H + r]!);
    const so = sigmoid(pool[gt! + H + r]!);
    const dh = pool[outbar! + r]! + (hbar2 === NONE ? 0 : pool[hbar2! + r]!);
    const dc = pool[outbar! + H + r]! + dh * so * (1 - tc * tc);
    const si = sigmoid(pool[gt! + r]!);
    const tu = Math.tanh(pool[gt! + 2 * H + r]!);
    if (gbar !== NONE) {
      pool[gbar! + r]! += dc * tu * si * (1 - si);
      pool[gbar! + H + r]! += dh * tc * so * (1 - so);
      pool[gbar! + 2 * H + r]! += dc * si * (1 - tu * tu);
    }
    for (let j = 0; j < k; j++) {
      const sf = sigmoid(pool[gt! + (3 + j) * H + r]!);
      if (gbar !== NONE) pool[gbar! + (3 + j) * H + r]! += dc * pool[c(j) + r]! * sf * (1 - sf);
      if (cbar(j) !== NONE) pool[cbar(j) + r]! += dc * sf;
    }
  }
}

/** The mnemonic of an opcode, for messages. */
export function mnemonic(op: number): string {
  return OPCODES[op]?.mnemonic ?? `op#${op}`;
}
