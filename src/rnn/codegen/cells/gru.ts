/**
 * The GRU cell (PyTorch's gate rows r, z, n): r = σ(·), z = σ(·), n = tanh(x_n + r ⊙ (W_hn h + b_hn)),
 * h = (1 − z)⊙n + z⊙h(t−1). b_hn stays in the kernel (the input projection leaves it out), since r scales it. Saved
 * per (row, unit): r, z, n, W_hn h + b_hn, and h(t−1). Backward: the n, z, r pre-activation gradients; the input
 * side's differ from the recurrent side's in n (by r), so both are written (dpre_x beside dpre_h); dh ⊙ z flows to
 * h(t−1) directly, besides dpre·W_hh.
 */
import type { CellCode } from "./index.js";
import { load, value } from "./site.js";

const GATES = ["gr", "gz", "gn"] as const;

export const gru: CellCode = {
  name: "gru",
  savedPerUnit: 5, // 3 gates, W_hn h + b_hn, h(t−1)
  forward: (k) => [
    ...k.declare(value("gr", `sigm(${k.pre(0)})`), value("gz", `sigm(${k.pre(1)})`)),
    ...k.declare(value("hnl", `${k.rec(2)} + bhn[${k.unit}]`)),
    ...k.declare(value("gn", `tanhf(${k.x(2)} + gr * hnl)`)),
    "h = (1.f - gz) * gn + gz * hprev;",
    ...k.save(GATES, "hnl"),
  ],
  backward: (k) => [
    ...k.savedGates(GATES),
    ...k.declare(load("hnl", `sstate[row * H + ${k.unit}]`), load("hprev", `shprev[row * H + ${k.unit}]`)),
    ...k.declare(value("dn", "dh * (1.f - gz) * (1.f - gn * gn)")),
    ...k.declare(value("dz", "dh * (hprev - gn) * gz * (1.f - gz)")),
    ...k.declare(value("dr", "dn * hnl * gr * (1.f - gr)")),
    ...k.gateGrads(["dr", "dz", "dn * gr"]),
    `float* dx = dpre_x + row * (3 * H) + ${k.unit};`,
    ...k.stores(["dx[0] = dr;", "dx[H] = dz;", "dx[2 * H] = dn;"]),
    `${k.carry("h")} = dh * gz;`,
  ],
  hFromNext: (k, rec) => `${rec} + ${k.carry("h")}`,
};
