/**
 * The bank-aware order of a sparse kernel's pairs (the sparse persistent RNN paper's Algorithm 1, Appendix A) and a
 * model of the shared-memory wavefronts a layout's loads of h take.
 *
 * Shared memory has 32 banks of 4 bytes. h is stored interleaved [K][w] for loads of w batch columns (w = 1, 2, 4:
 * ld.shared.f32/v2/v4), so index i occupies bytes 4w·i … 4w·i + 4w − 1, banks (w·i) mod 32 … + w − 1: the 32/w
 * "bank groups" of w banks, group i mod (32/w). A warp's wide load is served in w phases of 32/w consecutive lanes
 * (half-warps for 64-bit, quarter-warps for 128-bit); a phase takes as many wavefronts as the most distinct indices
 * its lanes read in one group (lanes reading the same index share one), so a load takes w wavefronts at best.
 *
 * Algorithm 1 reconciled with both errata:
 * - banks are bank groups: B = 32/w colors (not 32), index i has color i mod B, and the colors step by B;
 * - slots are 0-based, so a color is full when its next slot is ≥ N (the paper's `> N` would write slot N);
 * - the paper's "row X" rotation is the thread's lane: slot p of lane L ideally reads group (p − L) mod B, so at every
 *   slot the B lanes of a phase read B different groups. Color(g) starts at the first slot ≡ g + L (mod B);
 * - a thread's rows stay in their slot ranges (one accumulator per piece of pairsPerPiece slots; sparse.ts), so the
 *   algorithm runs per piece, over that piece's slots;
 * - padding (value 0) may read any index, so after the real pairs are placed each empty slot gets padding whose index
 *   is its slot's ideal group: padding never conflicts where the paper's ⟨index, 0⟩ could.
 *
 * The order is a permutation of each thread's real pairs (same rows, same pieces): the product is the same sum in a
 * different order, equal within fp32 rounding, not bit for bit (see layoutProduct, sparse-pairs.ts).
 */
import { gatesOf } from "../spec.js";
import { permutesRows, rowBalancedPairs, type SparseRnnKernelPlan, type WideLoad } from "./sparse.js";
import {
  emptyPairArrays,
  indexOffset,
  localRowOf,
  packSparsePairs,
  pairAt,
  randomRowBalancedRows,
  rowOrderOf,
  type SparsePairLayout,
  slotOffset,
  sparsePairsPerRow,
  transposeSparseRows,
} from "./sparse-pairs.js";

const mod = (a: number, b: number) => ((a % b) + b) % b;

function checkWideLoad(where: string, w: number): asserts w is WideLoad {
  if (w !== 1 && w !== 2 && w !== 4) throw new RangeError(`${where}: wideLoad must be 1, 2 or 4; got ${w}`);
}

/**
 * How the bank-aware order is found. The first two permute each thread's pairs within its pieces only.
 * - "algorithm-1": the paper's greedy, each thread on its own (above).
 * - "warp": the lanes of a load phase together. For each phase and piece, the lanes' pairs are the edges of a
 *   bipartite multigraph lanes × bank groups, and a slot is a color: where no group holds more than P pairs of the
 *   phase's lanes (P = pairsPerPiece), König's theorem gives a coloring with the P slots in which no two lanes read
 *   one group at a slot, found by alternating paths (Kempe chains). A group with more than P pairs keeps P of them
 *   in the coloring; each extra pair goes to a free slot of its lane where it raises that slot's wavefronts least.
 *   Padding then takes, at each free slot, an index of a group no lane reads there. The paper's greedy cannot
 *   coordinate lanes, and with a few pairs per piece (a wide row group) its rotation has nothing to rotate.
 * - "balanced" (the default): first moves pairs between the threads of a row group (the same row, the same piece:
 *   the row's sum is the same, summed in another order) so that in every load phase each bank group holds as near
 *   the phase's share as the row groups that straddle phases allow, then the warp coloring. A phase's wavefronts are
 *   at least its fullest group's pairs ÷ 1, and with random indices the fullest of B groups holds ~20–30% more than
 *   a slot count of pairs (RNN 2304 at 10%, v4: 1.34 wavefronts per ideal one in the warp order); a row group whose
 *   threads lie in two phases can trade a pair of a phase's full group for one of the other phase's, and the trades
 *   chain from phase to phase. The trades minimise the sum of squared group sizes per phase (a convex stand-in for
 *   the overflow past the slot count that carries a surplus along the chain, where the overflow alone is flat).
 */
