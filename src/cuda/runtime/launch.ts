// Launch shapes for the kernels that are not sized per kernel: the block of a grid-stride loop and the grid that
// covers n elements with it; and the count of device work an engine queues, which benchmarks report per batch.

/** Threads per block of the grid-stride kernels (the engines' element-wise kernels and the optimizer updates). */
export const GPU_BLOCK = 256;

/** The most blocks gridFor asks for: past it, each thread's grid-stride loop takes more elements. */
const MAX_GRID_BLOCKS = 4096;

/**
 * Blocks for a grid-stride kernel of GPU_BLOCK threads over n elements: enough to fill the GPU, few enough that
 * launch setup is cheap.
 */
export function gridFor(n: number): number {
  return Math.max(1, Math.min(Math.ceil(n / GPU_BLOCK), MAX_GRID_BLOCKS));
}

/** Device work an engine has queued, by kind (the benchmark reports them per batch). */
export interface LaunchCounts {
  /** Our kernels. */
  kernels: number;
  /** cuBLAS calls (each one or more kernels inside cuBLAS). */
  cublas: number;
  /** Asynchronous copies and memsets. */
  copies: number;
}
