// Shared by the GLP4NN analysis scripts (chain-bound.ts, pool-grid.ts): the median time of some work captured once
// as a CUDA graph and replayed.

import type { GpuContext } from "../../../src/cuda/index.js";
import { CudaEvent, CudaGraph } from "../../../src/cuda/index.js";

/** `run` captured on the context's stream as a graph, launched once to warm, then `repeats` times: the median ms. */
export function graphMedianMs(ctx: GpuContext, run: () => void, repeats = 7): number {
  const graph = CudaGraph.capture(ctx.stream, run);
  const [a, b] = [CudaEvent.create(), CudaEvent.create()];
  try {
    graph.launch();
    const times: number[] = [];
    for (let r = 0; r < repeats; r++) {
      a.record(ctx.stream);
      graph.launch();
      b.record(ctx.stream);
      times.push(CudaEvent.elapsedMs(a, b));
    }
    times.sort((x, y) => x - y);
    return times[(times.length - 1) >> 1]!;
  } finally {
    a.destroy();
    b.destroy();
    graph.destroy();
  }
}
