// The eager engine's work per node: which kernel or cuBLAS call computes a node's value (forward) and adds its
// gradient into its arguments' gradients (backward), with the math of the CPU reference kernels in src/ops/. Every
// value and gradient is read through a per-node device address that the engine lays out.

import { type CudaKernel, type KernelArg, karg } from "../../cuda/index.js";
import type { ComputationGraph } from "../../graph/graph.js";
import { Op, opName } from "../../graph/opcodes.js";
import type { GpuContext } from "../gpu/context.js";
import { gridFor } from "../gpu/parameters.js";
import { EAGER_BLOCK, EAGER_MAX_CELL_CHILDREN, type EagerKernelName } from "./kernels.js";

/** Device work an engine has queued, by kind (the benchmark reports them per batch). */
export interface EagerLaunchCounts {
  /** Our kernels. */
  kernels: number;
  /** cuBLAS calls (each one or more kernels inside cuBLAS). */
  cublas: number;
  /** Asynchronous copies and memsets. */
  copies: number;
}

/** Device addresses by node id: value, gradient, and (sum nodes) the argument pointer tables. Owned by the engine. */
export interface NodeAddresses {
  valPtr: Float64Array;
  gradPtr: Float64Array;
  tablePtr: Float64Array;
}

/** Launches one node's forward or backward work on the context's stream. */
export class EagerNodeKernels {
  constructor(
    private readonly ctx: GpuContext,
    private readonly k: Readonly<Record<EagerKernelName, CudaKernel>>,
    private readonly at: NodeAddresses,
    readonly counts: EagerLaunchCounts,
  ) {}

  private get valPtr(): Float64Array {
    return this.at.valPtr;
  }
  private get gradPtr(): Float64Array {
    return this.at.gradPtr;
  }
  private get tablePtr(): Float64Array {
    return this.at.tablePtr;
  }

  launch(kernel: CudaKernel, n: number, args: KernelArg[]): void {
    kernel.launch({ grid: gridFor(n), block: EAGER_BLOCK, stream: this.ctx.stream }, args);
    this.counts.kernels++;
  }

  /** y = alpha·op(W)·x + beta·y with W row-major [rows, cols]. */
  private gemv(trans: boolean, rows: number, cols: number, W: number, x: number, y: number, beta: number): void {
    this.ctx.cublas.sgemvRowMajor(this.ctx.cublasHandle, { trans, rows, cols, A: W, x, y, beta });
    this.counts.cublas++;
  }

  /** dW += dy·xᵀ (a rank-1 GEMM, k = 1) and dx += Wᵀ·dy, for W [rows, cols]. */
  private gemvBackward(rows: number, cols: number, w: number, x: number, dy: number): void {
    const cublas = this.ctx.cublas;
    cublas.sgemmRowMajor(this.ctx.cublasHandle, {
      m: rows,
      n: cols,
      k: 1,
      A: dy,
      B: this.valPtr[x]!,
      beta: 1,
      C: this.gradPtr[w]!,
    });
    this.counts.cublas++;
    this.gemv(true, rows, cols, this.valPtr[w]!, dy, this.gradPtr[x]!, 1);
  }

