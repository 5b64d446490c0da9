// Product batches on the GPU: y_j = b_j + Σ_t W_t·x_{t,j} for the n nodes of a batch (same W_t for all). Forward:
// one launch gathers every term's inputs into matrices X_t, one GEMM per term accumulates Y = Σ_t X_t·W_tᵀ, one
// launch scatters Y (plus the biases) into the nodes. Backward: one launch gathers dY (and adds the bias gradients),
// one GEMM per term forms dX_t = dY·W_t, one launch adds them into the inputs' gradients; the weight gradients
// dW_t += dYᵀ·X_t reuse the X_t gathered in forward (kept in the pool) and, for a parameter's single-term products,
// are one GEMM per pass over all its batches (a weight area) rather than one per batch.

import { gridFor, karg, type RowMajorGemm } from "../../cuda/index.js";
import type { ComputationGraph } from "../../graph/graph.js";
import { Op } from "../../graph/opcodes.js";
import type { CudaBatchBackend } from "./cuda-backend.js";
import { AB_BIAS_CHUNK, AB_BLOCK, AB_NONE } from "./cuda-kernels.js";
import type { BatchPlan } from "./plan.js";
import { isMatrixOp } from "./signature.js";

/**
 * The single-term products of one parameter W in a forward pass, with their inputs gathered into one matrix X (rows
 * in batch order) and, in backward, their output gradients into one matrix dY alongside: the gradient of W is then
 * one GEMM per pass (dW += dYᵀ·X) instead of one per batch. (Only for parameters: a computed W's gradient must be
 * complete before its own batch runs backward, so products of such a W add theirs per batch.)
 */
interface WeightArea {
  readonly w: number;
  readonly m: number;
  readonly cols: number;
  rows: number;
  x: number;
  dy: number;
  cursor: number;
}

/** Gathered inputs of a forward product batch, kept for its backward (dW = dYᵀ·X). */
interface KeptProduct {
  readonly nodes: Int32Array;
  readonly x: readonly number[];
  /** The batch's rows in its weight's area (single-term products of a parameter), or null. */
  readonly area: WeightArea | null;
  readonly row: number;
  /** Whether the current backward wrote the batch's rows of dY. */
  written: boolean;
}

/** Encodes product batches into the backend's pass (its table, scratch and commands). */
export class ProductEncoder {
  private kept: KeptProduct[] = [];
  /** Per node: its forward product batch in `kept`, or −1. */
  private keptOf = new Int32Array(1024);
  /** Weight areas of the last forward pass (plan()), and that pass's plan. */
  private areas = new Map<number, WeightArea>();
  private areaPlan: BatchPlan | null = null;
  /** Whether the current backward gathers dY into the weight areas (it runs the plan the areas were made for). */
  private deferring = false;

  constructor(private readonly enc: CudaBatchBackend) {}

  /** A new graph: nothing is kept. */
  reset(): void {
    this.kept = [];
    this.areas = new Map();
    this.areaPlan = null;
  }

  /** Nodes [from, to] of a graph of `size` nodes are new: none belongs to a kept batch yet. */
  forget(size: number, from: number, to: number): void {
    if (this.keptOf.length < size) {
      const k = new Int32Array(Math.max(size, 2 * this.keptOf.length));
      k.set(this.keptOf);
      this.keptOf = k;
    }
    this.keptOf.fill(-1, from, to + 1);
  }

  /** Before a forward pass of `plan`: one area per parameter for its single-term product batches. */
  plan(g: ComputationGraph, plan: BatchPlan): void {
    const areas = new Map<number, WeightArea>();
    for (let b = 0; b < plan.batchCount; b++) {
      if (!isMatrixOp(plan.batchOp[b]!)) continue;
      const first = plan.nodes[plan.batchStart[b]!]!;
      const k0 = g.op[first] === Op.Affine ? 1 : 0;
      if (g.argCount[first] !== k0 + 2) continue;
      const w = g.arg(first, k0);
      if (g.op[w] !== Op.Parameter) continue;
      let a = areas.get(w);
      if (!a) {
        a = { w, m: g.rows[first]!, cols: g.cols[w]!, rows: 0, x: 0, dy: 0, cursor: 0 };
        areas.set(w, a);
      }
      a.rows += plan.batchStart[b + 1]! - plan.batchStart[b]!;
    }
    for (const a of areas.values()) {
      a.x = this.enc.scratch(a.rows * a.cols);
      a.dy = this.enc.scratch(a.rows * a.m);
    }
    this.areas = areas;
    this.areaPlan = plan;
  }

