// The records and launches of every batch that is not a lookup or a matrix product: one kernel per batch, reading
// one record per node (offsets of its value, its arguments' values and gradients, and its attributes). The record
// layouts are the kernels' (cuda-kernels.ts); the math is the CPU reference's.

import { karg } from "../../cuda/index.js";
import type { ComputationGraph } from "../../graph/graph.js";
import { Op, opName } from "../../graph/opcodes.js";
import { gridFor } from "../gpu/parameters.js";
import type { CudaBatchBackend } from "./cuda-backend.js";
import { AB_BLOCK, AB_WIDE_SUM, BinaryCode, UnaryCode } from "./cuda-kernels.js";

/** The forward records and launch of a batch of `op` nodes (inputs and pickRange views need none). */
export function encodeOpForward(
  w: CudaBatchBackend,
  g: ComputationGraph,
  op: Op,
  nodes: Int32Array,
  start: number,
  end: number,
): void {
  const n = end - start;
  const first = nodes[start]!;
  const len = g.rows[first]! * g.cols[first]!;
  const { val } = w;
  switch (op) {
    case Op.Input:
    case Op.PickRange:
      return; // uploaded with the table; a view of its argument
    case Op.Concat:
      w.concat(g, nodes, start, end, false);
      return;
    case Op.Add:
    case Op.Sub:
    case Op.CMul: {
      const pos = w.records(nodes, start, end, 3, (i, q, r) => {
        r[q] = val[i]!;
        r[q + 1] = val[g.arg(i, 0)]!;
        r[q + 2] = val[g.arg(i, 1)]!;
      });
      w.elementwise("ab_binary", pos, n, len, [karg.i32(binaryCode(op))]);
      return;
    }
    case Op.Tanh:
    case Op.Logistic:
    case Op.Relu: {
      const pos = w.records(nodes, start, end, 2, (i, q, r) => {
        r[q] = val[i]!;
        r[q + 1] = val[g.arg(i, 0)]!;
      });
      w.elementwise("ab_unary", pos, n, len, [karg.i32(unaryCode(op))]);
      return;
    }
    case Op.Dropout: {
      const pos = w.records(nodes, start, end, 5, (i, q, r) => {
        r[q] = val[i]!;
        r[q + 1] = val[g.arg(i, 0)]!;
        r[q + 2] = g.aux[i]! >>> 0;
        r[q + 3] = g.aux2[i]! >>> 0;
        r[q + 4] = floatBitsOf(g.auxF[i]!);
      });
      w.elementwise("ab_dropout", pos, n, len, []);
      return;
    }
    case Op.Sum: {
      const K = g.argCount[first]!;
      const pos = w.records(nodes, start, end, K + 1, (i, q, r) => {
        r[q] = val[i]!;
        for (let k = 0; k < K; k++) r[q + 1 + k] = val[g.arg(i, k)]!;
      });
      if (K < AB_WIDE_SUM) w.elementwise("ab_sum", pos, n, len, [karg.i32(K)]);
      else w.kernel("ab_sum_wide", Math.min(n * len, 4096), AB_BLOCK, pos, [karg.i32(n), karg.i32(len), karg.i32(K)]);
      return;
    }
    case Op.PickNegLogSoftmax: {
      const xlen = g.rows[g.arg(first, 0)]!;
      const pos = w.records(nodes, start, end, 3, (i, q, r) => {
        r[q] = val[i]!;
        r[q + 1] = val[g.arg(i, 0)]!;
        r[q + 2] = g.aux[i]!;
      });
      // a warp per node
      w.kernel("ab_nll_softmax", gridFor(32 * n), AB_BLOCK, pos, [karg.i32(n), karg.i32(xlen)]);
      return;
    }
    case Op.LstmCell: {
      const k = g.aux[first]!;
      const H = len / 2;
      const pos = w.records(nodes, start, end, k + 2, (i, q, r) => {
        r[q] = val[i]!;
        for (let a = 0; a <= k; a++) r[q + 1 + a] = val[g.arg(i, a)]!;
      });
      w.elementwise("ab_lstm_cell", pos, n, H, [karg.i32(k)]);
      return;
    }
    default:
      throw new Error(`autobatch (GPU): no batched kernel for op ${opName(op)} (${g.describe(first)})`);
  }
}

