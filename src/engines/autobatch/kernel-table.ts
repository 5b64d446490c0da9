// The autobatch engine's CUDA kernels, one entry per op: the records and launch of a batch of that op's nodes
// (one kernel per batch), forward and backward. A record holds one node's offsets — its value, its arguments' values
// and gradients — and its attributes; the layouts are the kernels' (cuda-kernels.ts), the math the reference's.
// Lookups and products are batched by their own steps (CudaBatchBackend.lookupForward, cuda-products.ts), parameters
// never: their entries say so.

import { gridFor, karg } from "../../cuda/index.js";
import type { ComputationGraph } from "../../graph/graph.js";
import { isUnsupported, Op, type OpTable, opArray, unsupported } from "../../graph/opcodes.js";
import type { CudaBatchBackend } from "./cuda-backend.js";
import { AB_BLOCK, AB_WIDE_SUM, BinaryCode, UnaryCode } from "./cuda-kernels.js";

/** One op on the autobatch GPU engine: encodes the batch nodes[start … end) of that op (the loss reaches each). */
export interface BatchedKernel {
  forward(w: CudaBatchBackend, g: ComputationGraph, nodes: Int32Array, start: number, end: number): void;
  backward(w: CudaBatchBackend, g: ComputationGraph, nodes: Int32Array, start: number, end: number): void;
}

const ENGINE = "autobatch (GPU)";
const nothing = (): void => {};
const length = (g: ComputationGraph, i: number): number => g.rows[i]! * g.cols[i]!;

/** y = a + b | a − b | a ⊙ b (ab_binary, operation `code`). */
function binary(code: BinaryCode): BatchedKernel {
  return {
    forward(w, g, nodes, start, end) {
      const { val } = w;
      const pos = w.records(nodes, start, end, 3, (i, q, r) => {
        r[q] = val[i]!;
        r[q + 1] = val[g.arg(i, 0)]!;
        r[q + 2] = val[g.arg(i, 1)]!;
      });
      w.elementwise("ab_binary", pos, end - start, length(g, nodes[start]!), [karg.i32(code)]);
    },
    backward(w, g, nodes, start, end) {
      const { val, grad } = w;
      const pos = w.records(nodes, start, end, 5, (i, q, r) => {
        const a = g.arg(i, 0);
        const b = g.arg(i, 1);
        r[q] = grad[i]!;
        r[q + 1] = grad[a]!;
        r[q + 2] = grad[b]!;
        r[q + 3] = val[a]!;
        r[q + 4] = val[b]!;
      });
      w.elementwise("ab_binary_backward", pos, end - start, length(g, nodes[start]!), [karg.i32(code)]);
    },
  };
}

/** y = tanh(x) | σ(x) | max(0, x) (ab_unary, operation `code`). */
function unary(code: UnaryCode): BatchedKernel {
  return {
    forward(w, g, nodes, start, end) {
      const { val } = w;
      const pos = w.records(nodes, start, end, 2, (i, q, r) => {
        r[q] = val[i]!;
        r[q + 1] = val[g.arg(i, 0)]!;
      });
      w.elementwise("ab_unary", pos, end - start, length(g, nodes[start]!), [karg.i32(code)]);
    },
    backward(w, g, nodes, start, end) {
      const { val, grad } = w;
      const pos = w.records(nodes, start, end, 4, (i, q, r) => {
        r[q] = grad[i]!;
        r[q + 1] = grad[g.arg(i, 0)]!;
        r[q + 2] = val[i]!;
        r[q + 3] = val[g.arg(i, 0)]!;
      });
      w.elementwise("ab_unary_backward", pos, end - start, length(g, nodes[start]!), [karg.i32(code)]);
    },
  };
}

/** Records [y or dy, x or dx, key, base, bits of p] of a dropout batch, from `offsets` (values or gradients). */
function dropoutRecords(
  w: CudaBatchBackend,
  g: ComputationGraph,
  nodes: Int32Array,
  start: number,
  end: number,
  offsets: Uint32Array,
): number {
  return w.records(nodes, start, end, 5, (i, q, r) => {
    r[q] = offsets[i]!;
    r[q + 1] = offsets[g.arg(i, 0)]!;
    r[q + 2] = g.aux[i]! >>> 0;
    r[q + 3] = g.aux2[i]! >>> 0;
    r[q + 4] = floatBitsOf(g.auxF[i]!);
  });
}

