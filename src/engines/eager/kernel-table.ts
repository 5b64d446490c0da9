// The eager engine's kernels, one entry per op: which kernel or cuBLAS call computes a node's value (forward) and
// adds its gradient into its arguments' gradients (backward), with the math of the reference kernels in src/ops/.
// Every value and gradient is read through the node's device address (node-kernels.ts); the CUDA is
// src/codegen/eager-kernels.ts.

import { EAGER_MAX_CELL_CHILDREN, type EagerKernelName } from "../../codegen/eager-kernels.js";
import { type KernelArg, karg } from "../../cuda/index.js";
import type { ComputationGraph } from "../../graph/graph.js";
import { Op, type OpTable, opArray } from "../../graph/opcodes.js";
import { imageGeometry } from "../../ops/image.js";
import { lookupRowIds } from "../../ops/rows.js";
import type { EagerNodeKernels } from "./node-kernels.js";

/** One op on the eager engine: its work for node i, queued on the stream. */
export interface EagerKernel {
  forward(l: EagerNodeKernels, g: ComputationGraph, i: number): void;
  backward(l: EagerNodeKernels, g: ComputationGraph, i: number): void;
}

const nothing = (): void => {};

/** Value pointer of argument a of node i, and its gradient pointer. */
const val = (l: EagerNodeKernels, g: ComputationGraph, i: number, a: number): number => l.valPtr[g.arg(i, a)]!;
const grad = (l: EagerNodeKernels, g: ComputationGraph, i: number, a: number): number => l.gradPtr[g.arg(i, a)]!;
const size = (g: ComputationGraph, i: number): number => g.rows[i]! * g.cols[i]!;

/** y = f(a, b): `fwd(y, a, b, n)`; the gradient by `vp_add_backward` (sign s of b's part) or `vp_cmul_backward`. */
function binary(fwd: EagerKernelName, s: 1 | -1 | "cmul"): EagerKernel {
  return {
    forward(l, g, i) {
      const n = size(g, i);
      l.launch(l.k[fwd], n, [
        karg.ptr(l.valPtr[i]!),
        karg.ptr(val(l, g, i, 0)),
        karg.ptr(val(l, g, i, 1)),
        karg.i32(n),
      ]);
    },
    backward(l, g, i) {
      const n = size(g, i);
      const da = karg.ptr(grad(l, g, i, 0));
      const db = karg.ptr(grad(l, g, i, 1));
      const dy = karg.ptr(l.gradPtr[i]!);
      if (s === "cmul") {
        const a = karg.ptr(val(l, g, i, 0));
        l.launch(l.k.vp_cmul_backward, n, [da, db, a, karg.ptr(val(l, g, i, 1)), dy, karg.i32(n)]);
      } else {
        l.launch(l.k.vp_add_backward, n, [da, db, dy, karg.f32(s), karg.i32(n)]);
      }
    },
  };
}

/**
 * y = f(x): `fwd(y, x, n)`; the gradient `bwd(dx, from, dy, n)` reads the node's output (tanh, σ) or its input
 * (relu), as the reference does.
 */
function unary(fwd: EagerKernelName, bwd: EagerKernelName, from: "output" | "input"): EagerKernel {
  return {
    forward(l, g, i) {
      const n = size(g, i);
      l.launch(l.k[fwd], n, [karg.ptr(l.valPtr[i]!), karg.ptr(val(l, g, i, 0)), karg.i32(n)]);
    },
    backward(l, g, i) {
      const n = size(g, i);
      const at = from === "output" ? l.valPtr[i]! : val(l, g, i, 0);
      l.launch(l.k[bwd], n, [karg.ptr(grad(l, g, i, 0)), karg.ptr(at), karg.ptr(l.gradPtr[i]!), karg.i32(n)]);
    },
  };
}

function dropoutArgs(g: ComputationGraph, i: number): KernelArg[] {
  return [karg.u32(g.aux[i]! >>> 0), karg.u32(g.aux2[i]! >>> 0), karg.f32(g.auxF[i]!)];
}

/** Child j's pointer of a cell (0 past the last child: the kernel takes four). */
function child(ptrs: Float64Array, g: ComputationGraph, i: number, children: number, j: number): KernelArg {
  return karg.ptr(j < children ? ptrs[g.arg(i, 1 + j)]! : 0);
}

