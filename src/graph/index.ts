export {
  CollectionMismatchError,
  ComputationGraph,
  Expression,
  type GraphParameter,
  NO_COLLECTION,
  ShapeError,
} from "./graph.js";
export { OP_NAMES, Op, opName } from "./opcodes.js";
