/**
 * What the sparse persistent kernels (sparse-forward.ts, sparse-backward.ts) share: the constants of a plan, the
 * build options (the paper's ladder: naive → wide loads → bank-aware → Lamport), the load of a thread's
 * ⟨index, value⟩ pairs into registers, the load of a tile's vector into shared memory (polled for Lamport flags, or
 * plain after a grid barrier), the product over the pairs, the reduction of a row's partial sums over its row group,
 * and the grid barrier of a step.
 *
 * Shared memory (floats, dynamic): the tile's vector hs [K·BT] — wide loads: interleaved [K][BT], so one
 * ld.shared.v{BT} per pair loads all of the tile's columns; without: [BT][K], one scalar load per pair and column —
 * then the row sums rs [PR][BT] (PR = row groups · rows per thread), then, for a reduction through shared memory,
 * every thread's partial sums pb [NT][RW][BT].
 *
 * Between steps the vectors travel through an exchange buffer in global memory, xh [steps][tiles][K·BT]: the region of
 * (step, tile) holds the tile's vector in hs's own layout, written value by value by the cell threads that compute
 * it (a computed −0.0 as +0.0) and read by every CTA the step after as 16-byte cp.async copies straight into hs — no
 * registers, every copy in flight at once, no transposing stores. Lamport builds fill xh with −0.0 before the launch
 * and copy again the pieces that still hold a −0.0 in a column another CTA writes.
 *
 * Replicas: a launch of `nrep` copies of the layer (CPG CTAs each, nrep·CPG in all) runs the tiles of a step side by
 * side, replica r the tiles r, r + nrep, …; the replicas share nothing but the grid barrier of barrier builds.
 */
import { permutesRows, type SparseRnnKernelPlan } from "../plan/index.js";
import { gatesOf } from "../spec.js";

/** The synchronisation between steps: Lamport flags (−0.0 = not yet written) or a grid barrier per step. */
export type SparseSync = "lamport" | "barrier";

/** Build options of a sparse kernel: the rungs of the paper's ladder that change the code. */
export interface SparseKernelOptions {
  /** Default "lamport". */
  readonly sync?: SparseSync;
  /** One ld.shared.v{BT} per pair (h interleaved [K][BT]); false: one scalar load per pair and column. Default true. */
  readonly wideLoads?: boolean;
}

/**
 * The rungs of the ladder in order, each the one before plus one step. Bank-aware is the pair arrays' order, not the
 * code: a rung's `order` says which arrays the host loads.
 */
export const SPARSE_LADDER = [
  { name: "naive", sync: "barrier", wideLoads: false, order: "naive" },
  { name: "wide-loads", sync: "barrier", wideLoads: true, order: "naive" },
  { name: "bank-aware", sync: "barrier", wideLoads: true, order: "bank-aware" },
  { name: "lamport", sync: "lamport", wideLoads: true, order: "bank-aware" },
] as const satisfies readonly (Required<SparseKernelOptions> & { name: string; order: "naive" | "bank-aware" })[];

export type SparseRung = (typeof SPARSE_LADDER)[number]["name"];

/** Kernel names of a sparse module. */
export const SPARSE_KERNEL_NAMES = { forward: "rnn_sparse_forward", backward: "rnn_sparse_backward" } as const;

/** Words of a thread's index registers: ⌈S/2⌉ (16-bit, two a word) or S. */
export function indexWords(plan: SparseRnnKernelPlan): number {
  return plan.indexBits === 16 ? Math.ceil(plan.pairsPerThread / 2) : plan.pairsPerThread;
}

/** Whether the row group's partial sums are combined by warp shuffles (the group divides a warp). */
export const shuffleReduction = (plan: SparseRnnKernelPlan) => 32 % plan.threadsPerRowGroup === 0;

/** Floats of dynamic shared memory a kernel of this plan uses. */
export function sparseSharedFloats(plan: SparseRnnKernelPlan): number {
  const bt = plan.batchTile;
  const pr = plan.rowGroups * plan.rowsPerThread;
  const pb = shuffleReduction(plan) ? 0 : plan.threads * plan.rowsPerThread * bt;
  // the forward's cell inputs, copied asynchronously while the vector is polled: G input projections and the state
  const xs = plan.kind === "forward" ? plan.unitsPerCta * bt * (gatesOf(plan.cell) + 1) : 0;
  return plan.cols * bt + pr * bt + pb + xs + pr; // then the row order rmap [PR] (ints)
}

