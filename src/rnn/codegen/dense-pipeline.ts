/**
 * What the pipelined tile loops of the forward and the backward kernel (dense-forward.ts, dense-backward.ts) share:
 * their start (two tile slots, one mbarrier each, the step bookkeeping), the wait for a tile with the copies of the
 * next, and the move to the next tile or step.
 */

/**
 * A pipelined loop's wait for its tile (slot i & 1), then the copies of the next tile into the other slot: the next of
 * this step (`rows` this step's rows of the replica, `prevLocal` the previous step's, whose rows it polls) or the next
 * step's first (`nextRows` its rows, `curLocal` this step's, whose rows it polls).
 */
export function settleAndIssue(o: { rows: string; prevLocal: string; nextRows: string; curLocal: string }): string {
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
export function nextTile(load: string): string {
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
export function pipelinePrologue(t: string, rowsComment: string, rows: string): string {
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