export type BankAwareMethod = "algorithm-1" | "warp" | "balanced";

/** What decides where a plan's slots are. */
const LAYOUT_KEYS = [
  "cell",
  "hidden",
  "kind",
  "ctas",
  "threads",
  "rowsPerThread",
  "threadsPerRowGroup",
  "pairsPerPiece",
  "indexBits",
  "cols",
] as const;

/**
 * Each thread's pairs reordered so that the lanes of a warp's load phases read distinct bank groups as often as
 * possible for loads of `wideLoad` columns (default: the plan's batch tile).
 */
export function bankAwareOrder(
  plan: SparseRnnKernelPlan,
  layout: SparsePairLayout,
  wideLoad: WideLoad = plan.batchTile,
  method: BankAwareMethod = "balanced",
): SparsePairLayout {
  checkWideLoad("bankAwareOrder", wideLoad);
  for (const key of LAYOUT_KEYS) {
    if (layout.plan[key] !== plan[key]) {
      throw new RangeError(
        `bankAwareOrder: the layout was packed for another plan (${key} ${String(layout.plan[key])}, the plan's ${String(plan[key])})`,
      );
    }
  }
  const out = emptyPairArrays(plan);
  if (method === "algorithm-1") algorithm1(plan, layout, wideLoad, out);
  else if (method === "warp") warpColoring(plan, layout, wideLoad, out);
  else if (method === "balanced") {
    // the warp coloring of the balanced layout, CTA by CTA where it takes fewer wavefronts than the warp order's
    const balanced = balanceRowGroups(plan, layout, wideLoad);
    warpColoring(plan, balanced, wideLoad, out);
    const warp = emptyPairArrays(plan);
    warpColoring(plan, layout, wideLoad, warp);
    const mine = ctaWavefronts(plan, out.indices, wideLoad);
    const theirs = ctaWavefronts(plan, warp.indices, wideLoad);
    const slots = plan.pairsPerThread * plan.threads;
    const words = (out.indices.length / plan.ctas) | 0;
    const pr = plan.rowGroups * plan.rowsPerThread;
    const rowOrder = rowOrderOf(balanced).slice();
    const identity = rowOrderOf(layout);
    for (let c = 0; c < plan.ctas; c++) {
      if (theirs[c]! >= mine[c]!) continue;
      out.values.set(warp.values.subarray(c * slots, (c + 1) * slots), c * slots);
      out.padding.set(warp.padding.subarray(c * slots, (c + 1) * slots), c * slots);
      out.indices.set(warp.indices.subarray(c * words, (c + 1) * words), c * words);
      rowOrder.set(identity.subarray(c * pr, (c + 1) * pr), c * pr);
    }
    return { plan, order: "bank-aware", wideLoad, ...out, rowOrder };
  } else {
    throw new RangeError(`bankAwareOrder: method must be 'algorithm-1', 'warp' or 'balanced'; got ${String(method)}`);
  }
  return { plan, order: "bank-aware", wideLoad, ...out, ...(layout.rowOrder ? { rowOrder: layout.rowOrder } : {}) };
}

type PairArrays = ReturnType<typeof emptyPairArrays>;

function put(
  plan: SparseRnnKernelPlan,
  out: PairArrays,
  c: number,
  i: number,
  slot: number,
  index: number,
  value: number,
) {
  const at = slotOffset(plan, c, slot, i);
  out.values[at] = value;
  out.padding[at] = 0;
  out.indices[indexOffset(plan, c, slot, i)] = index;
}

/** The paper's Algorithm 1 per thread and piece, with the errata reconciled (see the file's comment). */
function algorithm1(plan: SparseRnnKernelPlan, layout: SparsePairLayout, wideLoad: WideLoad, out: PairArrays): void {
  const B = 32 / wideLoad;
  const P = plan.pairsPerPiece;
  const color = new Int32Array(B);
  const placed = new Uint8Array(P);
  for (let c = 0; c < plan.ctas; c++) {
    for (let i = 0; i < plan.threads; i++) {
      const lane = i % 32;
      for (let r = 0; r < plan.rowsPerThread; r++) {
        const o = r * P;
        for (let g = 0; g < B; g++) color[g] = o + mod(g + lane - o, B);
        placed.fill(0);
        for (let q = 0; q < P; q++) {
          const p = pairAt(layout, c, i, o + q);
          if (p.padding) continue;
          let x = p.index;
          let g = x % B;
          while (color[g]! >= o + P) g = ++x % B; // that group's slots are used up: the next group's
          const slot = color[g]!;
          color[g] = slot + B;
          placed[slot - o] = 1;
          put(plan, out, c, i, slot, p.index, p.value);
        }
        for (let q = 0; q < P; q++) {
          // padding: value 0 (emptyPairArrays), an index in the slot's ideal group
          if (placed[q] === 0) out.indices[indexOffset(plan, c, o + q, i)] = mod(o + q - lane, B) % plan.cols;
        }
      }
    }
  }
}

