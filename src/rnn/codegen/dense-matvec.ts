/**
 * The dense persistent kernels' arithmetic: a plan's compile-time constants, the recurrent matrix block held in
 * registers (fp32, or fp16 pairs), the register mat-vec of a tile of batch columns, its reduction over the row group,
 * and `row_sum`, which a cell thread reads its unit's sums with.
 */
import { BATCH_TILE, paddedCols, type RnnKernelPlan } from "../plan/index.js";
import { gatesOf } from "../spec.js";

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
