// The autobatch engine's batched steps for a CUDA device, as an encoder: each BatchBackend call writes the records
// of its batch's nodes into one host table for the whole pass and appends the batch's device commands (one kernel
// for an element-wise, cell or loss batch; gather → one GEMM per weight → scatter for a product batch). The engine
// then sends the table with one copy and issues the commands in order on one stream, so a pass costs one upload and
// the launches, and no host synchronisation. Everything here is float offsets into the device pool; only the device
// (src/engines/autobatch/gpu-engine.ts, or an emulator in the tests) turns them into addresses. Product batches are
// encoded in cuda-products.ts, the other ops' batches by their entries in kernel-table.ts; this file holds the pass and its memory.
//
// Memory. The engine lays out a region per graph: node values and node gradients at the graph's value offsets, then
// an aux area where tables grow up from the bottom (they are uploaded) and device-only scratch grows down from the
// top (the gathered inputs of products, kept for their backward, and reusable GEMM outputs). When the two meet the
// pass throws AuxOverflow and the engine lays out a larger region and starts the graph again.

import { gridFor, type KernelArg, karg, type RowMajorGemm } from "../../cuda/index.js";
import type { ComputationGraph } from "../../graph/graph.js";
import { Op } from "../../graph/opcodes.js";
import { lookupRowIds } from "../../ops/rows.js";
import { AB_BLOCK, type AutobatchKernelName } from "./cuda-kernels.js";
import { ProductEncoder } from "./cuda-products.js";
import type { BatchBackend } from "./executor.js";
import { AUTOBATCH_KERNELS } from "./kernel-table.js";
import type { BatchPlan } from "./plan.js";

/** One step of a pass, in stream order. Offsets are floats from the start of the device pool. */
export type DeviceCommand =
  | {
      readonly kind: "kernel";
      readonly name: AutobatchKernelName;
      readonly grid: number | readonly [number, number];
      readonly block: number;
      /** Pool offset of the batch's records; the kernel gets (pool base, records, ...args). */
      readonly rec: number;
      readonly args: readonly KernelArg[];
    }
  | { readonly kind: "gemm"; readonly gemm: RowMajorGemm<number> }
  | { readonly kind: "fill"; readonly offset: number; readonly count: number; readonly value: number }
  | NodeCommand;

/**
 * One node computed on its own by the device, with the eager engine's implementation (the rnn op: a node is a whole
 * packed batch already, so there is nothing to batch across nodes; src/engines/gpu/rnn-node.ts). Forward writes the
 * node's value; backward adds (+=) its gradient into its arguments' gradients, as every backward command does.
 */
export interface NodeCommand {
  readonly kind: "node";
  readonly op: Op;
  readonly backward: boolean;
  readonly g: ComputationGraph;
  readonly node: number;
  /** Pool offsets of the node's value, then of each argument's value, in argument order. */
  readonly val: Uint32Array;
  /** The same for the gradients. */
  readonly grad: Uint32Array;
}

/** A pass ready to issue: upload `table` to pool offset `tableOffset`, then run `commands` in order. */
export interface EncodedPass {
  readonly tableOffset: number;
  readonly table: Uint32Array;
  readonly commands: readonly DeviceCommand[];
}

/** Where the model's parameters are in the pool, and the record of touched lookup rows. */
export interface ParameterSite {
  paramValueOffset(index: number): number;
  paramGradOffset(index: number): number;
  touch(index: number, row: number): void;
}

/** The aux area is full: lay out a larger region and run the graph again. */
export class AuxOverflow extends Error {
  constructor(readonly neededFloats: number) {
    super(`autobatch: the aux area needs ${neededFloats} floats more than it has`);
    this.name = "AuxOverflow";
  }
}

const ALIGN = 64; // floats: 256-byte alignment of scratch matrices (cuBLAS operands)
const alignUp = (n: number) => Math.ceil(n / ALIGN) * ALIGN;

/** Threads per block for segments of `len` floats: whole warps, at most AB_BLOCK. */
function segmentBlock(len: number): number {
  return Math.min(AB_BLOCK, Math.max(32, Math.ceil(len / 32) * 32));
}

export class CudaBatchBackend implements BatchBackend {
  /** Pool offset of each node's value and gradient (parameters: the parameter's; pickRange: a view of its argument). */
  val = new Uint32Array(1024);
  grad = new Uint32Array(1024);

  private valuesBase = 0;
  private gradsBase = 0;
  private auxBase = 0;
  private auxSize = 0;
  /** Floats of the aux area used by tables (from the bottom) and scratch (from the top) of the current graph. */
  private tableTop = 0;
  private scratchFloor = 0;

