/**
 * Kernel launches and cuBLAS calls an autobatch plan implies for one pass, counted from the plan alone (independently
 * of the backend), so that the backends' own launch counters can be checked against it. `loss` limits the backward
 * pass to the nodes the loss reaches.
 */
import type { BatchPlan } from "../src/engines/autobatch/plan.js";
import { isMatrixOp } from "../src/engines/autobatch/signature.js";
import type { ComputationGraph } from "../src/graph/graph.js";
import { Op } from "../src/graph/opcodes.js";

export function expectedLaunches(
  g: ComputationGraph,
  plan: BatchPlan,
  direction: "forward" | "backward",
  loss = -1,
): { kernels: number; cublas: number } {
  const reach = new Uint8Array(g.size);
  if (loss >= 0) {
    reach[loss] = 1;
    for (let i = loss; i >= 0; i--) if (reach[i]) for (let k = 0; k < g.argCount[i]!; k++) reach[g.arg(i, k)] = 1;
  }
  let kernels = 0;
  let cublas = 0;
  const weights = new Set<number>();
  for (let b = 0; b < plan.batchCount; b++) {
    const nodes = plan.nodes.subarray(plan.batchStart[b]!, plan.batchStart[b + 1]!);
    const op = plan.batchOp[b]!;
    if (direction === "backward" && !nodes.some((i) => reach[i] === 1)) continue;
    if (op === Op.Input || (op === Op.PickRange && direction === "forward")) continue;
    if (isMatrixOp(op)) {
      const first = nodes[0]!;
      const terms = op === Op.Affine ? (g.argCount[first]! - 1) / 2 : 1;
      const w = g.arg(first, op === Op.Affine ? 1 : 0);
      // a parameter's single-term products add their weight gradient in one GEMM per pass, not one per batch
      const perWeight = terms === 1 && g.op[w] === Op.Parameter;
      if (perWeight) weights.add(w);
      kernels += 2;
      cublas += direction === "forward" ? terms : perWeight ? 1 : 2 * terms;
    } else {
      kernels += 1;
    }
  }
  return { kernels, cublas: direction === "forward" ? cublas : cublas + weights.size };
}
