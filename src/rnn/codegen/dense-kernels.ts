/**
 * The CUDA of the persistent recurrent kernels, generated per (cell, hidden, kind, precision) from a plan
 * (src/rnn/plan.ts). One launch runs a whole layer direction: each CTA loads its block of the recurrent matrix into
 * registers once and keeps it for every step.
 *
 * Steps hand data to each other without a grid barrier: the vector a step reads (h(t−1) forward, the gate gradients
 * of the step processed before backward) is written by the other CTAs into a buffer the host filled with −0.0, and a
 * reader polls each value until it is not −0.0 (the sparse persistent RNN paper's Lamport-style flags, DESIGN §7);
 * writers turn a −0.0 result into +0.0. That saves the barrier's two extra L2 round trips per step. Polls are
 * bounded: a value that never arrives (a failed CTA, CTAs that are not co-resident) ends the launch with an error in
 * the status block (src/codegen/grid-barrier.ts) instead of a hang.
 *
 * Layouts (docs/RNN.md): packed batches (PyTorch PackedSequence: batchSizes non-increasing, rows of step t at
 * offsets[t] … offsets[t] + batchSizes[t] − 1); PyTorch gate order (LSTM i, f, g, o; GRU r, z, n); W_hh [G·H, H]
 * row-major. `xw` is the input projection of every row, x·W_ihᵀ + b_ih + b_hh (GRU: without b_hn, which stays
 * inside r ⊙ (W_hn h + b_hn)).
 */
import { BATCH_TILE, paddedCols, type RnnKernelPlan } from "../plan/dense.js";
import { CELLS, type CellCode } from "./cells/index.js";
import { type BackwardSite, declLines, type ForwardSite, gateOffset, indented, load } from "./cells/site.js";
import {
  COMMON,
  clustered,
  clusterSize,
  constants,
  LOAD_TILE,
  LOAD_TILE_MC,
  matvecParts,
  pairLoad,
  pairPrologue,
  phaseMacros,
  RNN_KERNEL_NAMES,
  type RnnKernelOptions,
  ROW_SUM,
  TILE_PIPE,
} from "./kernel-parts.js";
import { PERSISTENT_BACKWARD_PARAMS, PERSISTENT_FORWARD_PARAMS, renderParams } from "./params.js";

// the public names of the kernels' building blocks, for the layer and the tests
export {
  clustered,
  clusterSize,
  MULTICAST_MIN_WEIGHT_REGISTERS,
  multicastPays,
  PENDING_BITS,
  PHASE_GLOBAL,
  PHASE_MAX_CTAS,
  PHASE_NAMES,
  POLL_SPIN_LIMIT,
  RNN_ERRORS,
  RNN_KERNEL_NAMES,
  type RnnKernelOptions,
} from "./kernel-parts.js";

