/**
 * How a persistent kernel gets the vector of a step (h(t−1) forward, the gate gradients backward) that the other CTAs
 * publish: polled copies into shared memory (cp.async, then settling the values that were still −0.0), the pipelined
 * loops' per-tile TMA bulk copies counted on an mbarrier, and the CTA pair's multicast of the whole batch. Nothing
 * here depends on how the matrix is stored: a sparse persistent kernel loads its vector the same way.
 */

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
 * cp.async copies by every thread was slower than the step loop: LSTM 1152 batch 16 on an H100, 7.2 against 6.2 ms.)
 * settle_tile waits for the slot's barrier, re-fetches the values that were
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
