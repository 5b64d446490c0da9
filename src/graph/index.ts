export { ComputationGraph, Expression, type GraphParameter, ShapeError } from "./graph.js";
export { Op, OP_NAMES, opName } from "./opcodes.js";
