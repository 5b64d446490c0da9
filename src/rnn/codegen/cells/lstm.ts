/**
 * The LSTM cell (PyTorch's gate rows i, f, g, o): c = σ(f)⊙c(t−1) + σ(i)⊙tanh(g), h = σ(o)⊙tanh(c). The memory c is
 * carried beside h (c0 in, cn out). Saved per (row, unit): the four gates after their activations, c, and h(t−1).
 * Backward: dc = dc(from the step after) + dh ⊙ o ⊙ (1 − tanh²c); the gates' pre-activation gradients from dc and dh;
 * dc ⊙ f flows to the step before (dc0 at a sequence's first step).
 */
import type { CellCode } from "./index.js";
import { load, value } from "./site.js";

const GATES = ["gi", "gf", "gg", "go"] as const;

export const lstm: CellCode = {
  name: "lstm",
  savedPerUnit: 6, // 4 gates, c, h(t−1)
  state: { name: "c", initial: "c0", last: "cn", lastGrad: "dcn" },
  forward: (k) => [
    ...k.declare(
      value("gi", `sigm(${k.pre(0)})`),
      value("gf", `sigm(${k.pre(1)})`),
      value("gg", `tanhf(${k.pre(2)})`),
      value("go", `sigm(${k.pre(3)})`),
    ),
    ...k.declare(value("cprev", k.prevState)),
    ...k.declare(value("c", "gf * cprev + gi * gg")),
    "h = go * tanhf(c);",
    ...k.keep("c"),
    ...k.save(GATES, "c"),
  ],
  backward: (k) => [
    ...k.savedGates(GATES),
    ...k.declare(load("cv", `sstate[row * H + ${k.unit}]`), value("tc", "tanhf(cv)")),
    ...k.declare(load("cprev", k.prevState)),
    ...k.declare(value("dc", `(from_next ? ${k.carry("c")} : ${k.lastGrad}) + dh * go * (1.f - tc * tc)`)),
    ...k.gateGrads([
      "dc * gg * gi * (1.f - gi)",
      "dc * cprev * gf * (1.f - gf)",
      "dc * gi * (1.f - gg * gg)",
      "dh * tc * go * (1.f - go)",
    ]),
    `${k.carry("c")} = dc * gf;`,
    "if (!has_prev) dc0[ci] = dc * gf;",
  ],
  hFromNext: (_k, rec) => rec,
};