  /** Before a backward pass of `plan`. */
  beginBackward(plan: BatchPlan): void {
    this.deferring = plan === this.areaPlan;
    for (const k of this.kept) k.written = false;
  }

  /** After a backward pass: the weight gradients of the areas, one GEMM each. */
  finishBackward(): void {
    if (!this.deferring) return;
    // rows of batches whose backward did not run (no node reaches the loss) hold no dY yet
    for (const k of this.kept) {
      if (k.area && !k.written) {
        const count = k.nodes.length * k.area.m;
        this.enc.push({ kind: "fill", offset: k.area.dy + k.row * k.area.m, count, value: 0 });
      }
    }
    for (const a of this.areas.values()) {
      const gemm = { transA: true, m: a.m, n: a.cols, k: a.rows, A: a.dy, B: a.x, beta: 1, C: this.enc.grad[a.w]! };
      this.enc.push({ kind: "gemm", gemm });
    }
  }

  forward(g: ComputationGraph, nodes: Int32Array, start: number, end: number): void {
    const enc = this.enc;
    const first = nodes[start]!;
    const affine = g.op[first] === Op.Affine;
    const n = end - start;
    const m = g.rows[first]!;
    const x: number[] = [];
    const k0 = affine ? 1 : 0;
    const area = g.argCount[first] === k0 + 2 ? (this.areas.get(g.arg(first, k0)) ?? null) : null;
    const row = area ? area.cursor : 0;
    if (area) {
      x.push(area.x + row * area.cols);
      area.cursor += n;
    } else {
      for (let k = k0; k < g.argCount[first]!; k += 2) x.push(enc.scratch(n * g.cols[g.arg(first, k)]!));
    }
    this.gatherInputs(g, nodes, start, end, x);
    const y = enc.reuse("y", n * m);
    this.gemms(g, first, (t, w, cols) => ({ transB: true, m: n, n: m, k: cols, A: x[t]!, B: w, C: y }), true);
    const pos = enc.reserve(2 * n);
    const words = enc.words;
    for (let p = start, q = pos; p < end; p++, q += 2) {
      const i = nodes[p]!;
      words[q] = enc.val[i]!;
      words[q + 1] = affine ? enc.val[g.arg(i, 0)]! : AB_NONE;
    }
    enc.kernel("ab_scatter_bias", gridFor(n * m), AB_BLOCK, pos, [karg.u32(y), karg.i32(n), karg.i32(m)]);
    const keep: KeptProduct = { nodes: nodes.slice(start, end), x, area, row, written: false };
    for (let p = start; p < end; p++) this.keptOf[nodes[p]!] = this.kept.length;
    this.kept.push(keep);
  }

  backward(g: ComputationGraph, nodes: Int32Array, start: number, end: number): void {
    const enc = this.enc;
    const first = nodes[start]!;
    const affine = g.op[first] === Op.Affine;
    const n = end - start;
    const m = g.rows[first]!;
    const kept = this.keptInputs(nodes, start, end);
    let total = 0;
    for (let k = affine ? 1 : 0; k < g.argCount[first]!; k += 2) total += n * g.cols[g.arg(first, k)]!;
    let x = kept?.x ?? null;
    if (x === null) {
      // the batch is not a forward batch (another plan, or some nodes do not reach the loss): gather again
      const fresh: number[] = [];
      let at = enc.reuse("x", total);
      for (let k = affine ? 1 : 0; k < g.argCount[first]!; k += 2) {
        fresh.push(at);
        at += n * g.cols[g.arg(first, k)]!;
      }
      this.gatherInputs(g, nodes, start, end, fresh);
      x = fresh;
    }
    const area = this.deferring && kept ? kept.area : null;
    const dy = area && kept ? area.dy + kept.row * m : enc.reuse("dy", n * m);
    if (kept) kept.written = area !== null;
    const pos = enc.reserve(2 * n);
    const words = enc.words;
    for (let p = start, q = pos; p < end; p++, q += 2) {
      const i = nodes[p]!;
      words[q] = enc.grad[i]!;
      words[q + 1] = affine ? enc.grad[g.arg(i, 0)]! : AB_NONE;
    }
    const b0 = affine ? g.arg(first, 0) : -1;
    const shared = b0 >= 0 && g.op[b0] === Op.Parameter ? enc.grad[b0]! : AB_NONE;
    const block = Math.min(AB_BLOCK, Math.ceil(m / 32) * 32);
    enc.kernel("ab_gather_grad_bias", [Math.ceil(m / block), Math.ceil(n / AB_BIAS_CHUNK)], block, pos, [
      karg.u32(dy),
      karg.i32(n),
      karg.i32(m),
      karg.u32(shared),
    ]);
    const xs = x;
    // dW_t += dYᵀ·X_t (unless the weight's area collects it for finishBackward), then dX_t = dY·W_t into one
    // scratch matrix per term, scattered (added) in one launch
    if (!area) {
      this.gemms(g, first, (t, _w, cols, wNode) => {
        return { transA: true, m, n: cols, k: n, A: dy, B: xs[t]!, beta: 1, C: enc.grad[wNode]! };
      });
    }
    const dx: number[] = [];
    let at = enc.reuse("dx", total);
    this.gemms(g, first, (_t, w, cols) => {
      dx.push(at);
      at += n * cols;
      return { m: n, n: cols, k: m, A: dy, B: w, C: dx[dx.length - 1]! };
    });
    this.scatterInputGradients(g, nodes, start, end, dx);
  }

