/**
 * The building blocks of the persistent recurrent kernels (src/rnn/gpu/kernel-source.ts assembles them): the kernels'
 * options, error codes and names, the cluster rule, the CUDA every module starts with (types, status block,
 * activations, polled loads, the pair multicast primitives), a plan's compile-time constants, the register mat-vec and
 * its reduction, and the polled loads of a step's vector (alone, or through a cluster's multicast).
 */
import { DEVICE_ACTIVATIONS } from "../../codegen/device-math.js";
import { FIRST_KERNEL_ERROR, GRID_BARRIER_CUDA, GRID_ERRORS } from "../../codegen/grid-barrier.js";
import { BATCH_TILE, gatesOf, paddedCols, type RnnKernelPlan } from "../plan/dense.js";

/** Status codes of the RNN kernels (status word 0). */
export const RNN_ERRORS = {
  /** A polled value did not arrive: [code, cta, step, row, column, -1]. */
  pollTimeout: FIRST_KERNEL_ERROR,
} as const;

/** Polls before a value that does not arrive is reported (each poll is an L2 round trip, ~0.5–1 µs). */
export const POLL_SPIN_LIMIT = 1 << 21;

/** Kernel names in a generated module. */
export const RNN_KERNEL_NAMES = { forward: "rnn_forward", backward: "rnn_backward", fill: "rnn_fill" } as const;

/** The −0.0 bit pattern that marks a value not yet written. */
export const PENDING_BITS = 0x80000000;

/** Options of a generated kernel. */
export interface RnnKernelOptions {
  /**
   * Instrumented build: thread 0 of every CTA adds the clock cycles of each phase of a tile (PHASE_NAMES) into the
   * module's global `rnn_phase[cta][phase]` (for `vpps bench rnn` with VPPS_RNN_PHASES=1; not for production).
   */
  readonly phases?: boolean;
  /**
   * Launch as clusters of two CTAs, for the multicast loads (default: `multicastPays`; forced on or off here, as
   * VPPS_RNN_CLUSTER=1/0 does). The grid must be even either way.
   */
  readonly cluster?: boolean;
  /**
   * CTAs per cluster of a clustered build: 2 (the two SMs of a TPC; the default) or 4 (a quarter of the L2 reads,
   * where the grid divides and the GPCs hold every cluster at once — the host checks; VPPS_RNN_CLUSTER_SIZE=4).
   */
  readonly clusterSize?: 2 | 4;
  /**
   * The forward kernel includes the pipelined tile loop (each tile's cell deferred past the next tile's wait). A
   * build of its own, which the layer runs for launches whose replica holds more than two tiles (pipelinedForward).
   */
  readonly pipelinedForward?: boolean;
  /**
   * The backward kernel's pipelined tile loop defers each tile's cell past the next tile's wait, as the forward's
   * does (a build of its own, for the same launches; without it the loop runs each tile's cell after its product).
   */
  readonly deferredBackward?: boolean;
}

/**
 * Weight registers per thread from which the pair multicast pays. Measured on an H100 in one call against the same
 * kernels without clusters (bench/results/h100/issue18/multicast/ab2.jsonl): layouts near the register limit (8 warps
 * per SM that cannot hide the load: RNN 2304, LSTM 1152 — 180 weight registers) gain 4–12% at batch 1–4 and up to 14%
 * at 16; layouts with many threads and few weights (RNN 512/1152, GRU 512/1152: 16–100) lose 4–11% at batch 1–4
 * (the barrier round adds latency to a poll that is not bandwidth-bound there) though they gain at 16. RNN 1792 (112
 * weight registers, never measured clustered until session 13) gains 10–21% forward and 7–13% forward+backward at
 * batch 1–16 (bench/results/h100/issue18/session13/multicast-1792/): the bound is 112.
 */
export const MULTICAST_MIN_WEIGHT_REGISTERS = 112;

/** Whether the pair multicast is expected to pay for a kernel of this plan (see MULTICAST_MIN_WEIGHT_REGISTERS). */
export function multicastPays(plan: { readonly weightRegisters: number }): boolean {
  return plan.weightRegisters >= MULTICAST_MIN_WEIGHT_REGISTERS;
}

