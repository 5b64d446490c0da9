/**
 * The CPU implementation of the RnnBackend seam: the float32 reference (src/rnn/reference.ts) for one
 * (layer, direction). Slow, exact, and the oracle the GPU backend is tested against.
 */
import type {
  RnnBackend,
  RnnBackwardLayerArgs,
  RnnBackwardLayerResult,
  RnnForwardLayerArgs,
  RnnForwardLayerResult,
  RnnSavedState,
} from "./backend.js";
import {
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

export class CpuRnnBackend implements RnnBackend {
  readonly device = "cpu";

  forwardLayer(a: RnnForwardLayerArgs): RnnForwardLayerResult {
    const fwd = referenceLayerForward(shapeOf(a), a.x, a.weights, a.h0, a.c0);
    const saved: CpuSaved | null = a.training ? { x: a.x, h0: a.h0, c0: a.c0, fwd } : null;
    return { y: fwd.y, hn: fwd.hn, cn: fwd.cn, saved };
  }

  backwardLayer(a: RnnBackwardLayerArgs): RnnBackwardLayerResult {
    const s = a.saved as CpuSaved;
    const b = referenceLayerBackward(shapeOf(a), s.x, a.weights, s.h0, s.c0, s.fwd, a.dy, a.dhn, a.dcn, a.gradients);
    return { dx: a.needInputGradient ? b.dx : null, dh0: b.dh0, dc0: b.dc0 };
  }
}