/**
 * The layout with each row group's pairs of a piece moved between its threads ("balanced" in BankAwareMethod): per
 * CTA and piece, a local search over the row groups whose threads lie in more than one load phase, each step the
 * trade (a pair of group g from phase A for one of group g' from phase B, or a pair moved into padding) that lowers
 * Σ size² over the phases' groups most, until none does. Every thread keeps at most pairsPerPiece pairs of the piece;
 * the pairs of a (segment, group) are taken in index order, so the result is a function of the indices alone.
 */
function balanceRowGroups(plan: SparseRnnKernelPlan, layout: SparsePairLayout, wideLoad: WideLoad): SparsePairLayout {
  const B = 32 / wideLoad;
  const P = plan.pairsPerPiece;
  const T = plan.threadsPerRowGroup;
  const RW = plan.rowsPerThread;
  const PR = plan.rowGroups * RW;
  const phases = Math.ceil(plan.threads / B);
  const out = emptyPairArrays(plan);
  const rowOrder = new Int32Array(plan.ctas * PR);
  const deg = new Int32Array(phases * B); // pairs of group g in phase p: deg[p·B + g]
  // row groups whose first thread starts a phase begin a new block: no row group links them to the phases before
  const block = new Int32Array(plan.rowGroups);
  for (let rg = 1; rg < plan.rowGroups; rg++) block[rg] = block[rg - 1]! + ((rg * T) % B === 0 ? 1 : 0);
  for (let c = 0; c < plan.ctas; c++) {
    // each local row's pairs, wherever the input layout holds them
    const rowPairs: { index: number; value: number }[][] = Array.from({ length: PR }, () => []);
    for (let rg = 0; rg < plan.rowGroups; rg++) {
      for (let r = 0; r < RW; r++) {
        const list = rowPairs[localRowOf(layout, c, rg * RW + r)]!;
        for (let i = rg * T; i < (rg + 1) * T; i++) {
          for (let q = 0; q < P; q++) {
            const x = pairAt(layout, c, i, r * P + q);
            if (!x.padding) list.push({ index: x.index, value: x.value });
          }
        }
        list.sort((x, y) => x.index - y.index);
      }
    }
    const order = chooseRowOrder(rowPairs);
    rowOrder.set(order, c * PR);
    for (let r = 0; r < RW; r++) {
      const o = r * P;
      deg.fill(0);
      // the row groups: their segments (a phase's threads of the group) and the pairs of each group
      const groups: {
        phase: number[];
        threads: number[][];
        cnt: Int32Array;
        pairs: { index: number; value: number }[][];
      }[] = [];
      for (let rg = 0; rg < plan.rowGroups; rg++) {
        const phase: number[] = [];
        const threads: number[][] = [];
        for (let i = rg * T; i < (rg + 1) * T; i++) {
          const p = Math.floor(i / B);
          if (phase.at(-1) !== p) {
            phase.push(p);
            threads.push([]);
          }
          threads.at(-1)!.push(i);
        }
        // the row's pairs in index order fill the group's threads one after another, P each, to start from
        const cnt = new Int32Array(phase.length * B);
        const pairs: { index: number; value: number }[][] = Array.from({ length: B }, () => []);
        rowPairs[order[rg * RW + r]!]!.forEach((x, n) => {
          const g = x.index % B;
          const k = phase.indexOf(Math.floor((rg * T + Math.floor(n / P)) / B));
          cnt[k * B + g]!++;
          deg[phase[k]! * B + g]!++;
          pairs[g]!.push(x);
        });
        groups.push({ phase, threads, cnt, pairs });
      }
      for (let sweep = 0; sweep < 200; sweep++) {
        let moved = false;
        for (const rg of groups) {
          const n = rg.phase.length;
          if (n < 2) continue;
          for (let improved = true; improved; ) {
            improved = false;
            for (let a = 0; a < n && !improved; a++) {
              for (let b = 0; b < n && !improved; b++) {
                if (a === b) continue;
                if (tradeBetween(rg, a, b)) improved = moved = true;
              }
            }
          }
        }
        if (!moved) break;
      }
      // the pairs back into the threads: segment by segment, group by group, a thread filled before the next
      for (const rg of groups) {
        const taken = new Int32Array(B);
        rg.phase.forEach((_, k) => {
          const threads = rg.threads[k]!;
          let t = 0;
          let q = 0;
          for (let g = 0; g < B; g++) {
            for (let m = 0; m < rg.cnt[k * B + g]!; m++) {
              if (q === P) {
                t++;
                q = 0;
              }
              const x = rg.pairs[g]![taken[g]!++]!;
              const at = slotOffset(plan, c, o + q, threads[t]!);
              out.values[at] = x.value;
              out.padding[at] = 0;
              out.indices[indexOffset(plan, c, o + q, threads[t]!)] = x.index;
              q++;
            }
          }
        });
      }
    }
  }
  return { plan, order: "naive", wideLoad: null, ...out, rowOrder };

  /**
   * The rows of a CTA placed in its row slots so that each block's bank groups hold near equal pairs (a local search
   * swapping two rows of different blocks while that lowers Σ size² over the blocks' groups): the trades between a
   * block's phases can then even out its phases. With one block (one warp's phases, w = 1) the identity.
   */
  function chooseRowOrder(rowPairs: readonly { index: number }[][]): Int32Array {
    const order = Int32Array.from({ length: PR }, (_, e) => e);
    const blocks = (block[plan.rowGroups - 1]! + 1) * RW;
    if (blocks <= RW || !permutesRows(plan)) return order;
    const blockOf = (slot: number) => block[Math.floor(slot / RW)]! * RW + (slot % RW);
    const n = rowPairs.map((list) => {
      const v = new Int32Array(B);
      for (const x of list) v[x.index % B]!++;
      return v;
    });
    const N = new Int32Array(blocks * B);
    for (let slot = 0; slot < PR; slot++) for (let g = 0; g < B; g++) N[blockOf(slot) * B + g]! += n[order[slot]!]![g]!;
    for (let sweep = 0; sweep < 8; sweep++) {
      let swapped = false;
      for (let s1 = 0; s1 < PR; s1++) {
        for (let s2 = s1 + 1; s2 < PR; s2++) {
          const b1 = blockOf(s1);
          const b2 = blockOf(s2);
          if (b1 === b2) continue;
          const v1 = n[order[s1]!]!;
          const v2 = n[order[s2]!]!;
          let d = 0;
          for (let g = 0; g < B; g++) {
            const x = v2[g]! - v1[g]!;
            d += 2 * x * (N[b1 * B + g]! - N[b2 * B + g]!) + 2 * x * x;
          }
          if (d >= 0) continue;
          for (let g = 0; g < B; g++) {
            const x = v2[g]! - v1[g]!;
            N[b1 * B + g]! += x;
            N[b2 * B + g]! -= x;
          }
          const t = order[s1]!;
          order[s1] = order[s2]!;
          order[s2] = t;
          swapped = true;
        }
      }
      if (!swapped) break;
    }
    return order;
  }

  /** The best trade of segment a's pairs for segment b's (or into b's padding), applied if it lowers Σ size². */
  function tradeBetween(rg: { phase: number[]; threads: number[][]; cnt: Int32Array }, a: number, b: number): boolean {
    const pa = rg.phase[a]! * B;
    const pb = rg.phase[b]! * B;
    // moving one pair of group g from a to b changes Σ size² by 2(deg_b,g − deg_a,g + 1)
    let g1 = -1;
    let g2 = -1; // the best and second best groups to move a → b
    for (let g = 0; g < B; g++) {
      if (rg.cnt[a * B + g] === 0) continue;
      const d = deg[pb + g]! - deg[pa + g]!;
      if (g1 < 0 || d < deg[pb + g1]! - deg[pa + g1]!) {
        g2 = g1;
        g1 = g;
      } else if (g2 < 0 || d < deg[pb + g2]! - deg[pa + g2]!) g2 = g;
    }
    if (g1 < 0) return false;
    const gain = (g: number) => 2 * (deg[pb + g]! - deg[pa + g]! + 1);
    let used = 0;
    for (let g = 0; g < B; g++) used += rg.cnt[b * B + g]!;
    let best = 0;
    let move: [number, number] | null = null; // [group a → b, group b → a or −1]
    if (used < rg.threads[b]!.length * P && gain(g1) < best) {
      best = gain(g1);
      move = [g1, -1];
    }
    for (let h = 0; h < B; h++) {
      if (rg.cnt[b * B + h] === 0) continue;
      const g = h === g1 ? g2 : g1;
      if (g < 0) continue;
      const back = 2 * (deg[pa + h]! - deg[pb + h]! + 1);
      if (gain(g) + back < best) {
        best = gain(g) + back;
        move = [g, h];
      }
    }
    if (move === null) return false;
    const [g, h] = move;
    rg.cnt[a * B + g]!--;
    rg.cnt[b * B + g]!++;
    deg[pa + g]!--;
    deg[pb + g]!++;
    if (h >= 0) {
      rg.cnt[b * B + h]!--;
      rg.cnt[a * B + h]!++;
      deg[pb + h]!--;
      deg[pa + h]!++;
    }
    return true;
  }
}

