// The kernels the conv layer launches: four of the eager program's (src/codegen/eager-kernels.ts, whose image kernels
// are src/codegen/image-kernels.ts) — im2col, col2im, the pooled forward's bias and a product slot's addition. A
// context compiles that program once, for the eager engine's nodes and its conv layers alike; a dispatch thread wraps
// the same functions by their handles (threads.ts). Every launch is grid-stride: gridFor(n) blocks of EAGER_BLOCK.

import { EAGER_BLOCK } from "../codegen/eager-kernels.js";
import type { CudaKernel, CudaStream, KernelArg } from "../cuda/index.js";
import { gridFor } from "../cuda/runtime/launch.js";

/** The conv layer's kernels, by their names in the eager program. */
export interface ConvKernels {
  readonly vp_im2col: CudaKernel;
  readonly vp_col2im_add: CudaKernel;
  readonly vp_conv_bias_add: CudaKernel;
  readonly vp_add_clear: CudaKernel;
}

/** What the runner launches with: its kernels and a counted grid-stride launch (the eager engine's node kernels). */
export interface ConvHost {
  readonly k: ConvKernels;
  readonly counts: { kernels: number; cublas: number };
  launch(kernel: CudaKernel, n: number, args: KernelArg[], stream: CudaStream): void;
}

/** The launch shape of a grid-stride kernel over n elements. */
export function launchShape(n: number): { grid: number; block: number } {
  return { grid: gridFor(n), block: EAGER_BLOCK };
}

/** A host that launches each kernel directly on the given stream and counts it in `counts.kernels`. */
export function directHost(k: ConvKernels, counts: { kernels: number; cublas: number }): ConvHost {
  return {
    k,
    counts,
    launch(kernel, n, args, stream) {
      kernel.launch({ ...launchShape(n), stream }, args);
      counts.kernels++;
    },
  };
}