/**
 * pickRange and flatten: a view of the argument from offset aux (0 for flatten) (assignAddresses); the gradient is
 * added back segment by segment.
 */
const view: BatchedKernel = {
  forward: nothing,
  backward(w, g, nodes, start, end) {
    const { grad } = w;
    const len = length(g, nodes[start]!);
    const pos = w.records(nodes, start, end, 3, (i, q, r) => {
      r[q] = grad[i]!;
      r[q + 1] = grad[g.arg(i, 0)]! + g.aux[i]!;
      r[q + 2] = len;
    });
    w.segments("ab_add_segments", pos, end - start, len);
  },
};

/** Why the image ops that are not views have no batched kernel (yet). */
const IMAGE_OPS = "image ops run on the eager engine (per-sample im2col + cuBLAS, docs/GLP4NN.md)";

/**
 * The rnn op, node by node: each node is a packed batch of sequences, run by the device with the eager engine's
 * implementation (src/engines/gpu/rnn-node.ts) at the node's offsets (a NodeCommand).
 */
const rnn: BatchedKernel = {
  forward(w, g, nodes, start, end) {
    for (let p = start; p < end; p++) w.node(g, nodes[p]!, false);
  },
  backward(w, g, nodes, start, end) {
    for (let p = start; p < end; p++) w.node(g, nodes[p]!, true);
  },
};

/** lookupRows: a segment copy per row, as lookup batches are (CudaBatchBackend.lookupRowsForward). */
const lookupRows: BatchedKernel = {
  forward(w, g, nodes, start, end) {
    for (let p = start; p < end; p++) w.lookupRowsForward(g, nodes[p]!);
  },
  backward(w, g, nodes, start, end) {
    for (let p = start; p < end; p++) w.lookupRowsBackward(g, nodes[p]!);
  },
};

/**
 * affineRows, Y [N, M] = X [N, K]·Wᵀ + b, as GEMMs on the node's own operands (the eager engine's products):
 * Y = 1·bᵀ (k = 1, exact), then Y += X·Wᵀ; backward dX += dY·W, dW += dYᵀ·X, db += 1ᵀ·dY (cuBLAS sums in a fixed
 * order, no atomics).
 */
const affineRows: BatchedKernel = {
  forward(w, g, nodes, start, end) {
    for (let p = start; p < end; p++) {
      const i = nodes[p]!;
      const [b, W, X] = [g.arg(i, 0), g.arg(i, 1), g.arg(i, 2)];
      const [n, m, k] = [g.rows[i]!, g.rows[W]!, g.cols[W]!];
      const y = w.val[i]!;
      w.push({ kind: "gemm", gemm: { m: n, n: m, k: 1, A: w.ones(n), B: w.val[b]!, beta: 0, C: y } });
      w.push({ kind: "gemm", gemm: { transB: true, m: n, n: m, k, A: w.val[X]!, B: w.val[W]!, beta: 1, C: y } });
    }
  },
  backward(w, g, nodes, start, end) {
    for (let p = start; p < end; p++) {
      const i = nodes[p]!;
      const [b, W, X] = [g.arg(i, 0), g.arg(i, 1), g.arg(i, 2)];
      const [n, m, k] = [g.rows[i]!, g.rows[W]!, g.cols[W]!];
      const dy = w.grad[i]!;
      w.push({ kind: "gemm", gemm: { m: n, n: k, k: m, A: dy, B: w.val[W]!, beta: 1, C: w.grad[X]! } });
      w.push({ kind: "gemm", gemm: { transA: true, m, n: k, k: n, A: dy, B: w.val[X]!, beta: 1, C: w.grad[W]! } });
      w.push({ kind: "gemm", gemm: { m: 1, n: m, k: n, A: w.ones(n), B: dy, beta: 1, C: w.grad[b]! } });
    }
  },
};