/** Whether a kernel of this plan is built as clusters of two CTAs. */
export function clustered(
  plan: { readonly ctas: number; readonly weightRegisters: number },
  opts: RnnKernelOptions = {},
): boolean {
  return plan.ctas % 2 === 0 && (opts.cluster ?? multicastPays(plan));
}

/** CTAs per cluster of a kernel of this plan: 0 (not clustered), 2 or 4 (`opts.clusterSize` where the grid divides). */
export function clusterSize(
  plan: { readonly ctas: number; readonly weightRegisters: number },
  opts: RnnKernelOptions = {},
): 0 | 2 | 4 {
  if (!clustered(plan, opts)) return 0;
  return opts.clusterSize === 4 && plan.ctas % 4 === 0 ? 4 : 2;
}

/** The phases an instrumented kernel times, in the order of `rnn_phase`'s columns. */
export const PHASE_NAMES = ["sync", "poll", "matvec", "cell"] as const;
/** The instrumented kernels' per-CTA counters (u64) and how many CTAs they hold. */
export const PHASE_GLOBAL = "rnn_phase";
export const PHASE_MAX_CTAS = 1024;

export function phaseMacros(on: boolean): string {
  if (!on) return "#define PHASE_START\n#define PHASE(i)\n";
  return `__device__ unsigned long long ${PHASE_GLOBAL}[${PHASE_MAX_CTAS}][${PHASE_NAMES.length}];
#define PHASE_START long long ph_t = clock64();
#define PHASE(i) if (threadIdx.x == 0) { const long long ph_n = clock64(); atomicAdd(&${PHASE_GLOBAL}[blockIdx.x][i], (unsigned long long)(ph_n - ph_t)); ph_t = ph_n; }
`;
}

/**
 * Shared-memory addresses, the CTA's cluster rank and barrier, mbarriers, and TMA bulk copies (alone or multicast to
 * a cluster): CUDA that every RNN kernel module starts with (in COMMON) and that bench/rnn/broadcast-probe.ts builds
 * its probe from. Needs `typedef unsigned int u32;` before it.
 */
export const TMA_CUDA = `__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ u32 cluster_rank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\\n\\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void mbar_init(unsigned long long* m) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(m)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect(unsigned long long* m, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(m)), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(unsigned long long* m, u32 parity) {
  u32 ok;
  asm volatile("{\\n\\t.reg .pred p;\\n\\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\n\\tselp.u32 %0, 1, 0, p;\\n\\t}"
               : "=r"(ok) : "r"(smem_u32(m)), "r"(parity) : "memory");
  return ok != 0;
}
// bytes (a multiple of 16) from global to this CTA's shared memory, counted on its barrier
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, u32 bytes, unsigned long long* m) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(m)) : "memory");
}
// bytes (a multiple of 16) from global to the same offset of the shared memory of every CTA in 'mask' (the cluster);
// each CTA's barrier counts them
__device__ __forceinline__ void bulk_multicast(void* dst, const void* src, u32 bytes, unsigned long long* m,
                                               unsigned short mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;"
      ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(m)), "h"(mask) : "memory");
}`;

