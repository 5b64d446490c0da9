import type { ComputationGraph } from "../../graph/graph.js";
import { Op } from "../../graph/opcodes.js";
import { bestGroup, countConsumers, countDepths, fillConsumers, maxPlannedDepth, placeByDepth } from "./passes.js";
import { isMatrixOp, SignatureTable } from "./signature.js";

/*
 * On-the-fly operation batching (Neubig, Goldberg & Dyer, NIPS 2017): the nodes of a batch's super-graph that do
 * the same operation on the same parameters (equal batching signature) run as one batched kernel. A plan is the
 * order of those kernels; building it is on the host's critical path for every batch, so it works on typed arrays
 * only, in a few linear passes, with scratch buffers reused across calls.
 */

/**
 * `depth`: a node's batch is (depth from the leaves, signature) — simple, but the same operation at different
 * depths (an output layer under every tree node) runs once per depth.
 * `agenda`: DyNet's agenda — keep the ready nodes grouped by signature and repeatedly run the group whose
 * signature has the lowest average depth over the whole graph, deferring matrix products while any other group is
 * ready, so that products collect more columns per GEMM.
 */
export type BatchStrategy = "depth" | "agenda";

export const BATCH_STRATEGIES: readonly BatchStrategy[] = ["depth", "agenda"];

export interface BatchPlanStats {
  /** Nodes in batches (parameter nodes excluded). */
  readonly nodes: number;
  /** Parameter nodes loaded before the first batch. */
  readonly parameters: number;
  /** Number of batches: kernel launches of one forward pass. */
  readonly batches: number;
  /** Batches of matrix products (one GEMM per weight each). */
  readonly matrixBatches: number;
  /** Distinct signatures among the planned nodes. */
  readonly signatures: number;
  readonly maxBatchSize: number;
  readonly meanBatchSize: number;
}

/**
 * The execution order of nodes [from, upTo] of a graph. Batch b holds `nodes[batchStart[b] … batchStart[b+1])`, all
 * with signature `batchSignature[b]` and op `batchOp[b]`; every argument of a node is a parameter node, a node
 * before `from` (computed earlier), or a node of an earlier batch.
 */
export interface BatchPlan {
  readonly strategy: BatchStrategy;
  readonly from: number;
  readonly upTo: number;
  /** Dense parameter nodes in [from, upTo]: loaded from the model, never batched. */
  readonly parameterNodes: Int32Array;
  readonly batchCount: number;
  /** batchCount + 1 entries. */
  readonly batchStart: Int32Array;
  readonly nodes: Int32Array;
  readonly batchOp: Uint8Array;
  /** Interned signature id per batch (ids are per plan; equal ids ⇔ equal `batchSignature` strings). */
  readonly batchSignature: Int32Array;
  readonly stats: BatchPlanStats;
}

function grownInt32(a: Int32Array<ArrayBuffer>, n: number): Int32Array<ArrayBuffer> {
  return a.length >= n ? a : new Int32Array(Math.max(n, a.length * 2));
}

/**
 * Builds plans; keeps its scratch buffers between calls so that planning a batch allocates only the plan itself.
 */
export class BatchPlanner {
  private readonly sigs = new SignatureTable();
  private nodeSig = new Int32Array(1024); // per local node (i − from); −1 for parameters
  private order = new Int32Array(1024);
  private nodeBatch = new Int32Array(1024);
  private counts = new Int32Array(1024);
  private sigStamp = new Int32Array(64);
  private sigBatch = new Int32Array(64);
  private sigDepthSum = new Float64Array(64);
  private sigCount = new Int32Array(64);
  private params = new Int32Array(64);
  // agenda
  private pending = new Int32Array(1024);
  private consStart = new Int32Array(1025);
  private cons = new Int32Array(2048);
  private next = new Int32Array(1024);
  private readyHead = new Int32Array(64);
  private readyTail = new Int32Array(64);
  private readySize = new Int32Array(64);
  private active = new Int32Array(64);
  private activeCount = 0;

  /** Plans nodes [from, upTo] of `g` (nodes before `from` count as computed). */
  plan(g: ComputationGraph, upTo: number, strategy: BatchStrategy, from = 0): BatchPlan {
    if (!Number.isInteger(upTo) || upTo < 0 || upTo >= g.size) {
      throw new RangeError(`planBatches: upTo = ${upTo} is not a node of the graph (it has ${g.size} nodes)`);
    }
    if (!Number.isInteger(from) || from < 0 || from > upTo) {
      throw new RangeError(`planBatches: from = ${from} must be an integer in [0, upTo = ${upTo}]`);
    }
    if (strategy !== "depth" && strategy !== "agenda") {
      throw new RangeError(`planBatches: strategy must be "depth" or "agenda"; got ${JSON.stringify(strategy)}`);
    }
    const n = upTo - from + 1;
    const paramCount = this.internAll(g, from, n);
    const batched = n - paramCount;
    const out = new Int32Array(batched);
    const starts: number[] = [0];
    if (strategy === "depth") this.byDepth(g, from, n, out, starts);
    else this.byAgenda(g, from, n, out, starts);
    return this.finish(strategy, from, upTo, out, starts, paramCount);
  }

