/**
 * The math of a recurrent layer over a packed batch — ONE implementation, used by the graph op (src/ops/rnn-op.ts)
 * and by the persistent layer's CPU reference (src/rnn/reference/reference.ts), and the oracle the GPU kernels are tested
 * against. Conventions (PyTorch/cuDNN; docs/RNN.md):
 *
 * - cells `rnn-tanh`, `rnn-relu`, `lstm`, `gru`; G = 1, 1, 4, 3 gate rows per unit;
 *   LSTM rows [i; f; g; o]: c' = σ(f)⊙c + σ(i)⊙tanh(g), h' = σ(o)⊙tanh(c');
 *   GRU rows [r; z; n]: n = tanh(xW_n + r ⊙ (W_hn h + b_hn)), h' = (1 − z)⊙n + z⊙h; RNN h' = act(xW + W_hh h + b_hh);
 * - packed batch: sequences sorted by decreasing length, batchSizes[t] = number of sequences longer than t; the rows
 *   of step t are contiguous, sequence b's row at step t is offset(t) + b;
 * - a reverse direction runs t = T−1 … 0 and starts sequence b at t = len_b − 1 from h0[b]; hn[b] is the state
 *   after its last processed step (its own last step forward, step 0 backward).
 *
 * Functions take typed-array views (`subarray`), generic over float32/float64 (gradient checks run in float64);
 * sums accumulate in float64 either way.
 */
import type { Buf } from "./common.js";

/** The recurrent cells, named as PyTorch's `mode` strings are (`RNN_TANH` → `rnn-tanh`). */
export const RNN_CELLS = ["rnn-tanh", "rnn-relu", "lstm", "gru"] as const;
export type RnnCell = (typeof RNN_CELLS)[number];

/** Gate rows per hidden unit: the height of W_ih and W_hh is G·H. */
export function gatesOf(cell: RnnCell): 1 | 3 | 4 {
  return cell === "lstm" ? 4 : cell === "gru" ? 3 : 1;
}

/** Floats per row (per hidden unit) that the forward saves for the backward: LSTM i,f,g,o,c'; GRU r,z,n,W_hn h+b_hn. */
export function savedPerUnit(cell: RnnCell): number {
  return cell === "lstm" ? 5 : cell === "gru" ? 4 : 0;
}

/** Throws a one-line Error naming `where` unless batchSizes is a packed batch's (≥ 1, non-increasing); returns N. */
export function checkBatchSizes(batchSizes: ArrayLike<number>, where: string): number {
  if (batchSizes.length === 0)
    throw new RangeError(`${where}: argument 'batchSizes' is empty; a packed batch has ≥ 1 step`);
  let n = 0;
  for (let t = 0; t < batchSizes.length; t++) {
    const b = batchSizes[t]!;
    if (!Number.isInteger(b) || b < 1 || (t > 0 && b > batchSizes[t - 1]!)) {
      throw new RangeError(
        `${where}: argument 'batchSizes' must be positive integers that never increase (sequences sorted by ` +
          `decreasing length); batchSizes[${t}] = ${b}${t > 0 ? ` after ${batchSizes[t - 1]}` : ""}`,
      );
    }
    n += b;
  }
  return n;
}

/** offset(t) for t = 0 … T (offset(T) = N): the first row of step t in a packed batch. */
export function stepOffsets(batchSizes: ArrayLike<number>): Int32Array {
  const off = new Int32Array(batchSizes.length + 1);
  for (let t = 0; t < batchSizes.length; t++) off[t + 1] = off[t]! + batchSizes[t]!;
  return off;
}

/** Sequence lengths (sorted, decreasing) of a packed batch: len_b = number of steps t with batchSizes[t] > b. */
export function lengthsOf(batchSizes: ArrayLike<number>): Int32Array {
  const len = new Int32Array(batchSizes[0] ?? 0);
  for (let t = 0; t < batchSizes.length; t++) for (let b = 0; b < batchSizes[t]!; b++) len[b] = t + 1;
  return len;
}