/** What every generated RNN kernel module starts with: types, limits, the status block, activations, polled loads. */
export const COMMON = `
typedef unsigned int u32;
constexpr u32 kBarrierSpinLimit = ${POLL_SPIN_LIMIT}u;
constexpr int kErrBarrierTimeout = ${GRID_ERRORS.barrierTimeout};
constexpr int kErrPollTimeout = ${RNN_ERRORS.pollTimeout};
${GRID_BARRIER_CUDA}
${DEVICE_ACTIVATIONS}

// A value other CTAs write: read at the coherence point (L2), never from this SM's L1.
__device__ __forceinline__ float4 ld_poll4(const float* p) {
  float4 v;
  asm volatile("ld.relaxed.gpu.global.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ bool pending1(float x) { return __float_as_uint(x) == 0x80000000u; }
__device__ __forceinline__ bool pending4(float4 v) {
  return pending1(v.x) | pending1(v.y) | pending1(v.z) | pending1(v.w);
}
// fp16 weight storage without cuda_fp16.h (NVRTC has no include path): pack two floats, and unpack in a volatile
// asm so that the compiler cannot hoist the conversions out of the step loop (which would keep every weight as fp32
// and spill).
__device__ __forceinline__ u32 pack_half2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ float2 unpack_half2(u32 h) {
  float2 f;
  asm volatile("{ .reg .f16 l, u; mov.b32 {l, u}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, u; }"
               : "=f"(f.x), "=f"(f.y) : "r"(h));
  return f;
}
// Publishes a value others poll: −0.0 would read as "not yet", so it becomes +0.0 (x + 0 would be folded away).
__device__ __forceinline__ void st_publish(float* p, float x) {
  x = (x == 0.f) ? 0.f : x;
  asm volatile("st.relaxed.gpu.global.f32 [%0], %1;" ::"l"(p), "f"(x) : "memory");
}

// Replicas: a launch runs 'nrep' copies of the layer side by side, replica r on the batch's sequences r, r + nrep,
// r + 2·nrep, … (local column j is sequence r + j·nrep). How many of the first n sequences are replica r's:
__device__ __forceinline__ int local_count(int n, int r, int nrep) { return n > r ? (n - r + nrep - 1) / nrep : 0; }

// Thread-block clusters of two CTAs (on the two SMs of a TPC): the vector every CTA polls each step is copied from L2
// once per pair by TMA bulk copies multicast to both CTAs' shared memory, halving the L2 reads (kept where it measured
// faster: MULTICAST_MIN_WEIGHT_REGISTERS; the poll is not L2-bandwidth-bound, bench/results/h100/issue18/session19).
${TMA_CUDA}
// No proxy fence between a step's reads of a buffer and the partner's multicast into it two steps later: the reads
// have completed (their values are in what this CTA published, which the partner waited for), and a fence is only
// needed to make generic-proxy writes visible to the async proxy.

// Fills rows × cols floats of a matrix with row stride ld with the pending mark (−0.0) before a launch.
extern "C" __global__ void ${RNN_KERNEL_NAMES.fill}(float* p, int rows, int cols, int ld) {
  long long n = (long long)rows * cols;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    long long r = i / cols;
    int c = (int)(i - r * cols);
    p[r * ld + c] = __uint_as_float(0x80000000u);
  }
}
`;

/** The reduce-scatter of `n` accumulators over a warp's 32 lanes: afterwards lane l holds totals l·q … l·q + q − 1. */
function reduceScatter(n32: number): string {
  const lines: string[] = [];
  let m = n32;
  for (let o = 16; o >= 1; o >>= 1) {
    const half = m / 2;
    lines.push(`  { const bool up = (lane & ${o}) != 0;
    #pragma unroll
    for (int i = 0; i < ${half}; i++) {
      const float send = up ? a[i] : a[i + ${half}];
      const float keep = up ? a[i + ${half}] : a[i];
      a[i] = keep + __shfl_xor_sync(0xffffffffu, send, ${o});
    } }`);
    m = half;
  }
  return lines.join("\n");
}

/** Compile-time constants of a plan, as CUDA. */
export function constants(plan: RnnKernelPlan): string {
  const acc = plan.rowsPerThread * BATCH_TILE;
  const n32 = Math.ceil(acc / 32) * 32;
  return `
constexpr int H = ${plan.hidden};
constexpr int G = ${gatesOf(plan.cell)};
constexpr int UC = ${plan.unitsPerCta};
constexpr int NC = ${plan.ctas}; // CTAs of a replica: CTA blockIdx.x is CTA blockIdx.x % NC of replica blockIdx.x / NC
constexpr int R = ${plan.rows};
constexpr int K = ${plan.cols};
constexpr int RW = ${plan.rowsPerThread};
constexpr int RG = ${plan.rowGroups};
constexpr int CG = ${plan.threadsPerRowGroup};
constexpr int CW = CG / 32;
constexpr int KC = ${plan.chunksPerThread};
constexpr int KP = ${paddedCols(plan)};
constexpr int BT = ${BATCH_TILE};
constexpr int NT = ${plan.threads};
constexpr int NACC = RW * BT;
constexpr int N32 = ${n32};
constexpr int Q = N32 / 32;
static_assert(KP % 4 == 0 && KP >= K, "padded columns");
static_assert(UC * BT <= NT, "one thread per (unit, batch column) of a tile");
`;
}

/**
 * The FMAs of one chunk, component by component over all RW·BT accumulators: consecutive FMAs are independent, so a
 * scheduler with two warps issues back to back instead of waiting out each FMA's latency.
 */
