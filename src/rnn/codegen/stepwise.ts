/**
 * The CUDA of the non-persistent path (src/rnn/gpu/stepwise.ts): a layer too large for the registers runs one cuBLAS
 * GEMM (h(t−1)·W_hhᵀ, or the gate gradients · W_hh backward) and one element-wise kernel per step. The element-wise
 * kernels do the cell math of the persistent kernels (src/rnn/gpu/kernel-source.ts) on the same buffers and layouts
 * (`saved`, gate order, packed rows), so the weight-gradient GEMMs after the backward are shared.
 */
import { DEVICE_ACTIVATIONS } from "../../codegen/device-math.js";
import { gatesOf, type RnnCellName } from "../plan/dense.js";

export const STEPWISE_KERNEL_NAMES = { forward: "rnn_step_forward", backward: "rnn_step_backward" } as const;

function forwardCell(cell: RnnCellName): string {
  switch (cell) {
    case "rnn-tanh":
      return "h = tanhf(xg[0] + hw[0]);";
    case "rnn-relu":
      return "h = fmaxf(xg[0] + hw[0], 0.f);";
    case "lstm":
      return `const float gi = sigm(xg[0] + hw[0]), gf = sigm(xg[H] + hw[H]);
    const float gg = tanhf(xg[2 * H] + hw[2 * H]), go = sigm(xg[3 * H] + hw[3 * H]);
    const float cprev = b < nprev ? sstate[(size_t)(offp + b) * H + u] : c0[(size_t)b * H + u];
    const float c = gf * cprev + gi * gg;
    h = go * tanhf(c);
    float* gt = sgates + row * (4 * H) + u;
    gt[0] = gi; gt[H] = gf; gt[2 * H] = gg; gt[3 * H] = go;
    sstate[row * H + u] = c;
    if (b >= nnext) cn[(size_t)b * H + u] = c;`;
    case "gru":
      return `const float gr = sigm(xg[0] + hw[0]), gz = sigm(xg[H] + hw[H]);
    const float hnl = hw[2 * H] + bhn[u];
    const float gn = tanhf(xg[2 * H] + gr * hnl);
    h = (1.f - gz) * gn + gz * hprev;
    float* gt = sgates + row * (3 * H) + u;
    gt[0] = gr; gt[H] = gz; gt[2 * H] = gn;
    sstate[row * H + u] = hnl;`;
  }
}

function backwardCell(cell: RnnCellName): string {
  switch (cell) {
    case "rnn-tanh":
      return `const float hv = y[row * ldy + u];
    dp[0] = dh * (1.f - hv * hv);`;
    case "rnn-relu":
      return `const float hv = y[row * ldy + u];
    dp[0] = hv > 0.f ? dh : 0.f;`;
    case "lstm":
      return `const float* gt = sgates + row * (4 * H) + u;
    const float gi = gt[0], gf = gt[H], gg = gt[2 * H], go = gt[3 * H];
    const float cv = sstate[row * H + u], tc = tanhf(cv);
    const float cprev = has_prev ? sstate[prow * H + u] : c0[ci];
    const float dc = (from_next ? carry_c[ci] : dcn[ci]) + dh * go * (1.f - tc * tc);
    dp[0] = dc * gg * gi * (1.f - gi);
    dp[H] = dc * cprev * gf * (1.f - gf);
    dp[2 * H] = dc * gi * (1.f - gg * gg);
    dp[3 * H] = dh * tc * go * (1.f - go);
    carry_c[ci] = dc * gf;
    if (!has_prev) dc0[ci] = dc * gf;`;
    case "gru":
      return `const float* gt = sgates + row * (3 * H) + u;
    const float gr = gt[0], gz = gt[H], gn = gt[2 * H];
    const float hnl = sstate[row * H + u], hprev = shprev[row * H + u];
    const float dn = dh * (1.f - gz) * (1.f - gn * gn);
    const float dz = dh * (hprev - gn) * gz * (1.f - gz);
    const float dr = dn * hnl * gr * (1.f - gr);
    dp[0] = dr; dp[H] = dz; dp[2 * H] = dn * gr;
    float* dx = dpre_x + row * (3 * H) + u;
    dx[0] = dr; dx[H] = dz; dx[2 * H] = dn;
    carry_h[ci] = dh * gz;`;
  }
}

