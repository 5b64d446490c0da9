/**
 * The specialised part of the VPPS kernel: register arrays per slot and, per matrix, fully unrolled calls of the
 * matrix routines with compile-time slot, shape and partition constants (paper §III-A2, Fig. 5).
 *
 * Every register array is indexed only by compile-time constants after unrolling, so ptxas keeps it in registers;
 * test/vpps-codegen.test.ts checks that no plan spills. Which partition a CTA holds in a slot is a runtime fact
 * (`blockIdx.x`), but it only selects rows, never registers.
 */

import { opcodeConstant } from "./kernel-static.js";
import type { MatrixPlan, VppsPlan } from "./plan.js";
import { LIST_ENTRIES, OPCODES, Opcode } from "./script.js";

/** Columns one column block of the x̄ reduction covers: 8 chunks of 32 lanes = the 256 threads of the CTA. */
export const REDUCE_BLOCK_COLS = 256;
const BLOCK_CHUNKS = REDUCE_BLOCK_COLS / 32;

/** A C identifier for a matrix's constants struct: `M1_U_iou`. */
export function matrixStruct(m: MatrixPlan): string {
  return `M${m.index}_${m.name.replace(/[^A-Za-z0-9_]/g, "_")}`;
}

/** The routines every specialised call uses; templated on the matrix struct so shapes are compile-time constants. */
export const MATRIX_ROUTINES = `
// ---- matrix routines (templated on a matrix's constants; w and g are register arrays [kRpw][slot chunks]) ------

// Index of the partition of M that this CTA holds in register slot s; in [0, M::kPartitions) iff it holds one.
template <class M> __device__ __forceinline__ int partition_in(int s) {
  return s * kCtas + (int)blockIdx.x - M::kFirstPartition;
}
template <class M> __device__ __forceinline__ bool holds(int s) {
  return (unsigned)partition_in<M>(s) < (unsigned)M::kPartitions;
}
// First row of M that this warp holds in slot s (rows past M::kRows are padding and stay zero).
template <class M> __device__ __forceinline__ int first_row(int s, int warp) {
  return partition_in<M>(s) * kRowsPerPartition + warp * kRpw;
}

// Lane l holds columns l, l + 32, ...: only a width that is not a multiple of 32 needs a runtime column guard.
template <class M> __device__ __forceinline__ bool has_col(int lane, int i) {
  return M::kCols % 32 == 0 || lane + 32 * i < M::kCols;
}

// Rows are addressed through one row pointer plus compile-time offsets: per-element 64-bit addresses cost ptxas
// registers it does not have to spare at the end of a kernel whose arrays fill the register file.
template <class M, int SC> __device__ __forceinline__ void load_rows(float (&w)[kRpw][SC], int row0, const float* master, int lane) {
  static_assert(M::kChunks <= SC, "slot narrower than matrix");
#pragma unroll
  for (int q = 0; q < kRpw; ++q) {
    const bool row_ok = row0 + q < M::kRows;
    const float* row = master + M::kMaster + (long long)(row0 + q) * M::kCols + lane;
#pragma unroll
    for (int i = 0; i < M::kChunks; ++i) w[q][i] = (row_ok && has_col<M>(lane, i)) ? row[32 * i] : 0.f;
  }
}

// y[r] = b[r] + W[r].x: each lane multiplies its columns, then a shuffle reduction per row.
template <class M, int SC>
__device__ __forceinline__ void mv_forward(const float (&w)[kRpw][SC], int row0, float* y, const float* x, const float* b, int lane) {
  float acc[kRpw];
#pragma unroll
  for (int q = 0; q < kRpw; ++q) acc[q] = 0.f;
#pragma unroll
  for (int i = 0; i < M::kChunks; ++i) {
    const int c = lane + 32 * i;
    const float xv = has_col<M>(lane, i) ? x[c] : 0.f;
#pragma unroll
    for (int q = 0; q < kRpw; ++q) acc[q] = fmaf(w[q][i], xv, acc[q]);
  }
  // After the butterfly every lane has every row's sum; lane q stores row q (one store site, see bias_grad).
  float mine = 0.f;
#pragma unroll
  for (int q = 0; q < kRpw; ++q) {
    const float s = warp_sum(acc[q]);
    mine = lane == q ? s : mine;
  }
  const int r = row0 + lane;
  if (lane < kRpw && r < M::kRows) y[r] = (b ? b[r] : 0.f) + mine;
}

// The warp's rows of ybar (all lanes read the same address: a broadcast); 0 for padding rows or unheld slots.
template <class M> __device__ __forceinline__ void load_ybar(float (&gy)[kRpw], bool held, int row0, const float* ybar) {
#pragma unroll
  for (int q = 0; q < kRpw; ++q) gy[q] = (held && row0 + q < M::kRows) ? ybar[row0 + q] : 0.f;
}

// Wbar += ybar x^T (outer product into gradient registers) and bbar[r] += ybar[r].
template <class M, int GC>
__device__ __forceinline__ void mv_outer(float (&g)[kRpw][GC], const float (&gy)[kRpw], const float* x, int lane) {
  static_assert(M::kChunks <= GC, "gradient slot narrower than matrix");
#pragma unroll
  for (int i = 0; i < M::kChunks; ++i) {
    const int c = lane + 32 * i;
    const float xv = has_col<M>(lane, i) ? x[c] : 0.f;
#pragma unroll
    for (int q = 0; q < kRpw; ++q) g[q][i] = fmaf(gy[q], xv, g[q][i]);
  }
}
// Lane q adds row q's share, so there is one predicated atomic site: branchy per-row atomics cost ptxas ~30
// registers of the budget (measured).
template <class M> __device__ __forceinline__ void bias_grad(const float (&gy)[kRpw], int row0, float* bbar, int lane) {
  float mine = 0.f;
#pragma unroll
  for (int q = 0; q < kRpw; ++q) mine = lane == q ? gy[q] : mine;
  const int r = row0 + lane;
  if (bbar != nullptr && lane < kRpw && r < M::kRows && mine != 0.f) atomicAdd(bbar + r, mine);
}

// Per-lane partial sums of (W^T ybar) for the chunks of column block B, accumulated over the slots holding M.
template <class M, int B, int SC>
__device__ __forceinline__ void mv_partial(const float (&w)[kRpw][SC], const float (&gy)[kRpw], float (&p)[${BLOCK_CHUNKS}]) {
#pragma unroll
  for (int t = 0; t < ${BLOCK_CHUNKS}; ++t) {
    if (${BLOCK_CHUNKS} * B + t < M::kChunks) {
#pragma unroll
      for (int q = 0; q < kRpw; ++q) p[t] = fmaf(w[q][${BLOCK_CHUNKS} * B + t], gy[q], p[t]);
    }
  }
}

// Combines the 8 warps' partials of column block B in shared memory, then one atomicAdd per column into xbar:
// 8x fewer global atomics than per-warp adds, and no transposed copy of W.
template <class M, int B>
__device__ __forceinline__ void reduce_partials(const float (&p)[${BLOCK_CHUNKS}], float* red, float* xbar, int lane, int warp) {
  constexpr int kBlockChunks = M::kChunks - ${BLOCK_CHUNKS} * B < ${BLOCK_CHUNKS} ? M::kChunks - ${BLOCK_CHUNKS} * B : ${BLOCK_CHUNKS};
#pragma unroll
  for (int t = 0; t < kBlockChunks; ++t) red[warp * ${REDUCE_BLOCK_COLS} + t * 32 + lane] = p[t];
  __syncthreads();
  const int col = threadIdx.x;
  const int c = ${REDUCE_BLOCK_COLS} * B + col;
  if (col < kBlockChunks * 32 && c < M::kCols) {
    float s = 0.f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) s += red[v * ${REDUCE_BLOCK_COLS} + col];
    if (s != 0.f) atomicAdd(xbar + c, s);
  }
  __syncthreads();
}

// W -= step * Wbar, then the new W goes back to the master copy (the kernel's last word on this partition).
template <class M, int SC, int GC>
__device__ __forceinline__ void update_rows(float (&w)[kRpw][SC], const float (&g)[kRpw][GC], int row0, float step, float* master, int lane) {
#pragma unroll
  for (int q = 0; q < kRpw; ++q) {
#pragma unroll
    for (int i = 0; i < M::kChunks; ++i) w[q][i] = fmaf(-step, g[q][i], w[q][i]);
    if (row0 + q >= M::kRows) continue;
    float* row = master + M::kMaster + (long long)(row0 + q) * M::kCols + lane;
#pragma unroll
    for (int i = 0; i < M::kChunks; ++i)
      if (has_col<M>(lane, i)) row[32 * i] = w[q][i];
  }
}

template <class M, int GC>
__device__ __forceinline__ void export_rows(const float (&g)[kRpw][GC], int row0, float* grads, int lane) {
#pragma unroll
  for (int q = 0; q < kRpw; ++q) {
    if (row0 + q >= M::kRows) continue;
    float* row = grads + M::kMaster + (long long)(row0 + q) * M::kCols + lane;
#pragma unroll
    for (int i = 0; i < M::kChunks; ++i)
      if (has_col<M>(lane, i)) row[32 * i] = g[q][i];
  }
}
`;