/** The warp-joint coloring per load phase and piece (see BankAwareMethod). */
function warpColoring(plan: SparseRnnKernelPlan, layout: SparsePairLayout, wideLoad: WideLoad, out: PairArrays): void {
  const B = 32 / wideLoad;
  const P = plan.pairsPerPiece;
  // vertices: the phase's B lanes, and each group's copies (copy k of group g: vertex k·B + g, at most P pairs each,
  // at most B copies); the slot tables hold the edge at (vertex, color), −1 if free
  const atLane = new Int32Array(B * P);
  const atCopy = new Int32Array(B * B * P);
  const degree = new Int32Array(B);
  const seen = new Int32Array(B);
  const count = new Int32Array(B * P); // pairs of group g at color c
  const most = new Int32Array(P); // the most pairs of one group at color c (concentrate's cache)
  const edgeLane: number[] = [];
  const edgeCopy: number[] = [];
  const edgeIndex: number[] = [];
  const edgeValue: number[] = [];
  const edgeColor: number[] = [];
  for (let c = 0; c < plan.ctas; c++) {
    for (let w = 0; w < plan.threads / 32; w++) {
      for (let phase = 0; phase < wideLoad; phase++) {
        const lane0 = 32 * w + phase * B;
        for (let r = 0; r < plan.rowsPerThread; r++) {
          const o = r * P;
          atLane.fill(-1);
          degree.fill(0);
          seen.fill(0);
          edgeLane.length = edgeCopy.length = edgeIndex.length = edgeValue.length = edgeColor.length = 0;
          for (let l = 0; l < B; l++) {
            for (let q = 0; q < P; q++) {
              const p = pairAt(layout, c, lane0 + l, o + q);
              if (p.padding) continue;
              degree[p.index % B]!++;
              edgeLane.push(l);
              edgeIndex.push(p.index);
              edgeValue.push(p.value);
              edgeColor.push(-1);
              edgeCopy.push(-1);
            }
          }
          let copies = 1;
          for (let g = 0; g < B; g++) copies = Math.max(copies, Math.ceil(degree[g]! / P));
          atCopy.fill(-1, 0, copies * B * P);
          // a group's last pairs beyond P go to its further copies (the last in lane order: they are colored first)
          for (let e = 0; e < edgeLane.length; e++) {
            const g = edgeIndex[e]! % B;
            const rank = seen[g]!++;
            const overflow = Math.max(0, degree[g]! - P);
            edgeCopy[e] =
              (rank < degree[g]! - overflow ? 0 : 1 + Math.floor((rank - (degree[g]! - overflow)) / P)) * B + g;
          }
          // the copies beyond the first first, so that they take the low colors and share them: a color whose groups
          // all have one pair costs one wavefront, one with a second copy two, whichever groups they are
          for (let pass = 0; pass < 2; pass++) {
            for (let e = 0; e < edgeLane.length; e++) {
              if (edgeCopy[e]! >= B === (pass === 0)) colorEdge(e);
            }
          }
          count.fill(0); // (the swaps of the coloring moved counts of edges not yet counted)
          for (let e = 0; e < edgeLane.length; e++) count[(edgeCopy[e]! % B) * P + edgeColor[e]!]!++;
          concentrate();
          for (let e = 0; e < edgeLane.length; e++) {
            put(plan, out, c, lane0 + edgeLane[e]!, o + edgeColor[e]!, edgeIndex[e]!, edgeValue[e]!);
          }
          // padding: at each free slot of a lane, a group no lane reads at that slot
          for (let k = 0; k < P; k++) {
            let g = 0;
            for (let l = 0; l < B; l++) {
              if (atLane[l * P + k] !== -1) continue;
              while (count[g * P + k]! > 0) g++;
              count[g * P + k] = 1;
              out.indices[indexOffset(plan, c, o + k, lane0 + l)] = g % plan.cols;
            }
          }
        }
      }
    }
  }

  /** The most pairs of one group at color k: its wavefronts. */
  function mostAt(k: number): number {
    let m = 0;
    for (let g = 0; g < B; g++) m = Math.max(m, count[g * P + k]!);
    return m;
  }

  /** The alternating path of colors a, b, a, … from vertex v (a copy), as edges. */
  function chain(v: number, a: number, b: number): number[] {
    const path: number[] = [];
    let node = v;
    let onCopy = true;
    let want = a;
    for (;;) {
      const f = onCopy ? atCopy[node * P + want]! : atLane[node * P + want]!;
      if (f === -1) return path;
      path.push(f);
      node = onCopy ? edgeLane[f]! : edgeCopy[f]!;
      onCopy = !onCopy;
      want = want === a ? b : a;
    }
  }

  /** Swaps colors a and b on the edges of a path (an (a, b)-component, so the coloring stays proper). */
  function swap(path: number[], a: number, b: number): void {
    for (const f of path) {
      const k = edgeColor[f]!;
      atLane[edgeLane[f]! * P + k] = -1;
      atCopy[edgeCopy[f]! * P + k] = -1;
      count[(edgeCopy[f]! % B) * P + k]!--;
    }
    for (const f of path) {
      const k = edgeColor[f] === a ? b : a;
      edgeColor[f] = k;
      atLane[edgeLane[f]! * P + k] = f;
      atCopy[edgeCopy[f]! * P + k] = f;
      count[(edgeCopy[f]! % B) * P + k]!++;
    }
  }

  /**
   * Moves pairs of second copies between colors by (a, b) swaps while that lowers the total wavefronts: a color whose
   * only double is that pair drops to one wavefront where another color already holds a double of other groups.
   */
  function concentrate(): void {
    for (let k = 0; k < P; k++) most[k] = mostAt(k);
    for (let round = 0; round < 3; round++) {
      let moved = false;
      for (let e = 0; e < edgeLane.length; e++) {
        const v = edgeCopy[e]!;
        if (v < B) continue;
        const g = v % B;
        const a = edgeColor[e]!;
        const before = most[a]!;
        if (count[g * P + a]! < before) continue;
        for (let b = 0; b < P; b++) {
          // worth a try where e's group would not be the most at b
          if (b === a || atCopy[v * P + b] !== -1 || count[g * P + b]! >= most[b]!) continue;
          const old = before + most[b]!;
          const path = chain(v, a, b);
          swap(path, a, b);
          const [ma, mb] = [mostAt(a), mostAt(b)];
          if (ma + mb < old) {
            most[a] = ma;
            most[b] = mb;
            moved = true;
            break;
          }
          swap(path, b, a);
        }
      }
      if (!moved) return;
    }
  }

  /**
   * Colors edge e = (lane l, copy v) properly with the lowest color free at l, first flipping the alternating path
   * from v where that color is taken at v (König: every vertex has at most P edges, so P colors suffice).
   */
  function colorEdge(e: number): void {
    const l = edgeLane[e]!;
    const v = edgeCopy[e]!;
    let a = 0;
    while (atLane[l * P + a] !== -1) a++;
    if (atCopy[v * P + a] !== -1) {
      let b = 0;
      while (atCopy[v * P + b] !== -1) b++;
      // the path from v along colors a, b, a, …: swap a and b on it (it cannot reach l, which has no a-edge)
      swap(chain(v, a, b), a, b);
    }
    edgeColor[e] = a;
    atLane[l * P + a] = e;
    atCopy[v * P + a] = e;
  }
}

