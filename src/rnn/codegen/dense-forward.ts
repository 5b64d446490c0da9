/**
 * The dense persistent forward kernel of one layer direction (the kernels' design: codegen/index.ts): each CTA holds
 * its units' rows of W_hh (all gates) in registers; per step it loads h(t−1) of the batch, multiplies, and its cell
 * threads run the cell (cells/) and publish h. Two loops: the step loop, and the pipelined tile loop of a build of
 * its own (RnnKernelOptions.pipelinedForward).
 */
import type { RnnKernelPlan } from "../plan/index.js";
import { CELLS, type CellCode } from "./cells/index.js";
import { declLines, type ForwardSite, gateOffset, indented } from "./cells/site.js";
import { constants, matvecParts, ROW_SUM } from "./dense-matvec.js";
import { nextTile, pipelinePrologue, settleAndIssue } from "./dense-pipeline.js";
import { clustered, clusterSize, phaseMacros, RNN_KERNEL_NAMES, type RnnKernelOptions } from "./kernel-options.js";
import { PERSISTENT_FORWARD_PARAMS, renderParams } from "./params.js";
import { COMMON } from "./prelude.js";
import { LOAD_TILE, LOAD_TILE_MC, pairLoad, pairPrologue, TILE_PIPE } from "./vector-loads.js";

/** The forward kernel of one layer direction. */
export function forwardKernelSource(plan: RnnKernelPlan, opts: RnnKernelOptions = {}): string {
  if (plan.kind !== "forward") throw new Error(`forwardKernelSource: plan is for the ${plan.kind} kernel`);
  const { weights, product, matvecAny } = matvecParts(plan);
  const code = CELLS[plan.cell];
  const st = code.state;
  return `// persistent ${plan.cell} forward, hidden ${plan.hidden}, ${plan.precision} weights (src/rnn/codegen/dense-forward.ts)
${COMMON}
${phaseMacros(opts.phases === true)}
${constants(plan)}
constexpr int CS = ${Math.max(1, clusterSize(plan, opts))}; // CTAs per cluster (1: not clustered)
// W_hh element of local row lr (gate g = lr / UC of unit (blockIdx.x % NC)·UC + lr % UC), column k
// A coherent load (__ldcg), never the read-only path: ptxas may re-load a read-only value inside the step loop
// instead of keeping it in a register, which would defeat the point of the kernel.
__device__ __forceinline__ float weight_at(const float* w, int lr, int k) {
  const int g = lr / UC, unit = (blockIdx.x % NC) * UC + lr % UC;
  return unit < H ? __ldcg(w + (size_t)(g * H + unit) * H + k) : 0.f;
}
${ROW_SUM}
${LOAD_TILE}
${LOAD_TILE_MC}
${TILE_PIPE}

// y [N, ldy] (this direction's columns; filled with −0.0 before the launch), saved: LSTM gates [N, 4H], c [N, H];
// GRU r, z, n [N, 3H], W_hn h + b_hn [N, H]; then h(t−1) of every row [N, H] when 'train'.
extern "C" __global__ void ${clusterSize(plan, opts) ? `__cluster_dims__(${clusterSize(plan, opts)}, 1, 1) ` : ""}__launch_bounds__(NT, 1) ${RNN_KERNEL_NAMES.forward}(
${renderParams(PERSISTENT_FORWARD_PARAMS)}) {
  extern __shared__ float4 smem4[];
  // the pair multicast: only in a clustered build (a constant otherwise, so its code folds away) and where the host
  // found the batch fits one group
  const bool mcx = ${clustered(plan, opts) ? "mc != 0" : "false"};
  (void)mc;
  float4* vs4 = smem4;                                           // [mc ? 2 : 1][lb][KP / 4]
  float* part = reinterpret_cast<float*>(smem4 + (mcx ? 2 : 1) * lb * (KP / 4)); // [2][CW][RG][N32]
  float* cstate = part + 2 * CW * RG * N32;                      // LSTM: c of (unit, sequence) [UC][bcap]
  float* hstate = cstate + UC * bcap;                            // the pipelined loop: h of (unit, sequence)
  const int tid = threadIdx.x, lane = tid & 31, rg = tid / CG, cg = tid - rg * CG;
${pairPrologue(clustered(plan, opts))}
${weights}
  // the cell thread of (unit u, tile column b)
  const int cu = tid / BT, cb = tid - cu * BT;
  const int rep = blockIdx.x / NC; // this CTA's replica
  const int unit = (blockIdx.x - rep * NC) * UC + cu;
  const bool cell_thread = cu < UC && unit < H;
  float* sgates = saved;
  float* sstate = saved + (size_t)total * H * (G == 1 ? 0 : G);
  float* shprev = saved + (size_t)total * H * (G == 4 ? 5 : G == 3 ? 4 : 0);
${opts.pipelinedForward === true ? forwardPipelined(plan, product) : "  (void)pipe; // the step loop only (a build without the pipelined loop)"}
  PHASE_START
  for (int s = 0; s < steps; s++) {
    const int t = reverse ? steps - 1 - s : s;
    const int nb = batch_sizes[t], off = offsets[t];
    const int tp = reverse ? t + 1 : t - 1;
    const int nprev = (s == 0) ? 0 : batch_sizes[tp];
    const int offp = (s == 0) ? 0 : offsets[tp];
    const bool last_step_all = reverse ? (t == 0) : (t == steps - 1);
    const int nnext = last_step_all ? 0 : batch_sizes[reverse ? t - 1 : t + 1];
    const int nbl = local_count(nb, rep, nrep); // this replica's sequences at step t
    for (int b0 = 0; b0 < nbl; b0 += BT) {
      PHASE(3)
      const int nt = min(BT, nbl - b0);
      // this tile's input projection, fetched before waiting for h(t−1)
      float xg[G];
      const int jl = b0 + cb, bb = rep + jl * nrep; // the cell thread's local column and its sequence
      const bool active = cell_thread && cb < nt;
      #pragma unroll
      for (int g = 0; g < G; g++) xg[g] = active ? xw[(size_t)(off + bb) * (G * H) + g * H + unit] : 0.f;
${st ? `      const float ${st.name}init = (active && bb >= nprev) ? ${st.initial}[(size_t)bb * H + unit] : 0.f;` : ""}
      __syncthreads(); // the previous tile's readers are done with vs4 and part
      PHASE(0)
      const int vrow = b0 % lb; // this tile's first row in the shared buffer, which holds a group of lb rows
      // multicast (mc): the whole batch is one group, in buffer s & 1
      const float4* vcur = ${clustered(plan, opts) ? "vs4 + (mcx ? (s & 1) * lb * (KP / 4) : 0)" : "vs4"};
      if (vrow == 0) {          // a group's first tile loads the whole group: one wait for all its rows
        const int nr = min(lb, nbl - b0);
        const auto row_of = [&](int b, bool& poll) -> const float* {
          const int r = rep + (b0 + b) * nrep;
          poll = r < nprev;
          return r < nprev ? y + (size_t)(offp + r) * ldy : h0 + (size_t)r * H;
        };
        const int nslots = min(lb, (nr + BT - 1) / BT * BT);
${pairLoad(clustered(plan, opts), "nr", "t")}
        if (__syncthreads_or(!ok)) return;
      }
      PHASE(1)
${matvecAny}
      PHASE(2)
      if (active) {
        const size_t row = (size_t)(off + bb);
        const float hprev = reinterpret_cast<const float*>(vcur)[(vrow + cb) * KP + unit];
        float h;
${indented(code.forward(forwardSite(code, "bb >= nprev")), 8)}
        st_publish(y + row * ldy + unit, h);
        if (train) shprev[row * H + unit] = hprev;
        if (bb >= nnext) {
          hn[(size_t)bb * H + unit] = h;
${st ? `          ${st.last}[(size_t)bb * H + unit] = ${st.name};` : ""}
        }
      }
    }
  }
}
`;
}

