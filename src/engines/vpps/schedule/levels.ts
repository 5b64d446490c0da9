/**
 * The batch's live nodes renumbered in the order the scheduler visits them: the nodes that emit instructions level
 * by level (graph order within a level), then the storage nodes (inputs, parameters, lookups, pickRanges) level by
 * level. Every per-node fact the passes read (the graph's op, shape, arguments and attributes, the layout's
 * offsets and flags) is copied into arrays of that numbering, the arguments renumbered too.
 *
 * Why: the forward and backward passes walk the graph level by level, and in graph order (tree by tree) the nodes
 * of one level lie hundreds of nodes apart, so that every fact of every visited node, and of each of its
 * arguments, was a cache miss in a different array (session 12: the profile was flat and bound by misses). In
 * this numbering a level is a run of consecutive nodes and the arguments of one level's nodes are runs of the
 * levels below, so the passes (and the dependency records of writes.ts, which are per node too) stream through
 * memory. The copy itself is one pass whose loads do not depend on each other, which the processor overlaps.
 *
 * Node ids of the view are only the scheduler's: the BatchSchedule keeps the layout in graph numbering, and
 * `order` maps back (errors and the VPPS_DUMP trace name graph nodes).
 */
import type { ComputationGraph } from "../../../graph/graph.js";
import type { BatchLayout } from "../plan/layout.js";

/** What the emitters read of a graph: ComputationGraph itself, or the level-ordered copy below. */
export interface NodeTable {
  readonly op: Uint8Array;
  readonly rows: Int32Array;
  readonly cols: Int32Array;
  readonly argStart: Int32Array;
  readonly argCount: Int32Array;
  readonly args: Int32Array;
  readonly aux: Int32Array;
  readonly aux2: Int32Array;
  readonly auxF: Float32Array;
  arg(id: number, k: number): number;
  describe(id: number): string;
}

/** The level-ordered copy of a graph's live nodes (reused across batches: every array is grow-only). */
export class LevelOrder implements NodeTable {
  op = new Uint8Array(0);
  rows = new Int32Array(0);
  cols = new Int32Array(0);
  argStart = new Int32Array(0);
  argCount = new Int32Array(0);
  args = new Int32Array(0);
  aux = new Int32Array(0);
  aux2 = new Int32Array(0);
  auxF = new Float32Array(0);
  /** Layout facts in this numbering. */
  value = new Int32Array(0);
  grad = new Int32Array(0);
  temp = new Int32Array(0);
  valueRoot = new Int32Array(0);
  gradRoot = new Int32Array(0);
  needGrad = new Uint8Array(0);
  placed = new Uint8Array(0);
  /** Per view node: its graph node; per graph node: its view node (-1: not live). */
  order = new Int32Array(0);
  pos = new Int32Array(0);
  private paramNode = new Int32Array(0);
  private readonly lookupNodes: number[] = [];
  /** The graph of the last `build`, for describe(). */
  private g: ComputationGraph | undefined;

  arg(id: number, k: number): number {
    return this.args[this.argStart[id]! + k]!;
  }

  /** The graph node's description, under its graph id (what a user can find). */
  describe(id: number): string {
    return this.g!.describe(this.order[id]!);
  }

  /**
   * Renumbers the live nodes of `g` (laid out as `L`, nodes [0, n)). `bucket[b + 1]` holds the number of nodes of
   * bucket b on entry: buckets 0..levels-1 are the listed nodes of each level (`listed[op]` = 1), buckets
   * levels..2·levels-1 the other live nodes of each level; on return `bucket[b]` is where bucket b starts. Returns
   * the layout in this numbering (the per-node arrays are views of this object's, the rest is L's).
   */
  build(
    g: ComputationGraph,
    L: BatchLayout,
    n: number,
    live: number,
    bucket: Int32Array,
    levels: number,
    listed: Uint8Array,
  ): BatchLayout {
    this.g = g;
    this.reserve(n, live, g.argsSize);
    for (let b = 1; b <= 2 * levels; b++) bucket[b]! += bucket[b - 1]!;
    this.place(g, L, n, bucket, levels, listed);
    // bucket[b] became the end of bucket b while placing; shift back so that it is the start
    for (let b = 2 * levels; b > 0; b--) bucket[b] = bucket[b - 1]!;
    bucket[0] = 0;
    this.gather(g, L, live);
    const params = L.paramNode.length;
    if (this.paramNode.length < params) this.paramNode = new Int32Array(params);
    const paramNode = this.paramNode.subarray(0, params);
    const pos = this.pos;
    for (let p = 0; p < params; p++) paramNode[p] = L.paramNode[p]! < 0 ? -1 : pos[L.paramNode[p]!]!;
    const lookupNodes = this.lookupNodes;
    lookupNodes.length = 0;
    for (const i of L.lookupRows.node) lookupNodes.push(pos[i]!);
    return {
      ...L,
      value: this.value,
      grad: this.grad,
      temp: this.temp,
      valueRoot: this.valueRoot,
      gradRoot: this.gradRoot,
      needGrad: this.needGrad,
      placed: this.placed,
      paramNode,
      lookupRows: { ...L.lookupRows, node: lookupNodes },
    };
  }

