/**
 * What a persistent recurrent layer is: its cell, sizes and stacking (the spec), the checks a spec passes, and where
 * each parameter lives. The conventions are PyTorch's/cuDNN's so that users can move weights across:
 *
 * - cells `rnn-tanh`, `rnn-relu`, `lstm`, `gru`, with G = 1, 1, 4, 3 gate rows per hidden unit;
 * - LSTM rows [i; f; g; o]: c' = σ(f)⊙c + σ(i)⊙tanh(g), h' = σ(o)⊙tanh(c');
 * - GRU rows [r; z; n]: r = σ(W_ir x + b_ir + W_hr h + b_hr), z likewise,
 *   n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn)), h' = (1 − z)⊙n + z⊙h;
 * - RNN: h' = act(W_ih x + b_ih + W_hh h + b_hh);
 * - per (layer l, direction d): W_ih [G·H, in_l], W_hh [G·H, H], b_ih [G·H], b_hh [G·H], row-major float32, named
 *   `weight_ih_l{l}`, `weight_hh_l{l}`, `bias_ih_l{l}`, `bias_hh_l{l}` with the suffix `_reverse` for d = 1;
 *   in_0 = inputSize, in_l = D·H above (D = 2 when bidirectional).
 *
 * The math itself is in src/ops/recurrent.ts (one implementation, shared with the graph op); this file is plain data.
 */

import { gatesOf, RNN_CELLS, type RnnCell } from "../ops/recurrent.js";
import { UserError } from "../util/errors.js";
import { showValue } from "../util/text.js";

export { gatesOf, RNN_CELLS, type RnnCell };

/** Whether the cell carries a memory c beside h (c0 / cn exist only then). */
export const hasCellState = (cell: RnnCell): boolean => cell === "lstm";

/** A recurrent stack: `layers` layers of `cell`, each with one or two directions. */
export interface RnnSpec {
  readonly cell: RnnCell;
  /** Width of the input rows of layer 0. */
  readonly inputSize: number;
  /** H: hidden units per direction. */
  readonly hidden: number;
  /** Stacked layers, ≥ 1; layer l > 0 reads layer l − 1's output [N, D·H]. */
  readonly layers: number;
  /** Two directions per layer (D = 2): the forward one in output columns 0…H−1, the backward one in H…2H−1. */
  readonly bidirectional: boolean;
}

/** What users pass: layers and bidirectional may be left out (1, false). */
export interface RnnSpecInput {
  readonly cell: RnnCell;
  readonly inputSize: number;
  readonly hidden: number;
  readonly layers?: number;
  readonly bidirectional?: boolean;
}

/** A spec, argument or packed batch that cannot be used; the message names the argument, the expected and the actual. */
export class RnnArgumentError extends UserError {}

/**
 * The largest hidden size or input size accepted. Far above what fits on chip (the persistent kernels refuse
 * or fall back much earlier, src/rnn/plan/); this bound only keeps G·H·in inside a typed array's length.
 */
export const MAX_RNN_SIZE = 1 << 16;
/** More layers than any published stack uses; a typo guard, not a hardware limit. */
export const MAX_RNN_LAYERS = 64;

/** `spec` checked and completed; throws RnnArgumentError naming the first bad field. */
export function validateRnnSpec(spec: RnnSpecInput, where = "PersistentRnn"): RnnSpec {
  if (typeof spec !== "object" || spec === null) {
    throw new RnnArgumentError(
      `${where}: the spec must be an object {cell, inputSize, hidden, …}; got ${String(spec)}`,
    );
  }
  const cell = spec.cell as unknown;
  if (typeof cell !== "string" || !(RNN_CELLS as readonly string[]).includes(cell)) {
    throw new RnnArgumentError(
      `${where}: argument 'cell' must be one of ${RNN_CELLS.join(", ")}; got ${JSON.stringify(cell) ?? String(cell)}`,
    );
  }
  const inputSize = sizeArg(spec.inputSize, "inputSize", where, MAX_RNN_SIZE);
  const hidden = sizeArg(spec.hidden, "hidden", where, MAX_RNN_SIZE);
  const layers = sizeArg(spec.layers ?? 1, "layers", where, MAX_RNN_LAYERS);
  const bidirectional = spec.bidirectional ?? false;
  if (typeof bidirectional !== "boolean") {
    throw new RnnArgumentError(
      `${where}: argument 'bidirectional' must be true or false; got ${String(bidirectional)}`,
    );
  }
  const checked: RnnSpec = { cell: cell as RnnCell, inputSize, hidden, layers, bidirectional };
  const count = rnnParameterCount(checked);
  if (count > MAX_RNN_PARAMETERS) {
    let largest = hidden;
    while (largest > 1 && rnnParameterCount({ ...checked, hidden: largest }) > MAX_RNN_PARAMETERS) {
      largest = Math.floor(largest * 0.99);
    }
    while (rnnParameterCount({ ...checked, hidden: largest + 1 }) <= MAX_RNN_PARAMETERS) largest++;
    throw new RnnArgumentError(
      `${where}: a ${checked.cell} stack of hidden ${hidden} has ${count.toLocaleString("en-US")} parameters, more ` +
        `than one Float32Array holds (${MAX_RNN_PARAMETERS.toLocaleString("en-US")}); with these sizes the largest ` +
        `'hidden' is ${largest}`,
    );
  }
  return checked;
}

