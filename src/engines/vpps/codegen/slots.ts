/**
 * The register side of the specialised kernel: per matrix a struct of compile-time constants (shape, partitions,
 * master offset, staging), and per register slot the weight and gradient arrays every CTA declares, loaded from the
 * master copy where the CTA holds a partition.
 *
 * Every register array is indexed only by compile-time constants after unrolling, so ptxas keeps it in registers;
 * test/vpps-codegen.test.ts checks that no plan spills. Which partition a CTA holds in a slot is a runtime fact
 * (`blockIdx.x`), but it only selects rows, never registers.
 */
import type { HeldMatrix, VppsPlan } from "../plan/plan.js";
import { backwardStage, forwardStage } from "./staging.js";

/** Matrix number n of a plan: a plan matrix, or (from `matrices.length` on) a transposed copy. */
export function heldMatrix(plan: VppsPlan, n: number): HeldMatrix {
  const m = n < plan.matrices.length ? plan.matrices[n] : plan.transposed[n - plan.matrices.length];
  if (m === undefined) throw new Error(`kernel template: the plan has no matrix number ${n}`);
  return m;
}

/** A C identifier for a matrix's constants struct: `M1_U_iou`. */
export function matrixStruct(m: HeldMatrix): string {
  return `M${m.index}_${m.name.replace(/[^A-Za-z0-9_]/g, "_")}`;
}

/** `struct M1_U_iou { ... }` with the matrix's compile-time constants, then those of the transposed copies. */
export function renderMatrixStructs(plan: VppsPlan): string {
  const copies = plan.transposed.map((t) => {
    const src = plan.matrices[t.source]!;
    return `// ${t.name} [${t.rows} x ${t.cols}]: transposed copy of ${src.name}, read-only; ${t.chunks} register(s) per row per lane, partitions ${
      t.firstPartition
    }..${t.firstPartition + t.partitionCount - 1} of the deal (slots ${t.slots.join(", ")})
struct ${matrixStruct(t)} {
  static constexpr int kRows = ${t.rows}, kCols = ${t.cols}, kChunks = ${t.chunks};
  static constexpr int kFirstPartition = ${t.firstPartition}, kPartitions = ${t.partitionCount};
  static constexpr long long kMaster = ${t.masterOffset}; // ${src.name}'s master copy: element (r, c) at kMaster + c * kSrcCols + r
  static constexpr int kSrcCols = ${src.cols};
  static constexpr int kStage = ${forwardStage(t, plan)}, kStageBwd = 0; // entries staged per round
};`;
  });
  return [...renderMatrixStructsOf(plan), ...copies].join("\n");
}

function renderMatrixStructsOf(plan: VppsPlan): string[] {
  return plan.matrices.map((m) => {
    const s = matrixStruct(m);
    return `// ${m.name} [${m.rows} x ${m.cols}]: ${m.chunks} register(s) per row per lane, partitions ${m.firstPartition}..${
      m.firstPartition + m.partitionCount - 1
    } of the deal (slots ${m.slots.join(", ")}), gradient in ${m.gradients}
struct ${s} {
  static constexpr int kRows = ${m.rows}, kCols = ${m.cols}, kChunks = ${m.chunks};
  static constexpr int kFirstPartition = ${m.firstPartition}, kPartitions = ${m.partitionCount};
  static constexpr long long kMaster = ${m.masterOffset}; // float offset in the master copy and gradient buffer
  static constexpr int kStage = ${forwardStage(m, plan)}, kStageBwd = ${backwardStage(m, plan)}; // entries staged per round
};`;
  });
}

/** The C name of slot s's weight register array. */
export const weightArray = (slot: number): string => `w${slot}`;
/** The C name of slot s's gradient register array. */
export const gradientArray = (slot: number): string => `g${slot}`;
const w = weightArray;
const g = gradientArray;

/** Register arrays of every slot, zeroed, then the partitions this CTA holds loaded from the master copy. */
export function renderSlotDeclarations(plan: VppsPlan): string {
  const lines: string[] = [];
  for (const s of plan.slots) {
    const names = s.matrices.map((i) => heldMatrix(plan, i).name).join(", ");
    lines.push(
      `  // slot ${s.index}: ${names} — ${s.weightRegs} weight + ${s.gradientRegs} gradient registers per thread`,
    );
    lines.push(`  float ${w(s.index)}[kRpw][${s.chunks}];`);
    if (s.gradientChunks > 0) lines.push(`  float ${g(s.index)}[kRpw][${s.gradientChunks}];`);
    lines.push(`#pragma unroll
  for (int q = 0; q < kRpw; ++q) {
#pragma unroll
    for (int i = 0; i < ${s.chunks}; ++i) ${w(s.index)}[q][i] = 0.f;`);
    if (s.gradientChunks > 0) {
      lines.push(`#pragma unroll
    for (int i = 0; i < ${s.gradientChunks}; ++i) ${g(s.index)}[q][i] = 0.f;`);
    }
    lines.push("  }");
    for (const i of s.matrices) {
      if (i >= plan.matrices.length) continue; // a transposed copy: loaded by load.t (renderLoadTransposed)
      const M = matrixStruct(plan.matrices[i]!);
      lines.push(
        `  if (holds<${M}>(${s.index})) load_rows<${M}>(${w(s.index)}, first_row<${M}>(${s.index}, warp), master, lane);`,
      );
    }
  }
  return lines.join("\n");
}

/** Calls for every (slot, register-gradient matrix) pair, for the end-of-batch instructions. */
export function perRegisterGradient(plan: VppsPlan, call: (M: string, slot: number) => string): string[] {
  const out: string[] = [];
  for (const s of plan.slots) {
    for (const i of s.matrices) {
      const m = plan.matrices[i]; // undefined: a transposed copy, which has no gradient
      if (m === undefined || m.gradients !== "registers") continue;
      const M = matrixStruct(m);
      out.push(`        if (holds<${M}>(${s.index})) ${call(M, s.index)};`);
    }
  }
  return out;
}
