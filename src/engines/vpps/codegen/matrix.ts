/**
 * The specialised part of the VPPS kernel: register arrays per slot and, per matrix, fully unrolled calls of the
 * matrix routines with compile-time slot, shape and partition constants (paper §III-A2, Fig. 5).
 *
 * Every register array is indexed only by compile-time constants after unrolling, so ptxas keeps it in registers;
 * test/vpps-codegen.test.ts checks that no plan spills. Which partition a CTA holds in a slot is a runtime fact
 * (`blockIdx.x`), but it only selects rows, never registers.
 */

import type { HeldMatrix, MatrixPlan, VppsPlan } from "../plan/plan.js";
import { WARPS_PER_CTA } from "../plan/plan.js";
import { LIST_ENTRIES, OPCODES, Opcode, TILE } from "../script/format.js";
import { opcodeConstant } from "./interpreter.js";

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

/**
 * Whether the interpreter polls a run of consecutive waits at once (a lane each; kernel-static.ts): the lanes' poll
 * state costs registers that the tightest plans (hidden 512) do not have (measured: a spill), so they poll one
 * wait at a time.
 */
export function groupWaits(plan: VppsPlan): boolean {
  return stagingHeadroom(plan) >= 24;
}

/**
 * Whether lstm.bwd has its own loop for two children with every load issued first: measured, it spilled the
 * tightest plan (hidden 512, rpw 1), so it needs the same headroom as grouped waits. (lstm's forward one needs
 * fewer registers and is always there.)
 */
export function binaryCellBackward(plan: VppsPlan): boolean {
  return stagingHeadroom(plan) >= 24;
}

/** x loads in flight per thread while staging (registers), by headroom. */
export function stageLoads(plan: VppsPlan): number {
  return stagingHeadroom(plan) >= 24 ? 8 : 4;
}

/**
 * How a plan's tile routines trade registers for speed, by the registers the plan leaves free:
 * - `passes`: passes of the product over each staged chunk, 1 (the thread's 16 accumulators at once) or 2 (8 at a
 *   time, twice the shared-memory reads), where one pass made ptxas spill (plans too tight to stage);
 * - `fast`: unroll the product loop (its shared loads overlap the FMAs) and load the next chunk while multiplying
 *   this one (16 more registers), where there is room.
 * test/vpps-codegen.test.ts compiles every Tree-LSTM plan, which covers all three kinds.
 */
export function tileMode(plan: VppsPlan): { readonly passes: 1 | 2; readonly fast: boolean } {
  const headroom = stagingHeadroom(plan);
  return { passes: headroom >= 24 ? 1 : 2, fast: headroom >= 48 };
}

/** Entries a matvec of `m` stages per round (0: too wide to stage; the unstaged path walks entries per warp). */
export function forwardStage(m: HeldMatrix, plan: VppsPlan): number {
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

// A product's row result: stored (matvec), or added atomically (matvec.acc, where other products add too).
template <bool kAcc> __device__ __forceinline__ void store_row(float* y, float v) {
  if (!kAcc) *y = v;
  else if (v != 0.f) atomicAdd(y, v);
}

// y[r] = b[r] + W[r].x (kAcc: y[r] += b[r] + W[r].x, atomically): each lane multiplies its columns, then a shuffle
// reduction per row.
template <class M, bool kAcc, int SC>
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
  if (lane < kRpw && r < M::kRows) store_row<kAcc>(y + r, (b ? b[r] : 0.f) + mine);
}

// threadIdx.x through a volatile asm, for index arithmetic inside the interpreter loop: from a plain threadIdx.x the
// compiler hoists the per-thread indices derived from it out of the loop and holds them in registers for the whole
// launch (measured: in stage_x that cost 20 to 30 registers of the plans that stage; in the tile routines it made
// the tightest plans spill).
__device__ __forceinline__ u32 opaque_tid() {
  u32 t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
}

// Rows [row0, row0 + kRowsPerPartition) of a transposed copy T = Wᵀ, whose element (r, c) is W[c][r] = master[kMaster
// + c * kSrcCols + r]. Read lane by lane that is one 4-byte sector per load; instead the CTA copies, per block of
// kBlock columns of T, the kRowsPerPartition consecutive floats of each of W's rows c (contiguous in the master copy)
// into shared memory (rows padded to an odd stride: no bank conflicts), and each thread then takes its registers.
// Runs before the interpreter loop, in buf (s_stage); uniform per CTA (holds<T> depends on blockIdx.x only).
template <class T, int SC>
__device__ __forceinline__ void load_rows_t(float (&w)[kRpw][SC], int row0, const float* master, float* buf, int warp, int lane) {
  static_assert(T::kChunks <= SC, "slot narrower than matrix");
  constexpr int kPad = kRowsPerPartition + 1;
  constexpr int kBlock = (${STAGE_FLOATS} / kPad) / 32 * 32; // columns of T per round: whole register chunks
  static_assert(kBlock >= 32, "a transposed copy's load block holds at least one chunk");
  const int first = row0 - warp * kRpw; // the CTA's first row of T
#pragma unroll
  for (int b = 0; b * kBlock < T::kCols; ++b) {
    __syncthreads();
    // a group of loads in flight before the group's shared stores (a load-store loop waited for each load:
    // ~20 µs per copy on the H100); groups of kStageLoads, since load.t runs inside the interpreter loop, where
    // every slot's registers are live
    constexpr int kPer = (kRowsPerPartition * kBlock + kThreads - 1) / kThreads;
    constexpr int kGroup = kPer < kStageLoads ? kPer : kStageLoads;
#pragma unroll 1
    for (int k0 = 0; k0 < kPer; k0 += kGroup) {
      float v[kGroup];
#pragma unroll
      for (int k = 0; k < kGroup; ++k) {
        const int t = (int)opaque_tid() + (k0 + k) * kThreads;
        const int cc = t / kRowsPerPartition, rr = t - cc * kRowsPerPartition;
        const int c = b * kBlock + cc, r = first + rr;
        v[k] = t < kRowsPerPartition * kBlock && c < T::kCols && r < T::kRows
                   ? master[T::kMaster + (long long)c * T::kSrcCols + r]
                   : 0.f;
      }
#pragma unroll
      for (int k = 0; k < kGroup; ++k) {
        const int t = (int)opaque_tid() + (k0 + k) * kThreads;
        const int cc = t / kRowsPerPartition, rr = t - cc * kRowsPerPartition;
        if (t < kRowsPerPartition * kBlock) buf[cc * kPad + rr] = v[k];
      }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < T::kChunks; ++i) {
      if (32 * i < b * kBlock || 32 * i >= (b + 1) * kBlock) continue;
#pragma unroll
      for (int q = 0; q < kRpw; ++q) w[q][i] = buf[(32 * i + lane - b * kBlock) * kPad + warp * kRpw + q];
    }
  }
  __syncthreads(); // the interpreter reuses buf
}