export interface BankConflicts {
  /** Warp loads: CTAs × warps × slots. */
  readonly loads: number;
  /** Wavefronts they take (for w = 1: the most lanes on one bank per load, summed). */
  readonly wavefronts: number;
  /** Conflict-free: w per load. */
  readonly ideal: number;
  /** wavefronts − ideal: the extra wavefronts bank conflicts cost. */
  readonly conflicts: number;
}

/**
 * The wavefronts of every warp load of a layout's pairs for loads of `wideLoad` columns (default: the plan's batch
 * tile), by the model above. Every lane of a warp loads (threads that hold padding only too: the kernel's code is the
 * same for all).
 */
export function bankConflicts(layout: SparsePairLayout, wideLoad: WideLoad = layout.plan.batchTile): BankConflicts {
  checkWideLoad("bankConflicts", wideLoad);
  const { plan } = layout;
  const wavefronts = ctaWavefronts(plan, layout.indices, wideLoad).reduce((a, b) => a + b, 0);
  const loads = plan.ctas * (plan.threads / 32) * plan.pairsPerThread;
  return { loads, wavefronts, ideal: loads * wideLoad, conflicts: wavefronts - loads * wideLoad };
}

/** The wavefronts of each CTA's warp loads (bankConflicts' model) for a layout's index array. */
function ctaWavefronts(plan: SparseRnnKernelPlan, indices: Uint16Array | Uint32Array, wideLoad: WideLoad): number[] {
  const B = 32 / wideLoad;
  const warps = plan.threads / 32;
  const lanes = new Int32Array(32);
  const count = new Int32Array(B);
  const out: number[] = [];
  for (let c = 0; c < plan.ctas; c++) {
    let wavefronts = 0;
    for (let w = 0; w < warps; w++) {
      for (let s = 0; s < plan.pairsPerThread; s++) {
        for (let l = 0; l < 32; l++) lanes[l] = indices[indexOffset(plan, c, s, 32 * w + l)]!;
        for (let phase = 0; phase < wideLoad; phase++) {
          count.fill(0);
          let most = 0;
          for (let l = phase * B; l < (phase + 1) * B; l++) {
            const x = lanes[l]!;
            let seen = false;
            for (let e = phase * B; e < l && !seen; e++) seen = lanes[e] === x;
            if (seen) continue; // the same word: one read serves both
            const g = x % B;
            most = Math.max(most, ++count[g]!);
          }
          wavefronts += most;
        }
      }
    }
    out.push(wavefronts);
  }
  return out;
}

