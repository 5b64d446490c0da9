/**
 * VPPS's kernels, one entry per op: the instructions a node of that op adds to the batch's script, forward
 * (forward.ts) and backward (backward.ts); scheduler.ts calls them level by level. Inputs, parameters, lookups and
 * pickRanges are storage that holds their values already (plan/layout.ts) and emit nothing. An op VPPS cannot lower
 * is an `unsupported` entry: the scheduler refuses a graph that uses it, naming the op.
 */
import type { ComputationGraph } from "../../../graph/graph.js";
import { isUnsupported, Op, type OpTable, opArray, UnsupportedOpError, unsupported } from "../../../graph/opcodes.js";
import type { BatchLayout } from "../plan/layout.js";
import { Opcode } from "../script/format.js";
import {
  affineBackward,
  cmulBackward,
  concatBackward,
  dropoutBackward,
  type Emitter,
  lstmBackward,
  matVecBackward,
  pickNlsBackward,
  subBackward,
  sumBackward,
  unaryBackward,
} from "./backward.js";
import {
  affineForward,
  binaryForward,
  concatForward,
  dropoutForward,
  lstmForward,
  matVecForward,
  pickNlsForward,
  sumForward,
  unaryForward,
} from "./forward.js";

/** One op on VPPS: node i's instructions. `collected`: the rows of GEMM-strategy gradients so far, per matrix. */
export interface VppsKernel {
  forward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number): void;
  backward(E: Emitter, g: ComputationGraph, L: BatchLayout, i: number, collected: Int32Array): void;
  /** Storage whose value (and gradient) exists anyway: no instructions, and no place in the level lists. */
  readonly storage?: true;
}

const nothing = (): void => {};
const storage: VppsKernel = { forward: nothing, backward: nothing, storage: true };

/** Why VPPS has no image ops: its script holds vector instructions on register-held matrices, not convolutions. */
const IMAGE_OPS = "image batches have no VPPS instructions; train convolutional models with --engine eager";
/** Why VPPS has no row-batch ops: its instructions work on one vector per node, and a row op is a whole batch. */
const ROW_OPS =
  "a row-batch op is a whole batch in one node (src/ops/rows.ts), VPPS runs one vector per node; build the " +
  "taggers with --rnn steps for VPPS";

const table: OpTable<VppsKernel> = {
  // the batch's uploaded inputs, the parameters' own storage, rows of a table, a slice of the argument
  [Op.Input]: storage,
  [Op.Parameter]: storage,
  [Op.Lookup]: storage,
  [Op.PickRange]: storage,
  [Op.MatVec]: { forward: matVecForward, backward: matVecBackward },
  [Op.Affine]: { forward: affineForward, backward: affineBackward },
  [Op.Concat]: { forward: concatForward, backward: concatBackward },
  [Op.Add]: { forward: binaryForward(Opcode.Add), backward: sumBackward },
  [Op.Sub]: { forward: binaryForward(Opcode.Sub), backward: subBackward },
  [Op.CMul]: { forward: binaryForward(Opcode.CMul), backward: cmulBackward },
  [Op.Tanh]: { forward: unaryForward(Opcode.Tanh), backward: unaryBackward(Opcode.TanhBwd, "output") },
  [Op.Logistic]: { forward: unaryForward(Opcode.Logistic), backward: unaryBackward(Opcode.LogisticBwd, "output") },
  [Op.Relu]: { forward: unaryForward(Opcode.Relu), backward: unaryBackward(Opcode.ReluBwd, "input") },
  [Op.Dropout]: { forward: dropoutForward, backward: dropoutBackward },
  [Op.PickNegLogSoftmax]: { forward: pickNlsForward, backward: pickNlsBackward },
  [Op.Sum]: { forward: sumForward, backward: sumBackward },
  [Op.LstmCell]: { forward: lstmForward, backward: lstmBackward },
  [Op.Conv2d]: unsupported("vpps", Op.Conv2d, IMAGE_OPS),
  [Op.MaxPool2d]: unsupported("vpps", Op.MaxPool2d, IMAGE_OPS),
  [Op.Flatten]: unsupported("vpps", Op.Flatten, IMAGE_OPS),
  [Op.Rnn]: unsupported(
    "vpps",
    Op.Rnn,
    "a packed recurrent layer is its own persistent kernel (docs/RNN.md); build the taggers with --rnn steps for VPPS",
  ),
  [Op.LookupRows]: unsupported("vpps", Op.LookupRows, ROW_OPS),
  [Op.AffineRows]: unsupported("vpps", Op.AffineRows, ROW_OPS),
  [Op.PickNegLogSoftmaxRows]: unsupported("vpps", Op.PickNegLogSoftmaxRows, ROW_OPS),
};

/** VPPS's kernels, indexed by op. */
export const VPPS_KERNELS: readonly VppsKernel[] = opArray(table, "VPPS kernels");

/** Per op: 1 when its nodes emit instructions (not storage). */
export const EMITS_INSTRUCTIONS = Uint8Array.from(VPPS_KERNELS, (k) => (k.storage ? 0 : 1));

/** Per op: 1 when VPPS refuses graphs with it (an `unsupported` entry), as of now (a scheduler reads it once). */
export function refusedOps(): Uint8Array {
  return Uint8Array.from(VPPS_KERNELS, (k) => (isUnsupported(k) ? 1 : 0));
}

/** The first live node's op that VPPS refuses, among nodes [0, n), or undefined. */
export function firstRefusedOp(g: ComputationGraph, n: number, refused: Uint8Array): Op | undefined {
  for (let i = 0; i < n; i++) if (refused[g.op[i]!] === 1) return g.op[i] as Op;
  return undefined;
}

/** The error of a graph using an op VPPS refuses: one line naming the op and why. */
export function refusal(op: Op): UnsupportedOpError {
  const k = VPPS_KERNELS[op]!;
  return new UnsupportedOpError("vpps", op, isUnsupported(k) ? k.unsupported : "no VPPS kernel");
}
