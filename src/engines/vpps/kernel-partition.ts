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

/**
 * Floats of shared memory the matrix instructions stage their x vectors in. A warp walking entries one at a time
 * waits a full L2 round trip per entry for its x (and 8 warps each fetch the same x); staging up to
 * `MAX_STAGE_ENTRIES` entries' vectors with the whole CTA puts all those loads in flight at once and reads each x
 * from L2 once per CTA.
 */
export const STAGE_FLOATS = 4096;
export const MAX_STAGE_ENTRIES = 8;
/** Floats of shared memory for the staged ȳ rows of matvec.bwd (per entry and slot: the CTA's 8·rpw rows). */
export const STAGE_YBAR_FLOATS = 1024;
/** Words of the staged operand-list entries (4 words per entry at most). */
export const STAGE_ENTRY_WORDS = 4 * MAX_STAGE_ENTRIES;

/**
 * Registers a plan leaves free beyond what the unstaged routines were measured to need: the staged forward product
 * keeps one bias per staged entry and a group of x loads in flight in registers, so tight plans stage fewer.
 */
function stagingHeadroom(plan: VppsPlan): number {
  return plan.budget.limitPerThread - plan.weightRegs - plan.gradientRegs - 64;
}

/** x loads in flight per thread while staging (registers), by headroom. */
export function stageLoads(plan: VppsPlan): number {
  return stagingHeadroom(plan) >= 24 ? 8 : 4;
}

/** Entries a matvec of `m` stages per round (0: too wide to stage; the unstaged path walks entries per warp). */
export function forwardStage(m: MatrixPlan, plan: VppsPlan): number {
  if (m.cols > STAGE_FLOATS) return 0;
  const cap = stagingHeadroom(plan) >= 24 ? MAX_STAGE_ENTRIES : 0;
  return Math.min(cap, Math.floor(STAGE_FLOATS / m.cols));
}

/** Entries a matvec.bwd of `m` stages per round: also bounded by the ȳ buffer (8·rpw rows per slot holding m). */
export function backwardStage(m: MatrixPlan, plan: VppsPlan): number {
  if (m.cols > STAGE_FLOATS || stagingHeadroom(plan) < 24) return 0;
  const perEntry = m.slots.length * 8 * plan.rowsPerWarp;
  return Math.min(MAX_STAGE_ENTRIES, Math.floor(STAGE_FLOATS / m.cols), Math.floor(STAGE_YBAR_FLOATS / perEntry));
}

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

// Copies the x operand (word XI of EW-word entries) of ne <= M::kStage staged entries into xs, entry e at
// e * kCols. All of a thread's loads are issued before its shared stores, so the CTA has them all in flight.
template <class M, int EW, int XI, int S>
__device__ __forceinline__ void stage_x(const u32* ent, u32 ne, const float* pool, float* xs) {
  constexpr int kPer = (S * M::kCols + kThreads - 1) / kThreads;
  constexpr int kGroup = kPer < kStageLoads ? kPer : kStageLoads; // loads in flight per thread (registers)
  const u32 total = ne * M::kCols;
#pragma unroll
  for (int k0 = 0; k0 < kPer; k0 += kGroup) {
    float v[kGroup];
#pragma unroll
    for (int k = 0; k < kGroup; ++k) {
      const u32 i = threadIdx.x + (k0 + k) * kThreads;
      const u32 e = i / M::kCols;
      v[k] = k0 + k < kPer && i < total ? pool[ent[EW * e + XI] + (i - e * M::kCols)] : 0.f;
    }
#pragma unroll
    for (int k = 0; k < kGroup; ++k) {
      const u32 i = threadIdx.x + (k0 + k) * kThreads;
      if (k0 + k < kPer && i < total) xs[i] = v[k];
    }
  }
}