/** y = W·x and the products of affine: one cuBLAS GEMV per (W, x) pair. */
function products(l: EagerNodeKernels, g: ComputationGraph, i: number, first: number, beta: number): void {
  for (let a = first; a < g.argCount[i]!; a += 2) {
    const w = g.arg(i, a);
    l.gemv(false, g.rows[w]!, g.cols[w]!, l.valPtr[w]!, val(l, g, i, a + 1), l.valPtr[i]!, beta);
  }
}

function productsBackward(l: EagerNodeKernels, g: ComputationGraph, i: number, first: number): void {
  for (let a = first; a < g.argCount[i]!; a += 2) {
    const w = g.arg(i, a);
    l.gemvBackward(g.rows[w]!, g.cols[w]!, w, g.arg(i, a + 1), l.gradPtr[i]!);
  }
}

const lstmCell: EagerKernel = {
  forward(l, g, i) {
    const children = g.aux[i]!;
    if (children > EAGER_MAX_CELL_CHILDREN) {
      throw new Error(
        `eager engine: ${g.describe(i)} is an lstmCell with ${children} children; at most ${EAGER_MAX_CELL_CHILDREN} are supported`,
      );
    }
    const c = (j: number) => child(l.valPtr, g, i, children, j);
    const h = g.rows[i]! / 2;
    const args = [karg.ptr(l.valPtr[i]!), karg.ptr(val(l, g, i, 0)), c(0), c(1), c(2), c(3), karg.i32(children)];
    l.launch(l.k.vp_lstm_cell, h, [...args, karg.i32(h)]);
  },
  backward(l, g, i) {
    const children = g.aux[i]!;
    const c = (j: number) => child(l.valPtr, g, i, children, j);
    const dc = (j: number) => child(l.gradPtr, g, i, children, j);
    const h = g.rows[i]! / 2;
    l.launch(l.k.vp_lstm_cell_backward, h, [
      karg.ptr(grad(l, g, i, 0)),
      dc(0),
      dc(1),
      dc(2),
      dc(3),
      karg.ptr(l.valPtr[i]!),
      karg.ptr(l.gradPtr[i]!),
      karg.ptr(val(l, g, i, 0)),
      c(0),
      c(1),
      c(2),
      c(3),
      karg.i32(children),
      karg.i32(h),
    ]);
  },
};

/** The pooling kernels' geometry arguments: planes (samples × channels), H, W, K, S, Ho, Wo. */
function poolArgs(g: ComputationGraph, i: number): KernelArg[] {
  const G = imageGeometry(g, i);
  return [G.n * G.c, G.h, G.w, G.kernel, G.stride, G.ho, G.wo].map((v) => karg.i32(v));
}

/** lookupRows: its rows are gathered per chunk (chunk.ts), their gradients scattered per chunk; backward marks them. */
const lookupRows: EagerKernel = {
  forward: nothing,
  backward(l, g, i) {
    const table = g.aux[i]!;
    for (const row of lookupRowIds(g, i)) l.device.touch(table, row);
  },
};

/** Y [N, M] = X [N, K]·Wᵀ + b: the bias into every row, then one GEMM; backward two GEMMs and one GEMV. */
const affineRows: EagerKernel = {
  forward(l, g, i) {
    const w = g.arg(i, 1);
    const [n, m, k] = [g.rows[i]!, g.rows[w]!, g.cols[w]!];
    const y = l.valPtr[i]!;
    l.launch(l.k.vp_rows_bias, n * m, [karg.ptr(y), karg.ptr(val(l, g, i, 0)), karg.i32(n), karg.i32(m)]);
    l.gemm({ transB: true, m: n, n: m, k, A: val(l, g, i, 2), B: l.valPtr[w]!, beta: 1, C: y });
  },
  // dX += dY·W, dW += dYᵀ·X, db += dYᵀ·1 (cuBLAS sums in a fixed order: the same bits on every run)
  backward(l, g, i) {
    const w = g.arg(i, 1);
    const [n, m, k] = [g.rows[i]!, g.rows[w]!, g.cols[w]!];
    const dy = l.gradPtr[i]!;
    l.gemm({ m: n, n: k, k: m, A: dy, B: l.valPtr[w]!, beta: 1, C: grad(l, g, i, 2) });
    l.gemm({ transA: true, m, n: k, k: n, A: dy, B: val(l, g, i, 2), beta: 1, C: l.gradPtr[w]! });
    l.gemv(true, n, m, dy, l.ones(n), grad(l, g, i, 0), 1);
  },
};

