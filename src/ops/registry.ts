import type { ComputationGraph } from "../graph/graph.js";
import { type OpTable, opArray } from "../graph/opcodes.js";
import { CELL_OPS } from "./cells.js";
import type { OpDefinition } from "./common.js";
import { ELEMENTWISE_OPS } from "./elementwise.js";
import { IMAGE_OPS } from "./image.js";
import { LINEAR_OPS } from "./linear.js";
import { LOSS_OPS } from "./loss.js";
import { RECURRENT_OPS } from "./recurrent-op.js";
import { ROW_OPS } from "./rows.js";
import { STRUCTURE_OPS } from "./structure.js";

/**
 * Every op's definition (reference kernels and batching signature), indexed by `Op`: each family's file contributes
 * its ops, and an op that no family defines does not compile here.
 */
export const OPS: readonly OpDefinition[] = opArray(
  {
    ...STRUCTURE_OPS,
    ...LINEAR_OPS,
    ...ELEMENTWISE_OPS,
    ...LOSS_OPS,
    ...CELL_OPS,
    ...IMAGE_OPS,
    ...RECURRENT_OPS,
    ...ROW_OPS,
  } satisfies OpTable<OpDefinition>,
  "reference kernels (src/ops)",
);

/** The reference kernels of every op, indexed by `Op` (the CPU engines' kernels). */
export const KERNELS: readonly OpDefinition[] = OPS;

let scratchKey = new Int32Array(64);

/**
 * The batching signature of node i as a string (for messages, checks and dumps): two nodes with equal signatures may
 * run as one batched kernel (`OpDefinition.signature`; the autobatch planner interns the integer key itself).
 * Parameter nodes return the empty string: they are never batched.
 */
export function batchSignature(g: ComputationGraph, i: number): string {
  const op = g.op[i]!;
  const room = 2 * g.argCount[i]! + 4;
  if (scratchKey.length < room) scratchKey = new Int32Array(room);
  scratchKey[0] = op;
  const len = OPS[op]!.signature(g, i, scratchKey);
  let s = len > 0 ? `${op}` : "";
  for (let k = 1; k < len; k++) s += `:${scratchKey[k]}`;
  return s;
}
