import type { ComputationGraph } from "../../graph/graph.js";
import { Op } from "../../graph/opcodes.js";
import type { BatchPlan } from "./plan.js";
import { isMatrixOp } from "./signature.js";

/**
 * The steps of batched execution, one call per batch of a plan. A backend owns the value and gradient spaces (one
 * offset per node, `g.valueOffset`); the CPU backend implements the steps with loops, a CUDA backend would implement
 * each as one launch (a gather kernel, one GEMM per weight, a scatter kernel, one elementwise kernel per batch).
 * A batch is `nodes[start … end)`; all its nodes share one batching signature.
 */
export interface BatchBackend {
  /** Copies each dense parameter's value into the value space at its parameter node. */
  loadParameters(g: ComputationGraph, nodes: Int32Array): void;
  /** y_j = E[row_j] for lookups of one table: a row gather. */
  lookupForward(g: ComputationGraph, nodes: Int32Array, start: number, end: number): void;
  /** y_j = b_j + Σ_t W_t·x_{t,j} with the same W_t for every node: gather X_t, one GEMM per t, scatter Y. */
  matrixForward(g: ComputationGraph, nodes: Int32Array, start: number, end: number): void;
  /** Every other op: the batch's nodes computed by one op (one elementwise kernel on a device). */
  opForward(g: ComputationGraph, op: Op, nodes: Int32Array, start: number, end: number): void;
  /** Adds the gradients of lookup rows into the table's gradient and marks the rows touched. */
  lookupBackward(g: ComputationGraph, nodes: Int32Array, start: number, end: number): void;
  /** dx_{t,j} += W_tᵀ·dy_j, dW_t += Σ_j dy_j·x_{t,j}ᵀ, db_j += dy_j: gather dY and X_t, GEMMs, scatter-add dX. */
  matrixBackward(g: ComputationGraph, nodes: Int32Array, start: number, end: number): void;
  /** Accumulates (+=) the batch's nodes' gradient contributions into their arguments. */
  opBackward(g: ComputationGraph, op: Op, nodes: Int32Array, start: number, end: number): void;
  /** Adds the gradients at these parameter nodes into the parameters' gradients. */
  storeParameterGradients(g: ComputationGraph, nodes: Int32Array): void;
}

/** Runs a plan forward: parameters first, then every batch in order. Returns the number of batches run. */
export function runForward(g: ComputationGraph, plan: BatchPlan, backend: BatchBackend): number {
  if (plan.parameterNodes.length > 0) backend.loadParameters(g, plan.parameterNodes);
  const { nodes, batchStart, batchOp } = plan;
  for (let b = 0; b < plan.batchCount; b++) {
    const op = batchOp[b]! as Op;
    const s = batchStart[b]!;
    const e = batchStart[b + 1]!;
    if (op === Op.Lookup) backend.lookupForward(g, nodes, s, e);
    else if (isMatrixOp(op)) backend.matrixForward(g, nodes, s, e);
    else backend.opForward(g, op, nodes, s, e);
  }
  return plan.batchCount;
}

/**
 * Scratch for `runBackward`: which nodes the loss reaches, and the reached nodes of the current batch. Kept by the
 * engine so a backward pass allocates nothing.
 */
export class BackwardScratch {
  reach = new Uint8Array(1024);
  batch = new Int32Array(256);
}

/**
 * Runs a plan backward from `loss` (whose gradient the caller has set, all others zero): batches in reverse order,
 * each restricted to the nodes the loss reaches — the same nodes the reference engine visits, so that lookup rows
 * are touched, and parameter gradients stored, exactly where it does. Reach is marked on the way: a node's
 * consumers all run in later batches, so they have marked it before its own batch comes up.
 * The plan must cover [0, loss]. Returns the number of batches that ran (non-empty after the reach filter).
 */
export function runBackward(
  g: ComputationGraph,
  plan: BatchPlan,
  loss: number,
  backend: BatchBackend,
  scratch: BackwardScratch,
): number {
  if (plan.from !== 0 || plan.upTo !== loss) {
    throw new Error(`runBackward: the plan covers nodes [${plan.from}, ${plan.upTo}]; backward needs [0, ${loss}]`);
  }
  if (scratch.reach.length < g.size) scratch.reach = new Uint8Array(Math.max(g.size, scratch.reach.length * 2));
  const reach = scratch.reach;
  reach.fill(0, 0, loss + 1);
  reach[loss] = 1;
  const { nodes, batchStart, batchOp } = plan;
  const { args, argStart, argCount } = g;
  let ran = 0;
  for (let b = plan.batchCount - 1; b >= 0; b--) {
    const s = batchStart[b]!;
    const e = batchStart[b + 1]!;
    if (scratch.batch.length < e - s) scratch.batch = new Int32Array(Math.max(e - s, scratch.batch.length * 2));
    const batch = scratch.batch;
    let n = 0;
    for (let p = s; p < e; p++) {
      const i = nodes[p]!;
      if (reach[i] === 0) continue;
      batch[n++] = i;
      const a1 = argStart[i]! + argCount[i]!;
      for (let k = argStart[i]!; k < a1; k++) reach[args[k]!] = 1;
    }
    if (n === 0) continue;
    ran++;
    const op = batchOp[b]! as Op;
    if (op === Op.Lookup) backend.lookupBackward(g, batch, 0, n);
    else if (isMatrixOp(op)) backend.matrixBackward(g, batch, 0, n);
    else backend.opBackward(g, op, batch, 0, n);
  }
  let np = 0;
  const params = new Int32Array(plan.parameterNodes.length);
  for (const i of plan.parameterNodes) if (reach[i] === 1) params[np++] = i;
  if (np > 0) backend.storeParameterGradients(g, params.subarray(0, np));
  return ran;
}