/** The two element-wise kernels of a (cell, hidden) layer's non-persistent path. */
export function stepwiseKernelSource(cell: RnnCellName, hidden: number): string {
  const G = gatesOf(cell);
  return `// non-persistent ${cell}, hidden ${hidden}: one GEMM and one element-wise kernel per step (src/rnn/gpu/stepwise-source.ts)
constexpr int H = ${hidden};
constexpr int G = ${G};
typedef unsigned int u32;
${DEVICE_ACTIVATIONS}

// Step t of the forward over rows b < nb (one thread per (row, unit)). hw0 = h(t−1)·W_hhᵀ [nb, G·H]; the previous
// state of row b is y's row of step tp (b < nprev) or h0/c0. Saved: as the persistent forward's (gates, state, h(t−1)).
extern "C" __global__ void ${STEPWISE_KERNEL_NAMES.forward}(
    const float* __restrict__ xw, const float* __restrict__ hw0, const float* __restrict__ bhn,
    const float* __restrict__ h0, const float* __restrict__ c0, float* y, int ldy, float* hn, float* cn, float* saved,
    int total, int nb, int off, int nprev, int offp, int nnext) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nb * H) return;
  const int b = i / H, u = i - b * H;
  const size_t row = (size_t)(off + b);
  float* sgates = saved;
  float* sstate = saved + (size_t)total * H * (G == 1 ? 0 : G);
  float* shprev = saved + (size_t)total * H * (G == 4 ? 5 : G == 3 ? 4 : 0);
  const float* xg = xw + row * (G * H) + u;
  const float* hw = hw0 + (size_t)b * (G * H) + u;
  const float hprev = b < nprev ? y[(size_t)(offp + b) * ldy + u] : h0[(size_t)b * H + u];
  float h;
  {
    ${forwardCell(cell)}
  }
  y[row * ldy + u] = h;
  shprev[row * H + u] = hprev;
  if (b >= nnext) hn[(size_t)b * H + u] = h;
}

// Iteration s of the backward over rows b < nrows: rec = dpre_h(tp)·W_hh [np, H] (the GEMM before it); rows active
// at step t get their gate gradients, rows b ≥ nb (first forward step tp) their dh0. carry [2, B, H] in global memory.
extern "C" __global__ void ${STEPWISE_KERNEL_NAMES.backward}(
    const float* __restrict__ saved, const float* __restrict__ y, int ldy, const float* __restrict__ c0,
    const float* __restrict__ dy, int lddy, const float* __restrict__ dhn, const float* __restrict__ dcn,
    const float* __restrict__ rec, float* dpre_h, float* dpre_x, float* dh0, float* dc0, float* carry, int total,
    int B, int t, int nb, int off, int np, int has_prev_all, int prev_rows, int prev_off) {
  const int nrows = max(nb, np);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nrows * H) return;
  const int b = i / H, u = i - b * H;
  const size_t ci = (size_t)b * H + u;
  const float* sgates = saved;
  const float* sstate = saved + (size_t)total * H * (G == 1 ? 0 : G);
  const float* shprev = saved + (size_t)total * H * (G == 4 ? 5 : G == 3 ? 4 : 0);
  float* carry_c = carry;
  float* carry_h = carry + (size_t)B * H;
  const float r = b < np ? rec[ci] : 0.f;
  if (b >= nb) { // b's first forward step was tp: what reaches its initial state
    dh0[ci] = r${cell === "gru" ? " + carry_h[ci]" : ""};
    return;
  }
  const size_t row = (size_t)(off + b);
  const bool from_next = b < np;
  const float dh = dy[row * lddy + u] + (from_next ? r${cell === "gru" ? " + carry_h[ci]" : ""} : dhn[ci]);
  const bool has_prev = has_prev_all != 0 || b < prev_rows;
  const size_t prow = has_prev ? (size_t)(prev_off + b) : 0;
  float* dp = dpre_h + row * (G * H) + u;
  {
    ${backwardCell(cell)}
  }
}
`;
}