/** `struct M1_U_iou { ... }` with the matrix's compile-time constants. */
export function renderMatrixStructs(plan: VppsPlan): string {
  return plan.matrices
    .map((m) => {
      const s = matrixStruct(m);
      return `// ${m.name} [${m.rows} x ${m.cols}]: ${m.chunks} register(s) per row per lane, partitions ${m.firstPartition}..${
        m.firstPartition + m.partitionCount - 1
      } of the deal (slots ${m.slots.join(", ")}), gradient in ${m.gradients}
struct ${s} {
  static constexpr int kRows = ${m.rows}, kCols = ${m.cols}, kChunks = ${m.chunks};
  static constexpr int kFirstPartition = ${m.firstPartition}, kPartitions = ${m.partitionCount};
  static constexpr long long kMaster = ${m.masterOffset}; // float offset in the master copy and gradient buffer
};`;
    })
    .join("\n");
}

const w = (slot: number) => `w${slot}`;
/** The raw operand word `name` of `op` in the staged instruction. */
const W = (op: Opcode, name: string): string => `ins[${1 + OPCODES[op]!.fixed.indexOf(name)}]`;
const g = (slot: number) => `g${slot}`;

/** Register arrays of every slot, zeroed, then the partitions this CTA holds loaded from the master copy. */
export function renderSlotDeclarations(plan: VppsPlan): string {
  const lines: string[] = [];
  for (const s of plan.slots) {
    const names = s.matrices.map((i) => plan.matrices[i]!.name).join(", ");
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
      const M = matrixStruct(plan.matrices[i]!);
      lines.push(
        `  if (holds<${M}>(${s.index})) load_rows<${M}>(${w(s.index)}, first_row<${M}>(${s.index}, warp), master, lane);`,
      );
    }
  }
  return lines.join("\n");
}