  /** Interns every node's signature; collects parameter nodes and per-signature depth sums. */
  private internAll(g: ComputationGraph, from: number, n: number): number {
    const sigs = this.sigs;
    sigs.reset();
    this.nodeSig = grownInt32(this.nodeSig, n);
    const nodeSig = this.nodeSig;
    let paramCount = 0;
    let known = 0; // signatures whose counters are initialised in this plan
    const op = g.op;
    const depth = g.depth;
    for (let li = 0; li < n; li++) {
      const i = from + li;
      if (op[i] === Op.Parameter) {
        if (paramCount === this.params.length) this.params = grownInt32(this.params, paramCount + 1);
        this.params[paramCount++] = i;
        nodeSig[li] = -1;
        continue;
      }
      const s = sigs.intern(g, i);
      if (s === known) {
        // ids are handed out in order, so a new signature is always the next one
        if (s === this.sigCount.length) this.growSignatureArrays(s + 1);
        this.sigCount[s] = 0;
        this.sigDepthSum[s] = 0;
        known++;
      }
      nodeSig[li] = s;
      this.sigCount[s]!++;
      this.sigDepthSum[s]! += depth[i]!;
    }
    return paramCount;
  }

  private growSignatureArrays(need: number): void {
    const m = Math.max(need, this.sigCount.length * 2);
    const sc = new Int32Array(m);
    sc.set(this.sigCount);
    this.sigCount = sc;
    const sd = new Float64Array(m);
    sd.set(this.sigDepthSum);
    this.sigDepthSum = sd;
    this.sigStamp = new Int32Array(m);
    this.sigBatch = new Int32Array(m);
    this.readyHead = new Int32Array(m);
    this.readyTail = new Int32Array(m);
    this.readySize = new Int32Array(m);
    this.active = new Int32Array(m);
  }

  /** Batches are (depth, signature), in increasing depth; within a depth, by first appearance of the signature. */
  private byDepth(g: ComputationGraph, from: number, n: number, out: Int32Array, starts: number[]): void {
    const maxDepth = this.sortByDepth(g, from, n);
    const total = this.counts[maxDepth]!;
    const sizes = this.groupBySignature(maxDepth);
    const fill = new Int32Array(sizes.length);
    for (let b = 0; b < sizes.length; b++) {
      fill[b] = starts[b]!;
      starts.push(starts[b]! + sizes[b]!);
    }
    const order = this.order;
    const nodeBatch = this.nodeBatch;
    for (let q = 0; q < total; q++) out[fill[nodeBatch[q]!]!++] = from + order[q]!;
  }

  /**
   * Counting sort of the planned nodes by depth into `order` (local ids, ascending within a depth); afterwards
   * counts[d] is the end of depth d in `order`. Returns the largest depth.
   */
  private sortByDepth(g: ComputationGraph, from: number, n: number): number {
    const maxDepth = maxPlannedDepth(this.nodeSig, g.depth, from, n);
    this.counts = grownInt32(this.counts, maxDepth + 2);
    countDepths(this.nodeSig, g.depth, from, n, this.counts, maxDepth);
    this.order = grownInt32(this.order, this.counts[maxDepth + 1]!);
    placeByDepth(this.nodeSig, g.depth, from, n, this.counts, this.order);
    return maxDepth;
  }

  /** Assigns each sorted node its batch (nodeBatch, parallel to order): one per (depth, signature); returns sizes. */
  private groupBySignature(maxDepth: number): number[] {
    const counts = this.counts;
    const order = this.order;
    const nodeSig = this.nodeSig;
    this.nodeBatch = grownInt32(this.nodeBatch, counts[maxDepth]!);
    const nodeBatch = this.nodeBatch;
    const stamp = this.sigStamp;
    const sigBatch = this.sigBatch;
    stamp.fill(0, 0, this.sigs.count);
    const sizes: number[] = [];
    let p = 0;
    for (let d = 0; d <= maxDepth; d++) {
      const end = counts[d]!;
      for (; p < end; p++) {
        const s = nodeSig[order[p]!]!;
        if (stamp[s] !== d + 1) {
          stamp[s] = d + 1;
          sigBatch[s] = sizes.length;
          sizes.push(0);
        }
        const b = sigBatch[s]!;
        nodeBatch[p] = b;
        sizes[b]!++;
      }
    }
    return sizes;
  }