/** One (layer, direction) over one packed batch. */
export interface RecurrentLayerShape {
  readonly cell: RnnCell;
  /** H. */
  readonly hidden: number;
  readonly batchSizes: ArrayLike<number>;
  /** The backward direction (t = T−1 … 0). */
  readonly reverse: boolean;
}

/**
 * What the forward writes. y rows are `yStride` apart (H for a single direction; D·H when y is a view at column
 * d·H of a stack's output), hn/cn are [B, H], saved is [N, savedPerUnit·H] (unused for plain RNNs).
 */
export interface RecurrentForwardOut<T extends Buf> {
  readonly y: T;
  readonly yStride: number;
  readonly hn: T;
  /** LSTM only (null otherwise). */
  readonly cn: T | null;
  readonly saved: T;
}

const sigm = (x: number): number => 1 / (1 + Math.exp(-x));

/**
 * The recurrent part of a layer: from the input projection xW = x·W_ihᵀ + b_ih ([N, G·H], computed beforehand),
 * W_hh [G·H, H], b_hh [G·H] and the initial state h0/c0 ([B, H]; null = zeros), writes y, hn, cn and saved.
 */
export function recurrentForward<T extends Buf>(
  layer: RecurrentLayerShape,
  xW: T,
  wHh: T,
  bHh: T,
  h0: T | null,
  c0: T | null,
  out: RecurrentForwardOut<T>,
): void {
  const { cell, hidden: H, batchSizes: bs, reverse } = layer;
  const G = gatesOf(cell);
  const GH = G * H;
  const T = bs.length;
  const off = stepOffsets(bs);
  const { y, yStride, hn: h, cn: c, saved } = out;
  const S = savedPerUnit(cell) * H;
  // h and c run in hn/cn: a sequence not yet started or already finished keeps its h0 or its final state there
  if (h0) h.set(h0.subarray(0, h.length));
  else h.fill(0);
  if (c) {
    if (c0) c.set(c0.subarray(0, c.length));
    else c.fill(0);
  }
  const pre = new Float64Array(GH);
  for (let s = 0; s < T; s++) {
    const t = reverse ? T - 1 - s : s;
    for (let b = 0; b < bs[t]!; b++) {
      const row = off[t]! + b;
      const hb = b * H;
      for (let j = 0; j < GH; j++) {
        let acc = bHh[j]!;
        const w = j * H;
        for (let k = 0; k < H; k++) acc += wHh[w + k]! * h[hb + k]!;
        pre[j] = acc;
      }
      const x = row * GH;
      const sv = row * S;
      const yr = row * yStride;
      for (let u = 0; u < H; u++) {
        let hu: number;
        if (cell === "lstm") {
          const i = sigm(xW[x + u]! + pre[u]!);
          const f = sigm(xW[x + H + u]! + pre[H + u]!);
          const g = Math.tanh(xW[x + 2 * H + u]! + pre[2 * H + u]!);
          const o = sigm(xW[x + 3 * H + u]! + pre[3 * H + u]!);
          const cu = f * c![hb + u]! + i * g;
          c![hb + u] = cu;
          hu = o * Math.tanh(cu);
          saved[sv + u] = i;
          saved[sv + H + u] = f;
          saved[sv + 2 * H + u] = g;
          saved[sv + 3 * H + u] = o;
          saved[sv + 4 * H + u] = cu;
        } else if (cell === "gru") {
          const r = sigm(xW[x + u]! + pre[u]!);
          const z = sigm(xW[x + H + u]! + pre[H + u]!);
          const hnU = pre[2 * H + u]!;
          const n = Math.tanh(xW[x + 2 * H + u]! + r * hnU);
          hu = (1 - z) * n + z * h[hb + u]!;
          saved[sv + u] = r;
          saved[sv + H + u] = z;
          saved[sv + 2 * H + u] = n;
          saved[sv + 3 * H + u] = hnU;
        } else {
          const a = xW[x + u]! + pre[u]!;
          hu = cell === "rnn-tanh" ? Math.tanh(a) : Math.max(a, 0);
        }
        // pre holds every product of the old h already, so h can be overwritten unit by unit
        h[hb + u] = hu;
        y[yr + u] = hu;
      }
    }
  }
  // the stored (possibly float32-rounded) values are the state, so hn equals y's last row bit for bit
}

