export { lstmCell, lstmStep, treeLstmLeaf, treeLstmNode } from "./cells.js";
export type { Buf, ExprLike, OpDefinition, OpKernels } from "./common.js";
export { add, cmul, dropout, dropoutKeeps, logistic, relu, sigmoid, sub, tanh } from "./elementwise.js";
export {
  type Conv2dOptions,
  conv2d,
  conv2dShape,
  flatten,
  type ImageShape,
  type MaxPool2dOptions,
  maxPool2d,
  maxPool2dShape,
} from "./image.js";
export { affine, matVec } from "./linear.js";
export { pickNegLogSoftmax } from "./loss.js";
export { type RnnOpSparsity, type RnnOpWeights, rnn } from "./recurrent-op.js";
export { batchSignature, KERNELS, OPS } from "./registry.js";
export { affineRows, lookupRows, pickNegLogSoftmaxRows } from "./rows.js";
export { concat, esum, input, lookup, parameter, pickRange, sum } from "./structure.js";
