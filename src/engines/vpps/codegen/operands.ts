/**
 * Names the generated CUDA gives opcodes and operands, rendered from the opcode table (script/format.ts), so that
 * the interpreter cannot drift from the encoder.
 */
import { OPCODES, Opcode } from "../script/format.js";

/** `OP_TANH_BWD` style C identifiers for opcodes. */
export function opcodeConstant(op: Opcode): string {
  return `OP_${Opcode[op].replace(/([a-z0-9])([A-Z])/g, "$1_$2").toUpperCase()}`;
}

/** Operand index (1-based word position after the preamble) of a named operand of `op`. */
export function operandIndex(op: Opcode, name: string): number {
  const i = OPCODES[op]!.fixed.indexOf(name);
  if (i < 0) throw new Error(`kernel template: opcode ${OPCODES[op]!.mnemonic} has no operand '${name}'`);
  return i + 1;
}

/** `(pool + ins[k])` for operand `name` of `op`: a pointer into the pool. */
export const operandPointer = (op: Opcode, name: string): string => `(pool + ins[${operandIndex(op, name)}])`;

/** `ins[k]`: the raw operand word `name` of `op` in the staged instruction. */
export const operandWord = (op: Opcode, name: string): string => `ins[${operandIndex(op, name)}]`;
