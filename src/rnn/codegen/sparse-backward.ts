/**
 * The sparse persistent backward kernel of one layer direction: steps in the reverse of the forward's order, as the
 * dense backward (dense-backward.ts). Each CTA holds the pairs of its units' rows of W_hhᵀ (the columns of W_hh, the
 * forward's mask transposed: plan/sparse-pairs.ts) in registers and, per step and tile, multiplies them by the
 * recurrent gate gradients of the step processed before (dpre_h rows of G·H floats, polled or after the step's grid
 * barrier), which gives dh of its units; the cell's backward (cells/) then publishes this step's gate gradients.
 * W_hh's gradient is the GEMM after the launch (runtime), kept at the kept weights by the layer's mask.
 *
 * What a step hands the step before besides dh·W_hh (LSTM dc, GRU dh ⊙ z) is in `carry` [2, B, H], global memory
 * that only the cell thread of (unit, sequence) reads and writes.
 */
import type { SparseRnnKernelPlan } from "../plan/index.js";
import { CELLS, type CellCode } from "./cells/index.js";
import { type BackwardSite, declLines, gateOffset, indented, load } from "./cells/site.js";
import { renderParams, SPARSE_BACKWARD_PARAMS } from "./params.js";
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

/** The module of a sparse backward kernel. */
export function sparseBackwardSource(plan: SparseRnnKernelPlan, opts: SparseKernelOptions = {}): string {
  if (plan.kind !== "backward") throw new Error(`sparseBackwardSource: plan is for the ${plan.kind} kernel`);
  const code = CELLS[plan.cell];
  const k = backwardSite(code);
  const sync = opts.sync ?? "lamport";
  return `// sparse persistent ${plan.cell} backward, hidden ${plan.hidden}, density ${plan.density}, ${sync}, ${opts.wideLoads === false ? "scalar" : "wide"} loads (src/rnn/codegen/sparse-backward.ts)
${COMMON}
${sparseConstants(plan, opts)}
${SPARSE_HELPERS}

// dpre_h [N, G·H]: gradients of the recurrent pre-activations (what W_hh's gradient reads; the step before reads
// them from the exchange buffer xh, filled with −0.0 by the host for Lamport builds); dpre_x [N, G·H]: those of the
// input side (GRU only: its n gate differs by r).
extern "C" __global__ void __launch_bounds__(NT, CPS) ${SPARSE_KERNEL_NAMES.backward}(
${renderParams(SPARSE_BACKWARD_PARAMS)}) {
  extern __shared__ float4 smem4[];
  float* hs = reinterpret_cast<float*>(smem4); // the tile's gate gradients [K·BT]
  float* rs = hs + K * BT;                     // row sums [PR][BT]
  float* pb = rs + PR * BT;                    // partial sums [NT][RW][BT] (a reduction through shared memory)
  (void)pb;
  int* rmap = reinterpret_cast<int*>(hs) + ${sparseSharedFloats(plan) - plan.rowGroups * plan.rowsPerThread}; // the row order [PR]
  const int tid = threadIdx.x;
${LOAD_PAIRS}
  // the cell thread of (unit u, tile column b): local row u of the product is its unit's
  const int cu = tid / BT, cb = tid - cu * BT;
  const int unit = cta * UC + cu;
  const bool cell_thread = cu < UC && unit < H;
  const float* sgates = saved;
  const float* sstate = saved + (size_t)total * H * (G == 1 ? 0 : G);
  const float* shprev = saved + (size_t)total * H * (G == 4 ? 5 : G == 3 ? 4 : 0);
  float* carry_c = carry;                          // LSTM: dc flowing to the previous step
  float* carry_h = carry + (size_t)batch_sizes[0] * H; // GRU: dh ⊙ z flowing to the previous step
  (void)sgates;
  (void)sstate;
  (void)shprev;
  (void)carry_c;
  (void)carry_h;
  for (int s = 0; s <= steps; s++) {
    const int t = s < steps ? (reverse ? s : steps - 1 - s) : -1;
    const int tp = s > 0 ? (reverse ? s - 1 : steps - s) : -1;
    const int nb = t >= 0 ? batch_sizes[t] : 0, off = t >= 0 ? offsets[t] : 0;
    const int np = tp >= 0 ? batch_sizes[tp] : 0;
    const int nrows = max(nb, np);
    for (int b0 = rep * BT; b0 < nrows; b0 += nrep * BT) {
      const int nt = min(BT, nrows - b0);
      __syncthreads(); // the previous tile's readers are done with hs and rs
${loadVector(plan, regionOf("tp"), "min(nt, max(0, np - b0))", null, "tp")}
${productCode(plan)}
      // the cell, its inputs read after the product (live across it, they would take registers the pairs need)
      const int bb = b0 + cb; // the cell thread's sequence
      const bool mine = cell_thread && cb < nt;
      if (mine) {
        const bool active = bb < nb; // a step of bb to differentiate (else: bb's dh0, or nothing)
        const size_t ci = (size_t)bb * H + unit;
        const size_t row = (size_t)(off + bb);
        const bool from_next = bb < np;
        const float rec = rs[cu * BT + cb];
        if (!active) {
          if (from_next) dh0[ci] = ${code.hFromNext(k, "rec")}; // bb's first forward step was tp
        } else {
          const bool has_prev = reverse ? (t + 1 < steps && bb < batch_sizes[t + 1]) : (t > 0);
          const size_t prow = has_prev ? (size_t)(offsets[reverse ? t + 1 : t - 1] + bb) : 0;
          (void)prow;
          const float dh = dy[row * lddy + unit] + (from_next ? ${code.hFromNext(k, "rec")} : dhn[ci]);
          float* dp = dpre_h + row * (G * H) + unit;
          float* xo = ${regionOf("t")} + hs_at(unit, cb); // gate g at hs_at(g·H + unit, cb) = xo + (g·H)·(WIDE ? BT : 1)
${indented(code.backward(k), 10)}
        }
      }
    }
    if (!step_barrier(bar, s, status)) return;
  }
}
`;
}

/** The sparse backward's site of the cells' math: reads where they are used, gate gradients published to dpre_h. */
function backwardSite(cell: CellCode): BackwardSite {
  return {
    unit: "unit",
    declare: (...decls) => declLines(decls, 1),
    get prevState() {
      return `has_prev ? sstate[prow * H + unit] : ${cell.state!.initial}[ci]`;
    },
    savedGates: (gates) => [
      `const float* gt = sgates + row * (${gates.length} * H) + unit;`,
      ...declLines(
        gates.map((g, i) => load(g, `gt[${gateOffset(i)}]`)),
        3,
      ),
    ],
    get lastGrad() {
      return `${cell.state!.lastGrad}[ci]`;
    },
    carry: (which) => `carry_${which}[ci]`,
    // each gate gradient to dpre_h (W_hh's gradient) and, published, to the exchange buffer (the step before)
    gateGrads: (values) =>
      values.flatMap((v, g) => [
        `const float gg${g} = ${v};`,
        `dp[${gateOffset(g)}] = gg${g};`,
        `st_publish(xo${g === 0 ? "" : ` + (${gateOffset(g)}) * (WIDE ? BT : 1)`}, gg${g});`,
      ]),
    stores: (lines) => [...lines],
  };
}