/** The forward kernel of one layer direction. */
export function forwardKernelSource(plan: RnnKernelPlan, opts: RnnKernelOptions = {}): string {
  if (plan.kind !== "forward") throw new Error(`forwardKernelSource: plan is for the ${plan.kind} kernel`);
  const { weights, product, matvecAny } = matvecParts(plan);
  const code = CELLS[plan.cell];
  const st = code.state;
  return `// persistent ${plan.cell} forward, hidden ${plan.hidden}, ${plan.precision} weights (src/rnn/gpu/kernel-source.ts)
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

// y [N, ldy] (this direction's columns; filled with −0.0 by rnn_fill), saved: LSTM gates [N, 4H], c [N, H];
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
 * A pipelined loop's wait for its tile (slot i & 1), then the copies of the next tile into the other slot: the next of
 * this step (`rows` this step's rows of the replica, `prevLocal` the previous step's, whose rows it polls) or the next
 * step's first (`nextRows` its rows, `curLocal` this step's, whose rows it polls).
 */
function settleAndIssue(o: { rows: string; prevLocal: string; nextRows: string; curLocal: string }): string {
  return `      PHASE(0)
      const bool ok = settle_tile(slot, &pbar[i & 1], (i >> 1) & 1, nt, rows_of(b0, nbP, offP), status, tp);
      if (__syncthreads_or(!ok)) return;
      PHASE(1)
      if (more) {
        float4* const other = vs4 + ((i + 1) & 1) * BT * (KP / 4);
        unsigned long long* const obar = &pbar[(i + 1) & 1];
        if (same) {
          const int n = min(BT, ${o.rows} - b0 - BT);
          issue_tile(other, obar, n, polled_rows(n, ${o.prevLocal}, b0 + BT), rows_of(b0 + BT, nbP, offP));
        } else {
          const int n = min(BT, ${o.nextRows});
          issue_tile(other, obar, n, polled_rows(n, ${o.curLocal}, 0), rows_of(0, nbC, offC));
        }
      }`;
}

/**
 * The end of a pipelined loop's tile: leave after the last tile, else the next tile of the step, or the next step's
 * first (its bookkeeping shifted by one step, then `load`: the loads of the steps ahead).
 */
function nextTile(load: string): string {
  return `      PHASE(3)
      if (!more) break;
      if (same) b0 += BT;
      else {
        s++;
        b0 = 0;
        nbP = nbC;
        offP = offC;
        nbC = nbN;
        offC = offN;
${load}
      }`;
}

/**
 * The start of a pipelined tile loop (both kernels): the two partial-sum buffers, one mbarrier per tile slot counting
 * its bulk copies (tile i uses slot i & 1, in its phase (i >> 1) & 1), `meta(s)` — the batch size and first packed row
 * of processing step s (`t` of s as given), 0 outside the steps — and `rows_of(b0, np, offp)`, the source of row b of
 * the tile at local column b0: polled where its sequence is one of the np that had a step at offp (`rows`: the polled
 * row's address, then the other's).
 */
function pipelinePrologue(t: string, rowsComment: string, rows: string): string {
  return `    float* const parts = part;
    __shared__ unsigned long long pbar[2];
    if (tid == 0) {
      mbar_init(&pbar[0]);
      mbar_init(&pbar[1]);
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    const auto meta = [&](int s, int& nb, int& off) {
      const bool in = s >= 0 && s < steps;
      const int t = ${t};
      nb = in ? batch_sizes[t] : 0;
      off = in ? offsets[t] : 0;
    };
    ${rowsComment}
    const auto rows_of = [&](int b0, int np, int offp) {
      return [=](int b, bool& poll) -> const float* {
        const int r = rep + (b0 + b) * nrep;
        poll = r < np;
        return r < np ? ${rows};
      };
    };`;
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
 * for launches of one replica over more than two tiles; measured in bench/results/h100/issue18/session20/.
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
      // forward's loop at batch 8 measured, bench/results/h100/issue18/session20/), so the cell runs now
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

// The persistent kernels' sites of the cells' math (cells/site.ts): a cell thread per (unit, tile column), the
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

/**
 * The backward's site: a cell's reads are fetched before the wait for the other CTAs (guarded by `active`, the
 * thread has a step to differentiate), its math runs after the product; gate gradients are published to dpre_h.
 */
function backwardSite(cell: CellCode): BackwardSite {
  // a conditional value is guarded first, so that it reads without parentheses
  const guard = (v: string) => (v.includes("?") ? `!active ? 0.f : ${v}` : `active ? ${v} : 0.f`);
  return {
    unit: "unit",
    declare: (...decls) =>
      decls.map((d) => {
        if (!d.load) return declLines([d], 1)[0]!;
        return { fetch: declLines([{ ...d, value: guard(d.value) }], 1)[0]! };
      }),
    get prevState() {
      return `has_prev ? sstate[prow * H + unit] : ${cell.state!.initial}[ci]`;
    },
    savedGates: (gates) =>
      [
        `const float* gt = sgates + row * (${gates.length} * H) + unit;`,
        ...declLines(
          gates.map((g, i) => load(g, guard(`gt[${gateOffset(i)}]`))),
          3,
        ),
      ].map((fetch) => ({ fetch })),
    // fetched before the wait with the other outer gradients
    get lastGrad() {
      return `${cell.state!.lastGrad}v`;
    },
    carry: (which) => `carry_${which}[cu * bcap + jl]`,
    gateGrads: (values) => values.map((v, g) => `st_publish(dp${g === 0 ? "" : ` + ${gateOffset(g)}`}, ${v});`),
    stores: (lines) => [...lines],
  };
}

/**
 * Dynamic shared memory of a launch over `batch` sequences: the tile's vector rows, the reduction's partial sums, and
 * the per-(unit, sequence) state that stays in the CTA (forward: LSTM's c; backward: dc and GRU's dh ⊙ z).
 */
export function sharedBytes(plan: RnnKernelPlan, batch: number, groupRows = BATCH_TILE): number {
  const n32 = Math.ceil((plan.rowsPerThread * BATCH_TILE) / 32) * 32;
  const cw = plan.threadsPerRowGroup / 32;
  // forward: LSTM's c and the pipelined loop's h (its deferred cells read no slot); backward: dc and GRU's dh ⊙ z
  const states = 2;
  const parts = 2; // the pipelined loops alternate two
  return 4 * (groupRows * paddedCols(plan) + parts * cw * plan.rowGroups * n32 + states * plan.unitsPerCta * batch);
}

/**
 * Rows of the vector a launch over `batch` sequences loads per wait: the whole batch (rounded up to whole tiles)
 * where shared memory allows, else as many whole tiles as fit; 0 if not even one tile fits.
 */
export function groupRows(plan: RnnKernelPlan, batch: number, maxSharedBytes: number): number {
  const fixed = sharedBytes(plan, batch, 0);
  const perRow = 4 * paddedCols(plan);
  const fit = Math.floor((maxSharedBytes - fixed) / perRow / BATCH_TILE) * BATCH_TILE;
  return Math.max(0, Math.min(Math.ceil(batch / BATCH_TILE) * BATCH_TILE, fit));
}

/**
 * The backward kernel of one layer direction: steps in the reverse of the forward's order. A CTA holds the columns
 * of W_hh of its units (rows of W_hhᵀ) and, per step, multiplies them by the recurrent gate gradients of the step
 * processed before (all CTAs' rows, polled), which gives dh of its units; the cell's backward then writes this
 * step's gate gradients for the next step (and the weight-gradient GEMMs after the launch). A sequence's dh0 comes
 * from the product one step after its first forward step was processed (or after the loop).
 */
export function backwardKernelSource(plan: RnnKernelPlan, opts: RnnKernelOptions = {}): string {
  if (plan.kind !== "backward") throw new Error(`backwardKernelSource: plan is for the ${plan.kind} kernel`);
  const { weights, product, matvecAny } = matvecParts(plan);
  return `// persistent ${plan.cell} backward, hidden ${plan.hidden}, ${plan.precision} weights (src/rnn/gpu/kernel-source.ts)
${COMMON}
${phaseMacros(opts.phases === true)}
${constants(plan)}
constexpr int CS = ${Math.max(1, clusterSize(plan, opts))}; // CTAs per cluster (1: not clustered)
// W_hhᵀ element of local row lr (unit (blockIdx.x % NC)·UC + lr), column k (a gate row of W_hh)
__device__ __forceinline__ float weight_at(const float* w, int lr, int k) {
  const int unit = (blockIdx.x % NC) * UC + lr;
  return unit < H ? __ldcg(w + (size_t)k * H + unit) : 0.f;
}
${ROW_SUM}
${LOAD_TILE}
${LOAD_TILE_MC}
${TILE_PIPE}

// dpre_h [N, G·H]: gradients of the recurrent pre-activations (filled with −0.0 by rnn_fill; what W_hh's gradient
// and the next step read); dpre_x [N, G·H]: those of the input side (GRU only: its n gate differs by r; else null).
// Shared memory after the tile: per (unit, sequence) what one step hands the next in this thread [2][UC][bcap]
// (LSTM: dc; GRU: dh ⊙ z). Everything a cell thread reads from global memory is fetched before the poll.
extern "C" __global__ void ${clusterSize(plan, opts) ? `__cluster_dims__(${clusterSize(plan, opts)}, 1, 1) ` : ""}__launch_bounds__(NT, 1) ${RNN_KERNEL_NAMES.backward}(
${renderParams(PERSISTENT_BACKWARD_PARAMS)}) {
  extern __shared__ float4 smem4[];
  // the pair multicast: only in a clustered build (a constant otherwise, so its code folds away) and where the host
  // found the batch fits one group
  const bool mcx = ${clustered(plan, opts) ? "mc != 0" : "false"};
  (void)mc;
  float4* vs4 = smem4;
  float* part = reinterpret_cast<float*>(smem4 + (mcx ? 2 : 1) * lb * (KP / 4));
  float* carry = part + 2 * CW * RG * N32;
  const int tid = threadIdx.x, lane = tid & 31, rg = tid / CG, cg = tid - rg * CG;
${pairPrologue(clustered(plan, opts))}
${weights}
  const int cu = tid / BT, cb = tid - cu * BT;
  const int rep = blockIdx.x / NC; // this CTA's replica
  const int unit = (blockIdx.x - rep * NC) * UC + cu;
  const bool cell_thread = cu < UC && unit < H;
  const float* sgates = saved;
  const float* sstate = saved + (size_t)total * H * (G == 1 ? 0 : G);
  const float* shprev = saved + (size_t)total * H * (G == 4 ? 5 : G == 3 ? 4 : 0);
  float* carry_c = carry;             // LSTM: dc flowing to the previous step
  float* carry_h = carry + UC * bcap; // GRU: dh ⊙ z flowing to the previous step
${backwardPipelined(plan, product, opts.deferredBackward === true)}
  PHASE_START
  for (int s = 0; s <= steps; s++) {
    const int t = s < steps ? (reverse ? s : steps - 1 - s) : -1;
    const int tp = s > 0 ? (reverse ? s - 1 : steps - s) : -1;
    const int nb = t >= 0 ? batch_sizes[t] : 0, off = t >= 0 ? offsets[t] : 0;
    const int np = tp >= 0 ? batch_sizes[tp] : 0, offp = tp >= 0 ? offsets[tp] : 0;
    const int nbl = local_count(nb, rep, nrep), npl = local_count(np, rep, nrep); // this replica's
    const int nrows = max(nbl, npl);
    for (int b0 = 0; b0 < nrows; b0 += BT) {
      PHASE(3)
      const int nt = min(BT, nrows - b0);
${backwardTileHead("off", "reverse ? (t + 1 < steps && bb < batch_sizes[t + 1]) : (t > 0)", "offsets[reverse ? t + 1 : t - 1]")}
      // fetched before the wait: the cell's inputs from this step's forward and the outer gradients
      const float dyv = active ? dy[row * lddy + unit] : 0.f;
      const float dhnv = (active && !from_next) ? dhn[ci] : 0.f;
${backwardPrefetch(plan)}
      __syncthreads();
      PHASE(0)
      const int vrow = b0 % lb;
      const float4* vcur = ${clustered(plan, opts) ? "vs4 + (mcx ? (s & 1) * lb * (KP / 4) : 0)" : "vs4"};
      if (vrow == 0) {
        const int nr = min(lb, nrows - b0);
        const auto row_of = [&](int b, bool& poll) -> const float* {
          const int r = rep + (b0 + b) * nrep;
          poll = r < np;
          return r < np ? dpre_h + (size_t)(offp + r) * (G * H) : nullptr;
        };
        const int nslots = min(lb, (nr + BT - 1) / BT * BT);
        const int npr = min(nr, max(npl - b0, 0));
${pairLoad(clustered(plan, opts), "npr", "tp")}
        if (__syncthreads_or(!ok)) return;
      }
      PHASE(1)
${matvecAny}
      PHASE(2)
${backwardTileCell(plan)}
    }
  }
}
`;
}

/**
 * A backward tile's per-thread bookkeeping: `off` is the step's first packed row, `hasPrev` whether sequence bb has a
 * forward step before t, `prevOff` that step's first packed row.
 */
function backwardTileHead(off: string, hasPrev: string, prevOff: string): string {
  return `      const int jl = b0 + cb, bb = rep + jl * nrep; // the cell thread's local column and its sequence
      const bool mine = cell_thread && cb < nt;
      const bool active = mine && bb < nb; // a step of bb to differentiate (else: bb's dh0, or nothing)
      const size_t ci = (size_t)bb * H + unit;
      const size_t row = (size_t)(${off} + bb);
      const bool from_next = bb < np;
      const bool has_prev = ${hasPrev};
      const size_t prow = has_prev ? (size_t)(${prevOff} + bb) : 0;`;
}

/** A backward tile's cell after its product (`continue` ends the tile: a loop's body, or a do-while(false)). */
function backwardTileCell(plan: RnnKernelPlan): string {
  const code = CELLS[plan.cell];
  const k = backwardSite(code);
  return `      if (!mine) continue;
      const float rec = row_sum(part, cu, cb);
      if (!active) {
        if (from_next) dh0[ci] = ${code.hFromNext(k, "rec")}; // bb's first forward step was tp
        continue;
      }
      const float dh = dyv + (from_next ? ${code.hFromNext(k, "rec")} : dhnv);
      float* dp = dpre_h + row * (G * H) + unit;
${indented(
  code.backward(k).filter((l) => typeof l === "string"),
  6,
)}`;
}

/**
 * The backward's pipelined loop (the host sets `pipe` where a replica's batch spans several tiles): the same work as
 * the step loop, one tile at a time, each tile's rows in one of two shared-memory slots, and the next tile's rows
 * copied (TMA bulk copies, one per row, counted on the slot's mbarrier) while this tile is multiplied. Tile k of a
 * step reads the gate gradients of tile k of the step before, which every CTA published while the other tiles ran,
 * so most of its wait is hidden; the step loop instead waits once per group of tiles, for rows of G·H floats that
 * only a few tiles' worth of shared memory can hold. Two partial-sum buffers: a tile's cell reads one while the next
 * tile's product fills the other. The step bookkeeping (batch sizes, offsets) stays in registers, loaded a step
 * ahead. Measured (bench/results/h100/issue18/session19/): LSTM 1152 at batch 16, 5.65 → 3.62 ms per backward
 * launch. `defer` (RnnKernelOptions.deferredBackward, a build of its own): each tile's cell runs after the next
 * tile's wait, as in the forward's loop, except in steps of one or two tiles; else right after the tile's product
 * and a barrier.
 */
function backwardPipelined(plan: RnnKernelPlan, product: string, defer: boolean): string {
  // the tile's bookkeeping as backwardTileCell reads it (from d_*), then its cell thread's loads
  const fetch = `      const int jl = d_jl, bb = rep + jl * nrep;
      const bool mine = (d_fl & 1) != 0, active = (d_fl & 2) != 0, from_next = (d_fl & 4) != 0;
      const bool has_prev = (d_fl & 8) != 0;
      const size_t ci = (size_t)bb * H + unit, row = (size_t)d_row, prow = (size_t)d_prow;
      const float dyv = active ? dy[row * lddy + unit] : 0.f;
      const float dhnv = (active && !from_next) ? dhn[ci] : 0.f;
${backwardPrefetch(plan)}`;
  const cell = (part: string) => `      do {
        const float* part = ${part};
${backwardTileCell(plan)
  .split("\n")
  .map((l) => `  ${l}`)
  .join("\n")}
      } while (false);`;
  // this tile's bookkeeping into d_* (the forward's step before t is the next processing step)
  const record = `      {
        const int jl = b0 + cb, bb = rep + jl * nrep;
        const bool mine = cell_thread && cb < nt, has_prev = s + 1 < steps && bb < nbN;
        d_jl = jl;
        d_row = offC + bb;
        d_prow = has_prev ? offN + bb : 0;
        d_fl = (mine ? 1 : 0) | (mine && bb < nbC ? 2 : 0) | (bb < nbP ? 4 : 0) | (has_prev ? 8 : 0);
        d_i = i;
      }`;
  const settleIssue = settleAndIssue({
    rows: "nrows",
    prevLocal: "local_count(nbP, rep, nrep)",
    nextRows: "nrows2",
    curLocal: "local_count(nbC, rep, nrep)",
  });
  const productOf = `        const float4* vcur = slot;
        const int vrow = 0;
        float* part = parts + (i & 1) * (CW * RG * N32);
${product}`;
  // deferred: the cell of the tile before runs after this tile's wait (its inputs fetched before it); eager: this
  // tile's cell runs after its product and a barrier
  const tile = defer
    ? `      {
${fetch}
${settleIssue}
${cell("parts + (d_i & 1) * (CW * RG * N32)")}
      }
${record}
      {
${productOf}
      }
      PHASE(2)
      // a step of one or two tiles: the next step's same tile reads this one's gradients at its wait (one tile) or
      // its copy is issued before the deferred cell would run (two), so the cell runs now
      if (nrows <= 2 * BT) {
        __syncthreads();
${fetch}
${cell("parts + (i & 1) * (CW * RG * N32)")}
        d_fl = 0;
      }`
    : `${record}
      {
${fetch}
${settleIssue}
${productOf}
        __syncthreads();
        PHASE(2)
${cell("parts + (i & 1) * (CW * RG * N32)")}
      }`;
  const tail = defer
    ? `    __syncthreads(); // the last product's sums
    {
${fetch}
${cell("parts + (d_i & 1) * (CW * RG * N32)")}
    }
`
    : "";
  return `  if (pipe) {
    // processing step s differentiates forward step t(s) (none at s = steps: that pass only gives the dh0 of the
    // sequences whose first step was t(s − 1)); the gradients it reads are those of step t(s − 1)
${pipelinePrologue(
  "reverse ? s : steps - 1 - s",
  "// tile b0's rows: the gate gradients of its sequences at the step processed before (none where it had none)",
  "dpre_h + (size_t)(offp + r) * (G * H) : nullptr",
)}
    const auto nrows_of = [&](int nb, int np) { return max(local_count(nb, rep, nrep), local_count(np, rep, nrep)); };
    int s = 0, nbC = 0, offC = 0, nbP = 0, offP = 0;
    for (; s <= steps; s++) {
      meta(s, nbC, offC);
      meta(s - 1, nbP, offP);
      if (nrows_of(nbC, nbP) > 0) break;
    }
    if (s > steps) return;
    int nbN, offN;
    meta(s + 1, nbN, offN);
    int b0 = 0;
    {
      const int n = min(BT, nrows_of(nbC, nbP));
      issue_tile(vs4, &pbar[0], n, polled_rows(n, local_count(nbP, rep, nrep), 0), rows_of(0, nbP, offP));
    }
    // the tile whose cell runs next (this thread's): local column, packed row and that of the forward step before,
    // flags (1 a column of this CTA's, 2 a step to differentiate, 4 its gradient flows from the next step, 8 it has a
    // forward step before), and the tile's number (its partial sums' buffer)
    int d_jl = 0, d_row = 0, d_prow = 0, d_fl = 0, d_i = 0;
    PHASE_START
    for (int i = 0;; i++) {
      const int tp = s > 0 ? (reverse ? s - 1 : steps - s) : -1;
      const int nrows = nrows_of(nbC, nbP), nt = min(BT, nrows - b0);
      const bool same = b0 + BT < nrows;
      const int nrows2 = s + 1 <= steps ? nrows_of(nbN, nbC) : 0;
      const bool more = same || nrows2 > 0;
      float4* const slot = vs4 + (i & 1) * BT * (KP / 4);
${tile}
${nextTile("        meta(s + 1, nbN, offN);")}
    }
${tail}    return;
  }`;
}

/** The cell thread's loads of a backward step, issued before it waits for the other CTAs. */
function backwardPrefetch(plan: Pick<RnnKernelPlan, "cell">): string {
  const code = CELLS[plan.cell];
  const st = code.state;
  const fetched = code.backward(backwardSite(code)).filter((l) => typeof l !== "string");
  return indented(
    [...fetched, ...(st ? [`const float ${st.lastGrad}v = (active && !from_next) ? ${st.lastGrad}[ci] : 0.f;`] : [])],
    6,
  );
}
