// The launch shape of the grid-stride kernels that every engine and the conv layer compile (the eager program, the
// trainers' update, the image kernels): GPU_BLOCK threads a block, gridFor(n) blocks over n elements.

/** Threads per block of the update kernels and of the engines' grid-stride kernels. */
export const GPU_BLOCK = 256;

/**
 * Blocks for a grid-stride kernel of GPU_BLOCK threads over n elements: enough to fill the GPU, few enough that
 * launch setup is cheap.
 */
export function gridFor(n: number): number {
  return Math.max(1, Math.min(Math.ceil(n / GPU_BLOCK), 4096));
}
