import type { ComputationGraph, Expression } from "../graph/graph.js";
import { Op } from "../graph/opcodes.js";
import type { LookupParameter, ParameterCollection } from "../model/parameters.js";
import type { Buf } from "../ops/common.js";
import { OPS } from "../ops/registry.js";
import { lookupRowsBackward, lookupRowsForward } from "../ops/rows.js";
import type { Trainer } from "../optim/trainers.js";
import { reduceHostGradients } from "./cpu-reducer.js";
import type { DataParallelEngine, GradientReducer } from "./data-parallel.js";
import { type EngineCapabilities, requireCollection, requireExpression, requireScalar } from "./engine.js";

export interface CpuEngineOptions {
  /** "f32" (default) for training; "f64" computes every node in double precision, for gradient checks. */
  precision?: "f32" | "f64";
}

/**
 * The reference engine: plain loops over one value buffer and one gradient buffer, node by node, in graph order.
 * Parameter values are copied into the value space at their parameter node, so every kernel sees only offsets into
 * two buffers; parameter gradients are added back into the model after the backward walk.
 */
export class CpuEngine implements DataParallelEngine {
  readonly name = "cpu";
  readonly capabilities: EngineCapabilities = { forwardOnly: true, nodeGradients: true };
  private v: Buf;
  private d: Buf;
  private graph: ComputationGraph | null = null;
  private generation = -1;
  /** Nodes [0, computed) of the current graph have values. */
  private computed = 0;
  private reach = new Uint8Array(1024);
  private readonly f64: boolean;
  private reducer: GradientReducer | null = null;

  constructor(
    readonly params: ParameterCollection,
    opts: CpuEngineOptions = {},
  ) {
    requireCollection(params, "cpu");
    this.f64 = opts.precision === "f64";
    this.v = this.alloc(1024);
    this.d = this.alloc(1024);
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
    }
    if (this.v.length < g.valueSize) {
      // a larger buffer starts empty: recompute the graph from its first node
      this.v = this.alloc(Math.max(g.valueSize, this.v.length * 2));
      this.computed = 0;
    }
    const v = this.v;
    for (let i = this.computed; i <= e.id; i++) {
      const op = g.op[i]!;
      if (op === Op.Parameter) {
        const p = this.params.all[g.aux[i]!]!;
        v.set(p.value, g.valueOffset[i]!);
      } else if (op === Op.Lookup) {
        const p = this.params.all[g.aux[i]!]!;
        const d = p.cols;
        const row = g.aux2[i]!;
        v.set(p.value.subarray(row * d, (row + 1) * d), g.valueOffset[i]!);
      } else if (op === Op.LookupRows) {
        lookupRowsForward(g, i, v, this.params.all[g.aux[i]!]!.value);
      } else {
        OPS[op]!.forward(g, i, v);
      }
    }
    if (e.id + 1 > this.computed) this.computed = e.id + 1;
  }

  forwardScalar(e: Expression): number {
    requireScalar(e, "forwardScalar", "e");
    this.forward(e);
    return this.v[e.graph.valueOffset[e.id]!]!;
  }

  backward(loss: Expression): void {
    requireScalar(loss, "backward", "loss");
    const g = loss.graph;
    this.forward(loss);
    const last = loss.id;
    const end = g.valueOffset[last]! + 1;
    if (this.d.length < this.v.length) this.d = this.alloc(this.v.length);
    const d = this.d;
    d.fill(0, 0, end);
    if (this.reach.length < g.size) this.reach = new Uint8Array(Math.max(g.size, this.reach.length * 2));
    const reach = this.reach;
    reach.fill(0, 0, last + 1);
    reach[last] = 1;
    d[g.valueOffset[last]!] = 1;
    const v = this.v;
    for (let i = last; i >= 0; i--) {
      if (reach[i] === 0) continue;
      const n = g.argCount[i]!;
      const s = g.argStart[i]!;
      for (let k = 0; k < n; k++) reach[g.args[s + k]!] = 1;
      const op = g.op[i]!;
      if (op === Op.Parameter) {
        const p = this.params.all[g.aux[i]!]!;
        const off = g.valueOffset[i]!;
        const pg = p.grad;
        for (let k = 0; k < pg.length; k++) pg[k] = pg[k]! + d[off + k]!;
      } else if (op === Op.Lookup) {
        const p = this.params.all[g.aux[i]!]! as LookupParameter;
        const dim = p.cols;
        const row = g.aux2[i]!;
        const off = g.valueOffset[i]!;
        const base = row * dim;
        for (let k = 0; k < dim; k++) p.grad[base + k] = p.grad[base + k]! + d[off + k]!;
        p.touch(row);
      } else if (op === Op.LookupRows) {
        const p = this.params.all[g.aux[i]!]! as LookupParameter;
        lookupRowsBackward(g, i, d, p.grad, (row) => p.touch(row));
      } else {
        OPS[op]!.backward(g, i, v, d);
      }
    }
  }

  value(e: Expression): Float32Array {
    requireExpression(e, "value", "e");
    this.forward(e);
    const off = e.graph.valueOffset[e.id]!;
    return Float32Array.from(this.v.subarray(off, off + e.size));
  }

  /** The value in the engine's own precision (float64 for gradient checks). */
  valueExact(e: Expression): Float64Array {
    this.forward(e);
    const off = e.graph.valueOffset[e.id]!;
    return Float64Array.from(this.v.subarray(off, off + e.size));
  }

  gradient(e: Expression): Float32Array {
    requireExpression(e, "gradient", "e");
    const g = e.graph;
    if (g !== this.graph || g.generation !== this.generation)
      throw new Error("gradient: run backward on this graph first");
    const off = g.valueOffset[e.id]!;
    return Float32Array.from(this.d.subarray(off, off + e.size));
  }

  update(trainer: Trainer): void {
    if (this.reducer) reduceHostGradients(this.params, this.reducer);
    trainer.update(this.params);
  }

  /** Data-parallel: the gradients are summed over `reducer`'s ranks (on the host) before every update. */
  setGradientReducer(reducer: GradientReducer | null): void {
    this.reducer = reducer;
  }

  syncToHost(): void {}

  dispose(): void {}

  private alloc(n: number): Buf {
    return this.f64 ? new Float64Array(n) : new Float32Array(n);
  }
}
