import type { ComputationGraph } from "./graph.js";
import type { Op } from "./opcodes.js";

/**
 * A handle to one node of a graph. It holds no data of its own: the node lives in the graph's typed arrays.
 * A handle is only valid for the graph generation it was made in (`renew()` invalidates it).
 */
export class Expression {
  constructor(
    readonly graph: ComputationGraph,
    readonly id: number,
    readonly generation: number,
  ) {}
  get rows(): number {
    return this.graph.rows[this.id]!;
  }
  get cols(): number {
    return this.graph.cols[this.id]!;
  }
  /** Number of elements of the node's value. */
  get size(): number {
    return this.graph.rows[this.id]! * this.graph.cols[this.id]!;
  }
  get op(): Op {
    return this.graph.op[this.id] as Op;
  }
  shapeString(): string {
    const c = this.cols;
    return c === 1 ? `[${this.rows}]` : `[${this.rows},${c}]`;
  }
}
