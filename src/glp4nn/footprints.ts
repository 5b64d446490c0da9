// What a library call (cuBLAS) launches, read without CUPTI: the call is captured alone into a CUDA graph — recorded,
// not run — and the graph's kernel nodes give each kernel's function, grid, block and dynamic shared memory; the
// function gives its registers and static shared memory (cuFuncGetAttribute) and its occupancy. With the call's
// duration from the tracker this is the kernel analyser's input for kernels GLP4NN's paper reads through CUPTI.

import { CudaGraph, type CudaStream, FunctionAttribute } from "../cuda/index.js";
import type { KernelProfile } from "./kernels.js";

/** One kernel of a call: its profile without the duration and instances (the tracker's and the caller's). */
export type KernelShape = Omit<KernelProfile, "durationUs" | "instances" | "name">;

/**
 * The kernels `call` launches on `stream`, captured and not run; undefined when the driver cannot capture it or report
 * its kernel nodes (the call then stays opaque). Do not capture a call's first use: run it once first.
 */
export function captureFootprint(stream: CudaStream, call: () => void): KernelShape[] | undefined {
  const driver = stream.driver;
  let graph: CudaGraph;
  try {
    graph = CudaGraph.capture(stream, call);
  } catch {
    return undefined;
  }
  try {
    const kernels = graph.kernelNodes().map((k) => {
      const threads = k.block[0] * k.block[1] * k.block[2];
      // 0 where the occupancy calculator cannot say (a kernel launched in clusters): the device model's limits then
      const blocksPerSm = driver.occupancyMaxActiveBlocksPerSm(k.func, threads, k.sharedBytes);
      return {
        blocks: k.grid[0] * k.grid[1] * k.grid[2],
        threadsPerBlock: threads,
        registersPerThread: driver.funcGetAttribute(FunctionAttribute.NumRegs, k.func),
        sharedBytesPerBlock: driver.funcGetAttribute(FunctionAttribute.SharedSizeBytes, k.func) + k.sharedBytes,
        ...(blocksPerSm >= 1 ? { blocksPerSm } : {}),
      };
    });
    return kernels.length > 0 ? kernels : undefined;
  } catch {
    return undefined;
  } finally {
    graph.destroy();
  }
}

/** The profiles of a call's kernels: its measured duration shared out evenly. */
export function callProfiles(
  name: string,
  shapes: readonly KernelShape[],
  durationUs: number,
  instances?: number,
): KernelProfile[] {
  return shapes.map((k, j) => ({
    ...k,
    name: shapes.length === 1 ? name : `${name} #${j + 1}`,
    durationUs: durationUs / shapes.length,
    ...(instances !== undefined ? { instances } : {}),
  }));
}
