/** The VPPS script as text: one instruction (`tanh n=8 y=1024 x=512`), or a whole batch processor by processor. */
import { bitsFloat, instructionWords, LIST_ENTRIES, NONE, OPCODES } from "./format.js";

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
