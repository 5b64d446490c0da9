/**
 * CUDA source of the image ops, Caffe's way: convolution is per-sample im2col (the sample's receptive fields laid
 * out as the columns of a [C·K·K, Ho·Wo] matrix) followed by cuBLAS GEMMs (src/conv/runner.ts), and its
 * input gradient is the GEMM's result scattered back by col2im. Max pooling is one launch over the whole batch.
 *
 * Nothing here uses atomics: col2im and the pooling gradient gather, per input element, every term that reaches it
 * in a fixed order, so the results do not depend on how many blocks or streams run at once. Index arithmetic is
 * `int`: a node has fewer than 2³¹ elements (the graph's offsets are int32), and so does a column buffer (checked
 * on the host, src/conv/runner.ts). The kernels' comments name the files they were written beside (conv.ts) and
 * stay as they are: they are part of the compiled text.
 */

/** The image kernels, compiled into the eager program (eager-kernels.ts lists them with the others). */
export const IMAGE_KERNEL_NAMES = [
  "vp_im2col",
  "vp_col2im_add",
  "vp_conv_bias_add",
  "vp_add_clear",
  "vp_maxpool",
  "vp_maxpool_backward",
] as const;

/** The kernels' source; sits inside the eager program's `extern "C"` block, after its GRID_STRIDE macro. */
export const IMAGE_KERNELS_SOURCE = `
// col[(c·K + ky)·K + kx][oy·Wo + ox] = x[c][oy·S − P + ky][ox·S − P + kx], 0 outside the image (Caffe's im2col);
// one thread per (c, oy, ox) writes its K·K entries
__global__ void vp_im2col(float* col, const float* x, int C, int H, int W, int K, int S, int P, int Ho, int Wo) {
  int plane = Ho * Wo;
  GRID_STRIDE(i, C * plane) {
    int ox = i % Wo, oy = (i / Wo) % Ho, c = i / plane;
    int y0 = oy * S - P, x0 = ox * S - P;
    float* dst = col + c * K * K * plane + oy * Wo + ox;
    const float* src = x + c * H * W;
    for (int ky = 0; ky < K; ky++) {
      int iy = y0 + ky;
      for (int kx = 0; kx < K; kx++) {
        int ix = x0 + kx;
        *dst = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? src[iy * W + ix] : 0.f;
        dst += plane;
      }
    }
  }
}
// dx[c][y][x] += Σ dcol[(c·K + ky)·K + kx][oy·Wo + ox] over the outputs (oy, ox) whose window covers (y, x), in
// the order oy, ox (Caffe's col2im, accumulating): one thread per input element, so no atomics
__global__ void vp_col2im_add(float* dx, const float* dcol, int C, int H, int W, int K, int S, int P, int Ho, int Wo) {
  int plane = Ho * Wo;
  GRID_STRIDE(i, C * H * W) {
    int px = i % W + P, py = (i / W) % H + P, c = i / (H * W);
    int ox0 = px < K ? 0 : (px - K) / S + 1, ox1 = min(px / S + 1, Wo);
    int oy0 = py < K ? 0 : (py - K) / S + 1, oy1 = min(py / S + 1, Ho);
    float v = 0.f;
    for (int oy = oy0; oy < oy1; oy++) {
      for (int ox = ox0; ox < ox1; ox++) {
        int ky = py - oy * S, kx = px - ox * S;
        v += dcol[((c * K + ky) * K + kx) * plane + oy * Wo + ox];
      }
    }
    dx[i] += v;
  }
}
// y[n][f][p] += b[f] over a batch of F·plane outputs per sample: the bias of a pooled convolution's forward in one
// launch, after its samples' GEMMs. Caffe adds it per sample with a rank-1 GEMM y[n] += b·1ᵀ (k = 1, α = β = 1),
// whose only rounding is fl(y + b·1) = fl(y + b): the same bits (conv.ts)
__global__ void vp_conv_bias_add(float* y, const float* b, int F, int plane, int n) {
  GRID_STRIDE(i, n) y[i] += b[(i / plane) % F];
}
// y[i] += x[i], then x[i] = 0: a product slot added into the weight gradient and left zeroed for its next product
// (conv.ts, weight sums by products)
__global__ void vp_add_clear(float* y, float* x, int n) {
  GRID_STRIDE(i, n) {
    y[i] += x[i];
    x[i] = 0.f;
  }
}

// The element a window takes its maximum from: the first largest in row-major order (strict >), as the CPU
// reference (src/ops/image.ts) picks it, so ties send the gradient to the same element; an offset in the plane
__device__ __forceinline__ int vp_window_argmax(const float* plane, int H, int W, int y0, int x0, int K) {
  int y1 = min(y0 + K, H), x1 = min(x0 + K, W);
  int best = y0 * W + x0;
  float m = plane[best];
  for (int iy = y0; iy < y1; iy++) {
    for (int ix = x0; ix < x1; ix++) {
      float v = plane[iy * W + ix];
      if (v > m) { m = v; best = iy * W + ix; }
    }
  }
  return best;
}
// y[p][oy][ox] = max of x[p] over [oy·S, oy·S + K) × [ox·S, ox·S + K) clipped to the plane; p = sample·C + channel
__global__ void vp_maxpool(float* y, const float* x, int planes, int H, int W, int K, int S, int Ho, int Wo) {
  GRID_STRIDE(i, planes * Ho * Wo) {
    int ox = i % Wo, oy = (i / Wo) % Ho, p = i / (Ho * Wo);
    const float* plane = x + p * H * W;
    y[i] = plane[vp_window_argmax(plane, H, W, oy * S, ox * S, K)];
  }
}
// dx[p][iy][ix] += Σ dy[p][oy][ox] over the windows covering (iy, ix) whose maximum is that element, in the order
// oy, ox; one thread per input element (the windows' maxima are found again rather than stored)
__global__ void vp_maxpool_backward(float* dx, const float* x, const float* dy, int planes, int H, int W, int K,
                                    int S, int Ho, int Wo) {
  GRID_STRIDE(i, planes * H * W) {
    int ix = i % W, iy = (i / W) % H, p = i / (H * W);
    const float* plane = x + p * H * W;
    int at = iy * W + ix;
    int oy0 = iy < K ? 0 : (iy - K) / S + 1, oy1 = min(iy / S + 1, Ho);
    int ox0 = ix < K ? 0 : (ix - K) / S + 1, ox1 = min(ix / S + 1, Wo);
    float v = 0.f;
    for (int oy = oy0; oy < oy1; oy++) {
      for (int ox = ox0; ox < ox1; ox++) {
        if (vp_window_argmax(plane, H, W, oy * S, ox * S, K) == at) v += dy[(p * Ho + oy) * Wo + ox];
      }
    }
    dx[i] += v;
  }
}
`;