  /** Computes node i from its arguments (nothing for inputs, parameters, lookups and pickRange views). */
  forward(g: ComputationGraph, i: number): void {
    const k = this.k;
    const op = g.op[i]! as Op;
    const n = g.rows[i]! * g.cols[i]!;
    const y = karg.ptr(this.valPtr[i]!);
    const arg = (a: number) => this.valPtr[g.arg(i, a)]!;
    switch (op) {
      case Op.Input:
      case Op.Parameter:
      case Op.Lookup:
      case Op.PickRange:
        return; // uploaded, the parameter itself, gathered per chunk, a view of the argument
      case Op.MatVec: {
        const w = g.arg(i, 0);
        this.gemv(false, g.rows[w]!, g.cols[w]!, this.valPtr[w]!, arg(1), this.valPtr[i]!, 0);
        return;
      }
      case Op.Affine: {
        this.ctx.device.driver.memcpyDtoDAsync(this.valPtr[i]!, arg(0), 4 * n, this.ctx.stream.handle);
        this.counts.copies++;
        for (let a = 1; a < g.argCount[i]!; a += 2) {
          const w = g.arg(i, a);
          this.gemv(false, g.rows[w]!, g.cols[w]!, this.valPtr[w]!, arg(a + 1), this.valPtr[i]!, 1);
        }
        return;
      }
      case Op.Concat:
        this.concat(g, i, false);
        return;
      case Op.Add:
      case Op.Sub:
      case Op.CMul: {
        const kernel = op === Op.Add ? k.vp_add : op === Op.Sub ? k.vp_sub : k.vp_cmul;
        this.launch(kernel, n, [y, karg.ptr(arg(0)), karg.ptr(arg(1)), karg.i32(n)]);
        return;
      }
      case Op.Tanh:
      case Op.Logistic:
      case Op.Relu: {
        const kernel = op === Op.Tanh ? k.vp_tanh : op === Op.Logistic ? k.vp_logistic : k.vp_relu;
        this.launch(kernel, n, [y, karg.ptr(arg(0)), karg.i32(n)]);
        return;
      }
      case Op.Dropout:
        this.launch(k.vp_dropout, n, [y, karg.ptr(arg(0)), ...dropoutArgs(g, i), karg.i32(n)]);
        return;
      case Op.PickNegLogSoftmax: {
        const len = g.rows[g.arg(i, 0)]!;
        k.vp_nll_softmax.launch({ grid: 1, block: EAGER_BLOCK, stream: this.ctx.stream }, [
          y,
          karg.ptr(arg(0)),
          karg.i32(g.aux[i]!),
          karg.i32(len),
        ]);
        this.counts.kernels++;
        return;
      }
      case Op.Sum:
        this.launch(k.vp_sum_ptrs, n, [y, karg.ptr(this.tablePtr[i]!), karg.i32(g.argCount[i]!), karg.i32(n)]);
        return;
      case Op.LstmCell: {
        const children = g.aux[i]!;
        if (children > EAGER_MAX_CELL_CHILDREN) {
          throw new Error(
            `eager engine: ${g.describe(i)} is an lstmCell with ${children} children; at most ${EAGER_MAX_CELL_CHILDREN} are supported`,
          );
        }
        const c = (j: number) => karg.ptr(j < children ? arg(1 + j) : 0);
        const h = g.rows[i]! / 2;
        this.launch(k.vp_lstm_cell, h, [y, karg.ptr(arg(0)), c(0), c(1), c(2), c(3), karg.i32(children), karg.i32(h)]);
        return;
      }
      default:
        throw new Error(`eager engine: no kernel for op ${opName(op)} (${g.describe(i)})`);
    }
  }