/** The summed row loss: one block per node, the eager engine's fixed-order sum; backward a thread per row. */
const pickNegLogSoftmaxRows: BatchedKernel = {
  forward(w, g, nodes, start, end) {
    for (let p = start; p < end; p++) {
      const i = nodes[p]!;
      const x = g.arg(i, 0);
      const pos = w.records(nodes, p, p + 1, 3, (_, q, r) => {
        r[q] = w.val[i]!;
        r[q + 1] = w.val[x]!;
        r[q + 2] = w.val[g.arg(i, 1)]!;
      });
      w.kernel("ab_nll_softmax_rows", 1, AB_BLOCK, pos, [karg.i32(g.rows[x]!), karg.i32(g.cols[x]!)]);
    }
  },
  backward(w, g, nodes, start, end) {
    for (let p = start; p < end; p++) {
      const i = nodes[p]!;
      const x = g.arg(i, 0);
      const pos = w.records(nodes, p, p + 1, 4, (_, q, r) => {
        r[q] = w.grad[x]!;
        r[q + 1] = w.val[x]!;
        r[q + 2] = w.val[g.arg(i, 1)]!;
        r[q + 3] = w.grad[i]!;
      });
      const rows = g.rows[x]!;
      w.kernel("ab_nll_softmax_rows_backward", gridFor(rows), AB_BLOCK, pos, [karg.i32(rows), karg.i32(g.cols[x]!)]);
    }
  },
};