function entryLoop(op: Opcode, body: string): string {
  const words = LIST_ENTRIES[op]!.length;
  return `#pragma unroll 1
          for (u32 e = 0; e < count; ++e) {
            const u32* ent = list + ${words} * e;
${body}
          }`;
}

function matVecCase(plan: VppsPlan): string {
  const o = Opcode.MatVec;
  const at = (name: string) => LIST_ENTRIES[o]!.indexOf(name);
  const cases = plan.matrices.map((m) => {
    const M = matrixStruct(m);
    const calls = m.slots.map(
      (s) =>
        `            if (holds<${M}>(${s})) mv_forward<${M}>(${w(s)}, first_row<${M}>(${s}, warp), y, x, b, lane);`,
    );
    const body = `            float* y = pool + ent[${at("y")}];
            const float* x = pool + ent[${at("x")}];
            const float* b = ent[${at("b")}] == kNone ? nullptr : pool + ent[${at("b")}];
${calls.join("\n")}`;
    return `        case ${m.index}: // ${m.name}\n          ${entryLoop(o, body)}\n          break;`;
  });
  return `      case ${opcodeConstant(o)}: { // matvec: n = matrix; entries (y, x, b); warps run through them unsynchronised
        const u32* list = table + ${W(o, "list")};
        const u32 count = ${W(o, "count")};
        switch (n) {
${cases.join("\n")}
          default: report_error(status, kErrBadMatrix, (int)n, 0, 0, (int)(pc + at)); s_abort = 1;
        }
      } break;`;
}

