// What the host prepares for one forward call of the eager engine, sent to the device with one copy: the values of
// the new input nodes, the row lists of the new lookups and lookupRows nodes (one gather per table instead of one copy per lookup; the
// same lookups grouped by row for the backward's scatter, which then adds a row's uses in node order without
// atomics), and the pointer tables of the new sum nodes (a loss summed over thousands of nodes is one kernel). Pure
// host code over the graph and a writable buffer, so it is tested without a GPU.

import type { ComputationGraph } from "../../graph/graph.js";
import { Op } from "../../graph/opcodes.js";
import { lookupRowIds } from "../../ops/rows.js";

/** The typed views of the buffer a chunk is written into (a PinnedBuffer, or plain arrays in tests). */
export interface ChunkBuffer {
  readonly f32: Float32Array;
  readonly i32: Int32Array;
  readonly u32: Uint32Array;
}

/**
 * One table's lookups of a chunk: rows[j] of the table go to value offset offsets[j] (floats), j < count. For the
 * gradient the same lookups grouped by row: distinct row u (of `distinct`, in order of first use) receives the value
 * offsets sources[starts[u] … starts[u + 1]), in node order (`groupRows`).
 */
export interface ChunkLookups {
  param: number;
  dim: number;
  count: number;
  /** Device addresses of the int lists. */
  rowsPtr: number;
  offsetsPtr: number;
  /** The number of distinct rows, and the device addresses of their lists (distinct rows, starts, sources). */
  distinct: number;
  distinctRowsPtr: number;
  startsPtr: number;
  sourcesPtr: number;
}

/** A table's lookups grouped by row: see ChunkLookups. `order` lists the lookups (indices j) row after row. */
export interface RowGroups {
  readonly distinct: readonly number[];
  readonly starts: readonly number[];
  readonly order: readonly number[];
}

/** Groups lookups of `rows` (row of lookup j) by row: rows in order of first use, each row's lookups in order j. */
export function groupRows(rows: readonly number[]): RowGroups {
  const byRow = new Map<number, number[]>();
  rows.forEach((r, j) => {
    const list = byRow.get(r);
    if (list === undefined) byRow.set(r, [j]);
    else list.push(j);
  });
  const distinct: number[] = [];
  const starts: number[] = [0];
  const order: number[] = [];
  for (const [r, js] of byRow) {
    distinct.push(r);
    order.push(...js);
    starts.push(order.length);
  }
  return { distinct, starts, order };
}

export interface ForwardChunk {
  lookups: ChunkLookups[];
}

export interface ChunkPlan {
  /** The chunk's size in floats (even, so that pointer tables after it stay 8-byte aligned). */
  readonly floats: number;
  /** Each new input node's values: their offset in the chunk, in floats. */
  readonly inputAt: ReadonlyMap<number, number>;
  /**
   * Writes the chunk into `buf` as if it were at device address `chunkPtr`, and sets the address of each sum node's
   * tables (`tablePtr`: the argument value addresses, then the argument gradient addresses, 8 bytes each).
   * `valPtr`/`gradPtr` must hold every argument of the sum nodes: place the nodes first (`placeNodes`).
   */
  write(
    buf: ChunkBuffer,
    chunkPtr: number,
    valPtr: Float64Array,
    gradPtr: Float64Array,
    tablePtr: Float64Array,
  ): ForwardChunk;
}

const TWO_32 = 0x1_0000_0000;

/** One table's rows read by a chunk, in node order (a lookupRows node's rows in its order). */
interface TableReads {
  readonly dim: number;
  readonly rows: number[];
  readonly offsets: number[];
}

