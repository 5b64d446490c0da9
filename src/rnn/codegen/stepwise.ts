/**
 * The CUDA of the non-persistent path (runtime/stepwise.ts): a layer too large for the registers runs one cuBLAS
 * GEMM (h(t−1)·W_hhᵀ, or the gate gradients · W_hh backward) and one element-wise kernel per step. The element-wise
 * kernels do the cell math of the persistent kernels (dense-forward.ts, dense-backward.ts) on the same buffers and
 * layouts (`saved`, gate order, packed rows), so the weight-gradient GEMMs after the backward are shared; each cell's
 * math is its file in cells/, rendered here through the stepwise sites below.
 */
import { DEVICE_ACTIVATIONS } from "../../codegen/device-math.js";
import type { RnnCellName } from "../plan/index.js";
import { gatesOf } from "../spec.js";
import { CELLS, type CellCode } from "./cells/index.js";
import { type BackwardSite, declLines, type ForwardSite, gateOffset, indented, load, packed } from "./cells/site.js";
import { renderParams, STEPWISE_BACKWARD_PARAMS, STEPWISE_FORWARD_PARAMS } from "./params.js";

export const STEPWISE_KERNEL_NAMES = { forward: "rnn_step_forward", backward: "rnn_step_backward" } as const;

// The stepwise kernels' sites of the cells' math (cells/site.ts): one thread per (row b, unit u), declarations two a
// line, a row's stores on one line where they fit.
const at = gateOffset;
/** The cell's lines sit in a block of the kernel's body. */
const INDENT = 4;

function forwardSite(cell: CellCode): ForwardSite {
  return {
    unit: "u",
    declare: (...decls) => declLines(decls, 2),
    // the state of row b's step before (y's row of step tp where b < nprev), else the initial one
    get prevState() {
      return `b < nprev ? sstate[(size_t)(offp + b) * H + u] : ${cell.state!.initial}[(size_t)b * H + u]`;
    },
    pre: (g) => `xg[${at(g)}] + hw[${at(g)}]`,
    x: (g) => `xg[${at(g)}]`,
    rec: (g) => `hw[${at(g)}]`,
    keep: () => [],
    save: (gates, state) => [
      `float* gt = sgates + row * (${gates.length} * H) + u;`,
      ...packed(
        gates.map((g, i) => `gt[${at(i)}] = ${g};`),
        INDENT,
      ),
      `sstate[row * H + u] = ${state};`,
    ],
  };
}

function backwardSite(cell: CellCode): BackwardSite {
  return {
    unit: "u",
    declare: (...decls) => declLines(decls, 2),
    get prevState() {
      return `has_prev ? sstate[prow * H + u] : ${cell.state!.initial}[ci]`;
    },
    savedGates: (gates) => [
      `const float* gt = sgates + row * (${gates.length} * H) + u;`,
      ...declLines(
        gates.map((g, i) => load(g, `gt[${at(i)}]`)),
        gates.length,
      ),
    ],
    get lastGrad() {
      return `${cell.state!.lastGrad}[ci]`;
    },
    carry: (which) => `carry_${which}[ci]`,
    gateGrads: (values) =>
      packed(
        values.map((v, g) => `dp[${at(g)}] = ${v};`),
        INDENT,
      ),
    stores: (lines) => packed(lines, INDENT),
  };
}

/** The two element-wise kernels of a (cell, hidden) layer's non-persistent path. */
export function stepwiseKernelSource(cell: RnnCellName, hidden: number): string {
  const G = gatesOf(cell);
  const code = CELLS[cell];
  const st = code.state;
  // the forward cell, then the last step's carried state (LSTM's cn) of a sequence that ends here
  const forward = [
    ...code.forward(forwardSite(code)),
    ...(st ? [`if (b >= nnext) ${st.last}[(size_t)b * H + u] = ${st.name};`] : []),
  ];
  const bk = backwardSite(code);
  return `// non-persistent ${cell}, hidden ${hidden}: one GEMM and one element-wise kernel per step (src/rnn/codegen/stepwise.ts)
constexpr int H = ${hidden};
constexpr int G = ${G};
typedef unsigned int u32;
${DEVICE_ACTIVATIONS}

// Step t of the forward over rows b < nb (one thread per (row, unit)). hw0 = h(t−1)·W_hhᵀ [nb, G·H]; the previous
// state of row b is y's row of step tp (b < nprev) or h0/c0. Saved: as the persistent forward's (gates, state, h(t−1)).
extern "C" __global__ void ${STEPWISE_KERNEL_NAMES.forward}(
${renderParams(STEPWISE_FORWARD_PARAMS)}) {
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
${indented(forward, INDENT)}
  }
  y[row * ldy + u] = h;
  shprev[row * H + u] = hprev;
  if (b >= nnext) hn[(size_t)b * H + u] = h;
}

// Iteration s of the backward over rows b < nrows: rec = dpre_h(tp)·W_hh [np, H] (the GEMM before it); rows active
// at step t get their gate gradients, rows b ≥ nb (first forward step tp) their dh0. carry [2, B, H] in global memory.
extern "C" __global__ void ${STEPWISE_KERNEL_NAMES.backward}(
${renderParams(STEPWISE_BACKWARD_PARAMS)}) {
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
    dh0[ci] = ${code.hFromNext(bk, "r")};
    return;
  }
  const size_t row = (size_t)(off + b);
  const bool from_next = b < np;
  const float dh = dy[row * lddy + u] + (from_next ? ${code.hFromNext(bk, "r")} : dhn[ci]);
  const bool has_prev = has_prev_all != 0 || b < prev_rows;
  const size_t prow = has_prev ? (size_t)(prev_off + b) : 0;
  float* dp = dpre_h + row * (G * H) + u;
  {
${indented(code.backward(bk), INDENT)}
  }
}
`;
}
