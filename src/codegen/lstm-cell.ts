/**
 * The per-unit math of the fused LSTM-style cell (src/ops/cells.ts), written once for the eager and autobatch
 * engines' CUDA (VPPS runs the cell inside its interpreter, spread over a warp). Needs DEVICE_ACTIVATIONS (`sigm`)
 * before it. A cell with k children has gates [i; o; u; f₁ … f_k] (H values each) and output [h; c]:
 *   c = σ(i) ⊙ tanh(u) + Σⱼ σ(fⱼ) ⊙ cⱼ,   h = σ(o) ⊙ tanh(c).
 * The caller reads its children's memories and writes the results its own way (pointer arguments, record offsets,
 * atomics or not); these functions compute unit r.
 */
export const DEVICE_LSTM_CELL = `
// ---- the fused cell, unit r (src/ops/cells.ts); gates = [i; o; u; f_1 … f_k], H units each ----
// forward: c = lstm_c_input(…) + Σ_j lstm_c_child(…, j, c_j), then h = lstm_h(…, c)
__device__ __forceinline__ float lstm_c_input(const float* gates, int H, int r) {
  return sigm(gates[r]) * tanhf(gates[2 * H + r]);
}
__device__ __forceinline__ float lstm_c_child(const float* gates, int H, int r, int j, float cj) {
  return sigm(gates[(3 + j) * H + r]) * cj;
}
__device__ __forceinline__ float lstm_h(const float* gates, int H, int r, float c) {
  return sigm(gates[H + r]) * tanhf(c);
}

// backward of unit r from its memory c and the output's gradients dh, dc: the memory's whole gradient (its own and
// through h = σ(o) tanh(c)) and the pre-activation gradients of gates i, o and u
struct LstmUnitGrad {
  float dc, di, d_o, du;
};
__device__ __forceinline__ LstmUnitGrad lstm_unit_backward(const float* gates, int H, int r, float c, float dh,
                                                           float dc) {
  LstmUnitGrad d;
  float tc = tanhf(c);
  float so = sigm(gates[H + r]);
  d.dc = dc + dh * so * (1.f - tc * tc);
  float si = sigm(gates[r]);
  float tu = tanhf(gates[2 * H + r]);
  d.di = d.dc * tu * si * (1.f - si);
  d.d_o = dh * tc * so * (1.f - so);
  d.du = d.dc * si * (1.f - tu * tu);
  return d;
}
// child j's part: returns forget gate j's gradient and sets dcj, child j's memory gradient (dc: LstmUnitGrad.dc)
__device__ __forceinline__ float lstm_child_backward(const float* gates, int H, int r, int j, float cj, float dc,
                                                     float& dcj) {
  float sf = sigm(gates[(3 + j) * H + r]);
  dcj = dc * sf;
  return dc * cj * sf * (1.f - sf);
}
`;