  /** One GEMM per term of a product batch: `make(term, W offset, W columns, W node)` gives its operands. */
  private gemms(
    g: ComputationGraph,
    first: number,
    make: (t: number, w: number, cols: number, wNode: number) => RowMajorGemm<number>,
    accumulate = false,
  ): void {
    const affine = g.op[first] === Op.Affine;
    let t = 0;
    for (let k = affine ? 1 : 0; k < g.argCount[first]!; k += 2, t++) {
      const w = g.arg(first, k);
      const gemm = make(t, this.enc.val[w]!, g.cols[w]!, w);
      this.enc.push({ kind: "gemm", gemm: accumulate ? { ...gemm, beta: t === 0 ? 0 : 1 } : gemm });
    }
  }

  /** X_t[j, :] = x_{t,j} for every term t of a product batch: one copy launch. */
  private gatherInputs(g: ComputationGraph, nodes: Int32Array, start: number, end: number, x: readonly number[]): void {
    this.segmentsPerTerm(g, nodes, start, end, x, false);
  }

  /** dx_{t,j} += dX_t[j, :]: one atomic-add launch. */
  private scatterInputGradients(
    g: ComputationGraph,
    nodes: Int32Array,
    start: number,
    end: number,
    dx: readonly number[],
  ): void {
    this.segmentsPerTerm(g, nodes, start, end, dx, true);
  }

  /** A segment per (term t, node j) between row j of matrix `mats[t]` and x_{t,j} (its value, or its gradient). */
  private segmentsPerTerm(
    g: ComputationGraph,
    nodes: Int32Array,
    start: number,
    end: number,
    mats: readonly number[],
    backward: boolean,
  ): void {
    const enc = this.enc;
    const first = nodes[start]!;
    const k0 = g.op[first] === Op.Affine ? 1 : 0;
    const n = end - start;
    const pos = enc.reserve(3 * n * mats.length);
    const w = enc.words;
    let q = pos;
    let maxLen = 0;
    for (let t = 0, k = k0; t < mats.length; t++, k += 2) {
      const cols = g.cols[g.arg(first, k)]!;
      if (cols > maxLen) maxLen = cols;
      for (let p = start, j = 0; p < end; p++, j++, q += 3) {
        const xNode = g.arg(nodes[p]!, k + 1);
        w[q] = backward ? mats[t]! + j * cols : enc.val[xNode]!;
        w[q + 1] = backward ? enc.grad[xNode]! : mats[t]! + j * cols;
        w[q + 2] = cols;
      }
    }
    enc.segments(backward ? "ab_add_segments" : "ab_copy_segments", pos, n * mats.length, maxLen);
  }

  /** The forward batch of exactly these nodes, in this order, with its gathered inputs; null if there is none. */
  private keptInputs(nodes: Int32Array, start: number, end: number): KeptProduct | null {
    const k = this.keptOf[nodes[start]!]!;
    const kept = k >= 0 ? this.kept[k] : undefined;
    if (!kept || kept.nodes.length !== end - start) return null;
    for (let p = start, j = 0; p < end; p++, j++) if (kept.nodes[j] !== nodes[p]) return null;
    return kept;
  }
}