// The forward product of ne staged entries (y, x, b) for the warp's rows: x from shared memory, the biases of all
// entries loaded up front so their latency overlaps the products. Unrolled over entries so bias[] stays in registers.
template <class M, int SC>
__device__ __forceinline__ void mv_forward_staged(const float (&w)[kRpw][SC], int row0, const u32* ent, const float* xs, u32 ne, float* pool, int lane) {
  const int r = row0 + lane;
  const bool store = lane < kRpw && r < M::kRows;
  float bias[M::kStage];
#pragma unroll
  for (int e = 0; e < M::kStage; ++e) {
    const u32 bo = ent[3 * e + 2];
    bias[e] = (store && (u32)e < ne && bo != kNone) ? pool[bo + r] : 0.f;
  }
#pragma unroll
  for (int e = 0; e < M::kStage; ++e) {
    if ((u32)e >= ne) break;
    const float* x = xs + e * M::kCols;
    float acc[kRpw];
#pragma unroll
    for (int q = 0; q < kRpw; ++q) acc[q] = 0.f;
#pragma unroll
    for (int i = 0; i < M::kChunks; ++i) {
      const float xv = has_col<M>(lane, i) ? x[lane + 32 * i] : 0.f;
#pragma unroll
      for (int q = 0; q < kRpw; ++q) acc[q] = fmaf(w[q][i], xv, acc[q]);
    }
    float mine = 0.f;
#pragma unroll
    for (int q = 0; q < kRpw; ++q) {
      const float s = warp_sum(acc[q]);
      mine = lane == q ? s : mine;
    }
    if (store) pool[ent[3 * e] + r] = bias[e] + mine;
  }
}

// ȳ rows [row0, row0 + kRowsPerPartition) of ne staged entries into gy (entry e at e * kRowsPerPartition); zeros
// for padding rows and for a slot this CTA does not hold.
template <class M>
__device__ __forceinline__ void stage_ybar(const u32* ent, u32 ne, bool held, int row0, const float* pool, float* gy) {
#pragma unroll 1
  for (u32 t = threadIdx.x; t < ne * kRowsPerPartition; t += kThreads) {
    const u32 e = t / kRowsPerPartition;
    const int row = row0 + (int)(t - e * kRowsPerPartition);
    gy[t] = held && row < M::kRows ? pool[ent[4 * e] + row] : 0.f;
  }
}

template <class M> __device__ __forceinline__ void read_ybar(float (&gy)[kRpw], const float* staged, int warp) {
#pragma unroll
  for (int q = 0; q < kRpw; ++q) gy[q] = staged[warp * kRpw + q];
}

// reduce_partials with two alternating buffers: one __syncthreads per column block instead of two (a buffer is
// written again only after the next barrier, by which time every thread has read it).
template <class M, int B>
__device__ __forceinline__ void reduce_partials_db(const float (&p)[${BLOCK_CHUNKS}], float* red, int& parity, float* xbar, int lane, int warp) {
  constexpr int kBlockChunks = M::kChunks - ${BLOCK_CHUNKS} * B < ${BLOCK_CHUNKS} ? M::kChunks - ${BLOCK_CHUNKS} * B : ${BLOCK_CHUNKS};
  float* buf = red + parity * (kWarps * ${REDUCE_BLOCK_COLS});
  parity ^= 1;
#pragma unroll
  for (int t = 0; t < kBlockChunks; ++t) buf[warp * ${REDUCE_BLOCK_COLS} + t * 32 + lane] = p[t];
  __syncthreads();
  const int col = threadIdx.x;
  const int c = ${REDUCE_BLOCK_COLS} * B + col;
  if (col < kBlockChunks * 32 && c < M::kCols) {
    float s = 0.f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) s += buf[v * ${REDUCE_BLOCK_COLS} + col];
    if (s != 0.f) atomicAdd(xbar + c, s);
  }
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
  static constexpr int kStage = ${forwardStage(m, plan)}, kStageBwd = ${backwardStage(m, plan)}; // entries staged per round
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

// The staged routines address entry words by position; the format fixes them (script.ts), this keeps them honest.
function checkEntryLayout(): void {
  const fwd = LIST_ENTRIES[Opcode.MatVec]!.join(",");
  const bwd = LIST_ENTRIES[Opcode.MatVecBwd]!.join(",");
  if (fwd !== "y,x,b" || bwd !== "ybar,x,xbar,bbar") {
    throw new Error(
      `kernel template: staged matvec routines expect entries (y,x,b) and (ybar,x,xbar,bbar); got (${fwd}) and (${bwd})`,
    );
  }
}