const FMA_BY_COMPONENT = `      #pragma unroll
      for (int j = 0; j < 4; j++) {
        #pragma unroll
        for (int r = 0; r < RW; r++) {
          const float2 lo = make_float2(wr[r][k].x, wr[r][k].y), hi = make_float2(wr[r][k].z, wr[r][k].w);
          const float wj = j == 0 ? lo.x : j == 1 ? lo.y : j == 2 ? hi.x : hi.y;
          #pragma unroll
          for (int b = 0; b < BT; b++) {
            const float xj = j == 0 ? x[b].x : j == 1 ? x[b].y : j == 2 ? x[b].z : x[b].w;
            a[r * BT + b] = fmaf(wj, xj, a[r * BT + b]);
          }
        }
      }`;

/** fp16 weights: float4 chunks loaded and packed between two barriers at the kernel's start (see matvecParts). */
const PACK_CHUNKS = 8;

/** fp16 weights: each row's pair unpacked once per chunk (the unpack is a volatile asm), then its four FMAs. */
const FMA_BY_ROW = `      #pragma unroll
      for (int r = 0; r < RW; r++) {
        const float2 lo = unpack_half2(wlo[r][k]), hi = unpack_half2(whi[r][k]);
        #pragma unroll
        for (int b = 0; b < BT; b++) {
          float& acc = a[r * BT + b];
          acc = fmaf(lo.x, x[b].x, acc);
          acc = fmaf(lo.y, x[b].y, acc);
          acc = fmaf(hi.x, x[b].z, acc);
          acc = fmaf(hi.y, x[b].w, acc);
        }
      }`;

/**
 * The shared part of both kernels: weights into registers, the polled vector load of a tile into shared memory,
 * the register mat-vec and the two-level reduction. `matvecAny` picks by the tile's columns `nt` between the mat-vec
 * of one column and that of BT. `weightAt(lr, k)` is the CUDA expression of the matrix element
 * at local row `lr`, column `k` (both in range).
 */