export const sparseSharedBytes = (plan: SparseRnnKernelPlan) => 4 * sparseSharedFloats(plan);

/** The constants of a kernel of this plan. */
export function sparseConstants(plan: SparseRnnKernelPlan, opts: SparseKernelOptions): string {
  const G = gatesOf(plan.cell);
  return `constexpr int H = ${plan.hidden};
constexpr int G = ${G};
constexpr int UC = ${plan.unitsPerCta};  // units per CTA
constexpr int CPG = ${plan.ctas};  // CTAs of one replica
constexpr int CPS = ${plan.ctasPerSm};  // CTAs resident on one SM
constexpr int NT = ${plan.threads};  // threads per CTA
constexpr int BT = ${plan.batchTile};  // batch columns of a tile
constexpr int K = ${plan.cols};  // the vector's length (a pair's index range)
constexpr int S = ${plan.pairsPerThread};  // pair slots per thread
constexpr int SW = ${indexWords(plan)};  // index words per thread
constexpr int P = ${plan.pairsPerPiece};  // slots of one row's piece
constexpr int RW = ${plan.rowsPerThread};  // rows per thread
constexpr int T = ${plan.threadsPerRowGroup};  // threads of a row group
constexpr int RG = ${plan.rowGroups};  // row groups
constexpr int PR = RG * RW;  // rows with padding
constexpr bool IDX16 = ${plan.indexBits === 16};
constexpr bool WIDE = ${opts.wideLoads !== false};
constexpr bool ROWMAP = ${permutesRows(plan)};  // row sums written through the row order (plan/sparse.ts, permutesRows)
constexpr bool LAMPORT = ${(opts.sync ?? "lamport") === "lamport"};
static_assert(K % 4 == 0, "the vector is loaded in 16-byte pieces");
// element (k, column j) of a tile's vector, in shared memory and in its region of the exchange buffer
__device__ __forceinline__ int hs_at(int k, int j) { return WIDE ? k * BT + j : j * K + k; }
__device__ __forceinline__ int hs_col(int e) { return WIDE ? e % BT : e / K; }
__device__ __forceinline__ int hs_k(int e) { return WIDE ? e / BT : e % K; }`;
}

/** Device helpers: a thread's index of slot s, the polled vector load, the step barrier. */
export const SPARSE_HELPERS = `
// the index of slot s (a compile-time constant in the unrolled loops): 16-bit, two to a register, low half even.
// Unpacked in a volatile asm, every step: the unpacked indices are loop-invariant, and ptxas would otherwise hoist them
// out of the step loop, a register per index instead of half of one, and spill.
__device__ __forceinline__ u32 pair_index(const u32 (&wi)[SW], int s) {
  if (!IDX16) return wi[s];
  u32 r;
  if (s & 1) asm volatile("shr.u32 %0, %1, 16;" : "=r"(r) : "r"(wi[s >> 1]));
  else asm volatile("and.b32 %0, %1, 65535;" : "=r"(r) : "r"(wi[s >> 1]));
  return r;
}

// A float from global to shared memory without a register (cp.async: waited for by cp_async_wait, by this thread).
__device__ __forceinline__ void cp_async4(float* dst, const float* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_all;" ::: "memory"); }
// 16 bytes from global to shared memory through L2 only (.cg: never a stale line of this SM's L1; what a poll needs)
__device__ __forceinline__ void cp_async16(float* dst, const float* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
// Whether 16-byte piece c of a tile's vector holds a column another CTA writes (columns [0, np) are polled)
__device__ __forceinline__ bool piece_polled(int c, int np) { return WIDE ? np > 0 : hs_col(4 * c) < np; }
// Whether piece c, copied to hs, still holds a pending −0.0 in a polled column
__device__ __forceinline__ bool piece_pending(const float* hs, int c, int np) {
  const float4 v = reinterpret_cast<const float4*>(hs)[c];
  if (!WIDE || BT == 1) return pending4(v); // one column (polled: piece_polled)
  if (BT == 4) return (np > 0 && pending1(v.x)) | (np > 1 && pending1(v.y)) | (np > 2 && pending1(v.z)) | (np > 3 && pending1(v.w));
  return (np > 0 && (pending1(v.x) | pending1(v.z))) | (np > 1 && (pending1(v.y) | pending1(v.w))); // [k, k+1][2]
}

// The grid barrier that ends step s in the barrier build (all threads call it; thread 0 signals and waits). Lamport
// builds need none. False when a CTA failed or the wait timed out.
__device__ __forceinline__ bool step_barrier(u32* bar, int s, int* status) {
  if (LAMPORT) return true;
  __syncthreads();
  bool ok = true;
  if (threadIdx.x == 0) {
    vpps_signal(bar);
    ok = vpps_wait(bar, (u32)(s + 1) * gridDim.x, status, (u32)s, s);
  }
  return !__syncthreads_or(!ok);
}`;

