/**
 * The CPU reference of persistent recurrent layers: one (layer, direction) with its input projection, and a whole
 * stack (layers × directions), forward and backward, generic over float32/float64. The math is the graph op's
 * (src/ops/recurrent.ts); this file only composes it. The GPU kernels are tested against `referenceLayerForward` /
 * `referenceLayerBackward` (which also take a precomputed input projection, as the kernels do).
 *
 * A pruned (sparse) layer gives its W_hh a mask (`LayerWeights.mask`, src/ops/prune.ts): the recurrent product then
 * uses W_hh ⊙ mask — exactly the dense reference on the masked matrix — and dW_hh gets the dense gradient at the kept
 * weights only (zero elsewhere): the pruned weights take no part, and an optimiser leaves them as they are.
 */
import type { Buf } from "../../ops/common.js";
import { addMasked, applyMask, type WeightMask } from "../../ops/prune.js";
import {
  gatesOf,
  inputProjection,
  inputProjectionBackward,
  type RecurrentLayerShape,
  recurrentBackward,
  recurrentForward,
  savedPerUnit,
  stepOffsets,
} from "../../ops/recurrent.js";
import type { PackedSequence } from "../packed.js";
import {
  directionsOf,
  hasCellState,
  layerInputSize,
  type RnnCell,
  type RnnSpec,
  rnnParameterLayout,
  rnnParameterName,
} from "../spec.js";

export {
  inputProjection,
  inputProjectionBackward,
  type RecurrentLayerShape,
  recurrentBackward,
  recurrentForward,
  savedPerUnit,
};

/** The four tensors of one (layer, direction) (see src/rnn/spec.ts for shapes). */
export interface LayerWeights<T extends Buf> {
  readonly weightIh: T;
  readonly weightHh: T;
  readonly biasIh: T;
  readonly biasHh: T;
  /** W_hh's pruning mask [G·H·H] (1 = kept); absent or null: dense. */
  readonly mask?: WeightMask | null;
}

/** The W_hh the recurrent product multiplies by: W_hh ⊙ mask for a pruned layer (a copy), else W_hh itself. */
const recurrentWeights = <T extends Buf>(weights: LayerWeights<T>): T =>
  weights.mask ? applyMask(weights.weightHh, weights.mask) : weights.weightHh;

/** One (layer, direction) over a packed batch: its shape plus the input width. */
export interface ReferenceLayer extends RecurrentLayerShape {
  readonly inputSize: number;
}

/** What the single-layer forward returns; all of it is what its backward needs. */
export interface ReferenceLayerForward<T extends Buf> {
  /** [N, G·H] input projection x·W_ihᵀ + b_ih. */
  readonly xW: T;
  /** [N, H]. */
  readonly y: T;
  /** [B, H]. */
  readonly hn: T;
  /** [B, H] for LSTM, else null. */
  readonly cn: T | null;
  /** [N, savedPerUnit(cell)·H]: the activated gates (and c' for LSTM, W_hn h + b_hn for GRU). */
  readonly saved: T;
}

const alloc = <T extends Buf>(like: T, n: number): T => new (like.constructor as new (n: number) => T)(n);

/**
 * Forward of one (layer, direction). With `xW` given (the input projection, [N, G·H], computed by the caller as the
 * GPU path does) x and W_ih/b_ih are not read; otherwise xW is computed from x.
 */
export function referenceLayerForward<T extends Buf>(
  layer: ReferenceLayer,
  x: T | null,
  weights: LayerWeights<T>,
  h0: T | null,
  c0: T | null,
  xW?: T,
): ReferenceLayerForward<T> {
  const H = layer.hidden;
  const GH = gatesOf(layer.cell) * H;
  const B = layer.batchSizes[0]!;
  const N = stepOffsets(layer.batchSizes)[layer.batchSizes.length]!;
  const w = recurrentWeights(weights);
  let proj = xW;
  if (!proj) {
    if (!x) throw new Error("referenceLayerForward: give x or its input projection xW");
    proj = alloc(w, N * GH);
    inputProjection(x, layer.inputSize, N, layer.inputSize, weights.weightIh, weights.biasIh, proj);
  }
  const out = {
    y: alloc(w, N * H),
    yStride: H,
    hn: alloc(w, B * H),
    cn: hasCellState(layer.cell) ? alloc(w, B * H) : null,
    saved: alloc(w, N * savedPerUnit(layer.cell) * H),
  };
  recurrentForward(layer, proj, w, weights.biasHh, h0, c0, out);
  return { xW: proj, y: out.y, hn: out.hn, cn: out.cn, saved: out.saved };
}