  /** The pass's table (host side); reserve() may replace it, so read it after reserving. */
  words = new Uint32Array(1 << 16);
  private floats = new Float32Array(this.words.buffer);
  private chunkLen = 0;
  private chunkBase = 0;
  private commands: DeviceCommand[] = [];

  private readonly products = new ProductEncoder(this);
  private reusable = {
    y: { off: 0, cap: 0 },
    dy: { off: 0, cap: 0 },
    dx: { off: 0, cap: 0 },
    x: { off: 0, cap: 0 },
    ones: { off: 0, cap: 0 },
  };

  constructor(private readonly site: ParameterSite) {}

  /** A new region: values, gradients, and an aux area of `auxSize` floats. Forgets the current graph. */
  layout(valuesBase: number, gradsBase: number, auxBase: number, auxSize: number): void {
    this.valuesBase = valuesBase;
    this.gradsBase = gradsBase;
    this.auxBase = auxBase;
    this.auxSize = auxSize;
    this.resetGraph();
  }

  /** A new graph in the same region: its tables and scratch start over. */
  resetGraph(): void {
    this.tableTop = 0;
    this.scratchFloor = this.auxSize;
    this.products.reset();
    for (const r of Object.values(this.reusable)) r.cap = 0;
  }

  /** Before a forward pass of `plan` (see ProductEncoder). */
  planProducts(g: ComputationGraph, plan: BatchPlan): void {
    this.products.plan(g, plan);
  }

  /** Before a backward pass of `plan`. */
  beginBackward(plan: BatchPlan): void {
    this.products.beginBackward(plan);
  }

  /** After a backward pass: the per-weight gradient GEMMs. */
  finishBackward(): void {
    this.products.finishBackward();
  }

  beginPass(): void {
    this.chunkLen = 0;
    this.chunkBase = this.auxBase + this.tableTop;
    this.commands = [];
  }

  /** Checks that the pass fits and hands it over. */
  endPass(): EncodedPass {
    const used = alignUp(this.chunkLen);
    if (this.tableTop + used > this.scratchFloor) throw new AuxOverflow(this.tableTop + used - this.scratchFloor);
    const tableOffset = this.chunkBase;
    this.tableTop += used;
    return { tableOffset, table: this.words.subarray(0, this.chunkLen), commands: this.commands };
  }

  /** Value and gradient offsets of nodes [from, to]; input values go into the pass's table. */
  assignAddresses(g: ComputationGraph, from: number, to: number): void {
    if (this.val.length < g.size) {
      const n = Math.max(g.size, 2 * this.val.length);
      const grow = (a: Uint32Array) => {
        const b = new Uint32Array(n);
        b.set(a);
        return b;
      };
      this.val = grow(this.val);
      this.grad = grow(this.grad);
    }
    this.products.forget(g.size, from, to);
    const { val, grad, site } = this;
    for (let i = from; i <= to; i++) {
      const op = g.op[i]!;
      const off = g.valueOffset[i]!;
      grad[i] = this.gradsBase + off;
      if (op === Op.Parameter) {
        val[i] = site.paramValueOffset(g.aux[i]!);
        grad[i] = site.paramGradOffset(g.aux[i]!);
      } else if (op === Op.PickRange || op === Op.Flatten) {
        // views: a range of the argument from aux (flatten: all of it, aux 0)
        val[i] = val[g.arg(i, 0)]! + g.aux[i]!;
      } else if (op === Op.Input) {
        const n = g.rows[i]! * g.cols[i]!;
        const pos = this.reserve(n);
        this.floats.set(g.inputData.subarray(g.aux[i]!, g.aux[i]! + n), pos);
        val[i] = this.chunkBase + pos;
      } else {
        val[i] = this.valuesBase + off;
      }
    }
  }

  /** Zeroes the gradients of nodes [0, loss] and seeds dLoss/dLoss = 1. */
  seedBackward(g: ComputationGraph, loss: number): void {
    const end = g.valueOffset[loss]! + g.rows[loss]! * g.cols[loss]!;
    this.commands.push({ kind: "fill", offset: this.gradsBase, count: end, value: 0 });
    if (g.op[loss] === Op.Parameter) {
      // the gradient is the parameter's own, which accumulates: add 1 rather than set it
      const pos = this.reserve(4);
      this.floats[pos] = 1;
      this.words.set([this.chunkBase + pos, this.grad[loss]!, 1], pos + 1);
      this.kernel("ab_add_segments", 1, 32, pos + 1, [karg.i32(1)]);
    } else {
      this.commands.push({ kind: "fill", offset: this.grad[loss]!, count: 1, value: 1 });
    }
  }