/**
 * The forward's pipelined loop (the host sets `pipe` where a replica's batch spans several tiles): one tile per wait,
 * each tile's rows of h(t−1) in one of two shared-memory slots, the next tile's rows copied (TMA bulk copies counted
 * on the slot's mbarrier) while this tile is multiplied, as in the backward's. Unlike the backward's, a tile's cell
 * is deferred: the cell threads run it after the next tile's wait, before their share of the next tile's product, so
 * its latency (a chain of loads, activations and stores by two warps) overlaps the other warps' products instead of
 * idling them behind a barrier. Two partial-sum buffers: the deferred cell reads one while the product fills the
 * other. A tile depends on the same tile of the step before, whose cell ran at least a tile earlier, except where a
 * step has one or two tiles: there the next step's tile waits for this one's cell, or its copy is issued before that
 * cell runs, so the cell runs at once ("flush"). The cell threads keep h (and LSTM's c) of their (unit, sequence) in
 * shared memory, so the cell reads nothing of a slot. Runs in a build of its own (RnnKernelOptions.pipelinedForward)
 * for launches of one replica over more than two tiles (where it measured faster on an H100: plan/launch.ts).
 */
function forwardPipelined(plan: RnnKernelPlan, product: string): string {
  const code = CELLS[plan.cell];
  const st = code.state;
  return `  if (pipe) {
${pipelinePrologue(
  "reverse ? steps - 1 - s : s",
  "// tile b0's rows: h(t−1) of its sequences (polled where they had a step before, else h0)",
  "y + (size_t)(offp + r) * ldy : h0 + (size_t)r * H",
)}
    const auto local = [&](int nb) { return local_count(nb, rep, nrep); }; // this replica's of nb sequences
    // the step's, the previous one's, and the next two's batch sizes and offsets: loaded two steps ahead, so that a
    // step change never waits for them
    int s = 0, nbC = 0, offC = 0, nbP = 0, offP = 0, nbN = 0, offN = 0, nbN2 = 0, offN2 = 0;
    for (; s < steps; s++) {
      meta(s, nbC, offC);
      if (local(nbC) > 0) break;
    }
    if (s >= steps) return;
    meta(s - 1, nbP, offP);
    meta(s + 1, nbN, offN);
    meta(s + 2, nbN2, offN2);
    int b0 = 0;
    // the deferred cell's tile: its packed row (−1: none for this thread), local column and flags
    int c_row = -1, c_jl = 0, c_flags = 0, c_i = 0;
    // its input projection, fetched before the wait that precedes it
    const auto fetch_x = [&](float (&xg)[G]) {
      #pragma unroll
      for (int g = 0; g < G; g++) xg[g] = c_row >= 0 ? xw[(size_t)c_row * (G * H) + g * H + unit] : 0.f;
    };
    const auto run_cell = [&](const float* part, const float (&xg)[G]) {
      if (c_row < 0) return;
      const int jl = c_jl, bb = rep + jl * nrep;
      const size_t row = (size_t)c_row;
      const bool first = (c_flags & 1) != 0;
      const float hprev = first ? h0[(size_t)bb * H + unit] : hstate[cu * bcap + jl];
${st ? `      const float ${st.name}init = first ? ${st.initial}[(size_t)bb * H + unit] : 0.f;` : ""}
      float h;
${indented(code.forward(forwardSite(code, "first")), 6)}
      st_publish(y + row * ldy + unit, h);
      hstate[cu * bcap + jl] = h;
      if (train) shprev[row * H + unit] = hprev;
      if ((c_flags & 2) != 0) {
        hn[(size_t)bb * H + unit] = h;
${st ? `        ${st.last}[(size_t)bb * H + unit] = ${st.name};` : ""}
      }
    };
    issue_tile(vs4, &pbar[0], min(BT, local(nbC)), polled_rows(min(BT, local(nbC)), local(nbP), 0), rows_of(0, nbP, offP));
    PHASE_START
    for (int i = 0;; i++) {
      const int tp = reverse ? steps - s : s - 1; // the step whose h this tile reads
      const int nl = local(nbC), nt = min(BT, nl - b0);
      const bool same = b0 + BT < nl;
      const bool more = same || local(nbN) > 0;
      float4* const slot = vs4 + (i & 1) * BT * (KP / 4);
      float xg[G];
      fetch_x(xg);
${settleAndIssue({ rows: "nl", prevLocal: "local(nbP)", nextRows: "local(nbN)", curLocal: "nl" })}
      run_cell(parts + (c_i & 1) * (CW * RG * N32), xg); // the previous tile's (if deferred)
      {
        const int jl = b0 + cb, bb = rep + jl * nrep;
        c_row = (cell_thread && cb < nt) ? offC + bb : -1;
        c_jl = jl;
        c_flags = (bb >= nbP ? 1 : 0) | (bb >= nbN ? 2 : 0);
        c_i = i;
      }
      const float4* vcur = slot;
      const int vrow = 0;
      float* part = parts + (i & 1) * (CW * RG * N32);
      // no barrier after the product: the deferred cell reads these sums after the next tile's wait (a barrier)
${product}
      PHASE(2)
      // a step of one or two tiles (the tail of a packed batch): the next step's same tile reads this one's h at its
      // wait (one tile) or its copy is issued before the deferred cell would run (two: every copy re-fetched, as the
      // forward's loop at batch 8 measured), so the cell runs now
      if (nl <= 2 * BT) {
        __syncthreads();
        float xf[G];
        fetch_x(xf);
        run_cell(part, xf);
        c_row = -1;
      }
${nextTile(`        nbN = nbN2;
        offN = offN2;
        meta(s + 2, nbN2, offN2);`)}
    }
    __syncthreads(); // the last product's sums
    float xl[G];
    fetch_x(xl);
    run_cell(parts + (c_i & 1) * (CW * RG * N32), xl);
    return;
  }`;
}

// The forward's site of the cells' math (cells/site.ts): a cell thread per (unit, tile column), W_hh h(t−1) from the
// product's row sums in shared memory, declarations one a line.

/** W_hh h(t−1) of gate g of the cell thread's unit: its row of the product (rows are gate-major: g·UC + cu). */
const rowSumOf = (g: number) => `row_sum(part, ${g === 0 ? "" : g === 1 ? "UC + " : `${g} * UC + `}cu, cb)`;

/** The forward's site; `first`: whether this is the sequence's first step (its state comes from the initial one). */
function forwardSite(cell: CellCode, first: string): ForwardSite {
  return {
    unit: "unit",
    declare: (...decls) => declLines(decls, 1),
    // the state stays in shared memory between a thread's steps; a sequence's first step reads the initial one
    // (fetched before the wait)
    get prevState() {
      return `(${first}) ? ${cell.state!.name}init : cstate[cu * bcap + jl]`;
    },
    pre: (g) => `${rowSumOf(g)} + xg[${g}]`,
    x: (g) => `xg[${g}]`,
    rec: rowSumOf,
    keep: (state) => [`cstate[cu * bcap + jl] = ${state};`],
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
