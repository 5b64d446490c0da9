import type { ComputationGraph, Expression } from "../../graph/graph.js";
import { Op } from "../../graph/opcodes.js";
import type { LookupParameter, ParameterCollection } from "../../model/parameters.js";
import type { Buf } from "../../ops/common.js";
import { OPS } from "../../ops/registry.js";
import { lookupRowsBackward, lookupRowsForward } from "../../ops/rows.js";
import type { Trainer } from "../../optim/trainers.js";
import { reduceHostGradients } from "../cpu-reducer.js";
import type { DataParallelEngine, GradientReducer } from "../data-parallel.js";
import { type EngineCapabilities, requireCollection, requireExpression, requireScalar } from "../engine.js";
import { BackwardScratch, type BatchBackend, runBackward, runForward } from "./executor.js";
import { type BatchPlan, BatchPlanner, type BatchStrategy } from "./plan.js";

/**
 * The batched steps on the CPU. Matrix batches really are gathered into contiguous matrices and multiplied with
 * one loop nest per weight (the shape of the GPU path: gather → GEMM → scatter); every other batch runs the
 * reference kernel per node, since on the CPU only the grouping is under test.
 *
 * Forward products accumulate exactly as the reference kernel does (bias first, then each term's dot product,
 * rounded into a buffer of the engine's precision), so forward values equal the CPU engine's bit for bit; backward
 * sums come in a different order and agree to rounding.
 */
export class CpuBatchBackend implements BatchBackend {
  /** The value and gradient spaces; the engine sets them before each pass. */
  v: Buf;
  d: Buf;
  private x: Buf;
  private y: Buf;
  private dx = new Float64Array(1024);

  constructor(
    readonly params: ParameterCollection,
    private readonly alloc: (n: number) => Buf,
  ) {
    this.v = alloc(0);
    this.d = alloc(0);
    this.x = alloc(1024);
    this.y = alloc(1024);
  }

  loadParameters(g: ComputationGraph, nodes: Int32Array): void {
    for (const i of nodes) this.v.set(this.params.all[g.aux[i]!]!.value, g.valueOffset[i]!);
  }

  lookupForward(g: ComputationGraph, nodes: Int32Array, start: number, end: number): void {
    const table = this.params.all[g.aux[nodes[start]!]!]!;
    const dim = table.cols;
    for (let p = start; p < end; p++) {
      const i = nodes[p]!;
      const row = g.aux2[i]!;
      this.v.set(table.value.subarray(row * dim, (row + 1) * dim), g.valueOffset[i]!);
    }
  }

  matrixForward(g: ComputationGraph, nodes: Int32Array, start: number, end: number): void {
    const v = this.v;
    const first = nodes[start]!;
    const affine = g.op[first] === Op.Affine;
    const n = end - start;
    const m = g.rows[first]!;
    const y = this.scratchY(n * m);
    if (affine) this.gather(v, g, nodes, start, end, 0, m, y);
    else y.fill(0, 0, n * m);
    const terms = g.argCount[first]!;
    for (let k = affine ? 1 : 0; k < terms; k += 2) {
      const w = g.arg(first, k);
      const cols = g.cols[w]!;
      const x = this.scratchX(n * cols);
      this.gather(v, g, nodes, start, end, k + 1, cols, x);
      gemmAccumulate(v, g.valueOffset[w]!, m, cols, x, n, y);
    }
    for (let j = 0; j < n; j++) {
      const off = g.valueOffset[nodes[start + j]!]!;
      for (let r = 0; r < m; r++) v[off + r] = y[j * m + r]!;
    }
  }

  opForward(g: ComputationGraph, op: Op, nodes: Int32Array, start: number, end: number): void {
    if (op === Op.LookupRows) {
      // a whole batch of rows in one node: read from its table, as lookups are
      for (let p = start; p < end; p++)
        lookupRowsForward(g, nodes[p]!, this.v, this.params.all[g.aux[nodes[p]!]!]!.value);
      return;
    }
    const kernel = OPS[op]!;
    for (let p = start; p < end; p++) kernel.forward(g, nodes[p]!, this.v);
  }

  lookupBackward(g: ComputationGraph, nodes: Int32Array, start: number, end: number): void {
    const table = this.params.all[g.aux[nodes[start]!]!]! as LookupParameter;
    const dim = table.cols;
    const d = this.d;
    for (let p = start; p < end; p++) {
      const i = nodes[p]!;
      const row = g.aux2[i]!;
      const off = g.valueOffset[i]!;
      const base = row * dim;
      for (let k = 0; k < dim; k++) table.grad[base + k] = table.grad[base + k]! + d[off + k]!;
      table.touch(row);
    }
  }

