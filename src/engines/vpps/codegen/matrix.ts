/**
 * The matrix routines of the VPPS kernel (CUDA text, the same for every plan): templated on a matrix's constants
 * struct (slots.ts), they load a partition's rows into registers, multiply (y = b + W x, staged or not), form
 * x̄ += Wᵀȳ by a CTA-wide reduction, accumulate W̄ += ȳxᵀ in registers, and update, export or import the gradient.
 * The interpreter cases that call them are matrix-cases.ts.
 */

import { BLOCK_CHUNKS, REDUCE_BLOCK_COLS, STAGE_FLOATS } from "./staging.js";

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
