export { ComputationGraph, Expression, type GraphParameter, ShapeError } from "./graph.js";
export { OP_NAMES, Op, opName } from "./opcodes.js";