/** The load of a thread's pairs into registers (once per launch), in the arrays' coalesced order (sparse-pairs.ts). */
export const LOAD_PAIRS = `  // the replica of this CTA and its CTA within the replica (the pairs and units of every replica are the same)
  const int rep = blockIdx.x / CPG, cta = blockIdx.x - rep * CPG;
  // this thread's pairs, loaded once: slot s at values[(cta·S + s)·NT + tid], its index word at (cta·SW + ⌊s/2⌋)·NT + tid.
  // Coherent loads (__ldcg), never the read-only path, which ptxas may re-load inside the step loop. From one base
  // pointer each: with the 64-bit offset of every load computed from cta, ptxas kept them live and spilled (the
  // tightest layouts, LSTM 1792 at 30%).
  float wv[S];
  u32 wi[SW];
  const float* vbase = values + (size_t)cta * S * NT + tid;
  const u32* ibase = indices + (size_t)cta * SW * NT + tid;
  #pragma unroll
  for (int s = 0; s < S; s++) wv[s] = __ldcg(vbase + s * NT);
  #pragma unroll
  for (int q = 0; q < SW; q++) wi[q] = __ldcg(ibase + q * NT);
  // the row order (which local row each row slot holds: rowmap [CPG][PR]) into rmap, at the end of shared memory
  if (ROWMAP) {
    for (int e = tid; e < PR; e += NT) rmap[e] = __ldcg(rowmap + cta * PR + e);
  }`;

/**
 * The exchange buffer of a launch over `steps` steps of at most `batch` sequences: `tiles` regions per step of
 * `floatsPerStep / tiles` floats each ([steps][tiles][K·BT], `regionOf`), `steps` rows of `floatsPerStep` floats for
 * the pending fill, `bytes` in all.
 */
export function exchangeShape(
  plan: Pick<SparseRnnKernelPlan, "cols" | "batchTile">,
  steps: number,
  batch: number,
): { tiles: number; floatsPerStep: number; rows: number; bytes: number } {
  const tiles = Math.max(1, Math.ceil(batch / plan.batchTile));
  const floatsPerStep = tiles * plan.cols * plan.batchTile;
  return { tiles, floatsPerStep, rows: steps, bytes: Math.max(16, 4 * steps * floatsPerStep) };
}

/** The exchange region of (time index `t`, the tile at `b0`): where a step's vector is published and read. */
export const regionOf = (t: string) => `xh + ((size_t)(${t}) * tiles + b0 / BT) * (K * BT)`;

/** Pieces of a tile's vector each thread copies (and polls): ⌈K·BT/4 / NT⌉. */
export const piecesPerThread = (plan: SparseRnnKernelPlan) =>
  Math.ceil((plan.cols * plan.batchTile) / 4 / plan.threads);

/**
 * Whether a kernel copies and looks at its pieces in one unrolled pass (batchedPollCode) rather than in loops over
 * them (loopPollCode): where a thread has at most 8 pieces and registers for all of them in flight (4 each) beyond
 * its estimate. On RNN 2304 at batch 16 (H100) the loop's look at the pieces was 16% of a step's stall samples, each
 * piece's shared-memory load waiting for the one before; on the tightest layouts the unrolled pass made ptxas spill.
 */
export function batchedPoll(plan: SparseRnnKernelPlan): boolean {
  const ppt = piecesPerThread(plan);
  return ppt <= 8 && plan.registerLimit - plan.registersEstimate >= 4 * ppt + 8;
}