// Copies the x operand (word XI of EW-word entries) of ne <= M::kStage staged entries into xs, entry e at
// e * kCols. All of a thread's loads are issued before its shared stores, so the CTA has them all in flight.
template <class M, int EW, int XI, int S>
__device__ __forceinline__ void stage_x(const u32* ent, u32 ne, const float* pool, float* xs) {
  constexpr int kPer = (S * M::kCols + kThreads - 1) / kThreads;
  constexpr int kGroup = kPer < kStageLoads ? kPer : kStageLoads; // loads in flight per thread (registers)
  const u32 total = ne * M::kCols;
  const u32 tid = opaque_tid();
#pragma unroll
  for (int k0 = 0; k0 < kPer; k0 += kGroup) {
    float v[kGroup];
#pragma unroll
    for (int k = 0; k < kGroup; ++k) {
      const u32 i = tid + (k0 + k) * kThreads;
      const u32 e = i / M::kCols;
      v[k] = k0 + k < kPer && i < total ? pool[ent[EW * e + XI] + (i - e * M::kCols)] : 0.f;
    }
#pragma unroll
    for (int k = 0; k < kGroup; ++k) {
      const u32 i = tid + (k0 + k) * kThreads;
      if (k0 + k < kPer && i < total) xs[i] = v[k];
    }
  }
}

// The forward product of ne staged entries (y, x, b) for the warp's rows: x from shared memory, the biases of all
// entries loaded up front so their latency overlaps the products. Unrolled over entries so bias[] stays in registers.
template <class M, bool kAcc, int SC>
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
    if (store) store_row<kAcc>(pool + ent[3 * e] + r, bias[e] + mine);
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

