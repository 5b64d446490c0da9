/**
 * The op set of the define-by-run graph. One number per op, stored per node in a Uint8Array; the math, shape rule,
 * gradient and batching signature of each op live in its family's file under `src/ops/`, and each engine's kernels
 * for it in that engine's `OpTable` (see docs/ADDING_AN_OP.md).
 */
export enum Op {
  /** y = the given values */
  Input = 0,
  /** y = a parameter's value (matrix or vector) */
  Parameter = 1,
  /** y = E[row], a row of a lookup table */
  Lookup = 2,
  /** y = W·x */
  MatVec = 3,
  /** y = b + Σᵢ Wᵢ·xᵢ */
  Affine = 4,
  /** y = [x₁; x₂; …] */
  Concat = 5,
  /** y = x[start:end] */
  PickRange = 6,
  /** y = a + b */
  Add = 7,
  /** y = a − b */
  Sub = 8,
  /** y = a ⊙ b */
  CMul = 9,
  /** y = tanh(x) */
  Tanh = 10,
  /** y = σ(x) = 1 / (1 + e^−x) */
  Logistic = 11,
  /** y = max(0, x) */
  Relu = 12,
  /** y = x ⊙ m / (1 − p), m ~ Bernoulli(1 − p) from the counter-based generator */
  Dropout = 13,
  /** y = −log softmax(x)[label] (a scalar) */
  PickNegLogSoftmax = 14,
  /** y = Σᵢ xᵢ (equal shapes) */
  Sum = 15,
  /** [h; c] of an LSTM-style cell with k children: c = σ(i)⊙tanh(u) + Σⱼ σ(fⱼ)⊙cⱼ, h = σ(o)⊙tanh(c) */
  LstmCell = 16,
  /** y[n] = b + W ⋆ x[n]: a 2-D convolution of each sample of an image batch [N, C·H·W] (src/ops/image.ts) */
  Conv2d = 17,
  /** y[n, c] = the maximum of each K×K window (stride S) of x[n, c], per sample and channel */
  MaxPool2d = 18,
  /** y = x's values as one vector: an image batch [N, D] becomes [N·D] */
  Flatten = 19,
  /** y = [h_fwd | h_bwd] [N, D·H]: one recurrent layer (RNN, LSTM, GRU) over a packed batch x [N, in] (src/ops/recurrent-op.ts) */
  Rnn = 20,
  /** Y = [E[r₀]; E[r₁]; …] [N, dim]: N rows of a lookup table, one per row of the result (src/ops/rows.ts) */
  LookupRows = 21,
  /** Y[n] = b + W·X[n] for every row n of X [N, K]: Y = X·Wᵀ + b [N, M] */
  AffineRows = 22,
  /** y = Σₙ −log softmax(X[n])[labelₙ] (a scalar) over the rows of X [N, C] */
  PickNegLogSoftmaxRows = 23,
}

import { UserError } from "../util/errors.js";

/** Number of ops; they are numbered 0 … OP_COUNT − 1. */
export const OP_COUNT = Object.values(Op).filter((v) => typeof v === "number").length;

/**
 * One entry per op: an engine's kernels, the reference math, the ops' names. Written as an object literal with
 * `[Op.X]` keys (`{ [Op.Tanh]: …, … } satisfies OpTable<K>`, or annotated), a table that lacks an op does not
 * compile ("Property '[Op.Tanh]' is missing …"): a new op cannot be forgotten by an engine, only deliberately
 * refused (`unsupported`).
 */
export type OpTable<K> = { readonly [op in Op]: K };

/**
 * The table as an array indexed by op, which is what hot paths read (one indexed load per node or batch). Checks
 * at run time too that every op, and nothing else, has an entry (a table built with casts, or from JavaScript).
 */
export function opArray<K>(table: OpTable<K>, what: string): readonly K[] {
  const entries = table as unknown as Record<string, K | undefined>;
  const out: K[] = new Array(OP_COUNT);
  for (let op = 0; op < OP_COUNT; op++) {
    const k = entries[op];
    if (k === undefined) throw new Error(`${what}: no entry for op '${Op[op]}' (${op}); every op needs one`);
    out[op] = k;
  }
  for (const key of Object.keys(entries)) {
    const op = Number(key);
    if (!(Number.isInteger(op) && op >= 0 && op < OP_COUNT)) {
      throw new Error(`${what}: entry '${key}' is not an op (ops are 0 … ${OP_COUNT - 1})`);
    }
  }
  return out;
}

export const OP_NAMES: readonly string[] = opArray(
  {
    [Op.Input]: "input",
    [Op.Parameter]: "parameter",
    [Op.Lookup]: "lookup",
    [Op.MatVec]: "matVec",
    [Op.Affine]: "affine",
    [Op.Concat]: "concat",
    [Op.PickRange]: "pickRange",
    [Op.Add]: "add",
    [Op.Sub]: "sub",
    [Op.CMul]: "cmul",
    [Op.Tanh]: "tanh",
    [Op.Logistic]: "logistic",
    [Op.Relu]: "relu",
    [Op.Dropout]: "dropout",
    [Op.PickNegLogSoftmax]: "pickNegLogSoftmax",
    [Op.Sum]: "sum",
    [Op.LstmCell]: "lstmCell",
    [Op.Conv2d]: "conv2d",
    [Op.MaxPool2d]: "maxPool2d",
    [Op.Flatten]: "flatten",
    [Op.Rnn]: "rnn",
    [Op.LookupRows]: "lookupRows",
    [Op.AffineRows]: "affineRows",
    [Op.PickNegLogSoftmaxRows]: "pickNegLogSoftmaxRows",
  },
  "op names",
);

export function opName(op: number): string {
  return OP_NAMES[op] ?? `op#${op}`;
}

/** A kernel-table entry that an engine deliberately does not run: its methods throw `UnsupportedOpError`. */
export interface Unsupported {
  /** Why the engine does not run this op (or where it runs it instead). */
  readonly unsupported: string;
  forward(...args: unknown[]): never;
  backward(...args: unknown[]): never;
}

/** An op an engine was asked to run and does not: names the engine, the op and why. */
export class UnsupportedOpError extends UserError {
  constructor(
    readonly engine: string,
    readonly op: Op,
    readonly reason: string,
  ) {
    super(`${engine}: op '${opName(op)}' is not supported: ${reason}`);
    this.name = "UnsupportedOpError";
  }
}

/**
 * The entry for an op that `engine` does not run, with the reason: a deliberate decision in the table, where a
 * missing entry would not compile. It fits any table whose entries are `{ forward(…), backward(…) }`.
 */
export function unsupported(engine: string, op: Op, why: string): Unsupported {
  const fail = (): never => {
    throw new UnsupportedOpError(engine, op, why);
  };
  return { unsupported: why, forward: fail, backward: fail };
}

/** Whether a table entry is an `unsupported` one. */
export function isUnsupported(entry: object): entry is Unsupported {
  return typeof (entry as Partial<Unsupported>).unsupported === "string";
}
