/**
 * Where a VPPS kernel's time goes, from the cycle counters of a kernel rendered with `profile: true`
 * (codegen/template.ts): thread 0 of every CTA reads the SM clock around each instruction, up to and including the
 * `__syncthreads` that ends it, so a wait's cycles are the time the whole CTA stood still on a barrier and a matrix
 * instruction's are the time all its warps needed. Summed over CTAs, the shares say whether processors mostly wait
 * (barrier-bound: fewer steps, shorter critical path) or mostly compute (work-bound: faster instructions).
 */
import { OPCODE_COUNT, OPCODES, Opcode } from "../script/format.js";

/**
 * u64 words of the `profile` argument: cycles and count per opcode, then weight-load cycles, script-staging cycles
 * and whole-CTA cycles (all summed over CTAs; PROFILE_SLOTS names them).
 */
export const PROFILE_WORDS = 2 * OPCODE_COUNT + 3;
export const PROFILE_SLOTS = {
  load: 2 * OPCODE_COUNT,
  staging: 2 * OPCODE_COUNT + 1,
  total: 2 * OPCODE_COUNT + 2,
} as const;

export interface OpcodeTime {
  readonly mnemonic: string;
  /** SM cycles summed over CTAs. */
  readonly cycles: number;
  readonly count: number;
  /** Share of all CTAs' cycles (whole kernel, weight loading included). */
  readonly share: number;
}

export interface KernelProfile {
  /** Sum over CTAs of each CTA's cycles from start to end. */
  readonly totalCycles: number;
  readonly loadCycles: number;
  readonly stagingCycles: number;
  /** Opcodes that ran, most cycles first. */
  readonly opcodes: readonly OpcodeTime[];
  /** Shares of the total: waiting on barriers, matrix instructions, everything else in the interpreter. */
  readonly waitShare: number;
  readonly matrixShare: number;
  readonly otherShare: number;
}

const MATRIX_OPCODES = new Set<number>([Opcode.MatVec, Opcode.MatVecBwd]);

/** Turns the raw counters (`VppsRuntime.readProfile`) into shares per opcode. */
export function summarizeKernelProfile(words: BigUint64Array): KernelProfile {
  const total = Number(words[PROFILE_SLOTS.total]);
  const share = (c: number) => (total > 0 ? c / total : 0);
  const opcodes: OpcodeTime[] = [];
  let wait = 0;
  let matrix = 0;
  let other = 0;
  for (let op = 0; op < OPCODE_COUNT; op++) {
    const cycles = Number(words[2 * op]);
    const count = Number(words[2 * op + 1]);
    if (count === 0) continue;
    opcodes.push({ mnemonic: OPCODES[op]!.mnemonic, cycles, count, share: share(cycles) });
    if (op === Opcode.Wait) wait += cycles;
    else if (MATRIX_OPCODES.has(op)) matrix += cycles;
    else other += cycles;
  }
  opcodes.sort((a, b) => b.cycles - a.cycles);
  return {
    totalCycles: total,
    loadCycles: Number(words[PROFILE_SLOTS.load]),
    stagingCycles: Number(words[PROFILE_SLOTS.staging]),
    opcodes,
    waitShare: share(wait),
    matrixShare: share(matrix),
    otherShare: share(other),
  };
}

/** A few lines for a log: the shares, then the opcodes above 1%. */
export function formatKernelProfile(p: KernelProfile): string {
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  const lines = [
    `kernel cycles (all CTAs): wait ${pct(p.waitShare)}, matrix ${pct(p.matrixShare)}, other instructions ` +
      `${pct(p.otherShare)}, weight load ${pct(p.loadCycles / Math.max(1, p.totalCycles))}, script staging ` +
      `${pct(p.stagingCycles / Math.max(1, p.totalCycles))}`,
  ];
  for (const o of p.opcodes) {
    if (o.share < 0.01) continue;
    lines.push(
      `  ${o.mnemonic.padEnd(12)} ${pct(o.share).padStart(6)}  ${o.count} runs, ${(o.cycles / o.count).toFixed(0)} cycles each`,
    );
  }
  return lines.join("\n");
}