  matrixBackward(g: ComputationGraph, nodes: Int32Array, start: number, end: number): void {
    const v = this.v;
    const d = this.d;
    const first = nodes[start]!;
    const affine = g.op[first] === Op.Affine;
    const n = end - start;
    const m = g.rows[first]!;
    const dy = this.scratchY(n * m);
    for (let j = 0; j < n; j++) {
      const off = g.valueOffset[nodes[start + j]!]!;
      for (let r = 0; r < m; r++) dy[j * m + r] = d[off + r]!;
    }
    if (affine) {
      for (let j = 0; j < n; j++) {
        const b = g.valueOffset[g.arg(nodes[start + j]!, 0)]!;
        for (let r = 0; r < m; r++) d[b + r] = d[b + r]! + dy[j * m + r]!;
      }
    }
    const terms = g.argCount[first]!;
    for (let k = affine ? 1 : 0; k < terms; k += 2) {
      const w = g.arg(first, k);
      const cols = g.cols[w]!;
      const x = this.scratchX(n * cols);
      this.gather(v, g, nodes, start, end, k + 1, cols, x);
      if (this.dx.length < n * cols) this.dx = new Float64Array(Math.max(n * cols, this.dx.length * 2));
      const dx = this.dx;
      dx.fill(0, 0, n * cols);
      gemmBackward(v, d, g.valueOffset[w]!, m, cols, x, dy, n, dx);
      for (let j = 0; j < n; j++) {
        const off = g.valueOffset[g.arg(nodes[start + j]!, k + 1)]!;
        for (let c = 0; c < cols; c++) d[off + c] = d[off + c]! + dx[j * cols + c]!;
      }
    }
  }

  opBackward(g: ComputationGraph, op: Op, nodes: Int32Array, start: number, end: number): void {
    if (op === Op.LookupRows) {
      for (let p = start; p < end; p++) {
        const table = this.params.all[g.aux[nodes[p]!]!]! as LookupParameter;
        lookupRowsBackward(g, nodes[p]!, this.d, table.grad, (row) => table.touch(row));
      }
      return;
    }
    const kernel = OPS[op]!;
    for (let p = start; p < end; p++) kernel.backward(g, nodes[p]!, this.v, this.d);
  }

  storeParameterGradients(g: ComputationGraph, nodes: Int32Array): void {
    const d = this.d;
    for (const i of nodes) {
      const pg = this.params.all[g.aux[i]!]!.grad;
      const off = g.valueOffset[i]!;
      for (let k = 0; k < pg.length; k++) pg[k] = pg[k]! + d[off + k]!;
    }
  }

  /** Copies argument `arg` (length `len`) of each node into consecutive rows of `dst`: dst[j·len + r]. */
  private gather(
    src: Buf,
    g: ComputationGraph,
    nodes: Int32Array,
    start: number,
    end: number,
    arg: number,
    len: number,
    dst: Buf,
  ): void {
    for (let p = start, j = 0; p < end; p++, j++) {
      const off = g.valueOffset[g.arg(nodes[p]!, arg)]!;
      for (let r = 0; r < len; r++) dst[j * len + r] = src[off + r]!;
    }
  }

  private scratchX(n: number): Buf {
    if (this.x.length < n) this.x = this.alloc(Math.max(n, this.x.length * 2));
    return this.x;
  }

  private scratchY(n: number): Buf {
    if (this.y.length < n) this.y = this.alloc(Math.max(n, this.y.length * 2));
    return this.y;
  }
}

/**
 * Y[j,·] += W·X[j,·] for all n columns: W row-major [m, k] at offset w of v; X [n, k] and Y [n, m] column-contiguous.
 * Row-outer order keeps one row of W in cache while it meets every column.
 */
function gemmAccumulate(v: Buf, w: number, m: number, k: number, x: Buf, n: number, y: Buf): void {
  for (let r = 0; r < m; r++) {
    const row = w + r * k;
    for (let j = 0; j < n; j++) {
      const xj = j * k;
      let s = 0;
      for (let c = 0; c < k; c++) s += v[row + c]! * x[xj + c]!;
      y[j * m + r] = y[j * m + r]! + s;
    }
  }
}

/** dW += dYᵀ·X (into d at W's offset) and dX += dY·W, for W [m, k], X [n, k], dY [n, m]. */
function gemmBackward(
  v: Buf,
  d: Buf,
  w: number,
  m: number,
  k: number,
  x: Buf,
  dy: Buf,
  n: number,
  dx: Float64Array,
): void {
  for (let r = 0; r < m; r++) {
    const row = w + r * k;
    for (let j = 0; j < n; j++) {
      const gy = dy[j * m + r]!;
      if (gy === 0) continue;
      const xj = j * k;
      for (let c = 0; c < k; c++) {
        d[row + c] = d[row + c]! + gy * x[xj + c]!;
        dx[xj + c] = dx[xj + c]! + gy * v[row + c]!;
      }
    }
  }
}

export interface AutobatchCpuOptions {
  /** Batching strategy (default "agenda", DyNet's better one). */
  strategy?: BatchStrategy;
  /** "f32" (default); "f64" computes in double precision, as the CPU engine's gradient-check mode. */
  precision?: "f32" | "f64";
}

