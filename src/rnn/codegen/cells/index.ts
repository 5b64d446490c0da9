/**
 * The recurrent cells' pointwise math, one file per cell, keyed by name: what the persistent kernels
 * (dense-kernels.ts) and the stepwise element-wise kernels (stepwise.ts) render, each through its own site
 * (site.ts). A sparse persistent kernel renders the same cells through a site of its own.
 */
import type { RnnCellName } from "../../plan/index.js";
import { gru } from "./gru.js";
import { lstm } from "./lstm.js";
import { rnnRelu, rnnTanh } from "./rnn.js";
import type { BackwardSite, CarriedState, ForwardSite, Line } from "./site.js";

/** One cell's math and what it keeps between the forward and the backward. */
export interface CellCode {
  readonly name: RnnCellName;
  /**
   * Floats per (packed row, unit) of the forward's `saved` buffer: the gates after their activations (none for the
   * plain RNNs, whose h is y), the cell's state (LSTM c, GRU W_hn h + b_hn), then h(t−1) (for W_hh's gradient).
   */
  readonly savedPerUnit: number;
  /** The state carried beside h, if any (LSTM's c). */
  readonly state?: CarriedState;
  /** A step's forward: sets `h` (declared by the template) and saves what the backward reads. */
  forward(k: ForwardSite): Line[];
  /** A step's backward from `dh`: the gate gradients, and what flows to the step before. */
  backward(k: BackwardSite): Line[];
  /** dh(t−1) from the step after, whose product with W_hh is `rec`, plus what the cell hands back directly. */
  hFromNext(k: BackwardSite, rec: string): string;
}

export const CELLS: Readonly<Record<RnnCellName, CellCode>> = {
  "rnn-tanh": rnnTanh,
  "rnn-relu": rnnRelu,
  lstm,
  gru,
};

/** Floats of the forward kernel's `saved` buffer for `total` packed rows (training: everything backward needs). */
export function savedFloats(cell: RnnCellName, hidden: number, total: number): number {
  return CELLS[cell].savedPerUnit * hidden * total;
}