  /**
   * DyNet's agenda: repeatedly run every ready node of the best ready signature. Split into phases (each a small
   * function with one hot loop) because V8 optimises those well; one large function deoptimised on every call.
   */
  private byAgenda(g: ComputationGraph, from: number, n: number, out: Int32Array, starts: number[]): void {
    this.buildConsumers(g, from, n);
    const sigCount = this.sigs.count;
    const avg = new Float64Array(sigCount);
    const matrix = new Uint8Array(sigCount);
    for (let s = 0; s < sigCount; s++) {
      avg[s] = this.sigDepthSum[s]! / this.sigCount[s]!;
      matrix[s] = isMatrixOp(this.sigs.op[s]!) ? 1 : 0;
    }
    this.seedReady(n, sigCount);
    const p = this.drain(from, out, starts, avg, matrix);
    if (p !== out.length) {
      throw new Error(`planBatches: agenda scheduled ${p} of ${out.length} nodes (the graph has a cycle?)`);
    }
  }

  /** Puts every node with no pending argument on its signature's ready list. */
  private seedReady(n: number, sigCount: number): void {
    this.readySize.fill(0, 0, sigCount);
    this.activeCount = 0;
    const nodeSig = this.nodeSig;
    const pending = this.pending;
    for (let li = 0; li < n; li++) if (nodeSig[li]! >= 0 && pending[li] === 0) this.makeReady(li);
  }

  /** Runs the best ready group until none is ready; returns the number of nodes emitted. */
  private drain(from: number, out: Int32Array, starts: number[], avg: Float64Array, matrix: Uint8Array): number {
    const active = this.active;
    let p = 0;
    while (this.activeCount > 0) {
      const k = bestGroup(active, this.activeCount, avg, matrix);
      const s = active[k]!;
      active[k] = active[--this.activeCount]!;
      p = this.runGroup(s, from, out, p);
      starts.push(p);
    }
    return p;
  }

  /** Consumers of each planned node (CSR in consStart/cons) and the number of planned arguments each waits for. */
  private buildConsumers(g: ComputationGraph, from: number, n: number): void {
    this.pending = grownInt32(this.pending, n);
    this.consStart = grownInt32(this.consStart, n + 1);
    this.next = grownInt32(this.next, n);
    countConsumers(g, from, n, this.nodeSig, this.pending, this.consStart);
    this.cons = grownInt32(this.cons, this.consStart[n]!);
    this.order = grownInt32(this.order, n);
    fillConsumers(g, from, n, this.nodeSig, this.consStart, this.cons, this.order);
  }

  /** Appends local node li to its signature's ready list, activating the signature if the list was empty. */
  private makeReady(li: number): void {
    const s = this.nodeSig[li]!;
    this.next[li] = -1;
    if (this.readySize[s] === 0) {
      this.readyHead[s] = li;
      this.active[this.activeCount++] = s;
    } else {
      this.next[this.readyTail[s]!] = li;
    }
    this.readyTail[s] = li;
    this.readySize[s]!++;
  }

  /** Emits the ready nodes of signature s as one batch from position p of out, readies their consumers; returns
   *  the position after the batch. */
  private runGroup(s: number, from: number, out: Int32Array, p: number): number {
    const { next, consStart, cons, pending } = this;
    let li = this.readyHead[s]!;
    this.readySize[s] = 0;
    while (li !== -1) {
      if (p === out.length) throw new Error("planBatches: a node was made ready twice (planner bug)");
      out[p++] = from + li;
      const c1 = consStart[li + 1]!;
      for (let c = consStart[li]!; c < c1; c++) {
        const lc = cons[c]!;
        if (--pending[lc] === 0) this.makeReady(lc);
      }
      li = next[li]!;
    }
    return p;
  }

  private finish(
    strategy: BatchStrategy,
    from: number,
    upTo: number,
    out: Int32Array,
    starts: number[],
    paramCount: number,
  ): BatchPlan {
    const batchCount = starts.length - 1;
    const batchStart = Int32Array.from(starts);
    const batchOp = new Uint8Array(batchCount);
    const batchSig = new Int32Array(batchCount);
    let maxSize = 0;
    let matrixBatches = 0;
    for (let b = 0; b < batchCount; b++) {
      const first = out[batchStart[b]!]! - from;
      const s = this.nodeSig[first]!;
      batchSig[b] = s;
      batchOp[b] = this.sigs.op[s]!;
      if (isMatrixOp(batchOp[b]!)) matrixBatches++;
      const size = batchStart[b + 1]! - batchStart[b]!;
      if (size > maxSize) maxSize = size;
    }
    return {
      strategy,
      from,
      upTo,
      parameterNodes: this.params.slice(0, paramCount),
      batchCount,
      batchStart,
      nodes: out,
      batchOp,
      batchSignature: batchSig,
      stats: {
        nodes: out.length,
        parameters: paramCount,
        batches: batchCount,
        matrixBatches,
        signatures: this.sigs.count,
        maxBatchSize: maxSize,
        meanBatchSize: batchCount === 0 ? 0 : out.length / batchCount,
      },
    };
  }
}

const sharedPlanner = new BatchPlanner();

/** Plans nodes [from, upTo] of `g` with a shared planner (JavaScript runs one plan at a time). */
export function planBatches(g: ComputationGraph, upTo: number, strategy: BatchStrategy, from = 0): BatchPlan {
  return sharedPlanner.plan(g, upTo, strategy, from);
}