// The inverse of export_rows: Wbar += the gradient buffer's rows (what tile.wbar accumulated there), so that the
// register gradient is the whole gradient before clipping, update and export.
template <class M, int GC>
__device__ __forceinline__ void import_rows(float (&g)[kRpw][GC], int row0, const float* grads, int lane) {
#pragma unroll
  for (int q = 0; q < kRpw; ++q) {
    if (row0 + q >= M::kRows) continue;
    const float* row = grads + M::kMaster + (long long)(row0 + q) * M::kCols + lane;
#pragma unroll
    for (int i = 0; i < M::kChunks; ++i)
      if (has_col<M>(lane, i)) g[q][i] += row[32 * i];
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

/** Outputs per side of a tile block: 16 × 16 threads with 4 × 4 outputs each. */
const TILE_DIM = 64;
/** K of one staged chunk of a tile product. */
const TILE_K = 32;
/** Accumulators per thread (its 4 × 4 outputs); half of them sit behind each operand's staged chunk. */
const TILE_ACC = 16;
/** Words of the CUDA struct TileArgs, which a tile instruction keeps in s_ent. */
const TILE_ARGS_WORDS = 8;

/** Position of word `name` in an entry of list instruction `op` (script.ts fixes the layout). */
function entryWord(op: Opcode, name: string): number {
  const k = LIST_ENTRIES[op]?.indexOf(name) ?? -1;
  if (k < 0) throw new Error(`kernel template: ${OPCODES[op]!.mnemonic} entries have no word '${name}'`);
  return k;
}

/**
 * The tile routines fix the tile's geometry (16 × 16 threads of 4 × 4 outputs) and borrow the shared buffers of the
 * list instructions: entry words in s_gy, one operand's chunk and half of the accumulators in each of s_stage and
 * s_reduce.
 */
function checkTileShape(): void {
  const { entries, rows, cols, wbarEntries } = TILE;
  if (entries !== TILE_DIM || rows !== TILE_DIM || cols !== TILE_DIM) {
    throw new Error(
      `kernel template: tile routines compute ${TILE_DIM} x ${TILE_DIM} blocks; TILE has entries ${entries}, rows ${rows}, cols ${cols}`,
    );
  }
  const words = Math.max(...[Opcode.Tile, Opcode.TileXbar, Opcode.TileWbar].map((o) => LIST_ENTRIES[o]!.length));
  if (words * Math.max(entries, wbarEntries) > STAGE_YBAR_FLOATS) {
    throw new Error(
      `kernel template: ${wbarEntries} tile entries of ${words} words do not fit the ${STAGE_YBAR_FLOATS}-word s_gy`,
    );
  }
  if (TILE_ARGS_WORDS > STAGE_ENTRY_WORDS) {
    throw new Error(`kernel template: TileArgs (${TILE_ARGS_WORDS} words) exceeds s_ent (${STAGE_ENTRY_WORDS} words)`);
  }
  const threads = 32 * WARPS_PER_CTA;
  const need = TILE_K * TILE_DIM + (TILE_ACC / 2) * threads;
  if (need > Math.min(STAGE_FLOATS, 2 * WARPS_PER_CTA * REDUCE_BLOCK_COLS)) {
    throw new Error(
      `kernel template: a tile chunk and half the accumulators (${need} floats) exceed s_stage or s_reduce`,
    );
  }
}

/**
 * CUDA of the tile instructions (tile, tile.xbar, tile.wbar): 64 × 64 blocks of the products of long lists,
 * computed from the master copy of the weights by any CTA (the scheduler places them), so that a list of hundreds
 * of entries is a few dense tiles instead of hundreds of latency-bound rounds on the holders of the matrix. Not
 * specialised per matrix: the routines take the matrix's shape at run time (TileArgs), so the interpreter holds one
 * copy of each instead of one per matrix.
 */
export function tileRoutines(plan: VppsPlan): string {
  checkTileShape();
  const mode = tileMode(plan);
  const F = (name: string) => entryWord(Opcode.Tile, name);
  const X = (name: string) => entryWord(Opcode.TileXbar, name);
  const G = (name: string) => entryWord(Opcode.TileWbar, name);
  const fw = LIST_ENTRIES[Opcode.Tile]!.length;
  const xw = LIST_ENTRIES[Opcode.TileXbar]!.length;
  const gw = LIST_ENTRIES[Opcode.TileWbar]!.length;
  return `
// ---- tile instructions: dense 64 x 64 blocks of long lists' products, from the master copy ---------------------
//
// A tile is a small GEMM C[i][j] = sum_k A[i][k] B[k][j] with 64 x 64 outputs: thread t = (tx, ty) = (t % 16, t / 16)
// owns the 4 x 4 outputs i in [4ty, 4ty + 4), j in [4tx, 4tx + 4). K runs in chunks of kTileK staged in shared memory
// with BOTH operands k-major (S[k][i], S[k][j]): a thread reads its 4 values of A and of B for one k as two float4
// loads (3 shared wavefronts per warp per 16 FMAs, against 8 with scalar reads), so the products are bound by the
// FMAs, not by shared memory.
//
// Registers. The interpreter keeps the weights in registers across its whole loop; the tightest plans leave the
// interpreter a few dozen (255 - 176 at H = 512), and the first versions of these routines spilled there. Hence:
// - the accumulators live in shared memory between chunks, in registers only while a chunk's products run, so
//   loading a chunk holds none;
// - the instruction's operands and the matrix's shape live in shared memory too (TileArgs, in s_ent) and are read
//   again after each barrier, so that only the chunk counter is carried in a register across the chunk loop;
// - each routine reads the thread index itself through opaque_tid(), so that the few dozen shared and global
//   addresses derived from it are computed where they are used rather than hoisted out of the chunk loop and the
//   interpreter loop and held for the whole launch (measured: the difference between spilling and not).
// Shared memory. One operand's chunk (kTileChunk floats) and half of the accumulators (8 x kThreads) fill a
// 4096-float buffer exactly: A and accumulators 0-7 in s_stage, B and 8-15 in s_reduce; the entry words in s_gy.
// Chunk rows have no padding (there is no room); tile_at() swizzles instead.
// The master copy is not written before the end-of-batch update (after a grid barrier), so any CTA may read it.
constexpr int kTileEntries = ${TILE.entries}, kTileRows = ${TILE.rows}, kTileCols = ${TILE.cols}; // per tile (script.ts TILE)
constexpr int kTileWbarEntries = ${TILE.wbarEntries};  // entries of one tile.wbar (its K)
constexpr int kTileXbarRows = ${TILE.xbarRows};     // rows one tile.xbar sums over (its K)
constexpr int kTileDim = ${TILE_DIM};          // outputs per side of a tile block
constexpr int kTileK = ${TILE_K};            // K of one staged chunk
constexpr int kTileChunk = kTileK * kTileDim;  // floats of one operand's staged chunk
constexpr int kTilePer = kTileChunk / kThreads; // elements of a chunk that one thread loads, per operand
constexpr int kTilePasses = ${mode.passes};       // passes of the product over a chunk (tileMode: by register headroom)
constexpr bool kTileFast = ${mode.fast};     // unrolled products, next chunk's loads in flight during them (tileMode)
static_assert(kThreads == 256 && kTileDim == 64 && kTileK % 8 == 0, "tile geometry: 16 x 16 threads of 4 x 4 outputs");
static_assert(kTileEntries == kTileDim && kTileRows == kTileDim && kTileCols == kTileDim, "tiles are square");

// Position of element (k, i) in a staged chunk: row k of 64 floats, its 4-float groups permuted by XOR with k % 8.
// A thread's float4 (i = 4x .. 4x + 3) stays contiguous and aligned; the along-k loader's stores of 8 consecutive k
// of one i fall into 8 different groups, hence different banks (without the swizzle: 8-way conflicts).
__device__ __forceinline__ int tile_at(int k, int i) {
  return k * kTileDim + (i ^ ((k & 7) << 2));
}

// The operands of the running tile instruction and the shape of its matrix, in shared memory (see "Registers").
// offset + rows * cols < 2^32 (checked by the generator): 32-bit offsets into the master copy and gradient buffer.
struct TileArgs {
  u32 offset, rows, cols; // matrix n
  u32 count, r0, c0;      // entries, first row, first column (0 where the opcode has no such operand)
  u32 bias, mixed;        // tile.wbar's bias gradient: the bbar all entries share (NONE: none), or mixed = 1
};
static_assert(sizeof(TileArgs) == 4 * ${TILE_ARGS_WORDS}, "TileArgs: the generator checks that it fits s_ent");

// This thread's accumulator q = 4 ii + jj: 0-7 behind A's chunk, 8-15 behind B's; consecutive threads, consecutive
// banks.
__device__ __forceinline__ float* tile_acc(float* sa, float* sb, int q, u32 tid) {
  return (q < 8 ? sa + q * kThreads : sb + (q - 8) * kThreads) + kTileChunk + tid;
}
// Accumulator row ii (q = 4 ii .. 4 ii + 3, kThreads apart) of this thread.
__device__ __forceinline__ float* tile_acc_row(float* sa, float* sb, int ii, u32 tid) {
  return (ii < 2 ? sa : sb) + kTileChunk + (ii & 1) * 4 * kThreads + tid;
}

template <class M> __device__ __forceinline__ void tile_matrix(u32& offset, u32& rows, u32& cols) {
  offset = (u32)M::kMaster;
  rows = (u32)M::kRows;
  cols = (u32)M::kCols;
}

// Sources of an operand's vectors: vector idx starts at float offset src(idx) of src.base, or is absent (NONE:
// zeros). 32-bit offsets rather than pointers: a thread has 16 loads in flight, and 64-bit addresses computed ahead
// of them cost twice the registers (measured: the difference between spilling and not in the tightest plans).
// Entry vectors: the pool vector named by word \`word\` of staged entry idx, from element \`offset\` on; absent past
// \`count\`, or where word \`skip\` (if >= 0) is NONE.
struct TileEntryVectors {
  const float* base; // the pool
  const u32* ent;
  int words, word, skip;
  u32 count, offset;
  __device__ __forceinline__ u32 operator()(u32 idx) const {
    if (idx >= count) return kNone;
    const u32* e = ent + words * idx;
    if (skip >= 0 && e[skip] == kNone) return kNone;
    return e[word] + offset;
  }
};
// Rows of the row-major matrix at float offset \`offset\` of base, \`cols\` wide: row row0 + idx from column col0 on;
// absent from row \`end\` on (the matrix's last row, or the end of the rows a tile covers).
struct TileMatrixRows {
  const float* base; // the master copy
  u32 offset, end, cols, row0, col0;
  __device__ __forceinline__ u32 operator()(u32 idx) const {
    const u32 r = row0 + idx;
    return r < end ? offset + r * cols + col0 : kNone;
  }
};

// Loaders of one operand's chunk [k0, k0 + kTileK): fetch() issues thread tid's kTilePer global loads into
// registers (all in flight together), put() stores them into the staged chunk.
//
// Vectors along k (vector i of the source is column i of the chunk): S[k][i] = src(i)[k0 + k], zero for k0 + k >= K.
// Lane l reads k = 8q + l % 8 of vector i = 32h + 4 warp + l / 8: 8 lanes read one 32-byte sector, and a warp's
// stores (8 k x 4 i) land in 32 different banks thanks to tile_at's swizzle.
template <class Src> struct TileAlongK {
  Src src;
  u32 K;
  __device__ __forceinline__ void fetch(float (&v)[kTilePer], u32 k0, u32 tid) const {
    const int lane = tid & 31, warp = tid >> 5;
#pragma unroll
    for (int h = 0; h < kTilePer / 4; ++h) {
      // one pointer per vector: its 4 loads are then immediate offsets from it
      const u32 o = src(32 * h + 4 * warp + (lane >> 3));
      const float* p = src.base + (o != kNone ? o : 0u) + k0 + (lane & 7);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const u32 k = k0 + 8 * q + (lane & 7);
        v[4 * h + q] = o != kNone && k < K ? p[8 * q] : 0.f;
      }
    }
  }
  __device__ __forceinline__ void put(const float (&v)[kTilePer], float* s, u32 tid) const {
    const int lane = tid & 31, warp = tid >> 5;
#pragma unroll
    for (int h = 0; h < kTilePer / 4; ++h)
#pragma unroll
      for (int q = 0; q < 4; ++q) s[tile_at(8 * q + (lane & 7), 32 * h + 4 * warp + (lane >> 3))] = v[4 * h + q];
  }
};
// Vectors along i (vector k of the source is row k of the chunk): S[k][i] = src(k0 + k)[i], zero for i >= n.
// Thread t reads i = t % 64 of k = t / 64 + 4m: a warp reads 128 consecutive bytes and stores into 32 banks.
template <class Src> struct TileAlongI {
  Src src;
  u32 n;
  __device__ __forceinline__ void fetch(float (&v)[kTilePer], u32 k0, u32 tid) const {
    const u32 i = tid % kTileDim, kb = tid / kTileDim;
#pragma unroll
    for (int m = 0; m < kTilePer; ++m) {
      const u32 o = src(k0 + kb + 4 * m);
      v[m] = o != kNone && i < n ? src.base[o + i] : 0.f;
    }
  }
  __device__ __forceinline__ void put(const float (&v)[kTilePer], float* s, u32 tid) const {
    const int i = tid % kTileDim, kb = tid / kTileDim;
#pragma unroll
    for (int m = 0; m < kTilePer; ++m) s[tile_at(kb + 4 * m, i)] = v[m];
  }
};

// A thread's values of one operand for one k: 4 (a float4) or 2 (a float2) consecutive floats of a staged row.
__device__ __forceinline__ void tile_frag(const float* p, float (&v)[4]) {
  const float4 t = *reinterpret_cast<const float4*>(p);
  v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
}
__device__ __forceinline__ void tile_frag(const float* p, float (&v)[2]) {
  const float2 t = *reinterpret_cast<const float2*>(p);
  v[0] = t.x, v[1] = t.y;
}

// The accumulators += this chunk's products A[k][4ty + ii] * B[k][4tx + jj] over its kTileK values of k: from shared
// memory into registers and back, rows ii in kTilePasses passes of kR (fewer registers, more shared reads). A warp's
// A reads are two addresses (a broadcast), its B reads 16 float4s of one row.
// k runs as k = 8 kk + j with j outer: the swizzle of tile_at depends on j only, so each j costs one address per
// operand and the kk steps are immediate offsets (the order of a sum's terms does not matter here). The kk loop is
// unrolled only in fast mode: unrolling lets the compiler load ahead, which takes registers (tileMode).
__device__ __forceinline__ void tile_mma(float* sa, float* sb, u32 tid) {
  constexpr int kR = 4 / kTilePasses;
  static_assert(kTilePasses == 1 || kTilePasses == 2, "kTilePasses: 1 or 2");
  const int tx = tid & 15, ty = tid >> 4;
#pragma unroll 1
  for (int pass = 0; pass < kTilePasses; ++pass) {
    const int ii0 = kR * pass; // this pass's rows: ii in [ii0, ii0 + kR)
    float acc[kR][4];
    float* row[kR];
#pragma unroll
    for (int ii = 0; ii < kR; ++ii) {
      row[ii] = tile_acc_row(sa, sb, ii0 + ii, tid);
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) acc[ii][jj] = row[ii][jj * kThreads];
    }
#pragma unroll 1
    for (int j = 0; j < 8; ++j) {
      const float* pa = sa + tile_at(j, 4 * ty + ii0);
      const float* pb = sb + tile_at(j, 4 * tx);
#pragma unroll(kTileFast ? kTileK / 8 : 1)
      for (int kk = 0; kk < kTileK / 8; ++kk) {
        float a[kR], b[4];
        tile_frag(pa + 8 * kk * kTileDim, a);
        tile_frag(pb + 8 * kk * kTileDim, b);
#pragma unroll
        for (int ii = 0; ii < kR; ++ii)
#pragma unroll
          for (int jj = 0; jj < 4; ++jj) acc[ii][jj] = fmaf(a[ii], b[jj], acc[ii][jj]);
      }
    }
#pragma unroll
    for (int ii = 0; ii < kR; ++ii)
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) row[ii][jj * kThreads] = acc[ii][jj];
  }
}

// This thread's accumulators = its 4 x 4 block of A B over op.K() (zero: zeros), read back with tile_acc(). Op builds
// the operands' loaders (op.a(), op.b()) from the TileArgs in shared memory, once per chunk, and op.hook() sees each
// staged chunk before its products. Per chunk: both operands' loads in flight together, a barrier, the products, a
// barrier; in fast mode the next chunk's loads are issued before the products, so their latency overlaps them.
// K is CTA-uniform: every thread reaches every __syncthreads.
template <class Op> __device__ __forceinline__ void tile_product(Op& op, float* sa, float* sb) {
  float va[kTilePer], vb[kTilePer];
  {
    const u32 tid = opaque_tid();
#pragma unroll
    for (int q = 0; q < 16; ++q) *tile_acc(sa, sb, q, tid) = 0.f;
    if (kTileFast) {
      op.a().fetch(va, 0u, tid);
      op.b().fetch(vb, 0u, tid);
    }
  }
#pragma unroll 1
  for (u32 k0 = 0; k0 < op.K(); k0 += kTileK) {
    {
      const u32 tid = opaque_tid();
      if (!kTileFast) {
        op.a().fetch(va, k0, tid);
        op.b().fetch(vb, k0, tid);
      }
      op.a().put(va, sa, tid);
      op.b().put(vb, sb, tid);
    }
    __syncthreads();
    if (kTileFast && k0 + kTileK < op.K()) {
      const u32 tid = opaque_tid();
      op.a().fetch(va, k0 + kTileK, tid);
      op.b().fetch(vb, k0 + kTileK, tid);
    }
    op.hook(sa, k0);
    tile_mma(sa, sb, opaque_tid());
    __syncthreads(); // the next chunk overwrites sa and sb
  }
}

// The tile's list entries (words = words per entry x count) into s_ent; the barrier makes them, and the TileArgs
// that thread 0 wrote before, visible to all threads.
__device__ __forceinline__ void tile_stage_entries(const u32* list, u32 words, u32* s_ent, u32 tid) {
#pragma unroll 1
  for (u32 t = tid; t < words; t += kThreads) s_ent[t] = list[t];
  __syncthreads();
}

// tile: for entries e < count (i) and rows r = r0 + j < rows: y_e[r] = (b_e ? b_e[r] : 0) + W[r] . x_e
// (A[e][k] = x_e[k], B[k][j] = W[r0 + j][k]; K = cols). Plain stores: each y row of the tile is written once.
struct TileForward {
  const TileArgs& g;
  const u32* ent;
  const float* pool;
  const float* master;
  __device__ __forceinline__ u32 K() const { return g.cols; }
  __device__ __forceinline__ TileAlongK<TileEntryVectors> a() const { return {{pool, ent, ${fw}, ${F("x")}, -1, g.count, 0u}, g.cols}; }
  __device__ __forceinline__ TileAlongK<TileMatrixRows> b() const { return {{master, g.offset, g.rows, g.cols, g.r0, 0u}, g.cols}; }
  __device__ __forceinline__ void hook(const float*, u32) const {}
};
__device__ __forceinline__ void tile_forward(const TileArgs& g, const u32* ent, float* pool, const float* master, float* sa, float* sb) {
  TileForward op{g, ent, pool, master};
  tile_product(op, sa, sb);
  const u32 tid = opaque_tid();
  const int tx = tid & 15, ty = tid >> 4;
  const u32 count = g.count, r0 = g.r0, rows = g.rows;
#pragma unroll 1
  for (int ii = 0; ii < 4; ++ii) {
    const u32 e = 4 * ty + ii;
    if (e >= count) continue;
    float* y = pool + ent[${fw} * e + ${F("y")}];
    const u32 bo = ent[${fw} * e + ${F("b")}];
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const u32 r = r0 + 4 * tx + jj;
      if (r < rows) y[r] = (bo != kNone ? (pool + bo)[r] : 0.f) + *tile_acc(sa, sb, 4 * ii + jj, tid);
    }
  }
}

// tile.xbar: for entries e < count (i) whose xbar is not NONE and columns c = c0 + j < cols:
// xbar_e[c] += sum_r W[r][c] ybar_e[r] over the rows r = r0 + k < min(r0 + kTileXbarRows, rows) (A[e][k] =
// ybar_e[r0 + k], B[k][j] = W[r0 + k][c0 + j]; K = that many rows). Atomics: the other row ranges' tiles and other
// instructions (another parent's product, an elementwise backward) add to the same xbar; exact zeros are not added.
struct TileXbar {
  const TileArgs& g;
  const u32* ent;
  const float* pool;
  const float* master;
  __device__ __forceinline__ u32 K() const { // the case checked r0 < rows
    return g.rows - g.r0 < kTileXbarRows ? g.rows - g.r0 : kTileXbarRows;
  }
  __device__ __forceinline__ TileAlongK<TileEntryVectors> a() const {
    return {{pool, ent, ${xw}, ${X("ybar")}, ${X("xbar")}, g.count, g.r0}, K()};
  }
  __device__ __forceinline__ TileAlongI<TileMatrixRows> b() const {
    return {{master, g.offset, g.r0 + K(), g.cols, g.r0, g.c0}, g.c0 < g.cols ? g.cols - g.c0 : 0u};
  }
  __device__ __forceinline__ void hook(const float*, u32) const {}
};
__device__ __forceinline__ void tile_xbar(const TileArgs& g, const u32* ent, float* pool, const float* master, float* sa, float* sb) {
  TileXbar op{g, ent, pool, master};
  tile_product(op, sa, sb);
  const u32 tid = opaque_tid();
  const int tx = tid & 15, ty = tid >> 4;
  const u32 count = g.count, c0 = g.c0, cols = g.cols;
#pragma unroll 1
  for (int ii = 0; ii < 4; ++ii) {
    const u32 e = 4 * ty + ii;
    if (e >= count) continue;
    const u32 xo = ent[${xw} * e + ${X("xbar")}];
    if (xo == kNone) continue;
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const u32 c = c0 + 4 * tx + jj;
      const float v = *tile_acc(sa, sb, 4 * ii + jj, tid);
      if (c < cols && v != 0.f) atomicAdd(pool + xo + c, v);
    }
  }
}

// tile.wbar: for rows r = r0 + i < rows and columns c = c0 + j < cols: G[r][c] += sum_e ybar_e[r] x_e[c] over the
// count entries (A[k][i] = ybar_k[r0 + i], B[k][j] = x_k[c0 + j]; K = count), atomically into the gradient buffer
// (other tiles add to the same block); exact zeros are not added.
// The tile with c0 = 0 also adds the bias gradient bbar_e[r] += ybar_e[r]. Usually all entries share one bbar (the
// matrix's bias): then thread i < 64 sums its row of the staged ybar chunks (hook) and adds the sum once. Entries
// with different bbar (mixed) take a second pass after the product, over ybar in global memory, with one atomicAdd
// per run of consecutive entries with the same bbar, row and quarter of the entries. (Flushing runs inside the
// chunk loop made the tightest plans spill: measured.)
struct TileWbar {
  const TileArgs& g;
  const u32* ent;
  float* pool;
  float sum; // this thread's row of ybar, summed over the chunks seen so far (when g.bias is not NONE)
  __device__ __forceinline__ u32 K() const { return g.count; }
  __device__ __forceinline__ TileAlongI<TileEntryVectors> a() const {
    return {{pool, ent, ${gw}, ${G("ybar")}, -1, g.count, g.r0}, g.r0 < g.rows ? g.rows - g.r0 : 0u};
  }
  __device__ __forceinline__ TileAlongI<TileEntryVectors> b() const {
    return {{pool, ent, ${gw}, ${G("x")}, -1, g.count, g.c0}, g.c0 < g.cols ? g.cols - g.c0 : 0u};
  }
  __device__ __forceinline__ u32 word(u32 e, int w) const {
    return ent[${gw} * e + w];
  }
  // This thread's row i of the tile takes part in the bias gradient: the tile starts at column 0, the row exists.
  __device__ __forceinline__ bool bias_row(u32 i) const {
    return g.c0 == 0u && i < kTileDim && g.r0 + i < g.rows;
  }
  // The staged chunk's ybar of this thread's row; rows of entries past count are zeros.
  __device__ __forceinline__ void hook(const float* sa, u32) {
    const u32 i = opaque_tid();
    if (g.bias == kNone || !bias_row(i)) return;
#pragma unroll 8
    for (int k = 0; k < kTileK; ++k) sum += sa[tile_at(k, i)];
  }
  // Mixed bbar: thread t takes row i = t % 64 of the entries [64q, 64q + 64), q = t / 64, and adds each run's sum.
  __device__ __forceinline__ void mixed_runs(u32 tid) const {
    const u32 i = tid % kTileDim, q = tid / kTileDim, r = g.r0 + i;
    if (g.c0 != 0u || r >= g.rows) return;
    const u32 begin = q * kTileDim, end = g.count < begin + kTileDim ? g.count : begin + kTileDim;
    u32 run = kNone;
    float s = 0.f;
    constexpr int kBlock = 8; // loads in flight
#pragma unroll 1
    for (u32 e0 = begin; e0 < end; e0 += kBlock) {
      float v[kBlock];
      u32 b[kBlock];
#pragma unroll
      for (int k = 0; k < kBlock; ++k) {
        const bool in = e0 + k < end;
        b[k] = in ? word(e0 + k, ${G("bbar")}) : run;
        v[k] = in ? pool[word(e0 + k, ${G("ybar")}) + r] : 0.f;
      }
#pragma unroll
      for (int k = 0; k < kBlock; ++k) {
        if (b[k] != run) {
          if (run != kNone && s != 0.f) atomicAdd(pool + run + r, s);
          run = b[k];
          s = 0.f;
        }
        s += v[k];
      }
    }
    if (run != kNone && s != 0.f) atomicAdd(pool + run + r, s);
  }
};
static_assert(kTileWbarEntries <= kThreads, "tile_wbar checks one entry's bbar per thread");
static_assert(kTileWbarEntries <= 4 * kTileDim, "mixed_runs: 4 quarters of 64 entries");
__device__ __forceinline__ void tile_wbar(TileArgs& g, const u32* ent, float* pool, float* grads, float* sa, float* sb) {
  TileWbar op{g, ent, pool, 0.f};
  if (g.c0 == 0u) { // CTA-uniform: every thread reaches the barrier
    // Do all entries share entry 0's bbar? One entry per thread; published to the routines by tile_product's first
    // barrier (only read when count > 0, i.e. when there is one).
    const u32 tid = opaque_tid(), count = g.count;
    const bool same = tid >= count || op.word(tid, ${G("bbar")}) == op.word(0, ${G("bbar")});
    const bool all = __syncthreads_and(same);
    if (tid == 0) {
      g.bias = all && count > 0u ? op.word(0, ${G("bbar")}) : kNone;
      g.mixed = all ? 0u : 1u;
    }
  }
  tile_product(op, sa, sb);
  const u32 tid = opaque_tid();
  if (g.count > 0u && g.c0 == 0u) {
    if (g.bias != kNone && op.bias_row(tid) && op.sum != 0.f) atomicAdd(pool + g.bias + (g.r0 + tid), op.sum);
    if (g.mixed) op.mixed_runs(tid);
  }
  const int tx = tid & 15, ty = tid >> 4;
  const u32 r0 = g.r0, c0 = g.c0, rows = g.rows, cols = g.cols, offset = g.offset;
#pragma unroll 1
  for (int ii = 0; ii < 4; ++ii) {
    const u32 r = r0 + 4 * ty + ii;
    if (r >= rows) continue;
    float* gr = grads + (offset + r * cols);
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const u32 c = c0 + 4 * tx + jj;
      const float v = *tile_acc(sa, sb, 4 * ii + jj, tid);
      if (c < cols && v != 0.f) atomicAdd(gr + c, v);
    }
  }
}
`;
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

const w = (slot: number) => `w${slot}`;
/** The raw operand word `name` of `op` in the staged instruction. */
const W = (op: Opcode, name: string): string => `ins[${1 + OPCODES[op]!.fixed.indexOf(name)}]`;
const g = (slot: number) => `g${slot}`;

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
  if (fwd !== "y,x,b" || LIST_ENTRIES[Opcode.MatVecAcc]!.join(",") !== fwd || bwd !== "ybar,x,xbar,bbar") {
    throw new Error(
      `kernel template: staged matvec routines expect entries (y,x,b) and (ybar,x,xbar,bbar); got (${fwd}) and (${bwd})`,
    );
  }
}

/** Rounds of up to kStage entries: the CTA stages the entries and their x vectors, then every warp multiplies. */
function matVecStaged(m: HeldMatrix, plan: VppsPlan, acc: boolean): string {
  const M = matrixStruct(m);
  const calls = m.slots.map(
    (s) =>
      `            if (holds<${M}>(${s})) mv_forward_staged<${M}, ${acc}>(${w(s)}, first_row<${M}>(${s}, warp), s_ent, s_stage, ne, pool, lane);`,
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

/**
 * matvec (y = b + W x) over the plan matrices, or matvec.acc (y += b + W x, atomics) over the plan matrices and the
 * transposed copies (the x̄ = Wᵀȳ of short backward lists).
 */
function matVecCase(plan: VppsPlan, o: Opcode.MatVec | Opcode.MatVecAcc): string {
  checkEntryLayout();
  const acc = o === Opcode.MatVecAcc;
  const at = (name: string) => LIST_ENTRIES[o]!.indexOf(name);
  const held: HeldMatrix[] = acc ? [...plan.matrices, ...plan.transposed] : [...plan.matrices];
  const cases = held.map((m) => {
    if (forwardStage(m, plan) > 0) return matVecStaged(m, plan, acc);
    const M = matrixStruct(m);
    const calls = m.slots.map(
      (s) =>
        `            if (holds<${M}>(${s})) mv_forward<${M}, ${acc}>(${w(s)}, first_row<${M}>(${s}, warp), y, x, b, lane);`,
    );
    const body = `            float* y = pool + ent[${at("y")}];
            const float* x = pool + ent[${at("x")}];
            const float* b = ent[${at("b")}] == kNone ? nullptr : pool + ent[${at("b")}];
${calls.join("\n")}`;
    return `        case ${m.index}: // ${m.name}\n          ${entryLoop(o, body)}\n          break;`;
  });
  const what = acc ? "y += b + W x (atomics)" : "y = b + W x";
  return `      case ${opcodeConstant(o)}: { // ${OPCODES[o]!.mnemonic}: n = matrix; entries (y, x, b), ${what}; warps run through them unsynchronised
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
            // Holders start the round at different entries (rotated by CTA), so that they do not all add into the
            // same x̄ vector at the same moment: same-address atomics serialise in the L2.
            const u32 e_first = blockIdx.x % ne;
#pragma unroll 1
            for (u32 ee = 0; ee < ne; ++ee) {
              const u32 e = ee + e_first < ne ? ee + e_first : ee + e_first - ne;
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
      const m = plan.matrices[i]; // undefined: a transposed copy, which has no gradient
      if (m === undefined || m.gradients !== "registers") continue;
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

/**
 * One tile instruction's case: pick matrix n's shape (an unknown n is reported, as by matvec), refuse more entries
 * than a tile takes or a first row or column past the matrix (scheduler bugs, reported as a bad length: status =
 * [code, cta, count, r0, c0, pc]; the check also rules out any wrap-around of r0 + i and c0 + j), put the operands
 * into TileArgs (s_ent), stage the entries (s_gy), then run `routine`. Every branch is on instruction words, which
 * are the same for the whole CTA, so every thread reaches the routines' barriers.
 */
function tileCase(plan: VppsPlan, op: Opcode, limit: string, what: string, routine: string, buffer: string): string {
  const words = LIST_ENTRIES[op]!.length;
  const has = (name: string) => OPCODES[op]!.fixed.includes(name);
  const matrices = plan.matrices.map(
    (m) => `          case ${m.index}: tile_matrix<${matrixStruct(m)}>(offset, rows, cols); break; // ${m.name}`,
  );
  return `      case ${opcodeConstant(op)}: { // ${OPCODES[op]!.mnemonic}: n = matrix; ${what}
        const u32 count = ${W(op, "count")};
        u32 offset = 0u, rows = 0u, cols = 0u;
        switch (n) {
${matrices.join("\n")}
          default: report_error(status, kErrBadMatrix, (int)n, 0, 0, (int)(pc + at)); s_abort = 1;
        }
        if (rows == 0u) break; // unknown matrix, reported
        const u32 r0 = ${has("r0") ? W(op, "r0") : "0u"}, c0 = ${has("c0") ? W(op, "c0") : "0u"};
        if (count > ${limit} || r0 >= rows || c0 >= cols) {
          report_error(status, kErrBadLength, (int)count, (int)r0, (int)c0, (int)(pc + at));
          s_abort = 1;
          break;
        }
        TileArgs& args = *reinterpret_cast<TileArgs*>(s_ent);
        if (threadIdx.x == 0) args = {offset, rows, cols, count, r0, c0, kNone, 0u};
        tile_stage_entries(table + ${W(op, "list")}, ${words}u * count, reinterpret_cast<u32*>(s_gy), opaque_tid());
        ${routine}(args, reinterpret_cast<const u32*>(s_gy), pool, ${buffer}, s_stage, s_reduce);
      } break;`;
}

function tileCases(plan: VppsPlan): string {
  const o = Opcode;
  for (const m of plan.matrices) {
    if (m.masterOffset + m.rows * m.cols >= 2 ** 32) {
      throw new Error(
        `kernel template: tile routines address the master copy with 32-bit offsets; ${m.name} ends at float ${m.masterOffset + m.rows * m.cols}`,
      );
    }
  }
  const importGrads = perRegisterGradient(
    plan,
    (M, s) => `import_rows<${M}>(${g(s)}, first_row<${M}>(${s}, warp), grads, lane)`,
  );
  return [
    tileCase(
      plan,
      o.Tile,
      "kTileEntries",
      "entries (y, x, b); y = b + W x for rows [r0, r0 + 64)",
      "tile_forward",
      "master",
    ),
    tileCase(
      plan,
      o.TileXbar,
      "kTileEntries",
      `entries (ybar, x, xbar, bbar); xbar += W^T ybar for columns [c0, c0 + 64), rows [r0, r0 + ${TILE.xbarRows})`,
      "tile_xbar",
      "master",
    ),
    tileCase(
      plan,
      o.TileWbar,
      "kTileWbarEntries",
      "entries (ybar, x, xbar, bbar); Wbar += ybar x^T into grads, bbar += ybar",
      "tile_wbar",
      "grads",
    ),
    `      case ${opcodeConstant(o.ImportGrads)}: // import.grads: Wbar += the gradient buffer's rows (tile.wbar's sums)
${importGrads.join("\n")}
        break;`,
  ].join("\n");
}

/** The load.t case: this CTA's partitions of the transposed copies, read from the master copy (load_rows_t). */
function loadTransposedCase(plan: VppsPlan): string {
  const loads: string[] = [];
  for (const t of plan.transposed) {
    const M = matrixStruct(t);
    for (const s of t.slots) {
      loads.push(
        `        if (holds<${M}>(${s})) load_rows_t<${M}>(${w(s)}, first_row<${M}>(${s}, warp), master, s_stage, warp, lane);`,
      );
    }
  }
  return `      case ${opcodeConstant(Opcode.LoadTransposed)}: // load.t: the transposed copies this CTA holds
${loads.join("\n")}
        break;`;
}

/** The interpreter cases that touch register-resident matrices or the master copy. */
export function renderMatrixCases(plan: VppsPlan): string {
  return [
    matVecCase(plan, Opcode.MatVec),
    matVecCase(plan, Opcode.MatVecAcc),
    loadTransposedCase(plan),
    matVecBwdCase(plan),
    endOfBatchCases(plan),
    tileCases(plan),
  ].join("\n");
}
