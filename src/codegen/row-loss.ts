/**
 * CUDA device code of the summed row loss (pickNegLogSoftmaxRows, src/ops/rows.ts), shared by the eager engine's
 * kernels (raw pointers) and the autobatch engine's (pool offsets from a record): both engines wrap these functions,
 * so the loss is the same sum, in the same order, on either. Included before `extern "C"` (a template cannot have C
 * linkage).
 */
export const DEVICE_ROW_LOSS = `
// y = Σ_n (log Σ_j exp(X[n, j]) − X[n, label n]) over the rows of X [rows, c]; one block of BLOCK threads. Thread t
// sums rows t, t + blockDim, … in that order, then a fixed tree adds the threads' sums: the same float sum on every run
template <int BLOCK>
__device__ __forceinline__ void vp_nll_softmax_rows_block(float* y, const float* x, const float* labels, int rows,
                                                          int c) {
  __shared__ float red[BLOCK];
  float acc = 0.f;
  for (int n = threadIdx.x; n < rows; n += blockDim.x) {
    const float* xr = x + (long long)n * c;
    float m = __int_as_float(0xff800000);  // −∞
    for (int j = 0; j < c; j++) m = fmaxf(m, xr[j]);
    float s = 0.f;
    for (int j = 0; j < c; j++) s += expf(xr[j] - m);
    acc += m + logf(s) - xr[(int)labels[n]];
  }
  red[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[0] = red[0];
}
// dX[n] += g (softmax(X[n]) − onehot(label n)) for row n of X [·, c]
__device__ __forceinline__ void vp_nll_softmax_row_backward(float* dx, const float* x, const float* labels, float g,
                                                            int n, int c) {
  const float* xr = x + (long long)n * c;
  float* dr = dx + (long long)n * c;
  float m = __int_as_float(0xff800000);
  for (int j = 0; j < c; j++) m = fmaxf(m, xr[j]);
  float s = 0.f;
  for (int j = 0; j < c; j++) s += expf(xr[j] - m);
  float logZ = m + logf(s);
  int label = (int)labels[n];
  for (int j = 0; j < c; j++) dr[j] += g * (expf(xr[j] - logZ) - (j == label ? 1.f : 0.f));
}
`;