/** The backward records and launch of a batch of `op` nodes (only the nodes the loss reaches are given). */
export function encodeOpBackward(
  w: CudaBatchBackend,
  g: ComputationGraph,
  op: Op,
  nodes: Int32Array,
  start: number,
  end: number,
): void {
  const n = end - start;
  const first = nodes[start]!;
  const len = g.rows[first]! * g.cols[first]!;
  const { val, grad } = w;
  switch (op) {
    case Op.Input:
      return;
    case Op.PickRange: {
      const pos = w.records(nodes, start, end, 3, (i, q, r) => {
        r[q] = grad[i]!;
        r[q + 1] = grad[g.arg(i, 0)]! + g.aux[i]!;
        r[q + 2] = len;
      });
      w.segments("ab_add_segments", pos, n, len);
      return;
    }
    case Op.Concat:
      w.concat(g, nodes, start, end, true);
      return;
    case Op.Add:
    case Op.Sub:
    case Op.CMul: {
      const pos = w.records(nodes, start, end, 5, (i, q, r) => {
        const a = g.arg(i, 0);
        const b = g.arg(i, 1);
        r[q] = grad[i]!;
        r[q + 1] = grad[a]!;
        r[q + 2] = grad[b]!;
        r[q + 3] = val[a]!;
        r[q + 4] = val[b]!;
      });
      w.elementwise("ab_binary_backward", pos, n, len, [karg.i32(binaryCode(op))]);
      return;
    }
    case Op.Tanh:
    case Op.Logistic:
    case Op.Relu: {
      const pos = w.records(nodes, start, end, 4, (i, q, r) => {
        r[q] = grad[i]!;
        r[q + 1] = grad[g.arg(i, 0)]!;
        r[q + 2] = val[i]!;
        r[q + 3] = val[g.arg(i, 0)]!;
      });
      w.elementwise("ab_unary_backward", pos, n, len, [karg.i32(unaryCode(op))]);
      return;
    }
    case Op.Dropout: {
      const pos = w.records(nodes, start, end, 5, (i, q, r) => {
        r[q] = grad[i]!;
        r[q + 1] = grad[g.arg(i, 0)]!;
        r[q + 2] = g.aux[i]! >>> 0;
        r[q + 3] = g.aux2[i]! >>> 0;
        r[q + 4] = floatBitsOf(g.auxF[i]!);
      });
      w.elementwise("ab_dropout_backward", pos, n, len, []);
      return;
    }
    case Op.Sum: {
      const K = g.argCount[first]!;
      const pos = w.records(nodes, start, end, K + 1, (i, q, r) => {
        r[q] = grad[i]!;
        for (let k = 0; k < K; k++) r[q + 1 + k] = grad[g.arg(i, k)]!;
      });
      w.kernel("ab_sum_backward", gridFor(n * K * len), AB_BLOCK, pos, [karg.i32(n), karg.i32(len), karg.i32(K)]);
      return;
    }
    case Op.PickNegLogSoftmax: {
      const xlen = g.rows[g.arg(first, 0)]!;
      const pos = w.records(nodes, start, end, 5, (i, q, r) => {
        const x = g.arg(i, 0);
        r[q] = grad[i]!;
        r[q + 1] = grad[x]!;
        r[q + 2] = val[x]!;
        r[q + 3] = val[i]!;
        r[q + 4] = g.aux[i]!;
      });
      w.elementwise("ab_nll_softmax_backward", pos, n, xlen, []);
      return;
    }
    case Op.LstmCell: {
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
      w.elementwise("ab_lstm_cell_backward", pos, n, len / 2, [karg.i32(k)]);
      return;
    }
    default:
      throw new Error(`autobatch (GPU): no batched gradient kernel for op ${opName(op)} (${g.describe(first)})`);
  }
}

function unaryCode(op: Op): number {
  return op === Op.Tanh ? UnaryCode.Tanh : op === Op.Logistic ? UnaryCode.Logistic : UnaryCode.Relu;
}

function binaryCode(op: Op): number {
  return op === Op.Add ? BinaryCode.Add : op === Op.Sub ? BinaryCode.Sub : BinaryCode.CMul;
}

const bits = new Float32Array(1);
const bitsU32 = new Uint32Array(bits.buffer);
/** The bits of x as a float32, for a record word (dropout's p). */
function floatBitsOf(x: number): number {
  bits[0] = x;
  return bitsU32[0]!;
}