/** Plans the chunk of nodes [from, to] of `g`. */
export function planChunk(g: ComputationGraph, from: number, to: number): ChunkPlan {
  const inputs: number[] = [];
  const sums: number[] = [];
  // per table: the rows read and the value offsets they go to (a lookup is one row, a lookupRows node N rows)
  const tables = new Map<number, TableReads>();
  const reads = (t: number, dim: number): TableReads => {
    let r = tables.get(t);
    if (!r) {
      r = { dim, rows: [], offsets: [] };
      tables.set(t, r);
    }
    return r;
  };
  const inputAt = new Map<number, number>();
  let floats = 0;
  for (let i = from; i <= to; i++) {
    const op = g.op[i]!;
    if (op === Op.Input) {
      inputs.push(i);
      inputAt.set(i, floats);
      floats += g.rows[i]! * g.cols[i]!;
    } else if (op === Op.Lookup) {
      const r = reads(g.aux[i]!, g.rows[i]!);
      r.rows.push(g.aux2[i]!);
      r.offsets.push(g.valueOffset[i]!);
    } else if (op === Op.LookupRows) {
      const dim = g.cols[i]!;
      const r = reads(g.aux[i]!, dim);
      const ids = lookupRowIds(g, i);
      const y = g.valueOffset[i]!;
      for (let n = 0; n < ids.length; n++) {
        r.rows.push(ids[n]!);
        r.offsets.push(y + n * dim);
      }
    } else if (op === Op.Sum) {
      sums.push(i);
    }
  }
  // per table: rows and offsets (2 per row read), then distinct rows, starts and sources (grouped by row)
  const groups = new Map<number, RowGroups>();
  for (const [t, r] of tables) {
    const grouped = groupRows(r.rows);
    groups.set(t, grouped);
    floats += 3 * r.rows.length + 2 * grouped.distinct.length + 1;
  }
  if (floats & 1) floats++;
  const tableStart = floats;
  for (const i of sums) floats += 4 * g.argCount[i]!;
  return {
    floats,
    inputAt,
    write(buf, chunkPtr, valPtr, gradPtr, tablePtr) {
      let pos = 0;
      for (const i of inputs) {
        const n = g.rows[i]! * g.cols[i]!;
        const off = g.aux[i]!;
        buf.f32.set(g.inputData.subarray(off, off + n), pos);
        pos += n;
      }
      const lookups: ChunkLookups[] = [];
      for (const [param, r] of tables) {
        const rowsAt = pos;
        buf.i32.set(r.rows, pos);
        pos += r.rows.length;
        const offsetsAt = pos;
        buf.i32.set(r.offsets, pos);
        pos += r.offsets.length;
        const grouped = groups.get(param)!;
        const distinctAt = pos;
        for (const row of grouped.distinct) buf.i32[pos++] = row;
        const startsAt = pos;
        for (const s of grouped.starts) buf.i32[pos++] = s;
        const sourcesAt = pos;
        for (const j of grouped.order) buf.i32[pos++] = r.offsets[j]!;
        lookups.push({
          param,
          dim: r.dim,
          count: r.rows.length,
          rowsPtr: chunkPtr + 4 * rowsAt,
          offsetsPtr: chunkPtr + 4 * offsetsAt,
          distinct: grouped.distinct.length,
          distinctRowsPtr: chunkPtr + 4 * distinctAt,
          startsPtr: chunkPtr + 4 * startsAt,
          sourcesPtr: chunkPtr + 4 * sourcesAt,
        });
      }
      pos = tableStart;
      const u32 = buf.u32;
      const put = (address: number) => {
        u32[pos++] = address % TWO_32;
        u32[pos++] = Math.floor(address / TWO_32);
      };
      for (const i of sums) {
        tablePtr[i] = chunkPtr + 4 * pos;
        const n = g.argCount[i]!;
        const s = g.argStart[i]!;
        for (let a = 0; a < n; a++) put(valPtr[g.args[s + a]!]!);
        for (let a = 0; a < n; a++) put(gradPtr[g.args[s + a]!]!);
      }
      return { lookups };
    },
  };
}

/** Where the nodes of a forward call live on the device (byte addresses). */
export interface NodeRegions {
  /** The graph's value and gradient regions: node i at 4 · valueOffset[i] bytes from each. */
  readonly values: number;
  readonly grads: number;
  /** The chunk's address (its inputs' values are in it, at `plan.inputAt`). */
  readonly chunkPtr: number;
  /** A parameter's weights and gradient. */
  paramValue(param: number): number;
  paramGrad(param: number): number;
}

/**
 * The value and gradient address of every node in [from, to] of `g`, in node order, so that a node that reads its
 * argument's memory in place (pickRange: the slice of its argument) finds the argument already placed, wherever the
 * argument lives: a parameter's weights, an input's values in this call's chunk (`plan`), or the value region.
 */
export function placeNodes(
  g: ComputationGraph,
  from: number,
  to: number,
  plan: ChunkPlan,
  r: NodeRegions,
  at: { readonly valPtr: Float64Array; readonly gradPtr: Float64Array },
): void {
  for (let i = from; i <= to; i++) {
    const op = g.op[i]!;
    const off = 4 * g.valueOffset[i]!;
    at.gradPtr[i] = r.grads + off;
    if (op === Op.Parameter) {
      at.valPtr[i] = r.paramValue(g.aux[i]!);
      at.gradPtr[i] = r.paramGrad(g.aux[i]!);
    } else if (op === Op.Input) {
      const pos = plan.inputAt.get(i);
      if (pos === undefined)
        throw new Error(`eager engine: input node ${i} is not in the chunk of nodes ${from}…${to}`);
      at.valPtr[i] = r.chunkPtr + 4 * pos;
    } else if (op === Op.PickRange) {
      at.valPtr[i] = at.valPtr[g.arg(i, 0)]! + 4 * g.aux[i]!;
    } else {
      at.valPtr[i] = r.values + off;
    }
  }
}
