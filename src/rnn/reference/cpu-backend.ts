/**
 * The CPU implementation of the RnnBackend seam: the float32 reference (reference.ts) for one
 * (layer, direction). Slow, exact, and the oracle the GPU backend is tested against. With `precision: "fp16"` it
 * computes what the GPU kernels compute from fp16 weight registers: W_hh rounded to the nearest fp16 (ties to even,
 * as their `cvt.rn.f16x2.f32` packs it; src/util/fp16.ts) in the forward and in the backward (whose kernel holds the
 * same rounded W_hhᵀ); W_ih, the biases, the arithmetic and every gradient stay fp32. A pruned layer's mask goes to
 * the reference (W_hh ⊙ mask, dW_hh at the kept weights only).
 */
import { roundToFp16Array } from "../../util/fp16.js";
import type {
  RnnBackend,
  RnnBackwardLayerArgs,
  RnnBackwardLayerResult,
  RnnForwardLayerArgs,
  RnnForwardLayerResult,
  RnnLayerWeights,
  RnnSavedState,
} from "../backend.js";
import { type RnnPrecision, validateRnnPrecision } from "../spec.js";
import {
  type LayerWeights,
  type ReferenceLayer,
  type ReferenceLayerForward,
  referenceLayerBackward,
  referenceLayerForward,
} from "./reference.js";

/** What the CPU forward keeps: its inputs and the reference forward's results. */
interface CpuSaved extends RnnSavedState {
  readonly x: Float32Array;
  readonly h0: Float32Array | null;
  readonly c0: Float32Array | null;
  readonly fwd: ReferenceLayerForward<Float32Array>;
}

const shapeOf = (a: RnnForwardLayerArgs | RnnBackwardLayerArgs): ReferenceLayer => ({
  cell: a.cell,
  hidden: a.hidden,
  inputSize: a.inputSize,
  batchSizes: a.batchSizes,
  reverse: a.direction === 1,
});

export interface CpuRnnBackendOptions {
  /** `fp16`: compute with W_hh rounded to fp16, as the GPU kernels store it (default fp32). */
  readonly precision?: RnnPrecision;
}

export class CpuRnnBackend implements RnnBackend {
  readonly device = "cpu";
  readonly precision: RnnPrecision;

  constructor(options: CpuRnnBackendOptions = {}) {
    this.precision = validateRnnPrecision(options.precision, "CpuRnnBackend");
  }

  /**
   * The weights the math reads: W_hh rounded to fp16 for `fp16` (a copy; the caller's parameters are untouched), with
   * the call's mask.
   */
  private stored(w: RnnLayerWeights, mask: RnnForwardLayerArgs["mask"]): LayerWeights<Float32Array> {
    const weightHh = this.precision === "fp16" ? roundToFp16Array(w.weightHh) : w.weightHh;
    return { ...w, weightHh, mask: mask ?? null };
  }

  forwardLayer(a: RnnForwardLayerArgs): RnnForwardLayerResult {
    const fwd = referenceLayerForward(shapeOf(a), a.x, this.stored(a.weights, a.mask), a.h0, a.c0);
    const saved: CpuSaved | null = a.training ? { x: a.x, h0: a.h0, c0: a.c0, fwd } : null;
    return { y: fwd.y, hn: fwd.hn, cn: fwd.cn, saved };
  }

  backwardLayer(a: RnnBackwardLayerArgs): RnnBackwardLayerResult {
    const s = a.saved as CpuSaved;
    const w = this.stored(a.weights, a.mask);
    const b = referenceLayerBackward(shapeOf(a), s.x, w, s.h0, s.c0, s.fwd, a.dy, a.dhn, a.dcn, a.gradients);
    return { dx: a.needInputGradient ? b.dx : null, dh0: b.dh0, dc0: b.dc0 };
  }
}