/** What the backward reads besides the weights: the forward's outputs and saved values. */
export interface RecurrentBackwardIn<T extends Buf> {
  readonly y: T;
  readonly yStride: number;
  readonly saved: T;
  readonly h0: T | null;
  readonly c0: T | null;
  /** Gradient of the loss w.r.t. y (rows `dyStride` apart), or null for none. */
  readonly dy: T | null;
  readonly dyStride: number;
  readonly dhn: T | null;
  readonly dcn: T | null;
}

/**
 * What the backward produces: dxW ([N, G·H], written — it is also the gradient of b_ih and feeds dx = dxW·W_ih and
 * dW_ih = dxWᵀ·x), dh0/dc0 ([B, H], written), and dW_hh/db_hh (accumulated, +=).
 */
export interface RecurrentBackwardOut<T extends Buf> {
  readonly dxW: T;
  readonly dWhh: T;
  readonly dbHh: T;
  readonly dh0: T;
  /** LSTM only. */
  readonly dc0: T | null;
}

/** Backpropagation through time of `recurrentForward` for the same layer, weights and inputs. */
export function recurrentBackward<T extends Buf>(
  layer: RecurrentLayerShape,
  wHh: T,
  inp: RecurrentBackwardIn<T>,
  out: RecurrentBackwardOut<T>,
): void {
  const { cell, hidden: H, batchSizes: bs, reverse } = layer;
  const G = gatesOf(cell);
  const GH = G * H;
  const T = bs.length;
  const off = stepOffsets(bs);
  const S = savedPerUnit(cell) * H;
  const { y, yStride, saved, h0, c0, dy, dyStride } = inp;
  const { dxW, dWhh, dbHh } = out;
  // dh/dc run in dh0/dc0: a sequence joins (in reverse time) at its last processed step with dhn, and once it has
  // passed its first step what remains there is the gradient of its initial state
  const dh = out.dh0;
  const dc = out.dc0;
  if (inp.dhn) dh.set(inp.dhn.subarray(0, dh.length));
  else dh.fill(0);
  if (dc) {
    if (inp.dcn) dc.set(inp.dcn.subarray(0, dc.length));
    else dc.fill(0);
  }
  const dpre = new Float64Array(GH); // gradient of the recurrent pre-activation W_hh h + b_hh
  const hPrev = new Float64Array(H);
  const dhPrev = new Float64Array(H);
  for (let s = 0; s < T; s++) {
    const t = reverse ? s : T - 1 - s;
    const bt = bs[t]!;
    // the step before this one in the direction of travel, for each sequence b < bt (or none: its initial state)
    const tp = reverse ? t + 1 : t - 1;
    for (let b = 0; b < bt; b++) {
      const row = off[t]! + b;
      const hb = b * H;
      const prevRow = tp >= 0 && tp < T && b < bs[tp]! ? off[tp]! + b : -1;
      for (let k = 0; k < H; k++) {
        hPrev[k] = prevRow >= 0 ? y[prevRow * yStride + k]! : h0 ? h0[hb + k]! : 0;
      }
      const x = row * GH;
      const sv = row * S;
      for (let u = 0; u < H; u++) {
        const dhu = dh[hb + u]! + (dy ? dy[row * dyStride + u]! : 0);
        if (cell === "lstm") {
          const i = saved[sv + u]!;
          const f = saved[sv + H + u]!;
          const g = saved[sv + 2 * H + u]!;
          const o = saved[sv + 3 * H + u]!;
          const tc = Math.tanh(saved[sv + 4 * H + u]!);
          const cPrev = prevRow >= 0 ? saved[prevRow * S + 4 * H + u]! : c0 ? c0[hb + u]! : 0;
          const dcu = dc![hb + u]! + dhu * o * (1 - tc * tc);
          dpre[u] = dcu * g * i * (1 - i);
          dpre[H + u] = dcu * cPrev * f * (1 - f);
          dpre[2 * H + u] = dcu * i * (1 - g * g);
          dpre[3 * H + u] = dhu * tc * o * (1 - o);
          for (let q = 0; q < 4; q++) dxW[x + q * H + u] = dpre[q * H + u]!;
          dc![hb + u] = dcu * f;
          dhPrev[u] = 0;
        } else if (cell === "gru") {
          const r = saved[sv + u]!;
          const z = saved[sv + H + u]!;
          const n = saved[sv + 2 * H + u]!;
          const hnU = saved[sv + 3 * H + u]!;
          const dn = dhu * (1 - z) * (1 - n * n);
          const dz = dhu * (hPrev[u]! - n) * z * (1 - z);
          const dr = dn * hnU * r * (1 - r);
          dxW[x + u] = dr;
          dxW[x + H + u] = dz;
          dxW[x + 2 * H + u] = dn;
          dpre[u] = dr;
          dpre[H + u] = dz;
          dpre[2 * H + u] = dn * r;
          dhPrev[u] = dhu * z;
        } else {
          const yu = y[row * yStride + u]!;
          const da = cell === "rnn-tanh" ? dhu * (1 - yu * yu) : yu > 0 ? dhu : 0;
          dxW[x + u] = da;
          dpre[u] = da;
          dhPrev[u] = 0;
        }
      }
      for (let j = 0; j < GH; j++) {
        const dj = dpre[j]!;
        if (dj === 0) continue;
        dbHh[j] = dbHh[j]! + dj;
        const w = j * H;
        for (let k = 0; k < H; k++) {
          dWhh[w + k] = dWhh[w + k]! + dj * hPrev[k]!;
          dhPrev[k] = dhPrev[k]! + dj * wHh[w + k]!;
        }
      }
      for (let k = 0; k < H; k++) dh[hb + k] = dhPrev[k]!;
    }
  }
}