/**
 * The copy of a thread's pieces (tid, tid + NT, …) and, in Lamport builds, the polls, unrolled: a mask of the pieces
 * still to look at; each look loads every piece unconditionally (one out of range reads piece 0), with no
 * branch and no copy between the loads, so they wait for one shared-memory latency, not one each, and a piece's bit
 * is only ever cleared; then the pending ones are copied again at once (rare: ~1% of steps at RNN 2304, batch 16).
 */
function batchedPollCode(region: string, polled: string, step: string): string {
  return `        constexpr int PPT = (NC + NT - 1) / NT; // pieces of a thread: tid, tid + NT, …
        constexpr int PW = (PPT + 31) / 32;     // words of its mask of pieces still to look at
        const int npl = ${polled};
        const float* src = npl > 0 ? ${region} : xh;
        u32 pend[PW];
        #pragma unroll
        for (int w = 0; w < PW; w++) pend[w] = 0u;
        #pragma unroll
        for (int i = 0; i < PPT; i++) {
          const int c = tid + i * NT;
          if ((NC % NT == 0 || c < NC) && piece_polled(c, npl)) {
            cp_async16(hs + 4 * c, src + 4 * c);
            pend[i / 32] |= 1u << (i % 32);
          }
        }
        cp_async_wait();
        if (LAMPORT && npl > 0) {
          for (u32 spins = 0;; spins++) {
            #pragma unroll
            for (int i = 0; i < PPT; i++) {
              const int c = (NC % NT == 0 || tid + i * NT < NC) ? tid + i * NT : 0; // (piece 0: always there)
              if (!piece_pending(hs, c, npl)) pend[i / 32] &= ~(1u << (i % 32));
            }
            u32 any = 0u;
            #pragma unroll
            for (int w = 0; w < PW; w++) any |= pend[w];
            if (any == 0u) break;
            if (spins > kBarrierSpinLimit) {
              int pending = tid; // the first piece still pending, for the report
              #pragma unroll
              for (int i = PPT - 1; i >= 0; i--) {
                if ((pend[i / 32] >> (i % 32)) & 1u) pending = tid + i * NT;
              }
              report_error(status, kErrPollTimeout, ${step}, b0 + hs_col(4 * pending), hs_k(4 * pending), -1);
              ok = false;
              break;
            }
            #pragma unroll
            for (int i = 0; i < PPT; i++) {
              if ((pend[i / 32] >> (i % 32)) & 1u) cp_async16(hs + 4 * (tid + i * NT), src + 4 * (tid + i * NT));
            }
            cp_async_wait();
          }
        }`;
}

/** The copy and polls in loops over the thread's pieces: fewest registers (the tightest layouts). */
function loopPollCode(region: string, polled: string, step: string): string {
  return `        const int npl = ${polled};
        const float* src = npl > 0 ? ${region} : xh;
        for (int c = tid; c < NC; c += NT) {
          if (piece_polled(c, npl)) cp_async16(hs + 4 * c, src + 4 * c);
        }
        cp_async_wait();
        if (LAMPORT && npl > 0) {
          for (u32 spins = 0;; spins++) {
            int pending = -1;
            for (int c = tid; c < NC; c += NT) {
              if (piece_polled(c, npl) && piece_pending(hs, c, npl)) {
                cp_async16(hs + 4 * c, src + 4 * c); // every pending piece copied again before any is looked at
                pending = c;
              }
            }
            if (pending < 0) break;
            cp_async_wait();
            if (spins > kBarrierSpinLimit) {
              report_error(status, kErrPollTimeout, ${step}, b0 + hs_col(4 * pending), hs_k(4 * pending), -1);
              ok = false;
              break;
            }
          }
        }`;
}

/**
 * The load of a tile's vector into hs from the exchange region `region` of the step before (sparse-product.ts's
 * header): columns [0, npl) with npl = `polled` are copied (and, in Lamport builds, polled until none holds −0.0),
 * columns from npl to nt are `own(j, k)` (sequences that start at this step: the caller's initial state; null: zeros),
 * columns past nt zeros. A value that never arrives ends the launch with an error in the status block. Ends with
 * `if (__syncthreads_or(!ok)) return;`.
 */