function matVecBwdMatrix(m: MatrixPlan): string {
  const o = Opcode.MatVecBwd;
  const at = (name: string) => LIST_ENTRIES[o]!.indexOf(name);
  const M = matrixStruct(m);
  const lines = [
    `            const float* ybar = pool + ent[${at("ybar")}];
            const float* x = pool + ent[${at("x")}];
            float* xbar = ent[${at("xbar")}] == kNone ? nullptr : pool + ent[${at("xbar")}];
            float* bbar = ent[${at("bbar")}] == kNone ? nullptr : pool + ent[${at("bbar")}];`,
  ];
  for (const s of m.slots) {
    lines.push(`            const bool h${s} = holds<${M}>(${s});
            const int r${s} = first_row<${M}>(${s}, warp);
            float gy${s}[kRpw];
            load_ybar<${M}>(gy${s}, h${s}, r${s}, ybar);
            if (h${s}) {
              bias_grad<${M}>(gy${s}, r${s}, bbar, lane);${m.gradients === "registers" ? `\n              mv_outer<${M}>(${g(s)}, gy${s}, x, lane);` : ""}
            }`);
  }
  const blocks = Math.ceil(m.chunks / BLOCK_CHUNKS);
  // x̄ needs the CTA-wide reduction; xbar is uniform across the CTA, so every thread reaches its __syncthreads
  lines.push("            if (xbar) {");
  for (let b = 0; b < blocks; b++) {
    lines.push(`              { // columns ${b * REDUCE_BLOCK_COLS}..${Math.min(m.cols, (b + 1) * REDUCE_BLOCK_COLS) - 1}
                float p[${BLOCK_CHUNKS}] = {${new Array(BLOCK_CHUNKS).fill("0.f").join(", ")}};`);
    for (const s of m.slots) lines.push(`                mv_partial<${M}, ${b}>(${w(s)}, gy${s}, p);`);
    lines.push(`                reduce_partials<${M}, ${b}>(p, s_reduce, xbar, lane, warp);
              }`);
  }
  lines.push("            }");
  return `        case ${m.index}: { // ${m.name}: gradient in ${m.gradients}
          ${entryLoop(o, lines.join("\n"))}
        } break;`;
}

function matVecBwdCase(plan: VppsPlan): string {
  const o = Opcode.MatVecBwd;
  return `      case ${opcodeConstant(o)}: { // matvec.bwd: n = matrix; entries (ybar, x, xbar, bbar)
        const u32* list = table + ${W(o, "list")};
        const u32 count = ${W(o, "count")};
        switch (n) {
${plan.matrices.map((m) => matVecBwdMatrix(m)).join("\n")}
          default: report_error(status, kErrBadMatrix, (int)n, 0, 0, (int)(pc + at)); s_abort = 1;
        }
      } break;`;
}

/** Calls for every (slot, register-gradient matrix) pair, for the end-of-batch instructions. */
function perRegisterGradient(plan: VppsPlan, call: (M: string, slot: number) => string): string[] {
  const out: string[] = [];
  for (const s of plan.slots) {
    for (const i of s.matrices) {
      const m = plan.matrices[i]!;
      if (m.gradients !== "registers") continue;
      const M = matrixStruct(m);
      out.push(`        if (holds<${M}>(${s.index})) ${call(M, s.index)};`);
    }
  }
  return out;
}

function endOfBatchCases(plan: VppsPlan): string {
  const norm = plan.slots
    .filter((s) => s.gradientChunks > 0)
    .map(
      (s) => `#pragma unroll
        for (int q = 0; q < kRpw; ++q)
#pragma unroll
          for (int i = 0; i < ${s.gradientChunks}; ++i) s = fmaf(${g(s.index)}[q][i], ${g(s.index)}[q][i], s);`,
    );
  const accOf = (op: Opcode) => W(op, "acc");
  const update = perRegisterGradient(
    plan,
    (M, s) => `update_rows<${M}>(${w(s)}, ${g(s)}, first_row<${M}>(${s}, warp), step, master, lane)`,
  );
  const exports = perRegisterGradient(
    plan,
    (M, s) => `export_rows<${M}>(${g(s)}, first_row<${M}>(${s}, warp), grads, lane)`,
  );
  return `      case ${opcodeConstant(Opcode.GradNorm2)}: { // gradnorm2: acc += sum of this CTA's register gradients squared
        float s = 0.f;
        ${norm.join("\n        ")}
        s = warp_sum(s);
        if (lane == 0 && s != 0.f) atomicAdd(pool + ${accOf(Opcode.GradNorm2)}, s);
      } break;
      case ${opcodeConstant(Opcode.UpdateRegs)}: { // update.regs: W -= lr * scale * Wbar, write back
        const float step = lr * clip_scale(pool, ${accOf(Opcode.UpdateRegs)}, clip);
${update.join("\n")}
      } break;
      case ${opcodeConstant(Opcode.ExportGrads)}: // export.grads: Wbar to the gradient buffer
${exports.join("\n")}
        break;`;
}

/** The interpreter cases that touch register-resident matrices. */
export function renderMatrixCases(plan: VppsPlan): string {
  return [matVecCase(plan), matVecBwdCase(plan), endOfBatchCases(plan)].join("\n");
}
