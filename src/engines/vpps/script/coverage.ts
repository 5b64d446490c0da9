/**
 * Which waits of a batch script order something. A wait is covered when, by the time its processor reaches it, that
 * processor has already synchronised (directly or through other processors' waits) with every signal of its
 * barrier: removing it changes nothing. Found by running the script once, in any order its waits allow, with a
 * vector clock per processor (each clock counts its own processor's instructions and takes the maximum of the
 * signals' clocks at each wait). A diagnostic (tests, bench/lab/vpps/replay.ts), not on the batch path: it costs
 * a clock of `ctas` entries per signal.
 */
import { instructionWords, Opcode } from "./format.js";

export interface ScriptWait {
  readonly cta: number;
  /** Word offset of the wait instruction in the script. */
  readonly at: number;
  readonly covered: boolean;
}

/** Every wait of `script` (a batch of `ctas` processors) in the order the run reached them, covered or not. */
export function waitCoverage(script: Uint32Array, ctas: number): ScriptWait[] {
  const header = ctas + 1;
  const pc = Int32Array.from({ length: ctas }, (_, c) => header + script[c]!);
  const clock = Array.from({ length: ctas }, () => new Int32Array(ctas));
  const signals = new Map<number, Int32Array[]>();
  const out: ScriptWait[] = [];
  for (let moved = true; moved; ) {
    moved = false;
    for (let c = 0; c < ctas; c++) {
      const mine = clock[c]!;
      for (const end = header + script[c + 1]!; pc[c]! < end; ) {
        const at = pc[c]!;
        const code = script[at]! & 0xff;
        const bar = script[at]! >>> 8;
        if (code === Opcode.Wait) {
          const seen = signals.get(bar) ?? [];
          if (seen.length < script[at + 1]!) break;
          out.push({ cta: c, at, covered: !seen.some((v) => v.some((x, k) => x > mine[k]!)) });
          for (const v of seen) for (let k = 0; k < ctas; k++) if (v[k]! > mine[k]!) mine[k] = v[k]!;
        }
        mine[c]!++;
        if (code === Opcode.Signal) {
          const list = signals.get(bar);
          if (list === undefined) signals.set(bar, [mine.slice()]);
          else list.push(mine.slice());
        }
        pc[c] = at + instructionWords(script, at);
        moved = true;
      }
    }
  }
  for (let c = 0; c < ctas; c++) {
    if (pc[c]! < header + script[c + 1]!) throw new Error(`waitCoverage: processor ${c} never passes its wait`);
  }
  return out;
}