/** Gradients of one (layer, direction). */
export interface ReferenceLayerBackward<T extends Buf> {
  /** [N, G·H]: gradient of the input projection (= the rows' contributions to db_ih). */
  readonly dxW: T;
  /** [N, inputSize], or null when x was not given. */
  readonly dx: T | null;
  readonly dh0: T;
  readonly dc0: T | null;
}

/**
 * Backward of one (layer, direction): accumulates (+=) into `gradients` (W_hh and b_hh always; W_ih and b_ih only
 * when x is given, since they need it) and returns dxW, dx (when x is given), dh0, dc0.
 */
export function referenceLayerBackward<T extends Buf>(
  layer: ReferenceLayer,
  x: T | null,
  weights: LayerWeights<T>,
  h0: T | null,
  c0: T | null,
  fwd: ReferenceLayerForward<T>,
  dy: T | null,
  dhn: T | null,
  dcn: T | null,
  gradients: LayerWeights<T>,
): ReferenceLayerBackward<T> {
  const H = layer.hidden;
  const B = layer.batchSizes[0]!;
  const w = recurrentWeights(weights);
  const N = fwd.y.length / H;
  const mask = weights.mask ?? null;
  // a pruned layer's dW_hh goes through a buffer of its own, then only its kept entries into the gradients
  const dWhh = mask ? alloc(gradients.weightHh, gradients.weightHh.length) : gradients.weightHh;
  const out = {
    dxW: alloc(w, fwd.xW.length),
    dWhh,
    dbHh: gradients.biasHh,
    dh0: alloc(w, B * H),
    dc0: hasCellState(layer.cell) ? alloc(w, B * H) : null,
  };
  const inp = { y: fwd.y, yStride: H, saved: fwd.saved, h0, c0, dy, dyStride: H, dhn, dcn };
  recurrentBackward(layer, w, inp, out);
  if (mask) addMasked(gradients.weightHh, dWhh, mask);
  let dx: T | null = null;
  if (x) {
    dx = alloc(w, N * layer.inputSize);
    const s = layer.inputSize;
    inputProjectionBackward(out.dxW, x, s, N, s, weights.weightIh, dx, s, gradients.weightIh, gradients.biasIh);
  }
  return { dxW: out.dxW, dx, dh0: out.dh0, dc0: out.dc0 };
}

/**
 * The four tensors of (layer, direction) as views of a stack's flat parameter buffer, with W_hh's mask when `masks`
 * (one per (layer, direction), index l·D + d; null: dense) gives one.
 */
export function layerWeightsOf<T extends Buf>(
  spec: RnnSpec,
  flat: T,
  layer: number,
  direction: number,
  masks?: RnnMasks | null,
): LayerWeights<T> {
  const view = (kind: "weight_ih" | "weight_hh" | "bias_ih" | "bias_hh"): T => {
    const name = rnnParameterName(kind, layer, direction);
    const info = rnnParameterLayout(spec).find((p) => p.name === name)!;
    return flat.subarray(info.offset, info.offset + info.length) as T;
  };
  const mask = masks?.[layer * directionsOf(spec) + direction] ?? null;
  return {
    weightIh: view("weight_ih"),
    weightHh: view("weight_hh"),
    biasIh: view("bias_ih"),
    biasHh: view("bias_hh"),
    ...(mask ? { mask } : {}),
  };
}

/** A stack's W_hh masks, one per (layer, direction) at index l·D + d (null: that one is dense). */
export type RnnMasks = readonly (WeightMask | null)[];

/** A whole stack's forward: outputs and everything its backward reads. */
export interface ReferenceStackForward<T extends Buf> {
  /** [N, D·H]: the top layer's output. */
  readonly y: T;
  /** [L·D, B, H] (index l·D + d). */
  readonly hn: T;
  /** [L·D, B, H] for LSTM, else null. */
  readonly cn: T | null;
  /** Per layer: its input ([N, in_l]) and per direction the layer forward. */
  readonly layers: readonly { readonly x: T; readonly dirs: readonly ReferenceLayerForward<T>[] }[];
  readonly h0: T | null;
  readonly c0: T | null;
  readonly batchSizes: Int32Array;
  /** The masks the forward pruned W_hh with (its backward uses the same). */
  readonly masks: RnnMasks | null;
}

const stateView = <T extends Buf>(s: T | null, k: number, bh: number): T | null =>
  s ? (s.subarray(k * bh, (k + 1) * bh) as T) : null;

function layerShape(spec: RnnSpec, batchSizes: Int32Array, layer: number, direction: number): ReferenceLayer {
  return {
    cell: spec.cell as RnnCell,
    hidden: spec.hidden,
    inputSize: layerInputSize(spec, layer),
    batchSizes,
    reverse: direction === 1,
  };
}

