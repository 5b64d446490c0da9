/**
 * The interpreter cases of the fused LSTM cell (lstm, lstm.bwd): a Tree-LSTM node's gate nonlinearities, memory and
 * output in one instruction, with the gradients into the gates and the children's memories (src/ops/cells.ts has
 * the reference formulas).
 */
import { OPCODES, Opcode } from "../script/format.js";
import { opcodeConstant, operandPointer as P, operandWord as W } from "./operands.js";

export function renderCellCases(): string {
  const O = Opcode;
  const cs = 1 + OPCODES[O.LstmCell]!.fixed.length;
  const pairs = 1 + OPCODES[O.LstmCellBwd]!.fixed.length;
  return `      case ${opcodeConstant(O.LstmCell)}: { // lstm: n = H, gates [i; o; u; f1..fk]
        float* out = ${P(O.LstmCell, "out")}; const float* gt = ${P(O.LstmCell, "gates")};
        float* h2 = ${W(O.LstmCell, "h2")} == kNone ? nullptr : ${P(O.LstmCell, "h2")}; // h into the parent's concat
        const u32 k = ${W(O.LstmCell, "k")}; const u32* cs = ins + ${cs};
        if (k == 2) {
          // binary trees' cell: every load first, so one round trip to L2 instead of one per child (the generic
          // loop below is not unrolled: it would cost registers in every plan). The same sums in the same order.
          const float* c0 = pool + cs[0]; const float* c1 = pool + cs[1];
#pragma unroll 1
          for (u32 r = threadIdx.x; r < n; r += kThreads) {
            const float gi = gt[r], go = gt[n + r], gu = gt[2 * n + r], g0 = gt[3 * n + r], g1 = gt[4 * n + r];
            const float x0 = c0[r], x1 = c1[r];
            float c = sigm(gi) * tanhf(gu);
            c += sigm(g0) * x0;
            c += sigm(g1) * x1;
            out[n + r] = c;
            const float h = sigm(go) * tanhf(c);
            out[r] = h;
            if (h2) h2[r] = h;
          }
          break;
        }
#pragma unroll 1
        for (u32 r = threadIdx.x; r < n; r += kThreads) {
          float c = sigm(gt[r]) * tanhf(gt[2 * n + r]);
#pragma unroll 1
          for (u32 j = 0; j < k; ++j) c += sigm(gt[(3 + j) * n + r]) * pool[cs[j] + r];
          out[n + r] = c;
          const float h = sigm(gt[n + r]) * tanhf(c);
          out[r] = h;
          if (h2) h2[r] = h;
        }
      } break;
      case ${opcodeConstant(O.LstmCellBwd)}: { // lstm.bwd: the reference's formulas (src/ops/cells.ts)
        const float* outbar = ${P(O.LstmCellBwd, "outbar")}; const float* out = ${P(O.LstmCellBwd, "out")};
        const float* gt = ${P(O.LstmCellBwd, "gates")};
        float* gbar = ${W(O.LstmCellBwd, "gatesbar")} == kNone ? nullptr : ${P(O.LstmCellBwd, "gatesbar")};
        const float* hb2 = ${W(O.LstmCellBwd, "hbar2")} == kNone ? nullptr : ${P(O.LstmCellBwd, "hbar2")};
        const u32 k = ${W(O.LstmCellBwd, "k")}; const u32* cp = ins + ${pairs};
        if (kBinaryCellBwd && k == 2) {
          // binary trees' cell, every load first (see lstm), where the plan has the registers (kernel-template.ts)
#pragma unroll 1
          for (u32 r = threadIdx.x; r < n; r += kThreads) {
            const float c = out[n + r], go = gt[n + r], dh = outbar[r] + (hb2 ? hb2[r] : 0.f), cb = outbar[n + r];
            const float gi = gt[r], gu = gt[2 * n + r], g0 = gt[3 * n + r], g1 = gt[4 * n + r];
            const float x0 = pool[cp[0] + r], x1 = pool[cp[2] + r];
            const float tc = tanhf(c), so = sigm(go);
            const float dc = cb + dh * so * (1.f - tc * tc);
            const float s0 = sigm(g0), s1 = sigm(g1);
            if (cp[1] != kNone) atomicAdd(pool + cp[1] + r, dc * s0);
            if (cp[3] != kNone) atomicAdd(pool + cp[3] + r, dc * s1);
            if (gbar) {
              const float si = sigm(gi), tu = tanhf(gu);
              atomicAdd(gbar + r, dc * tu * si * (1.f - si));
              atomicAdd(gbar + n + r, dh * tc * so * (1.f - so));
              atomicAdd(gbar + 2 * n + r, dc * si * (1.f - tu * tu));
              atomicAdd(gbar + 3 * n + r, dc * x0 * s0 * (1.f - s0));
              atomicAdd(gbar + 4 * n + r, dc * x1 * s1 * (1.f - s1));
            }
          }
          break;
        }
#pragma unroll 1
        for (u32 r = threadIdx.x; r < n; r += kThreads) {
          const float c = out[n + r], tc = tanhf(c), so = sigm(gt[n + r]), dh = outbar[r] + (hb2 ? hb2[r] : 0.f);
          const float dc = outbar[n + r] + dh * so * (1.f - tc * tc);
          const float si = sigm(gt[r]), tu = tanhf(gt[2 * n + r]);
          if (gbar) {
            atomicAdd(gbar + r, dc * tu * si * (1.f - si));
            atomicAdd(gbar + n + r, dh * tc * so * (1.f - so));
            atomicAdd(gbar + 2 * n + r, dc * si * (1.f - tu * tu));
          }
#pragma unroll 1
          for (u32 j = 0; j < k; ++j) {
            const float sf = sigm(gt[(3 + j) * n + r]);
            if (gbar) atomicAdd(gbar + (3 + j) * n + r, dc * pool[cp[2 * j] + r] * sf * (1.f - sf));
            if (cp[2 * j + 1] != kNone) atomicAdd(pool + cp[2 * j + 1] + r, dc * sf);
          }
        }
      } break;`;
}
