/**
 * The sparse persistent forward kernel of one layer direction (the sparse persistent RNN paper, DESIGN §7; the plan:
 * plan/sparse.ts, the pair arrays: plan/sparse-pairs.ts). Each CTA holds the ⟨index, value⟩ pairs of its units' rows
 * of W_hh (all gates) in registers — 16-bit indices two to a register, rows padded to equal length — and per step,
 * per tile of BT sequences: loads h(t−1) of the tile into shared memory (polled: Lamport flags; or after the step's
 * grid barrier), multiplies (sparse-product.ts), reduces each row over its row group, and its cell threads run the
 * cell (cells/, the dense kernels' math) and publish h (a computed −0.0 as +0.0, so that it never reads as pending).
 *
 * Any batch: a step's sequences run in tiles of BT columns (the last one partial), the tiles of a step side by side on
 * the launch's replicas (sparse-product.ts). LSTM's c stays in `cn` between a sequence's steps (its cell thread is the
 * same every step: column b of unit u is thread u·BT + b mod BT of a CTA of the tile's replica).
 *
 * Lamport builds leave the exchange buffer as they found it, −0.0 everywhere, so that the next launch needs no fill
 * (the host fills it only after other launches: runtime/sparse.ts). Each cell thread resets the values it published
 * once no CTA reads them any more: when the first tile of step s finds step s − 1's values of every CTA of the replica,
 * each of those CTAs has finished step s − 2 and with it its copies of step s − 3's regions, so the thread resets what
 * it published up to step s − 3; what it published last (the last steps', and a replica's after its tiles ran out)
 * waits for one grid barrier at the end of the launch.
 */
import type { SparseRnnKernelPlan } from "../plan/index.js";
import { CELLS, type CellCode } from "./cells/index.js";
import { declLines, type ForwardSite, gateOffset, indented } from "./cells/site.js";
import { renderParams, SPARSE_FORWARD_PARAMS } from "./params.js";
import { COMMON } from "./prelude.js";
import {
  LOAD_PAIRS,
  loadVector,
  productCode,
  regionOf,
  SPARSE_HELPERS,
  SPARSE_KERNEL_NAMES,
  type SparseKernelOptions,
  sparseConstants,
  sparseSharedFloats,
} from "./sparse-product.js";

