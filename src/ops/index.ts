export { lstmCell, lstmStep, treeLstmLeaf, treeLstmNode } from "./cells.js";
export type { Buf, ExprLike, OpDefinition, OpKernels } from "./common.js";
export { add, cmul, dropout, dropoutKeeps, logistic, relu, sigmoid, sub, tanh } from "./elementwise.js";
export { affine, matVec } from "./linear.js";
export { pickNegLogSoftmax } from "./loss.js";
export { batchSignature, KERNELS, OPS } from "./registry.js";
export { concat, esum, input, lookup, parameter, pickRange, sum } from "./structure.js";