  // ---- BatchBackend --------------------------------------------------------------------------------------------

  /** Parameter nodes point at the parameters (assignAddresses): nothing to copy. */
  loadParameters(): void {}

  lookupForward(g: ComputationGraph, nodes: Int32Array, start: number, end: number): void {
    const table = g.aux[nodes[start]!]!;
    const base = this.site.paramValueOffset(table);
    const dim = g.rows[nodes[start]!]!;
    const pos = this.reserve(3 * (end - start));
    const w = this.words;
    for (let p = start, q = pos; p < end; p++, q += 3) {
      const i = nodes[p]!;
      w[q] = base + g.aux2[i]! * dim;
      w[q + 1] = this.val[i]!;
      w[q + 2] = dim;
    }
    this.segments("ab_copy_segments", pos, end - start, dim);
  }

  lookupBackward(g: ComputationGraph, nodes: Int32Array, start: number, end: number): void {
    const table = g.aux[nodes[start]!]!;
    const base = this.site.paramGradOffset(table);
    const dim = g.rows[nodes[start]!]!;
    const pos = this.reserve(3 * (end - start));
    const w = this.words;
    for (let p = start, q = pos; p < end; p++, q += 3) {
      const i = nodes[p]!;
      const row = g.aux2[i]!;
      w[q] = this.grad[i]!;
      w[q + 1] = base + row * dim;
      w[q + 2] = dim;
      this.site.touch(table, row);
    }
    this.segments("ab_add_segments", pos, end - start, dim);
  }

  /** lookupRows node i: row n of its value is row ids[n] of the table, one segment copy per row. */
  lookupRowsForward(g: ComputationGraph, i: number): void {
    const dim = g.cols[i]!;
    const base = this.site.paramValueOffset(g.aux[i]!);
    const ids = lookupRowIds(g, i);
    const y = this.val[i]!;
    const pos = this.reserve(3 * ids.length);
    const w = this.words;
    for (let n = 0, q = pos; n < ids.length; n++, q += 3) {
      w[q] = base + ids[n]! * dim;
      w[q + 1] = y + n * dim;
      w[q + 2] = dim;
    }
    this.segments("ab_copy_segments", pos, ids.length, dim);
  }

  /** Adds each row's gradient into its table row (atomically: rows may repeat) and marks the rows touched, in order. */
  lookupRowsBackward(g: ComputationGraph, i: number): void {
    const table = g.aux[i]!;
    const dim = g.cols[i]!;
    const base = this.site.paramGradOffset(table);
    const ids = lookupRowIds(g, i);
    const dy = this.grad[i]!;
    const pos = this.reserve(3 * ids.length);
    const w = this.words;
    for (let n = 0, q = pos; n < ids.length; n++, q += 3) {
      const row = ids[n]!;
      w[q] = dy + n * dim;
      w[q + 1] = base + row * dim;
      w[q + 2] = dim;
      this.site.touch(table, row);
    }
    this.segments("ab_add_segments", pos, ids.length, dim);
  }

  matrixForward(g: ComputationGraph, nodes: Int32Array, start: number, end: number): void {
    this.products.forward(g, nodes, start, end);
  }

  matrixBackward(g: ComputationGraph, nodes: Int32Array, start: number, end: number): void {
    this.products.backward(g, nodes, start, end);
  }

  opForward(g: ComputationGraph, op: Op, nodes: Int32Array, start: number, end: number): void {
    AUTOBATCH_KERNELS[op]!.forward(this, g, nodes, start, end);
  }

  opBackward(g: ComputationGraph, op: Op, nodes: Int32Array, start: number, end: number): void {
    AUTOBATCH_KERNELS[op]!.backward(this, g, nodes, start, end);
  }

  /** Parameter gradients accumulate in place (parameter nodes point at them): nothing to store. */
  storeParameterGradients(): void {}

  // ---- helpers, shared with kernel-table.ts and cuda-products.ts --------------------------------------------------------

  /** Reserves `n` words of the pass's table; returns their position. */
  reserve(n: number): number {
    const pos = this.chunkLen;
    if (pos + n > this.words.length) {
      const w = new Uint32Array(Math.max(pos + n, 2 * this.words.length));
      w.set(this.words.subarray(0, pos));
      this.words = w;
      this.floats = new Float32Array(w.buffer);
    }
    this.chunkLen = pos + n;
    return pos;
  }