  /** Room for n graph nodes, `live` view nodes and `argWords` argument words. */
  private reserve(n: number, live: number, argWords: number): void {
    if (this.pos.length < n) this.pos = new Int32Array(2 * n);
    if (this.args.length < argWords) this.args = new Int32Array(2 * argWords);
    if (this.op.length >= live) return;
    const size = 2 * live;
    this.op = new Uint8Array(size);
    this.rows = new Int32Array(size);
    this.cols = new Int32Array(size);
    this.argStart = new Int32Array(size);
    this.argCount = new Int32Array(size);
    this.aux = new Int32Array(size);
    this.aux2 = new Int32Array(size);
    this.auxF = new Float32Array(size);
    this.value = new Int32Array(size);
    this.grad = new Int32Array(size);
    this.temp = new Int32Array(size);
    this.valueRoot = new Int32Array(size);
    this.gradRoot = new Int32Array(size);
    this.needGrad = new Uint8Array(size);
    this.placed = new Uint8Array(size);
    this.order = new Int32Array(size);
  }

  /** Each live node's place (a counting sort by bucket, graph order within one): pos and order. */
  private place(
    g: ComputationGraph,
    L: BatchLayout,
    n: number,
    bucket: Int32Array,
    levels: number,
    listed: Uint8Array,
  ): void {
    const { depth, op } = g;
    const live = L.live;
    const { pos, order } = this;
    for (let i = 0; i < n; i++) {
      if (live[i] === 0) {
        pos[i] = -1;
        continue;
      }
      const b = listed[op[i]!] === 1 ? depth[i]! : levels + depth[i]!;
      const p = bucket[b]!++;
      pos[i] = p;
      order[p] = i;
    }
  }

  /** Copies every fact of each view node from its graph node, arguments and storage roots renumbered. */
  private gather(g: ComputationGraph, L: BatchLayout, live: number): void {
    const { op, rows, cols, argStart, argCount, args, aux, aux2, auxF } = g;
    const { value, grad, temp, valueRoot, gradRoot, needGrad, placed } = L;
    const { order, pos } = this;
    const vOp = this.op;
    const vRows = this.rows;
    const vCols = this.cols;
    const vAux = this.aux;
    const vAux2 = this.aux2;
    const vAuxF = this.auxF;
    const vValue = this.value;
    const vGrad = this.grad;
    const vTemp = this.temp;
    const vNeedGrad = this.needGrad;
    const vPlaced = this.placed;
    const vValueRoot = this.valueRoot;
    const vGradRoot = this.gradRoot;
    const vArgStart = this.argStart;
    const vArgCount = this.argCount;
    const vArgs = this.args;
    let a = 0;
    for (let p = 0; p < live; p++) {
      const i = order[p]!;
      vOp[p] = op[i]!;
      vRows[p] = rows[i]!;
      vCols[p] = cols[i]!;
      vAux[p] = aux[i]!;
      vAux2[p] = aux2[i]!;
      vAuxF[p] = auxF[i]!;
      vValue[p] = value[i]!;
      vGrad[p] = grad[i]!;
      vTemp[p] = temp[i]!;
      vNeedGrad[p] = needGrad[i]!;
      vPlaced[p] = placed[i]!;
      const vr = valueRoot[i]!;
      vValueRoot[p] = vr < 0 ? -1 : pos[vr]!;
      const gr = gradRoot[i]!;
      vGradRoot[p] = gr < 0 ? -1 : pos[gr]!;
      const s = argStart[i]!;
      const c = argCount[i]!;
      vArgStart[p] = a;
      vArgCount[p] = c;
      for (let k = 0; k < c; k++) vArgs[a + k] = pos[args[s + k]!]!;
      a += c;
    }
  }
}
