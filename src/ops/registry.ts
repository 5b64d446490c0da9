import type { ComputationGraph } from "../graph/graph.js";
import { OP_COUNT, Op } from "../graph/opcodes.js";
import { lstmCellKernels } from "./cells.js";
import type { OpKernels } from "./common.js";
import {
  addKernels,
  cmulKernels,
  dropoutKernels,
  logisticKernels,
  reluKernels,
  subKernels,
  tanhKernels,
} from "./elementwise.js";
import { affineKernels, matVecKernels } from "./linear.js";
import { pickNegLogSoftmaxKernels } from "./loss.js";
import { concatKernels, inputKernels, pickRangeKernels, sumKernels } from "./structure.js";

/** Parameter and lookup values come from the model's storage; the engine fills them. */
const suppliedByEngine: OpKernels = {
  forward() {
    throw new Error("parameter and lookup values are supplied by the engine");
  },
  backward() {},
};

/** The reference kernels of every op, indexed by `Op`. */
export const KERNELS: readonly OpKernels[] = (() => {
  const k: OpKernels[] = new Array(OP_COUNT);
  k[Op.Input] = inputKernels;
  k[Op.Parameter] = suppliedByEngine;
  k[Op.Lookup] = suppliedByEngine;
  k[Op.MatVec] = matVecKernels;
  k[Op.Affine] = affineKernels;
  k[Op.Concat] = concatKernels;
  k[Op.PickRange] = pickRangeKernels;
  k[Op.Add] = addKernels;
  k[Op.Sub] = subKernels;
  k[Op.CMul] = cmulKernels;
  k[Op.Tanh] = tanhKernels;
  k[Op.Logistic] = logisticKernels;
  k[Op.Relu] = reluKernels;
  k[Op.Dropout] = dropoutKernels;
  k[Op.PickNegLogSoftmax] = pickNegLogSoftmaxKernels;
  k[Op.Sum] = sumKernels;
  k[Op.LstmCell] = lstmCellKernels;
  return k;
})();

/**
 * The batching signature of node i: two nodes with equal signatures do the same operation on the same parameters
 * with compatible shapes, so an autobatching engine may run them as one batched kernel (DyNet's rule). Matrix
 * products key on the parameter nodes (same W → one GEMM over gathered columns); everything else on op and shape.
 * Parameter nodes return the empty string: they are never batched.
 */
export function batchSignature(g: ComputationGraph, i: number): string {
  const op = g.op[i]!;
  switch (op) {
    case Op.Parameter:
      return "";
    case Op.Lookup:
      return `${op}:${g.aux[i]}`;
    case Op.MatVec:
    case Op.Affine: {
      let s = `${op}:${g.rows[i]}`;
      const n = g.argCount[i]!;
      for (let k = op === Op.Affine ? 1 : 0; k < n; k += 2) {
        const w = g.arg(i, k);
        s += g.op[w] === Op.Parameter ? `:W${g.aux[w]}` : `:n${w}`;
      }
      if (op === Op.Affine) {
        const b = g.arg(i, 0);
        s += g.op[b] === Op.Parameter ? `:b${g.aux[b]}` : ":b";
      }
      return s;
    }
    case Op.Concat: {
      let s = `${op}`;
      const n = g.argCount[i]!;
      for (let k = 0; k < n; k++) s += `:${g.rows[g.arg(i, k)]}`;
      return s;
    }
    case Op.PickRange:
      return `${op}:${g.rows[g.arg(i, 0)]}:${g.aux[i]}:${g.aux2[i]}`;
    case Op.LstmCell:
      return `${op}:${g.aux[i]}:${g.rows[i]}`;
    case Op.Sum:
      return `${op}:${g.argCount[i]}:${g.rows[i]}:${g.cols[i]}`;
    case Op.PickNegLogSoftmax:
      return `${op}:${g.rows[g.arg(i, 0)]}`;
    default:
      return `${op}:${g.rows[i]}:${g.cols[i]}`;
  }
}