export function matvecParts(plan: RnnKernelPlan): {
  weights: string;
  product: string;
  matvec: string;
  matvecAny: string;
} {
  const fp16 = plan.precision === "fp16";
  // each thread's rows × float4 column chunks, loaded once: fp16 packs two weights per register (low half: the even
  // column), fp32 keeps the float4
  const [declare, store] = fp16
    ? [
        `
  // fp16 storage: two weights per register (low half: the even column)
  u32 wlo[RW][KC], whi[RW][KC];
  // ptxas would schedule the packs late, after the loads that follow (hiding their latency), and hold the loaded
  // floats two per weight register until then: spilled at the larger layouts. A barrier whose predicate reads every
  // register packed since the one before makes it pack them first, and no load crosses a barrier: at most
  // ${4 * PACK_CHUNKS} loaded floats are live. At the kernel's start only; the predicate's value does not matter.
  u32 packed = 0;`,
        `      wlo[r][k] = pack_half2(v[0], v[1]);
      whi[r][k] = pack_half2(v[2], v[3]);
      packed ^= wlo[r][k] ^ whi[r][k];
      if ((r * KC + k) % ${PACK_CHUNKS} == ${PACK_CHUNKS - 1} || r * KC + k == RW * KC - 1) {
        (void)__syncthreads_or(packed == 0u);
        packed = 0;
      }`,
      ]
    : ["\n  float4 wr[RW][KC];", "      wr[r][k] = make_float4(v[0], v[1], v[2], v[3]);"];
  const weights = `${declare}
  #pragma unroll
  for (int r = 0; r < RW; r++) {
    const int lr = rg * RW + r;
    #pragma unroll
    for (int k = 0; k < KC; k++) {
      const int col = 4 * (cg + CG * k);
      float v[4];
      #pragma unroll
      for (int j = 0; j < 4; j++) v[j] = (lr < R && col + j < K) ? weight_at(w, lr, col + j) : 0.f;
${store}
    }
  }`;
  // per chunk: the batch columns' x once, then each row's weights (fp16: unpacked once per chunk and row); `product`
  // ends with each warp's sums in `part`, `matvec` with the barrier after which any thread may read them
  const product = `
    // the tile's mat-vec: thread (rg, cg) multiplies its rows by its columns of every batch column
    float a[N32];
    #pragma unroll
    for (int i = 0; i < N32; i++) a[i] = 0.f;
    #pragma unroll
    for (int k = 0; k < KC; k++) {
      float4 x[BT];
      #pragma unroll
      for (int b = 0; b < BT; b++) x[b] = vcur[(vrow + b) * (KP / 4) + cg + CG * k];
${fp16 ? FMA_BY_ROW : FMA_BY_COMPONENT}
    }
    // reduce over the row group: within each warp (reduce-scatter), then across its CW warps in shared memory
${reduceScatter(Math.ceil((plan.rowsPerThread * BATCH_TILE) / 32) * 32)}
    #pragma unroll
    for (int j = 0; j < Q; j++) part[((cg >> 5) * RG + rg) * N32 + lane * Q + j] = a[j];`;
  // a tile of one sequence (batch 1, or a batch's last tile): one column's FMAs and an all-reduce of RW sums instead of
  // BT columns' FMAs and the reduce-scatter of N32, a quarter of the product's instructions
  const fma1 = fp16
    ? `      #pragma unroll
      for (int r = 0; r < RW; r++) {
        const float2 lo = unpack_half2(wlo[r][k]), hi = unpack_half2(whi[r][k]);
        a1[r] = fmaf(hi.y, x0.w, fmaf(hi.x, x0.z, fmaf(lo.y, x0.y, fmaf(lo.x, x0.x, a1[r]))));
      }`
    : `      #pragma unroll
      for (int j = 0; j < 4; j++) {
        #pragma unroll
        for (int r = 0; r < RW; r++) {
          const float wj = j == 0 ? wr[r][k].x : j == 1 ? wr[r][k].y : j == 2 ? wr[r][k].z : wr[r][k].w;
          const float xj = j == 0 ? x0.x : j == 1 ? x0.y : j == 2 ? x0.z : x0.w;
          a1[r] = fmaf(wj, xj, a1[r]);
        }
      }`;
  const product1 = `
    // the mat-vec of a tile of one column (row vrow)
    static_assert(RW <= 32, "one lane per row of a warp's sums");
    float a1[RW];
    #pragma unroll
    for (int r = 0; r < RW; r++) a1[r] = 0.f;
    #pragma unroll
    for (int k = 0; k < KC; k++) {
      const float4 x0 = vcur[vrow * (KP / 4) + cg + CG * k];
${fma1}
    }
    #pragma unroll
    for (int o = 16; o >= 1; o >>= 1) {
      #pragma unroll
      for (int r = 0; r < RW; r++) a1[r] += __shfl_xor_sync(0xffffffffu, a1[r], o);
    }
    if (lane < RW) {
      float v = a1[0];
      #pragma unroll
      for (int r = 1; r < RW; r++) v = lane == r ? a1[r] : v;
      part[((cg >> 5) * RG + rg) * N32 + lane * BT] = v; // where row_sum(part, row, 0) reads row 'lane'
    }`;
  return {
    weights,
    product,
    matvec: `${product}\n    __syncthreads();`,
    matvecAny: `      if (nt == 1) {${product1}
        __syncthreads();
      } else {${product}
        __syncthreads();
      }`,
  };
}

/** The sum of row `lr`, batch column `b` of the tile's product (after matvec's __syncthreads). */
export const ROW_SUM = `
__device__ __forceinline__ float row_sum(const float* part, int lr, int b) {
  const int rg = lr / RW, i = (lr - rg * RW) * BT + b;
  float s = 0.f;
  #pragma unroll
  for (int wg = 0; wg < CW; wg++) s += part[(wg * RG + rg) * N32 + i];
  return s;
}`;

/** 16-byte copies global → shared through L2 (cp.async.cg), and the wait for all of a thread's. */
const CP_ASYNC = `
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((u32)__cvta_generic_to_shared(smem)), "l"(gmem)
               : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
`;

/**
 * Settling polled entries: entry e of a thread is float4 idx = threadIdx.x + e·NT of the rows in shared memory (row
 * idx / PER_ROW, chunk idx % PER_ROW). Both loads below end in settle_group: for a group of up to 32 entries, `pending`
 * marks those still −0.0 (or, with `inflight`, whose cp.async copies were just issued); each round waits for the
 * copies, re-checks in shared memory and re-issues only those still pending, so a round costs one L2 round trip
 * whatever the number of values. Returns false if a value never arrived (status written) or another CTA failed.
 */
