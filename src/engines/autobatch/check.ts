import type { ComputationGraph } from "../../graph/graph.js";
import { Op, opName } from "../../graph/opcodes.js";
import { batchSignature } from "../../ops/registry.js";
import type { BatchPlan } from "./plan.js";

/**
 * Checks a plan against its graph; returns the first problem found, or null. Used by tests and debugging: every
 * node in [from, upTo] is planned exactly once (parameters as parameter nodes), the nodes of a batch share one
 * signature string, and every argument is ready before its batch.
 */
export function verifyPlan(g: ComputationGraph, plan: BatchPlan): string | null {
  const { from, upTo } = plan;
  const batchOf = new Int32Array(upTo - from + 1).fill(-2);
  for (const i of plan.parameterNodes) {
    if (g.op[i] !== Op.Parameter) return `parameterNodes holds ${g.describe(i)}, which is not a parameter node`;
    batchOf[i - from] = -1;
  }
  for (let b = 0; b < plan.batchCount; b++) {
    const s0 = plan.batchStart[b]!;
    const sig = batchSignature(g, plan.nodes[s0]!);
    for (let p = s0; p < plan.batchStart[b + 1]!; p++) {
      const i = plan.nodes[p]!;
      if (i < from || i > upTo) return `batch ${b} holds node ${i}, outside the planned range [${from}, ${upTo}]`;
      if (batchOf[i - from] !== -2) return `node ${g.describe(i)} is planned twice`;
      batchOf[i - from] = b;
      if (batchSignature(g, i) !== sig) {
        return `batch ${b} mixes signatures '${sig}' and '${batchSignature(g, i)}' (node ${g.describe(i)})`;
      }
      if (g.op[i] !== plan.batchOp[b]) return `batch ${b} has op ${opName(plan.batchOp[b]!)}; node ${g.describe(i)}`;
    }
  }
  for (let i = from; i <= upTo; i++) if (batchOf[i - from] === -2) return `node ${g.describe(i)} is not planned`;
  for (let b = 0; b < plan.batchCount; b++) {
    for (let p = plan.batchStart[b]!; p < plan.batchStart[b + 1]!; p++) {
      const i = plan.nodes[p]!;
      for (let k = 0; k < g.argCount[i]!; k++) {
        const a = g.arg(i, k);
        if (a >= from && batchOf[a - from]! >= b) {
          return `node ${g.describe(i)} in batch ${b} needs node #${a}, which runs in batch ${batchOf[a - from]}`;
        }
      }
    }
  }
  return null;
}

/** A readable listing of a plan (one line per batch), for dumps and failing tests. */
export function formatPlan(g: ComputationGraph, plan: BatchPlan, maxNodesPerLine = 8): string {
  const lines = [
    `${plan.strategy} plan of nodes [${plan.from}, ${plan.upTo}]: ${plan.batchCount} batches, ` +
      `${plan.stats.nodes} nodes, ${plan.parameterNodes.length} parameters`,
  ];
  for (let b = 0; b < plan.batchCount; b++) {
    const s = plan.batchStart[b]!;
    const e = plan.batchStart[b + 1]!;
    const ids = Array.from(plan.nodes.subarray(s, Math.min(e, s + maxNodesPerLine)), (i) => `#${i}`);
    if (e - s > maxNodesPerLine) ids.push("…");
    lines.push(`  ${b}: ${opName(plan.batchOp[b]!)} ×${e - s} [${batchSignature(g, plan.nodes[s]!)}] ${ids.join(" ")}`);
  }
  return lines.join("\n");
}