/** The module of a sparse forward kernel. */
export function sparseForwardSource(plan: SparseRnnKernelPlan, opts: SparseKernelOptions = {}): string {
  if (plan.kind !== "forward") throw new Error(`sparseForwardSource: plan is for the ${plan.kind} kernel`);
  const code = CELLS[plan.cell];
  const st = code.state;
  const sync = opts.sync ?? "lamport";
  return `// sparse persistent ${plan.cell} forward, hidden ${plan.hidden}, density ${plan.density}, ${sync}, ${opts.wideLoads === false ? "scalar" : "wide"} loads (src/rnn/codegen/sparse-forward.ts)
${COMMON}
${sparseConstants(plan, opts)}
${SPARSE_HELPERS}

// y [N, ldy] (this direction's columns); saved when 'train': LSTM gates [N, 4H], c [N, H]; GRU r, z, n [N, 3H],
// W_hn h + b_hn [N, H]; then h(t−1) of every row [N, H]. xh: the exchange buffer of the steps' h (filled with −0.0 by
// the host for Lamport builds). bar: the barrier build's step counter (zero at launch).
extern "C" __global__ void __launch_bounds__(NT, CPS) ${SPARSE_KERNEL_NAMES.forward}(
${renderParams(SPARSE_FORWARD_PARAMS)}) {
  extern __shared__ float4 smem4[];
  float* hs = reinterpret_cast<float*>(smem4); // the tile's h(t−1) [K·BT]
  float* rs = hs + K * BT;                     // row sums [PR][BT]
  float* pb = rs + PR * BT;                    // partial sums [NT][RW][BT] (a reduction through shared memory)
  float* xs = pb + (${"32 % T == 0 ? 0 : NT * RW * BT"}); // the cell threads' inputs [UC·BT][G + 1]
  (void)pb;
  int* rmap = reinterpret_cast<int*>(hs) + ${sparseSharedFloats(plan) - plan.rowGroups * plan.rowsPerThread}; // the row order [PR]
  const int tid = threadIdx.x;
${LOAD_PAIRS}
  // the cell thread of (unit u, tile column b): local row g·UC + u of the product is gate g of its unit
  const int cu = tid / BT, cb = tid - cu * BT;
  const int unit = cta * UC + cu;
  const bool cell_thread = cu < UC && unit < H;
  float* sgates = saved;
  float* sstate = saved + (size_t)total * H * (G == 1 ? 0 : G);
  float* shprev = saved + (size_t)total * H * (G == 4 ? 5 : G == 3 ? 4 : 0);
  (void)sgates;
  (void)sstate;
  // Lamport builds: the values this thread published at steps [unreset, upto] back to the pending mark (the header)
  int unreset = 0;
  auto reset_published = [&](int upto) {
    for (; unreset <= upto; unreset++) {
      const int t = reverse ? steps - 1 - unreset : unreset;
      const int nb = batch_sizes[t];
      for (int b0 = rep * BT; b0 < nb; b0 += nrep * BT) {
        if (cell_thread && b0 + cb < nb) st_pending(${regionOf("t")} + hs_at(unit, cb));
      }
    }
  };
  (void)reset_published;
  for (int s = 0; s < steps; s++) {
    const int t = reverse ? steps - 1 - s : s;
    const int nb = batch_sizes[t], off = offsets[t];
    const int tp = reverse ? t + 1 : t - 1;
    const int nprev = (s == 0) ? 0 : batch_sizes[tp];
    const bool last_step_all = reverse ? (t == 0) : (t == steps - 1);
    const int nnext = last_step_all ? 0 : batch_sizes[reverse ? t - 1 : t + 1];
    for (int b0 = rep * BT; b0 < nb; b0 += nrep * BT) {
      const int nt = min(BT, nb - b0);
      // the cell thread's inputs, copied into its own slot of xs while the vector is polled
      const int bb = b0 + cb;
      const bool active = cell_thread && cb < nt;
      float* xin = xs + tid * (G + 1);
      if (active) {
        #pragma unroll
        for (int g = 0; g < G; g++) cp_async4(xin + g, xw + (size_t)(off + bb) * (G * H) + g * H + unit);
${st ? `        if (bb >= nprev) cp_async4(xin + G, ${st.initial} + (size_t)bb * H + unit);` : ""}
      }
      __syncthreads(); // the previous tile's readers are done with hs and rs
${loadVector(plan, regionOf("tp"), "min(nt, max(0, nprev - b0))", (j, k) => `h0[(size_t)(b0 + ${j}) * H + ${k}]`, "t")}
${productCode(plan)}
      // the cell, its inputs from xs (in shared memory across the product, not in the registers the pairs need)
      if (active) {
        cp_async_wait();
        const float* xg = xin;
${st ? `        const float ${st.name}init = xin[G];` : ""}
        const size_t row = (size_t)(off + bb);
        const float hprev = hs[hs_at(unit, cb)];
        float h;
${indented(code.forward(forwardSite(code)), 8)}
        y[row * ldy + unit] = h;
        if (!last_step_all) st_publish(${regionOf("t")} + hs_at(unit, cb), h);
        if (train) shprev[row * H + unit] = hprev;
        if (bb >= nnext) hn[(size_t)bb * H + unit] = h;
      }
      // the replica's first tile found step s − 1's values of every CTA: step s − 3's regions are read (the header)
      if (LAMPORT && b0 == rep * BT && nprev > b0) reset_published(s - 3);
    }
    if (!step_barrier(bar, s, status)) return;
  }
  if (LAMPORT) {
    // every CTA done with every region: the rest of what this thread published back to the pending mark
    __syncthreads();
    bool ok = true;
    if (tid == 0) {
      vpps_signal(bar);
      ok = vpps_wait(bar, gridDim.x, status, (u32)steps, steps);
    }
    if (__syncthreads_or(!ok)) return;
    reset_published(steps - 2);
  }
}
`;
}

/** W_hh h(t−1) of gate g of the cell thread's unit: its row of the product (gate-major: g·UC + cu). */
const rowSumOf = (g: number) => `rs[(${g === 0 ? "" : g === 1 ? "UC + " : `${g} * UC + `}cu) * BT + cb]`;

/** The sparse forward's site of the cells' math (cells/site.ts): LSTM's c kept in cn between steps. */
function forwardSite(cell: CellCode): ForwardSite {
  return {
    unit: "unit",
    declare: (...decls) => declLines(decls, 1),
    get prevState() {
      return `bb >= nprev ? ${cell.state!.name}init : ${cell.state!.last}[(size_t)bb * H + unit]`;
    },
    pre: (g) => `${rowSumOf(g)} + xg[${g}]`,
    x: (g) => `xg[${g}]`,
    rec: rowSumOf,
    keep: (state) => [`${cell.state!.last}[(size_t)bb * H + unit] = ${state};`],
    save: (gates, state) => [
      "if (train) {",
      ...gates.map(
        (g, i) => `  sgates[row * (${gates.length} * H) + ${i === 0 ? "" : `${gateOffset(i)} + `}unit] = ${g};`,
      ),
      `  sstate[row * H + unit] = ${state};`,
      "}",
    ],
  };
}