  /** Adds node i's gradient contribution into its arguments' gradients (lookups are scattered by the engine). */
  backward(g: ComputationGraph, i: number): void {
    const k = this.k;
    const op = g.op[i]! as Op;
    const n = g.rows[i]! * g.cols[i]!;
    const dy = this.gradPtr[i]!;
    const v = (a: number) => this.valPtr[g.arg(i, a)]!;
    const d = (a: number) => this.gradPtr[g.arg(i, a)]!;
    switch (op) {
      case Op.Input:
      case Op.Parameter:
        return; // a parameter node's gradient is the parameter's: nothing to add back
      case Op.MatVec: {
        const w = g.arg(i, 0);
        this.gemvBackward(g.rows[w]!, g.cols[w]!, w, g.arg(i, 1), dy);
        return;
      }
      case Op.Affine:
        this.launch(k.vp_axpy, n, [karg.ptr(d(0)), karg.ptr(dy), karg.f32(1), karg.i32(n)]);
        for (let a = 1; a < g.argCount[i]!; a += 2) {
          const w = g.arg(i, a);
          this.gemvBackward(g.rows[w]!, g.cols[w]!, w, g.arg(i, a + 1), dy);
        }
        return;
      case Op.Concat:
        this.concat(g, i, true);
        return;
      case Op.PickRange:
        this.launch(k.vp_axpy, n, [karg.ptr(d(0) + 4 * g.aux[i]!), karg.ptr(dy), karg.f32(1), karg.i32(n)]);
        return;
      case Op.Add:
      case Op.Sub:
        this.launch(k.vp_add_backward, n, [
          karg.ptr(d(0)),
          karg.ptr(d(1)),
          karg.ptr(dy),
          karg.f32(op === Op.Add ? 1 : -1),
          karg.i32(n),
        ]);
        return;
      case Op.CMul:
        this.launch(k.vp_cmul_backward, n, [
          karg.ptr(d(0)),
          karg.ptr(d(1)),
          karg.ptr(v(0)),
          karg.ptr(v(1)),
          karg.ptr(dy),
          karg.i32(n),
        ]);
        return;
      case Op.Tanh:
      case Op.Logistic: {
        const kernel = op === Op.Tanh ? k.vp_tanh_backward : k.vp_logistic_backward;
        this.launch(kernel, n, [karg.ptr(d(0)), karg.ptr(this.valPtr[i]!), karg.ptr(dy), karg.i32(n)]);
        return;
      }
      case Op.Relu:
        this.launch(k.vp_relu_backward, n, [karg.ptr(d(0)), karg.ptr(v(0)), karg.ptr(dy), karg.i32(n)]);
        return;
      case Op.Dropout:
        this.launch(k.vp_dropout_backward, n, [karg.ptr(d(0)), karg.ptr(dy), ...dropoutArgs(g, i), karg.i32(n)]);
        return;
      case Op.PickNegLogSoftmax: {
        const len = g.rows[g.arg(i, 0)]!;
        this.launch(k.vp_nll_softmax_backward, len, [
          karg.ptr(d(0)),
          karg.ptr(v(0)),
          karg.ptr(this.valPtr[i]!),
          karg.ptr(dy),
          karg.i32(g.aux[i]!),
          karg.i32(len),
        ]);
        return;
      }
      case Op.Sum: {
        const count = g.argCount[i]!;
        // the gradient table follows the value table
        const table = this.tablePtr[i]! + 8 * count;
        this.launch(k.vp_sum_ptrs_backward, n, [karg.ptr(table), karg.ptr(dy), karg.i32(count), karg.i32(n)]);
        return;
      }
      case Op.LstmCell: {
        const children = g.aux[i]!;
        const c = (j: number) => karg.ptr(j < children ? v(1 + j) : 0);
        const dc = (j: number) => karg.ptr(j < children ? d(1 + j) : 0);
        const h = g.rows[i]! / 2;
        this.launch(k.vp_lstm_cell_backward, h, [
          karg.ptr(d(0)),
          dc(0),
          dc(1),
          dc(2),
          dc(3),
          karg.ptr(this.valPtr[i]!),
          karg.ptr(dy),
          karg.ptr(v(0)),
          c(0),
          c(1),
          c(2),
          c(3),
          karg.i32(children),
          karg.i32(h),
        ]);
        return;
      }
      default:
        throw new Error(`eager engine: no gradient kernel for op ${opName(op)} (${g.describe(i)})`);
    }
  }

  /** y = [x₁; x₂; …] (or its gradient) in launches of up to four arguments. */
  private concat(g: ComputationGraph, i: number, backward: boolean): void {
    const count = g.argCount[i]!;
    const base = backward ? this.gradPtr[i]! : this.valPtr[i]!;
    const table = backward ? this.gradPtr : this.valPtr;
    let at = 0;
    for (let a0 = 0; a0 < count; a0 += 4) {
      const ptrs: KernelArg[] = [];
      const lens: KernelArg[] = [];
      let len = 0;
      for (let a = a0; a < a0 + 4; a++) {
        const node = a < count ? g.arg(i, a) : -1;
        ptrs.push(karg.ptr(node >= 0 ? table[node]! : 0));
        const n = node >= 0 ? g.rows[node]! : 0;
        lens.push(karg.i32(n));
        len += n;
      }
      const y = karg.ptr(base + 4 * at);
      if (backward) this.launch(this.k.vp_concat4_backward, len, [y, ...ptrs, ...lens]);
      else this.launch(this.k.vp_concat4, len, [y, ...ptrs, ...lens]);
      at += len;
    }
  }
}

function dropoutArgs(g: ComputationGraph, i: number): KernelArg[] {
  return [karg.u32(g.aux[i]! >>> 0), karg.u32(g.aux2[i]! >>> 0), karg.f32(g.auxF[i]!)];
}