/** Rounds of up to kStage entries: the CTA stages the entries and their x vectors, then every warp multiplies. */
function matVecStaged(m: MatrixPlan, plan: VppsPlan): string {
  const M = matrixStruct(m);
  const calls = m.slots.map(
    (s) =>
      `            if (holds<${M}>(${s})) mv_forward_staged<${M}>(${w(s)}, first_row<${M}>(${s}, warp), s_ent, s_stage, ne, pool, lane);`,
  );
  return `        case ${m.index}: { // ${m.name}: ${forwardStage(m, plan)} entries staged per round
          constexpr u32 S = ${M}::kStage;
#pragma unroll 1
          for (u32 e0 = 0; e0 < count; e0 += S) {
            const u32 ne = count - e0 < S ? count - e0 : S;
            if (threadIdx.x < 3 * ne) s_ent[threadIdx.x] = list[3 * e0 + threadIdx.x];
            __syncthreads();
            stage_x<${M}, 3, 1, S>(s_ent, ne, pool, s_stage);
            __syncthreads();
${calls.join("\n")}
            if (e0 + S < count) __syncthreads(); // the next round overwrites s_ent and s_stage
          }
        } break;`;
}

function matVecCase(plan: VppsPlan): string {
  checkEntryLayout();
  const o = Opcode.MatVec;
  const at = (name: string) => LIST_ENTRIES[o]!.indexOf(name);
  const cases = plan.matrices.map((m) => {
    if (forwardStage(m, plan) > 0) return matVecStaged(m, plan);
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

/** matvec.bwd in staged rounds: entries, x vectors and the CTA's ȳ rows in shared memory, then entry by entry. */
function matVecBwdStaged(m: MatrixPlan, plan: VppsPlan): string {
  const M = matrixStruct(m);
  const registers = m.gradients === "registers";
  const stageYbar = m.slots.map(
    (s, j) =>
      `            stage_ybar<${M}>(s_ent, ne, holds<${M}>(${s}), first_row<${M}>(${s}, 0), pool, s_gy + ${j} * S * kRowsPerPartition);`,
  );
  const perSlot = m.slots.map(
    (s, j) => `              const bool h${s} = holds<${M}>(${s});
              float gy${s}[kRpw];
              read_ybar<${M}>(gy${s}, s_gy + (${j} * S + e) * kRowsPerPartition, warp);
              if (h${s}) {
                bias_grad<${M}>(gy${s}, first_row<${M}>(${s}, warp), bbar, lane);${registers ? `\n                mv_outer<${M}>(${g(s)}, gy${s}, x, lane);` : ""}
              }`,
  );
  const blocks = Math.ceil(m.chunks / BLOCK_CHUNKS);
  const reduce: string[] = [];
  for (let b = 0; b < blocks; b++) {
    reduce.push(`                { // columns ${b * REDUCE_BLOCK_COLS}..${Math.min(m.cols, (b + 1) * REDUCE_BLOCK_COLS) - 1}
                  float p[${BLOCK_CHUNKS}] = {${new Array(BLOCK_CHUNKS).fill("0.f").join(", ")}};`);
    for (const s of m.slots) reduce.push(`                  mv_partial<${M}, ${b}>(${w(s)}, gy${s}, p);`);
    reduce.push(`                  reduce_partials_db<${M}, ${b}>(p, s_reduce, parity, xbar, lane, warp);
                }`);
  }
  return `        case ${m.index}: { // ${m.name}: gradient in ${m.gradients}; ${backwardStage(m, plan)} entries staged per round
          constexpr u32 S = ${M}::kStageBwd;
          int parity = 0;
#pragma unroll 1
          for (u32 e0 = 0; e0 < count; e0 += S) {
            const u32 ne = count - e0 < S ? count - e0 : S;
            if (threadIdx.x < 4 * ne) s_ent[threadIdx.x] = list[4 * e0 + threadIdx.x];
            __syncthreads();${registers ? `\n            stage_x<${M}, 4, 1, S>(s_ent, ne, pool, s_stage);` : ""}
${stageYbar.join("\n")}
            __syncthreads();
#pragma unroll 1
            for (u32 e = 0; e < ne; ++e) {
              const u32 xo = s_ent[4 * e + 2], bo = s_ent[4 * e + 3];
              float* xbar = xo == kNone ? nullptr : pool + xo;
              float* bbar = bo == kNone ? nullptr : pool + bo;
              const float* x = s_stage + e * ${M}::kCols;
              (void)x;
${perSlot.join("\n")}
              if (xbar) { // uniform across the CTA: every thread reaches the reduction's __syncthreads
${reduce.join("\n")}
              }
            }
            if (e0 + S < count) __syncthreads(); // the next round overwrites the staged entries
          }
        } break;`;
}

function matVecBwdMatrix(m: MatrixPlan, plan: VppsPlan): string {
  if (backwardStage(m, plan) > 0) return matVecBwdStaged(m, plan);
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
${plan.matrices.map((m) => matVecBwdMatrix(m, plan)).join("\n")}
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