/** xW = x·W_ihᵀ + b_ih: x [N, in] (rows `xStride` apart), W_ih [G·H, in] → xW [N, G·H] (written). */
export function inputProjection<T extends Buf>(
  x: T,
  xStride: number,
  rows: number,
  inputSize: number,
  wIh: T,
  bIh: T,
  xW: T,
): void {
  const GH = bIh.length;
  for (let n = 0; n < rows; n++) {
    const xr = n * xStride;
    for (let j = 0; j < GH; j++) {
      let acc = bIh[j]!;
      const w = j * inputSize;
      for (let k = 0; k < inputSize; k++) acc += wIh[w + k]! * x[xr + k]!;
      xW[n * GH + j] = acc;
    }
  }
}

/**
 * The input projection's backward, all accumulated (+=): dx += dxW·W_ih (dx rows `dxStride` apart; null to skip),
 * dW_ih += dxWᵀ·x, db_ih += Σ rows of dxW.
 */
export function inputProjectionBackward<T extends Buf>(
  dxW: T,
  x: T,
  xStride: number,
  rows: number,
  inputSize: number,
  wIh: T,
  dx: T | null,
  dxStride: number,
  dWih: T,
  dbIh: T,
): void {
  const GH = dbIh.length;
  for (let n = 0; n < rows; n++) {
    const xr = n * xStride;
    const dr = n * dxStride;
    for (let j = 0; j < GH; j++) {
      const dj = dxW[n * GH + j]!;
      if (dj === 0) continue;
      dbIh[j] = dbIh[j]! + dj;
      const w = j * inputSize;
      for (let k = 0; k < inputSize; k++) {
        dWih[w + k] = dWih[w + k]! + dj * x[xr + k]!;
        if (dx) dx[dr + k] = dx[dr + k]! + dj * wIh[w + k]!;
      }
    }
  }
}