  /** `stride` words per node of nodes[start … end), written by `write(node, position, words)`. */
  records(
    nodes: Int32Array,
    start: number,
    end: number,
    stride: number,
    write: (i: number, q: number, w: Uint32Array) => void,
  ): number {
    const pos = this.reserve(stride * (end - start));
    const w = this.words;
    for (let p = start, q = pos; p < end; p++, q += stride) write(nodes[p]!, q, w);
    return pos;
  }

  /** Device-only floats of the current graph, from the top of the aux area. */
  scratch(n: number): number {
    this.scratchFloor -= alignUp(n);
    return this.auxBase + Math.max(0, this.scratchFloor);
  }

  /** A scratch matrix reused by every batch of the graph (stream order makes that safe); grown when too small. */
  reuse(which: "y" | "dy" | "dx" | "x", n: number): number {
    const r = this.reusable[which];
    if (r.cap < n) {
      r.cap = Math.max(n, 2 * r.cap);
      r.off = this.scratch(r.cap);
    }
    return r.off;
  }

  /** Appends node i as a command of its own (NodeCommand), with the offsets of its and its arguments' spaces. */
  node(g: ComputationGraph, i: number, backward: boolean): void {
    const count = g.argCount[i]!;
    const val = new Uint32Array(count + 1);
    const grad = new Uint32Array(count + 1);
    val[0] = this.val[i]!;
    grad[0] = this.grad[i]!;
    for (let a = 0; a < count; a++) {
      const x = g.arg(i, a);
      val[a + 1] = this.val[x]!;
      grad[a + 1] = this.grad[x]!;
    }
    this.commands.push({ kind: "node", op: g.op[i]! as Op, backward, g, node: i, val, grad });
  }

  /**
   * Pool offset of at least n ones (affineRows' bias: Y = 1·bᵀ, db += dYᵀ·1 as GEMMs), filled where first placed in
   * this graph (stream order makes later uses safe).
   */
  ones(n: number): number {
    const r = this.reusable.ones;
    if (r.cap < n) {
      r.cap = Math.max(n, 2 * r.cap, 1024);
      r.off = this.scratch(r.cap);
      this.commands.push({ kind: "fill", offset: r.off, count: r.cap, value: 1 });
    }
    return r.off;
  }

  /** Appends a command (GEMMs and fills; kernels go through kernel()). */
  push(c: DeviceCommand): void {
    this.commands.push(c);
  }

  /** Appends a launch of `name` over the records at table position `pos`. */
  kernel(
    name: AutobatchKernelName,
    grid: number | readonly [number, number],
    block: number,
    pos: number,
    args: KernelArg[],
  ): void {
    this.commands.push({ kind: "kernel", name, grid, block, rec: this.chunkBase + pos, args });
  }

  /** A launch with a thread per element of n nodes of `len` floats each. */
  elementwise(name: AutobatchKernelName, pos: number, n: number, len: number, extra: KernelArg[]): void {
    this.kernel(name, gridFor(n * len), AB_BLOCK, pos, [karg.i32(n), karg.i32(len), ...extra]);
  }

  /** A copy (or atomic add) of `count` segments of at most `maxLen` floats each. */
  segments(name: "ab_copy_segments" | "ab_add_segments", pos: number, count: number, maxLen: number): void {
    this.kernel(name, Math.min(count, 4096), segmentBlock(maxLen), pos, [karg.i32(count)]);
  }

  /** y = [x₁; x₂; …] as one segment per argument (or its gradient, added back). */
  concat(g: ComputationGraph, nodes: Int32Array, start: number, end: number, backward: boolean): void {
    const first = nodes[start]!;
    const K = g.argCount[first]!;
    const n = end - start;
    const pos = this.reserve(3 * n * K);
    const w = this.words;
    let q = pos;
    let maxLen = 0;
    for (let p = start; p < end; p++) {
      const i = nodes[p]!;
      let at = 0;
      for (let k = 0; k < K; k++, q += 3) {
        const a = g.arg(i, k);
        const len = g.rows[a]!;
        if (len > maxLen) maxLen = len;
        w[q] = backward ? this.grad[i]! + at : this.val[a]!;
        w[q + 1] = backward ? this.grad[a]! : this.val[i]! + at;
        w[q + 2] = len;
        at += len;
      }
    }
    this.segments(backward ? "ab_add_segments" : "ab_copy_segments", pos, n * K, maxLen);
  }
}