/** The summed row loss: one block reduces every row in a fixed order; backward one thread per row. */
const pickNegLogSoftmaxRows: EagerKernel = {
  forward(l, g, i) {
    const x = g.arg(i, 0);
    l.launchBlock(l.k.vp_nll_softmax_rows, [
      karg.ptr(l.valPtr[i]!),
      karg.ptr(l.valPtr[x]!),
      karg.ptr(val(l, g, i, 1)),
      karg.i32(g.rows[x]!),
      karg.i32(g.cols[x]!),
    ]);
  },
  backward(l, g, i) {
    const x = g.arg(i, 0);
    l.launch(l.k.vp_nll_softmax_rows_backward, g.rows[x]!, [
      karg.ptr(l.gradPtr[x]!),
      karg.ptr(l.valPtr[x]!),
      karg.ptr(val(l, g, i, 1)),
      karg.ptr(l.gradPtr[i]!),
      karg.i32(g.rows[x]!),
      karg.i32(g.cols[x]!),
    ]);
  },
};

const table: OpTable<EagerKernel> = {
  // uploaded with the chunk (eager/chunk.ts); nothing flows back
  [Op.Input]: { forward: nothing, backward: nothing },
  // the node points at the parameter's own value and gradient
  [Op.Parameter]: { forward: nothing, backward: nothing },
  // rows are gathered per chunk, and their gradients scattered per chunk, by the engine; backward marks the row
  [Op.Lookup]: {
    forward: nothing,
    backward(l, g, i) {
      l.device.touch(g.aux[i]!, g.aux2[i]!);
    },
  },
  [Op.MatVec]: {
    forward(l, g, i) {
      products(l, g, i, 0, 0);
    },
    backward(l, g, i) {
      productsBackward(l, g, i, 0);
    },
  },
  [Op.Affine]: {
    // y = b, then y += Wᵢ·xᵢ per pair
    forward(l, g, i) {
      l.copy(l.valPtr[i]!, val(l, g, i, 0), 4 * size(g, i));
      products(l, g, i, 1, 1);
    },
    backward(l, g, i) {
      const n = size(g, i);
      l.launch(l.k.vp_axpy, n, [karg.ptr(grad(l, g, i, 0)), karg.ptr(l.gradPtr[i]!), karg.f32(1), karg.i32(n)]);
      productsBackward(l, g, i, 1);
    },
  },
  [Op.Concat]: {
    forward(l, g, i) {
      l.concat(g, i, false);
    },
    backward(l, g, i) {
      l.concat(g, i, true);
    },
  },
  [Op.PickRange]: {
    // a view of its argument (the engine points the node into it)
    forward: nothing,
    backward(l, g, i) {
      const n = size(g, i);
      const dx = grad(l, g, i, 0) + 4 * g.aux[i]!;
      l.launch(l.k.vp_axpy, n, [karg.ptr(dx), karg.ptr(l.gradPtr[i]!), karg.f32(1), karg.i32(n)]);
    },
  },
  [Op.Add]: binary("vp_add", 1),
  [Op.Sub]: binary("vp_sub", -1),
  [Op.CMul]: binary("vp_cmul", "cmul"),
  [Op.Tanh]: unary("vp_tanh", "vp_tanh_backward", "output"),
  [Op.Logistic]: unary("vp_logistic", "vp_logistic_backward", "output"),
  [Op.Relu]: unary("vp_relu", "vp_relu_backward", "input"),
  [Op.Dropout]: {
    forward(l, g, i) {
      const n = size(g, i);
      l.launch(l.k.vp_dropout, n, [
        karg.ptr(l.valPtr[i]!),
        karg.ptr(val(l, g, i, 0)),
        ...dropoutArgs(g, i),
        karg.i32(n),
      ]);
    },
    backward(l, g, i) {
      const n = size(g, i);
      const args = [karg.ptr(grad(l, g, i, 0)), karg.ptr(l.gradPtr[i]!), ...dropoutArgs(g, i), karg.i32(n)];
      l.launch(l.k.vp_dropout_backward, n, args);
    },
  },
  [Op.PickNegLogSoftmax]: {
    // one block reduces the node
    forward(l, g, i) {
      const len = g.rows[g.arg(i, 0)]!;
      l.launchBlock(l.k.vp_nll_softmax, [
        karg.ptr(l.valPtr[i]!),
        karg.ptr(val(l, g, i, 0)),
        karg.i32(g.aux[i]!),
        karg.i32(len),
      ]);
    },
    backward(l, g, i) {
      const len = g.rows[g.arg(i, 0)]!;
      l.launch(l.k.vp_nll_softmax_backward, len, [
        karg.ptr(grad(l, g, i, 0)),
        karg.ptr(val(l, g, i, 0)),
        karg.ptr(l.valPtr[i]!),
        karg.ptr(l.gradPtr[i]!),
        karg.i32(g.aux[i]!),
        karg.i32(len),
      ]);
    },
  },
  [Op.Sum]: {
    // the arguments' addresses are a device table of the chunk (a loss summed over thousands of nodes: one launch)
    forward(l, g, i) {
      const n = size(g, i);
      const args = [karg.ptr(l.valPtr[i]!), karg.ptr(l.tablePtr[i]!), karg.i32(g.argCount[i]!), karg.i32(n)];
      l.launch(l.k.vp_sum_ptrs, n, args);
    },
    backward(l, g, i) {
      const n = size(g, i);
      const count = g.argCount[i]!;
      // the gradient table follows the value table
      const table = l.tablePtr[i]! + 8 * count;
      l.launch(l.k.vp_sum_ptrs_backward, n, [karg.ptr(table), karg.ptr(l.gradPtr[i]!), karg.i32(count), karg.i32(n)]);
    },
  },
  [Op.LstmCell]: lstmCell,
  // per-sample im2col + GEMMs, Caffe's way (conv-node.ts, src/conv/)
  [Op.Conv2d]: {
    forward(l, g, i) {
      l.conv.forward(l, g, i);
    },
    backward(l, g, i) {
      l.conv.backward(l, g, i);
    },
  },
  // one launch over the batch; the gradient gathers per input element (no atomics)
  [Op.MaxPool2d]: {
    forward(l, g, i) {
      l.launch(l.k.vp_maxpool, size(g, i), [karg.ptr(l.valPtr[i]!), karg.ptr(val(l, g, i, 0)), ...poolArgs(g, i)]);
    },
    backward(l, g, i) {
      const x = g.arg(i, 0);
      l.launch(l.k.vp_maxpool_backward, size(g, x), [
        karg.ptr(l.gradPtr[x]!),
        karg.ptr(l.valPtr[x]!),
        karg.ptr(l.gradPtr[i]!),
        ...poolArgs(g, i),
      ]);
    },
  },
  // a copy rather than a view (as pickRange is): an input's address is only known once its chunk is written
  [Op.Flatten]: {
    forward(l, g, i) {
      l.copy(l.valPtr[i]!, val(l, g, i, 0), 4 * size(g, i));
    },
    backward(l, g, i) {
      const n = size(g, i);
      l.launch(l.k.vp_axpy, n, [karg.ptr(grad(l, g, i, 0)), karg.ptr(l.gradPtr[i]!), karg.f32(1), karg.i32(n)]);
    },
  },
  // one layer direction of the persistent RNN per direction (gpu/rnn-node.ts), on the engine's stream
  [Op.Rnn]: {
    forward(l, g, i) {
      l.rnn().forward(g, i, l.valPtr);
    },
    backward(l, g, i) {
      l.rnn().backward(g, i, l.valPtr, l.gradPtr);
    },
  },
  [Op.LookupRows]: lookupRows,
  [Op.AffineRows]: affineRows,
  [Op.PickNegLogSoftmaxRows]: pickNegLogSoftmaxRows,
};

/** The eager engine's kernels, indexed by op. */
export const EAGER_KERNELS: readonly EagerKernel[] = opArray(table, "eager engine kernels");

/** Whether an op's forward queues device work (inputs, parameters, lookups and views queue none). */
export function forwardWorks(op: number): boolean {
  return EAGER_KERNELS[op]!.forward !== nothing;
}