/**
 * DyNet-style autobatching on the CPU: each forward call plans the newly requested nodes into batches of equal
 * signature and runs them batch by batch; backward runs the batches in reverse. Results match `CpuEngine` (forward
 * exactly, gradients to rounding); the plan statistics say how many kernel launches a device would need.
 */
export class AutobatchCpuEngine implements DataParallelEngine {
  readonly name = "autobatch";
  readonly capabilities: EngineCapabilities = { forwardOnly: true, nodeGradients: true };
  readonly strategy: BatchStrategy;
  /** The plan of the latest forward call and of the latest backward pass (for statistics and dumps). */
  lastForwardPlan: BatchPlan | null = null;
  lastBackwardPlan: BatchPlan | null = null;
  /** Batches run since construction: kernel launches a device would make. */
  forwardBatches = 0;
  backwardBatches = 0;

  private readonly backend: CpuBatchBackend;
  private readonly planner = new BatchPlanner();
  private readonly scratch = new BackwardScratch();
  private readonly f64: boolean;
  private graph: ComputationGraph | null = null;
  private generation = -1;
  /** Nodes [0, computed) of the current graph have values. */
  private computed = 0;
  private reducer: GradientReducer | null = null;

  constructor(
    readonly params: ParameterCollection,
    opts: AutobatchCpuOptions = {},
  ) {
    requireCollection(params, "autobatch");
    const strategy = opts.strategy ?? "agenda";
    if (strategy !== "depth" && strategy !== "agenda") {
      throw new RangeError(`autobatch: strategy must be "depth" or "agenda"; got ${JSON.stringify(strategy)}`);
    }
    this.strategy = strategy;
    this.f64 = opts.precision === "f64";
    this.backend = new CpuBatchBackend(params, (n) => this.alloc(n));
    this.backend.v = this.alloc(1024);
    this.backend.d = this.alloc(1024);
  }

  forward(e: Expression): void {
    requireExpression(e, "forward", "e");
    const g = e.graph;
    g.check(e, "forward", "e");
    this.params.checkGraph(g, this.name);
    if (g !== this.graph || g.generation !== this.generation) {
      this.graph = g;
      this.generation = g.generation;
      this.computed = 0;
      this.lastForwardPlan = null;
    }
    if (this.backend.v.length < g.valueSize) {
      // a larger buffer starts empty: recompute the graph from its first node
      this.backend.v = this.alloc(Math.max(g.valueSize, this.backend.v.length * 2));
      this.computed = 0;
    }
    if (e.id < this.computed) return;
    const plan = this.planner.plan(g, e.id, this.strategy, this.computed);
    this.forwardBatches += runForward(g, plan, this.backend);
    this.lastForwardPlan = plan;
    this.computed = e.id + 1;
  }

  forwardScalar(e: Expression): number {
    requireScalar(e, "forwardScalar", "e");
    this.forward(e);
    return this.backend.v[e.graph.valueOffset[e.id]!]!;
  }

  backward(loss: Expression): void {
    requireScalar(loss, "backward", "loss");
    const g = loss.graph;
    this.forward(loss);
    const last = loss.id;
    // the forward plan serves backward when one forward call computed exactly [0, loss]
    const fp = this.lastForwardPlan;
    const plan = fp && fp.from === 0 && fp.upTo === last ? fp : this.planner.plan(g, last, this.strategy, 0);
    this.lastBackwardPlan = plan;
    const be = this.backend;
    if (be.d.length < be.v.length) be.d = this.alloc(be.v.length);
    be.d.fill(0, 0, g.valueOffset[last]! + 1);
    be.d[g.valueOffset[last]!] = 1;
    this.backwardBatches += runBackward(g, plan, last, be, this.scratch);
  }

  value(e: Expression): Float32Array {
    requireExpression(e, "value", "e");
    this.forward(e);
    const off = e.graph.valueOffset[e.id]!;
    return Float32Array.from(this.backend.v.subarray(off, off + e.size));
  }

  gradient(e: Expression): Float32Array {
    requireExpression(e, "gradient", "e");
    const g = e.graph;
    if (g !== this.graph || g.generation !== this.generation)
      throw new Error("gradient: run backward on this graph first");
    const off = g.valueOffset[e.id]!;
    return Float32Array.from(this.backend.d.subarray(off, off + e.size));
  }

  update(trainer: Trainer): void {
    if (this.reducer) reduceHostGradients(this.params, this.reducer);
    trainer.update(this.params);
  }

  /** Data-parallel: the gradients are summed over `reducer`'s ranks (on the host) before every update. */
  setGradientReducer(reducer: GradientReducer | null): void {
    this.reducer = reducer;
  }

  /** Parameters live in the model's host arrays already. */
  syncToHost(): void {}

  dispose(): void {}

  private alloc(n: number): Buf {
    return this.f64 ? new Float64Array(n) : new Float32Array(n);
  }
}