export interface SampledBankConflicts {
  /** The CTAs measured (the first ones of the plan). */
  readonly ctas: number;
  readonly naive: BankConflicts;
  readonly algorithm1: BankConflicts;
  readonly warp: BankConflicts;
  readonly balanced: BankConflicts;
}

/**
 * The wavefronts of a plan's loads on a random row-balanced mask of its density (seeded), in the naive order and each
 * bank-aware order, over the plan's first `ctas` CTAs (every CTA is alike; a whole layer takes seconds).
 */
export function sampleBankConflicts(
  plan: SparseRnnKernelPlan,
  options: { readonly seed?: number; readonly ctas?: number } = {},
): SampledBankConflicts {
  const G = gatesOf(plan.cell);
  const fwd = randomRowBalancedRows(
    G * plan.hidden,
    plan.hidden,
    rowBalancedPairs(plan.hidden, plan.density),
    options.seed ?? 1,
  );
  const m = plan.kind === "forward" ? fwd : transposeSparseRows(fwd);
  const most = sparsePairsPerRow(m, "forward");
  // a mask beyond the backward's column estimate (one in a thousand): measure it with the pairs it needs
  const planned =
    most > plan.pairsPerRow
      ? { ...plan, pairsPerRow: most, pairsPerPiece: Math.ceil(most / plan.threadsPerRowGroup) }
      : plan;
  const sample: SparseRnnKernelPlan = {
    ...planned,
    pairsPerThread: planned.rowsPerThread * planned.pairsPerPiece,
    ctas: Math.min(plan.ctas, options.ctas ?? 4),
  };
  const naive = packSparsePairs(m, sample);
  return {
    ctas: sample.ctas,
    naive: bankConflicts(naive),
    algorithm1: bankConflicts(bankAwareOrder(sample, naive, sample.batchTile, "algorithm-1")),
    warp: bankConflicts(bankAwareOrder(sample, naive, sample.batchTile, "warp")),
    balanced: bankConflicts(bankAwareOrder(sample, naive, sample.batchTile, "balanced")),
  };
}