const table: OpTable<BatchedKernel> = {
  // uploaded with the pass's table (CudaBatchBackend.assignAddresses); nothing flows back
  [Op.Input]: { forward: nothing, backward: nothing },
  [Op.Parameter]: unsupported(ENGINE, Op.Parameter, "parameter nodes point at the parameters; they are never batched"),
  [Op.Lookup]: unsupported(ENGINE, Op.Lookup, "lookup batches are row copies (CudaBatchBackend.lookupForward)"),
  [Op.MatVec]: unsupported(ENGINE, Op.MatVec, "product batches are gathered GEMMs (cuda-products.ts)"),
  [Op.Affine]: unsupported(ENGINE, Op.Affine, "product batches are gathered GEMMs (cuda-products.ts)"),
  [Op.Concat]: {
    forward(w, g, nodes, start, end) {
      w.concat(g, nodes, start, end, false);
    },
    backward(w, g, nodes, start, end) {
      w.concat(g, nodes, start, end, true);
    },
  },
  [Op.PickRange]: view,
  [Op.Add]: binary(BinaryCode.Add),
  [Op.Sub]: binary(BinaryCode.Sub),
  [Op.CMul]: binary(BinaryCode.CMul),
  [Op.Tanh]: unary(UnaryCode.Tanh),
  [Op.Logistic]: unary(UnaryCode.Logistic),
  [Op.Relu]: unary(UnaryCode.Relu),
  [Op.Dropout]: {
    forward(w, g, nodes, start, end) {
      const pos = dropoutRecords(w, g, nodes, start, end, w.val);
      w.elementwise("ab_dropout", pos, end - start, length(g, nodes[start]!), []);
    },
    backward(w, g, nodes, start, end) {
      const pos = dropoutRecords(w, g, nodes, start, end, w.grad);
      w.elementwise("ab_dropout_backward", pos, end - start, length(g, nodes[start]!), []);
    },
  },
  [Op.PickNegLogSoftmax]: {
    forward(w, g, nodes, start, end) {
      const { val } = w;
      const n = end - start;
      const xlen = g.rows[g.arg(nodes[start]!, 0)]!;
      const pos = w.records(nodes, start, end, 3, (i, q, r) => {
        r[q] = val[i]!;
        r[q + 1] = val[g.arg(i, 0)]!;
        r[q + 2] = g.aux[i]!;
      });
      // a warp per node
      w.kernel("ab_nll_softmax", gridFor(32 * n), AB_BLOCK, pos, [karg.i32(n), karg.i32(xlen)]);
    },
    backward(w, g, nodes, start, end) {
      const { val, grad } = w;
      const xlen = g.rows[g.arg(nodes[start]!, 0)]!;
      const pos = w.records(nodes, start, end, 5, (i, q, r) => {
        const x = g.arg(i, 0);
        r[q] = grad[i]!;
        r[q + 1] = grad[x]!;
        r[q + 2] = val[x]!;
        r[q + 3] = val[i]!;
        r[q + 4] = g.aux[i]!;
      });
      w.elementwise("ab_nll_softmax_backward", pos, end - start, xlen, []);
    },
  },
  [Op.Sum]: {
    forward(w, g, nodes, start, end) {
      const { val } = w;
      const n = end - start;
      const first = nodes[start]!;
      const len = length(g, first);
      const K = g.argCount[first]!;
      const pos = w.records(nodes, start, end, K + 1, (i, q, r) => {
        r[q] = val[i]!;
        for (let k = 0; k < K; k++) r[q + 1 + k] = val[g.arg(i, k)]!;
      });
      if (K < AB_WIDE_SUM) w.elementwise("ab_sum", pos, n, len, [karg.i32(K)]);
      else w.kernel("ab_sum_wide", Math.min(n * len, 4096), AB_BLOCK, pos, [karg.i32(n), karg.i32(len), karg.i32(K)]);
    },
    backward(w, g, nodes, start, end) {
      const { grad } = w;
      const n = end - start;
      const first = nodes[start]!;
      const len = length(g, first);
      const K = g.argCount[first]!;
      const pos = w.records(nodes, start, end, K + 1, (i, q, r) => {
        r[q] = grad[i]!;
        for (let k = 0; k < K; k++) r[q + 1 + k] = grad[g.arg(i, k)]!;
      });
      w.kernel("ab_sum_backward", gridFor(n * K * len), AB_BLOCK, pos, [karg.i32(n), karg.i32(len), karg.i32(K)]);
    },
  },
  [Op.LstmCell]: {
    forward(w, g, nodes, start, end) {
      const { val } = w;
      const first = nodes[start]!;
      const k = g.aux[first]!;
      const pos = w.records(nodes, start, end, k + 2, (i, q, r) => {
        r[q] = val[i]!;
        for (let a = 0; a <= k; a++) r[q + 1 + a] = val[g.arg(i, a)]!;
      });
      w.elementwise("ab_lstm_cell", pos, end - start, length(g, first) / 2, [karg.i32(k)]);
    },
    backward(w, g, nodes, start, end) {
      const { val, grad } = w;
      const first = nodes[start]!;
      const k = g.aux[first]!;
      const pos = w.records(nodes, start, end, 2 * k + 4, (i, q, r) => {
        r[q] = val[i]!;
        r[q + 1] = grad[i]!;
        for (let a = 0; a <= k; a++) {
          const x = g.arg(i, a);
          // gates at [2], [3]; children's values at [4 … 4 + k), their gradients after
          r[q + (a === 0 ? 2 : 3 + a)] = val[x]!;
          r[q + (a === 0 ? 3 : 3 + k + a)] = grad[x]!;
        }
      });
      w.elementwise("ab_lstm_cell_backward", pos, end - start, length(g, first) / 2, [karg.i32(k)]);
    },
  },
  [Op.Conv2d]: unsupported(ENGINE, Op.Conv2d, IMAGE_OPS),
  [Op.MaxPool2d]: unsupported(ENGINE, Op.MaxPool2d, IMAGE_OPS),
  [Op.Flatten]: view,
  // the rest are whole batches in one node (never batched with another: their signature holds the node's id)
  [Op.Rnn]: rnn,
  [Op.LookupRows]: lookupRows,
  [Op.AffineRows]: affineRows,
  [Op.PickNegLogSoftmaxRows]: pickNegLogSoftmaxRows,
};

/** Ops that other steps run (executor.ts: parameter loads, lookups, products): `unsupported` here on purpose. */
const RUN_ELSEWHERE: ReadonlySet<Op> = new Set([Op.Parameter, Op.Lookup, Op.MatVec, Op.Affine]);

/** The autobatch engine's batched CUDA kernels, indexed by op. */
export const AUTOBATCH_KERNELS: readonly BatchedKernel[] = opArray(table, "autobatch GPU kernels");

/** Whether the GPU autobatch engine refuses graphs with this op (its entry is `unsupported` and no other step runs it). */
export function refusesOp(op: Op): boolean {
  return isUnsupported(AUTOBATCH_KERNELS[op]!) && !RUN_ELSEWHERE.has(op);
}

const bits = new Float32Array(1);
const bitsU32 = new Uint32Array(bits.buffer);
/** The bits of x as a float32, for a record word (dropout's p). */
function floatBitsOf(x: number): number {
  bits[0] = x;
  return bitsU32[0]!;
}