/** The most parameters a stack may have: they live in one Float32Array (and its gradient in another). */
export const MAX_RNN_PARAMETERS = 2 ** 31 - 1;

function sizeArg(v: unknown, name: string, where: string, max: number): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 1 || v > max) {
    throw new RnnArgumentError(`${where}: argument '${name}' must be an integer in 1…${max}; got ${String(v)}`);
  }
  return v;
}

/**
 * How the persistent GPU kernels store the recurrent weights W_hh in registers: `fp32`, or `fp16` (two weights per
 * register, so about twice the hidden size fits; each weight rounded to nearest fp16, ties to even). The arithmetic is
 * fp32 either way; W_ih, the biases and every gradient stay fp32. The CPU backend rounds W_hh the same way for `fp16`.
 */
export const RNN_PRECISIONS = ["fp32", "fp16"] as const;
export type RnnPrecision = (typeof RNN_PRECISIONS)[number];

/** `precision` checked (undefined: fp32); anything else is refused in one line naming the argument and the values. */
export function validateRnnPrecision(precision: unknown, where = "PersistentRnn"): RnnPrecision {
  if (precision === undefined) return "fp32";
  if (typeof precision === "string" && (RNN_PRECISIONS as readonly string[]).includes(precision)) {
    return precision as RnnPrecision;
  }
  throw new RnnArgumentError(
    `${where}: argument 'precision' must be 'fp32' or 'fp16' (how the GPU kernels store W_hh; leave it out for fp32); ` +
      `got ${showValue(precision)}`,
  );
}

/** D: 2 for a bidirectional stack, else 1. */
export const directionsOf = (spec: RnnSpec): 1 | 2 => (spec.bidirectional ? 2 : 1);

/** in_l: the input width of layer l (inputSize for layer 0, D·H above). */
export const layerInputSize = (spec: RnnSpec, layer: number): number =>
  layer === 0 ? spec.inputSize : directionsOf(spec) * spec.hidden;

/** Output row width of the stack: D·H. */
export const outputSize = (spec: RnnSpec): number => directionsOf(spec) * spec.hidden;

/** The four tensors of one (layer, direction). */
export const RNN_PARAMETER_KINDS = ["weight_ih", "weight_hh", "bias_ih", "bias_hh"] as const;
export type RnnParameterKind = (typeof RNN_PARAMETER_KINDS)[number];

/** One parameter tensor of a stack. */
export interface RnnParameterInfo {
  /** PyTorch's name: `weight_ih_l0`, `bias_hh_l1_reverse`, … */
  readonly name: string;
  readonly kind: RnnParameterKind;
  readonly layer: number;
  /** 0 forward, 1 backward (the `_reverse` tensors). */
  readonly direction: number;
  /** [rows, cols] for weights, [rows] for biases (row-major). */
  readonly shape: readonly number[];
  /** Number of floats (product of the shape). */
  readonly length: number;
  /** Offset, in floats, in the stack's one flat parameter buffer (PyTorch's order: l, then d, then kind). */
  readonly offset: number;
}

/** PyTorch's name of a parameter tensor. */
export const rnnParameterName = (kind: RnnParameterKind, layer: number, direction: number): string =>
  `${kind}_l${layer}${direction === 1 ? "_reverse" : ""}`;

/**
 * Every parameter tensor of the stack, in PyTorch's `_flat_weights` order: for each layer, for each direction,
 * weight_ih, weight_hh, bias_ih, bias_hh; offsets index one flat buffer holding them all back to back.
 */
export function rnnParameterLayout(spec: RnnSpec): readonly RnnParameterInfo[] {
  const gh = gatesOf(spec.cell) * spec.hidden;
  const out: RnnParameterInfo[] = [];
  let offset = 0;
  for (let layer = 0; layer < spec.layers; layer++) {
    const inl = layerInputSize(spec, layer);
    for (let direction = 0; direction < directionsOf(spec); direction++) {
      for (const kind of RNN_PARAMETER_KINDS) {
        const shape = kind === "weight_ih" ? [gh, inl] : kind === "weight_hh" ? [gh, spec.hidden] : [gh];
        const length = shape.reduce((a, b) => a * b, 1);
        out.push({ name: rnnParameterName(kind, layer, direction), kind, layer, direction, shape, length, offset });
        offset += length;
      }
    }
  }
  return out;
}

/** Total floats of all parameters of the stack. */
export function rnnParameterCount(spec: RnnSpec): number {
  const layout = rnnParameterLayout(spec);
  const last = layout[layout.length - 1]!;
  return last.offset + last.length;
}

/**
 * FLOPs of the recurrent product W_hh·h of one step of one (layer, direction) over a batch of B sequences:
 * 2·G·H·H·B (a multiply and an add per weight per sequence). The benchmark's TFLOP/s divide this, summed over the
 * steps (Σₜ batchSizes[t] = N for a packed batch), by the recurrent time; the input projection is not counted.
 */
export function recurrentFlopsPerStep(cell: RnnCell, hidden: number, batch: number): number {
  return 2 * gatesOf(cell) * hidden * hidden * batch;
}

/** FLOPs of the recurrent products of a whole stack over a packed batch of N rows (N = Σ batchSizes). */
export function recurrentFlops(spec: RnnSpec, rows: number): number {
  return recurrentFlopsPerStep(spec.cell, spec.hidden, rows) * spec.layers * directionsOf(spec);
}