/**
 * Forward of a stack; params is the flat buffer of rnnParameterLayout(spec); h0/c0 [L·D, B, H] or null (zeros);
 * `masks` prunes W_hh per (layer, direction) (none: dense).
 */
export function referenceForward<T extends Buf>(
  spec: RnnSpec,
  params: T,
  x: PackedSequence<T>,
  h0: T | null,
  c0: T | null,
  masks?: RnnMasks | null,
): ReferenceStackForward<T> {
  const D = directionsOf(spec);
  const H = spec.hidden;
  const B = x.batchSizes[0]!;
  const N = x.data.length / x.width;
  const lstm = hasCellState(spec.cell);
  const hn = alloc(params, spec.layers * D * B * H);
  const cn = lstm ? alloc(params, spec.layers * D * B * H) : null;
  const layers: { x: T; dirs: ReferenceLayerForward<T>[] }[] = [];
  let input = x.data;
  for (let l = 0; l < spec.layers; l++) {
    const y = alloc(params, N * D * H);
    const dirs: ReferenceLayerForward<T>[] = [];
    for (let d = 0; d < D; d++) {
      const k = l * D + d;
      const f = referenceLayerForward(
        layerShape(spec, x.batchSizes, l, d),
        input,
        layerWeightsOf(spec, params, l, d, masks),
        stateView(h0, k, B * H),
        stateView(c0, k, B * H),
      );
      for (let n = 0; n < N; n++) y.set(f.y.subarray(n * H, (n + 1) * H), n * D * H + d * H);
      hn.set(f.hn, k * B * H);
      if (cn && f.cn) cn.set(f.cn, k * B * H);
      dirs.push(f);
    }
    layers.push({ x: input, dirs });
    input = y;
  }
  return { y: input, hn, cn, layers, h0, c0, batchSizes: x.batchSizes, masks: masks ?? null };
}

/** Gradients of a stack's inputs (the weights' go into the caller's buffer). */
export interface ReferenceStackBackward<T extends Buf> {
  /** [N, inputSize]. */
  readonly dx: T;
  /** [L·D, B, H]. */
  readonly dh0: T;
  /** [L·D, B, H] for LSTM, else null. */
  readonly dc0: T | null;
}

/**
 * Backward of a stack from dy ([N, D·H]) and dhn/dcn ([L·D, B, H]; null = zeros); accumulates (+=) the weight
 * gradients into `grads` (the flat layout of the parameters), W_hh's at the forward's kept weights only.
 */
export function referenceBackward<T extends Buf>(
  spec: RnnSpec,
  params: T,
  fwd: ReferenceStackForward<T>,
  dy: T | null,
  dhn: T | null,
  dcn: T | null,
  grads: T,
): ReferenceStackBackward<T> {
  const D = directionsOf(spec);
  const H = spec.hidden;
  const B = fwd.batchSizes[0]!;
  const N = fwd.y.length / (D * H);
  const dh0 = alloc(params, spec.layers * D * B * H);
  const dc0 = hasCellState(spec.cell) ? alloc(params, spec.layers * D * B * H) : null;
  let dOut = dy; // gradient of the current layer's output [N, D·H]
  for (let l = spec.layers - 1; l >= 0; l--) {
    const { x, dirs } = fwd.layers[l]!;
    const inl = layerInputSize(spec, l);
    const dx = alloc(params, N * inl);
    for (let d = 0; d < D; d++) {
      const k = l * D + d;
      let dyd: T | null = null;
      if (dOut) {
        dyd = alloc(params, N * H);
        for (let n = 0; n < N; n++) dyd.set(dOut.subarray(n * D * H + d * H, n * D * H + (d + 1) * H), n * H);
      }
      const shape = layerShape(spec, fwd.batchSizes, l, d);
      const b = referenceLayerBackward(
        shape,
        x,
        layerWeightsOf(spec, params, l, d, fwd.masks),
        stateView(fwd.h0, k, B * H),
        stateView(fwd.c0, k, B * H),
        dirs[d]!,
        dyd,
        stateView(dhn, k, B * H),
        stateView(dcn, k, B * H),
        layerWeightsOf(spec, grads, l, d),
      );
      for (let i = 0; i < dx.length; i++) dx[i] = dx[i]! + b.dx![i]!;
      dh0.set(b.dh0, k * B * H);
      if (dc0 && b.dc0) dc0.set(b.dc0, k * B * H);
    }
    dOut = dx;
  }
  return { dx: dOut!, dh0, dc0 };
}
