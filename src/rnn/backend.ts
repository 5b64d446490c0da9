/**
 * The seam between the persistent recurrent layer (src/rnn/layer.ts: stacking, directions, packing, parameters) and
 * what computes ONE (layer, direction) over a packed batch: the CPU reference (src/rnn/reference/cpu-backend.ts) or
 * the persistent GPU kernels (src/rnn/runtime/gpu-backend.ts). A backend owns the whole layer call — the input
 * projection GEMM (xW = x·W_ihᵀ + b_ih for all steps), the recurrent part, and in the backward the input-gradient and
 * weight-gradient GEMMs — so a GPU backend keeps every intermediate on the device between forward and backward.
 *
 * Arrays crossing the seam are host float32 in the layouts of src/rnn/spec.ts and src/rnn/packed.ts. The layer
 * stitches directions and layers together; the backend never sees more than one (layer, direction).
 *
 * A pruned layer passes W_hh's mask (`mask`, src/ops/prune.ts): the backend computes with W_hh ⊙ mask and adds
 * dW_hh at the kept weights only. The weights it is given stay the dense master copy.
 */
import type { WeightMask } from "../ops/prune.js";
import type { RnnCell, RnnPrecision } from "./spec.js";

/** Which (layer, direction) of which stack, over which packed batch. */
export interface RnnLayerCall {
  readonly cell: RnnCell;
  /** H. */
  readonly hidden: number;
  /** in_l: inputSize for layer 0, D·H above. */
  readonly inputSize: number;
  readonly layer: number;
  /** 0 forward (t = 0 … T−1), 1 backward (t = T−1 … 0, sequence b starting at t = len_b − 1). */
  readonly direction: 0 | 1;
  /** The packed batch's steps: non-increasing, batchSizes[0] = B, Σ = N. */
  readonly batchSizes: Int32Array;
}

/** The four tensors of one (layer, direction), row-major: W_ih [G·H, in], W_hh [G·H, H], b_ih [G·H], b_hh [G·H]. */
export interface RnnLayerWeights {
  readonly weightIh: Float32Array;
  readonly weightHh: Float32Array;
  readonly biasIh: Float32Array;
  readonly biasHh: Float32Array;
}

/**
 * What a forward keeps for its backward, opaque to the layer (the CPU keeps host arrays, a GPU backend device
 * buffers). The layer calls dispose() once the backward has used it or a new forward replaces it.
 */
export interface RnnSavedState {
  dispose?(): void;
}

export interface RnnForwardLayerArgs extends RnnLayerCall {
  /** The layer's input, [N, inputSize]. */
  readonly x: Float32Array;
  readonly weights: RnnLayerWeights;
  /**
   * Changes whenever the host weights may have changed since the last call with the same (layer, direction): a
   * backend that keeps a device copy re-uploads only then. Equal across one forward and its backward.
   */
  readonly weightsVersion: number;
  /** W_hh's pruning mask [G·H·H] (1 = kept; src/ops/prune.ts); absent or null: dense. */
  readonly mask?: WeightMask | null;
  /** [B, H]; null = zeros. */
  readonly h0: Float32Array | null;
  /** [B, H], LSTM only; null = zeros. */
  readonly c0: Float32Array | null;
  /** Keep what backwardLayer needs; false for inference (saved may then be null). */
  readonly training: boolean;
}

export interface RnnForwardLayerResult {
  /** [N, H]: the hidden state of every row (this direction's half of the layer's output). */
  readonly y: Float32Array;
  /** [B, H]: each sequence's state after its last processed step. */
  readonly hn: Float32Array;
  /** [B, H], LSTM only (null otherwise). */
  readonly cn: Float32Array | null;
  readonly saved: RnnSavedState | null;
}

export interface RnnBackwardLayerArgs extends RnnLayerCall {
  readonly weights: RnnLayerWeights;
  readonly weightsVersion: number;
  /** The matching forward's mask: dW_hh is added at its kept weights only. */
  readonly mask?: WeightMask | null;
  /** What the matching forwardLayer returned (with training = true). */
  readonly saved: RnnSavedState;
  /** [N, H] gradient of the loss w.r.t. y; null = zeros. */
  readonly dy: Float32Array | null;
  /** [B, H] gradient w.r.t. hn; null = zeros. */
  readonly dhn: Float32Array | null;
  /** [B, H] gradient w.r.t. cn (LSTM); null = zeros. */
  readonly dcn: Float32Array | null;
  /** Accumulated into (+=), in the weights' layout. */
  readonly gradients: RnnLayerWeights;
  /** Whether dx is wanted (false for layer 0 when the user does not need the input's gradient). */
  readonly needInputGradient: boolean;
}

export interface RnnBackwardLayerResult {
  /** [N, inputSize], or null when not asked for. */
  readonly dx: Float32Array | null;
  /** [B, H]. */
  readonly dh0: Float32Array;
  /** [B, H], LSTM only. */
  readonly dc0: Float32Array | null;
}

/** Computes one (layer, direction) of a recurrent stack, forward and backward. */
export interface RnnBackend {
  /** `cpu` or `cuda:N`: where it runs, for messages and `PersistentRnn.device`. */
  readonly device: string;
  /** How it stores W_hh (src/rnn/spec.ts RNN_PRECISIONS); absent means fp32. */
  readonly precision?: RnnPrecision;
  forwardLayer(args: RnnForwardLayerArgs): RnnForwardLayerResult;
  backwardLayer(args: RnnBackwardLayerArgs): RnnBackwardLayerResult;
  /** Frees whatever the backend holds (device buffers, compiled kernels' modules). */
  dispose?(): void;
}
