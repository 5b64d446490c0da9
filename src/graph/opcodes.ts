/**
 * The op set of the define-by-run graph. One number per op, stored per node in a Uint8Array; the math, shape rule,
 * gradient and batching signature of each op live in its family's file under `src/ops/`.
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
}

export const OP_COUNT = 17;

export const OP_NAMES: readonly string[] = [
  "input",
  "parameter",
  "lookup",
  "matVec",
  "affine",
  "concat",
  "pickRange",
  "add",
  "sub",
  "cmul",
  "tanh",
  "logistic",
  "relu",
  "dropout",
  "pickNegLogSoftmax",
  "sum",
  "lstmCell",
];

export function opName(op: number): string {
  return OP_NAMES[op] ?? `op#${op}`;
}