export function loadVector(
  plan: SparseRnnKernelPlan,
  region: string,
  polled: string,
  own: ((j: string, k: string) => string) | null,
  step: string,
): string {
  return `      {
        bool ok = true;
        constexpr int NC = K * BT / 4; // 16-byte pieces of the tile's vector
${batchedPoll(plan) ? batchedPollCode(region, polled, step) : loopPollCode(region, polled, step)}
        if (npl < nt || nt < BT) {
          for (int c = tid; c < NC; c += NT) {
            #pragma unroll
            for (int i = 0; i < 4; i++) {
              const int e = 4 * c + i, j = hs_col(e);
              if (j >= npl) hs[e] = ${own === null ? "0.f" : `j < nt ? ${own("j", "hs_k(e)")} : 0.f`};
            }
          }
        }
        if (__syncthreads_or(!ok)) return;
      }`;
}

/** The product of a thread's pairs with the tile's vector, one accumulator per (row, column). */
export function productCode(plan: SparseRnnKernelPlan): string {
  const bt = plan.batchTile;
  const wide =
    bt === 4
      ? `const float4 hv = reinterpret_cast<const float4*>(hs)[ix];
            acc[r][0] = fmaf(wv[s], hv.x, acc[r][0]);
            acc[r][1] = fmaf(wv[s], hv.y, acc[r][1]);
            acc[r][2] = fmaf(wv[s], hv.z, acc[r][2]);
            acc[r][3] = fmaf(wv[s], hv.w, acc[r][3]);`
      : bt === 2
        ? `const float2 hv = reinterpret_cast<const float2*>(hs)[ix];
            acc[r][0] = fmaf(wv[s], hv.x, acc[r][0]);
            acc[r][1] = fmaf(wv[s], hv.y, acc[r][1]);`
        : "acc[r][0] = fmaf(wv[s], hs[ix], acc[r][0]);";
  return `      // the product: slot s belongs to the thread's row ⌊s / P⌋
      float acc[RW][BT];
      #pragma unroll
      for (int r = 0; r < RW; r++) {
        #pragma unroll
        for (int j = 0; j < BT; j++) acc[r][j] = 0.f;
      }
      #pragma unroll
      for (int s = 0; s < S; s++) {
        const int r = s / P;
        const u32 ix = pair_index(wi, s);
        if (WIDE) {
          ${wide}
        } else {
          #pragma unroll
          for (int j = 0; j < BT; j++) acc[r][j] = fmaf(wv[s], hs[j * K + ix], acc[r][j]);
        }
      }
${reductionCode(plan)}
      __syncthreads();`;
}

/** The reduction of a row's partial sums over its row group into rs [PR][BT]. */
function reductionCode(plan: SparseRnnKernelPlan): string {
  if (shuffleReduction(plan)) {
    return `      // the row group's T threads (consecutive lanes of one warp): butterfly shuffles, in the same order everywhere
      #pragma unroll
      for (int o = T / 2; o > 0; o >>= 1) {
        #pragma unroll
        for (int r = 0; r < RW; r++) {
          #pragma unroll
          for (int j = 0; j < BT; j++) acc[r][j] += __shfl_xor_sync(0xffffffffu, acc[r][j], o);
        }
      }
      if (tid % T == 0 && tid / T < RG) {
        #pragma unroll
        for (int r = 0; r < RW; r++) {
          const int lr = ROWMAP ? rmap[(tid / T) * RW + r] : (tid / T) * RW + r; // this row slot's local row
          #pragma unroll
          for (int j = 0; j < BT; j++) rs[lr * BT + j] = acc[r][j];
        }
      }`;
  }
  return `      // the row group's T threads span warps: every thread's partial sums through shared memory, summed in thread order
      #pragma unroll
      for (int r = 0; r < RW; r++) {
        #pragma unroll
        for (int j = 0; j < BT; j++) pb[(tid * RW + r) * BT + j] = acc[r][j];
      }
      __syncthreads();
      for (int e = tid; e < PR * BT; e += NT) {
        const int lr = e / BT, j = e - lr * BT, g = lr / RW, r = lr - g * RW;
        float sum = 0.f;
        #pragma unroll
        for (int q = 0; q < T; q++) sum += pb[((g * T + q) * RW + r) * BT + j];
        rs[(ROWMAP ? rmap[lr] : lr) * BT + j] = sum; // row slot lr holds local row rmap[lr] (the row order)
      }`;
}