const SETTLE = `${CP_ASYNC}
// How many of the first n rows are polled: they are a prefix (the sequences that had a previous step).
template <typename RowOf>
__device__ __forceinline__ int polled_prefix(int n, RowOf row_of) {
  int k = 0;
  for (; k < n; k++) {
    bool poll = false;
    (void)row_of(k, poll);
    if (!poll) break;
  }
  return k;
}
// Waits for the phase of an mbarrier with this parity to complete, bounded as the polls are (false: it never did, or
// another CTA failed).
__device__ __forceinline__ bool wait_mbar(unsigned long long* m, u32 parity, int* status, int step) {
  u32 spins = 0;
  while (!mbar_try_wait(m, parity)) {
    if (++spins > kBarrierSpinLimit) {
      report_error(status, kErrPollTimeout, step, -1, -1, -1);
      return false;
    }
    if ((spins & 1023u) == 0 && *(volatile int*)status != 0) return false;
  }
  return true;
}
template <typename RowOf>
__device__ __forceinline__ bool settle_group(float4* vs4, int e0, u32 pending, bool inflight, RowOf row_of,
                                             int* status, int step) {
  constexpr int PER_ROW = K / 4;
  u32 spins = 0;
  while (pending != 0) {
    if (!inflight) {
      for (u32 m = pending; m != 0; m &= m - 1) {
        const int idx = threadIdx.x + (e0 + __ffs(m) - 1) * NT, b = idx / PER_ROW, q = idx - b * PER_ROW;
        bool poll = false;
        cp_async16(vs4 + b * (KP / 4) + q, row_of(b, poll) + 4 * q);
      }
    }
    inflight = false;
    cp_async_wait_all();
    u32 still = 0;
    for (u32 m = pending; m != 0; m &= m - 1) {
      const int e = e0 + __ffs(m) - 1;
      const int idx = threadIdx.x + e * NT;
      if (pending4(vs4[(idx / PER_ROW) * (KP / 4) + idx % PER_ROW])) still |= 1u << (e - e0);
    }
    pending = still;
    if (pending == 0) break;
    if (++spins > kBarrierSpinLimit) {
      const int idx = threadIdx.x + (e0 + __ffs(pending) - 1) * NT;
      report_error(status, kErrPollTimeout, step, idx / PER_ROW, 4 * (idx % PER_ROW), -1);
      return false;
    }
    if ((spins & 1023u) == 0 && *(volatile int*)status != 0) return false;
  }
  return true;
}`;

/** Loads a tile's vector rows into shared memory (polling rows other CTAs publish); zero rows where `src` is null. */
export const LOAD_TILE = `${SETTLE}
// Rows b < nslots of the shared buffer are filled: row b < nrows from row_of(b, poll) (K floats, 16-byte aligned),
// polled when 'poll' is set, or is zero (null). Polled values are copied global → shared by cp.async (L2, no
// registers), 32 entries of a thread at a time, then settled.
template <typename RowOf>
__device__ __forceinline__ bool load_tile(float4* vs4, int nrows, int nslots, RowOf row_of, int* status, int step) {
  constexpr int PER_ROW = K / 4;
  const int TOTAL = nslots * PER_ROW;
  const int E = (TOTAL + NT - 1) / NT;
  #pragma unroll 1
  for (int e0 = 0; e0 < E; e0 += 32) {
    const int e1 = min(E, e0 + 32);
    u32 pending = 0;
    for (int e = e0; e < e1; e++) {
      const int idx = threadIdx.x + e * NT;
      if (idx >= TOTAL) break;
      const int b = idx / PER_ROW, q = idx - b * PER_ROW;
      float4* dst = vs4 + b * (KP / 4) + q;
      bool poll = false;
      const float* r = b < nrows ? row_of(b, poll) : nullptr;
      if (r == nullptr) *dst = make_float4(0.f, 0.f, 0.f, 0.f);
      else if (!poll) *dst = *reinterpret_cast<const float4*>(r + 4 * q);
      else {
        cp_async16(dst, r + 4 * q);
        pending |= 1u << (e - e0);
      }
    }
    if (!settle_group(vs4, e0, pending, true, row_of, status, step)) return false;
  }
  return true;
}`;

