/**
 * The plain RNN cells (PyTorch's RNN_TANH and RNN_RELU): h = act(x·W_ihᵀ + b_ih + W_hh h(t−1) + b_hh), one gate.
 * Backward: the pre-activation's gradient from dh and h itself (y, which the forward wrote): tanh′ = 1 − h², relu′ =
 * [h > 0]. Nothing else is saved: `saved` holds only h(t−1) for W_hh's gradient.
 */
import type { CellCode } from "./index.js";
import { load } from "./site.js";

export const rnnTanh: CellCode = {
  name: "rnn-tanh",
  savedPerUnit: 1,
  forward: (k) => [`h = tanhf(${k.pre(0)});`],
  backward: (k) => [...k.declare(load("hv", `y[row * ldy + ${k.unit}]`)), ...k.gateGrads(["dh * (1.f - hv * hv)"])],
  hFromNext: (_k, rec) => rec,
};

export const rnnRelu: CellCode = {
  name: "rnn-relu",
  savedPerUnit: 1,
  forward: (k) => [`h = fmaxf(${k.pre(0)}, 0.f);`],
  backward: (k) => [...k.declare(load("hv", `y[row * ldy + ${k.unit}]`)), ...k.gateGrads(["hv > 0.f ? dh : 0.f"])],
  hFromNext: (_k, rec) => rec,
};
