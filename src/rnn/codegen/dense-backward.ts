/**
 * The dense persistent backward kernel of one layer direction (the kernels' design: codegen/index.ts): steps in the
 * reverse of the forward's order; each CTA holds its units' columns of W_hh in registers, multiplies them by the gate
 * gradients of the step processed before, and its cell threads run the cell's backward (cells/). Two loops: the step
 * loop, and the pipelined tile loop (eager, or with deferred cells in a build of its own).
 */
import type { RnnKernelPlan } from "../plan/index.js";
import { CELLS, type CellCode } from "./cells/index.js";
import { type BackwardSite, declLines, gateOffset, indented, load } from "./cells/site.js";
import { constants, matvecParts, ROW_SUM } from "./dense-matvec.js";
import { nextTile, pipelinePrologue, settleAndIssue } from "./dense-pipeline.js";
import { clustered, clusterSize, phaseMacros, RNN_KERNEL_NAMES, type RnnKernelOptions } from "./kernel-options.js";
import { PERSISTENT_BACKWARD_PARAMS, renderParams } from "./params.js";
import { COMMON } from "./prelude.js";
import { LOAD_TILE, LOAD_TILE_MC, pairLoad, pairPrologue, TILE_PIPE } from "./vector-loads.js";

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
  return `// persistent ${plan.cell} backward, hidden ${plan.hidden}, ${plan.precision} weights (src/rnn/codegen/dense-backward.ts)
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

// dpre_h [N, G·H]: gradients of the recurrent pre-activations (filled with −0.0 before the launch; what W_hh's gradient
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

/**
 * A backward tile's cell after its product (`continue` ends the tile: a loop's body, or a do-while(false)): the
 * cell's math, whose reads of memory went before the wait (backwardPrefetch).
 */
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
 * ahead. Measured on an H100: LSTM 1152 at batch 16, 5.65 → 3.62 ms per backward launch. `defer` (RnnKernelOptions.deferredBackward, a build of its own): each tile's cell runs after the next
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

/**
 * The cell thread's loads of a backward step, issued before it waits for the other CTAs: the cell's fetched lines,
 * then the outer gradient of a carried state's last value (LSTM's dcn), as dy's and dhn's are fetched.
 */
function backwardPrefetch(plan: Pick<RnnKernelPlan, "cell">): string {
  const code = CELLS[plan.cell];
  const st = code.state;
  const fetched = code.backward(backwardSite(code)).filter((l) => typeof l !== "string");
  return indented(
    [...fetched, ...(st ? [`const float ${st.lastGrad}v = (active && !from_next) ? ${st.lastGrad}[ci] : 0.f;`] : [])],
    6,
  );
}