/**
 * The backward's pipelined loop's tile loads (a batch of several tiles per replica): a tile's BT rows go to one of two
 * slots, and the next tile's copies are issued before this tile is multiplied, so the wait for other CTAs' values of
 * a tile published a tile or more earlier is hidden behind this tile's product. issue_tile starts the copies: one TMA
 * bulk copy per polled row, issued by the last warp's last lanes (not the first warps' cell threads) and counted on the
 * slot's mbarrier; rows that are not polled are loaded directly, rows past `nt` are zero. (The same loop with 16-byte
 * cp.async copies by every thread was slower than the step loop: LSTM 1152 batch 16, 7.2 against 6.2 ms; measured in
 * bench/results/h100/issue18/session19/.) settle_tile waits for the slot's barrier, re-fetches the values that were
 * still −0.0 when the copy read them and waits again until none is, or reports a value that never arrived.
 */
export const TILE_PIPE = `
// Rows of a tile that are polled: those whose sequence had a step before (a prefix), for a tile of nt rows starting
// at local column b0 of a replica that holds npl of the previous step's sequences (no loop over row_of: the loop
// cost ~3% of the forward's issue slots at batch 16).
__device__ __forceinline__ int polled_rows(int nt, int npl, int b0) { return max(0, min(nt, npl - b0)); }
// npolled: polled_rows of the tile
template <typename RowOf>
__device__ __forceinline__ void issue_tile(float4* slot, unsigned long long* bar, int nt, int npolled, RowOf row_of) {
  constexpr int PER_ROW = K / 4;
  // issued by the last warp's last lanes, not the first warps' cell threads
  const int qb = NT - 1 - (int)threadIdx.x;
  if (qb == 0) mbar_arrive_expect(bar, (u32)npolled * (u32)(4 * K));
  if (qb >= 0 && qb < npolled) {
    bool poll = false;
    bulk_copy(slot + qb * (KP / 4), row_of(qb, poll), 4 * K, bar);
  }
  for (int idx = threadIdx.x + npolled * PER_ROW; idx < BT * PER_ROW; idx += NT) {
    const int b = idx / PER_ROW, q = idx - b * PER_ROW;
    bool poll = false;
    const float* r = b < nt ? row_of(b, poll) : nullptr;
    slot[b * (KP / 4) + q] = r == nullptr ? make_float4(0.f, 0.f, 0.f, 0.f) : *reinterpret_cast<const float4*>(r + 4 * q);
  }
}
template <typename RowOf>
__device__ __forceinline__ bool settle_tile(float4* slot, unsigned long long* bar, u32 parity, int nt, RowOf row_of,
                                            int* status, int step) {
  constexpr int PER_ROW = K / 4;
  constexpr int E = (BT * PER_ROW + NT - 1) / NT;
  static_assert(E <= 64, "entries per thread of a tile");
  if (!wait_mbar(bar, parity, status, step)) return false;
  u32 spins = 0;
  for (;;) {
    // every entry read at once (independent loads, no memory clobber between them: a loop that re-issued as it
    // went read them one latency after another, ~4k cycles a tile of the LSTM 1152 backward), the −0.0 ones marked
    unsigned long long pend = 0;
    #pragma unroll
    for (int e = 0; e < E; e++) {
      const int idx = threadIdx.x + e * NT;
      const int b = idx / PER_ROW;
      if (idx < BT * PER_ROW && b < nt && pending4(slot[b * (KP / 4) + idx - b * PER_ROW])) pend |= 1ull << e;
    }
    if (pend == 0) return true;
    // rare: re-fetch the polled ones (rows that are not polled hold no −0.0 that matters)
    int first = -1;
    for (unsigned long long m = pend; m != 0; m &= m - 1) {
      const int idx = threadIdx.x + (__ffsll(m) - 1) * NT;
      const int b = idx / PER_ROW, q = idx - b * PER_ROW;
      bool poll = false;
      const float* r = row_of(b, poll);
      if (!poll) continue;
      cp_async16(slot + b * (KP / 4) + q, r + 4 * q);
      if (first < 0) first = idx;
    }
    if (first < 0) return true;
    cp_async_wait_all();
    if (++spins > kBarrierSpinLimit) {
      report_error(status, kErrPollTimeout, step, first / PER_ROW, 4 * (first % PER_ROW), -1);
      return false;
    }
    if ((spins & 1023u) == 0 && *(volatile int*)status != 0) return false;
  }
}`;

/**
 * The whole batch's rows in one buffer through the CTA pair's multicast: each CTA copies every other polled row
 * (one bulk copy per row, to both CTAs), the plain rows are loaded directly, and after the barrier every thread
 * settles its entries that were still −0.0 when the copy read them, as load_tile does.
 */
export const LOAD_TILE_MC = `
template <typename RowOf>
__device__ __forceinline__ bool load_tile_mc(float4* vs4, int nrows, int nslots, RowOf row_of,
                                             unsigned long long* mbar, u32 parity, int* status, int step) {
  constexpr int PER_ROW = K / 4;
  const int npolled = polled_prefix(nrows, row_of);
  if (threadIdx.x == 0) mbar_arrive_expect(mbar, (u32)npolled * (u32)(4 * K));
  const u32 rank = cluster_rank();
  for (int b = CS * threadIdx.x + (int)rank; b < npolled; b += CS * NT) {
    bool poll = false;
    bulk_multicast(vs4 + b * (KP / 4), row_of(b, poll), 4 * K, mbar, (unsigned short)((1u << CS) - 1));
  }
  // the other rows: h0 (loaded) or zeros
  const int TOTAL = nslots * PER_ROW;
  for (int idx = threadIdx.x + npolled * PER_ROW; idx < TOTAL; idx += NT) {
    const int b = idx / PER_ROW, q = idx - b * PER_ROW;
    bool poll = false;
    const float* r = b < nrows ? row_of(b, poll) : nullptr;
    vs4[b * (KP / 4) + q] = r == nullptr ? make_float4(0.f, 0.f, 0.f, 0.f) : *reinterpret_cast<const float4*>(r + 4 * q);
  }
  if (!wait_mbar(mbar, parity, status, step)) return false;
  // values published after the copy read them are still −0.0: settle those, 32 entries of a thread at a time
  const int TP = npolled * PER_ROW;
  const int E = (TP + NT - 1) / NT;
  #pragma unroll 1
  for (int e0 = 0; e0 < E; e0 += 32) {
    const int e1 = min(E, e0 + 32);
    u32 pending = 0;
    for (int e = e0; e < e1; e++) {
      const int idx = threadIdx.x + e * NT;
      if (idx >= TP) break;
      if (pending4(vs4[(idx / PER_ROW) * (KP / 4) + idx % PER_ROW])) pending |= 1u << (e - e0);
    }
    if (!settle_group(vs4, e0, pending, false, row_of, status, step)) return false;
  }
  return true;
}`;

/** A kernel's start: zero the vector buffers; a clustered build also sets up the pair's barriers. */
export function pairPrologue(on: boolean): string {
  const zero = `  for (int i = tid; i < (mcx ? 2 : 1) * lb * (KP / 4); i += NT) vs4[i] = make_float4(0.f, 0.f, 0.f, 0.f);`;
  if (!on) return zero;
  return `${zero}
  // the pair's multicast barriers (one per buffer), initialised before the partner may signal them
  __shared__ unsigned long long mbar[2];
  u32 mbar_phase = 0;
  if (mcx) {
    if (tid == 0) {
      mbar_init(&mbar[0]);
      mbar_init(&mbar[1]);
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    cluster_sync();
  }`;
}

/** The group load of a step: through the pair's multicast where the launch uses it (clustered builds), else alone. */
export function pairLoad(on: boolean, rows: string, step: string): string {
  const alone = `load_tile(vs4, ${rows}, nslots, row_of, status, ${step})`;
  if (!on) return `        const bool ok = ${alone};`;
  return `        const bool ok = mcx ? load_tile_mc(const_cast<float4*>(vcur), ${rows}, nslots, row_of, &mbar[s & 1],
                                           (mbar_phase >> (s & 1)) & 1u, status, ${step})
                            : ${alone};
        mbar_phase ^= mcx ? 1u << (s & 1) : 0u;`;
}
