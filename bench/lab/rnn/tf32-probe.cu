// Persistent-RNN experiment (2026-11-26): can tensor cores make a persistent step's recurrent product at batch 16 fast
// enough, with the weights still held in registers, and how accurate is it?
//
// One CTA per SM, 512 threads (16 warps), each CTA holding a 40 × 1152 block of W_hh in registers (LSTM 1152 on 128
// CTAs: 9 units × 4 gates = 36 rows, padded to 5 tiles of 8) and multiplying it by a batch of 16 vectors h (16 × 1152,
// in shared memory) once per "step", 256 steps, the partial sums of the 16 warps (each owns 72 columns) reduced
// through shared memory. Variants:
//   fma    fp32 FMAs, the weights in registers (5 rows × 18 columns a thread), the batch in tiles of 4 (as the
//          persistent kernels do): a simple form, not our tuned kernel (its phases are measured in
//          docs/journal/rnn.md)
//   tf32x3 mma.sync m16n8k8 TF32 with the split a = a_big + a_small (CUTLASS's "3xTF32"): a_small·b_big +
//          a_big·b_small + a_big·b_big, fp32 accumulation; the weights' B fragments are the registers
//   tf32x1 one TF32 product (for the accuracy column only)
// Prints cycles per step (clock64 of CTA 0, median over CTAs' means) and the largest relative error against fp64 on
// the host, and ptxas's register use is printed by the build (-Xptxas -v).
//
//   nvcc -O3 -arch=sm_90 -Xptxas -v -o /tmp/tf32-probe bench/lab/rnn/tf32-probe.cu && /tmp/tf32-probe
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

constexpr int K = 1152;      // columns (hidden)
constexpr int ROWS = 40;     // rows held by a CTA (5 n-tiles of 8)
constexpr int NTILE = ROWS / 8;
constexpr int B = 16;        // batch columns (one m16 tile)
constexpr int WARPS = 16;
constexpr int NT = WARPS * 32;
constexpr int KW = K / WARPS;  // columns per warp: 72
constexpr int KSTEPS = KW / 8; // k8 steps per warp: 9
constexpr int HS = K + 4;      // shared row stride of h (floats), against bank conflicts
constexpr int STEPS = 256;

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

__device__ __forceinline__ unsigned tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// The weights' split, kept inside the step loop (volatile): hoisted out of it, the big and small halves of all 90
// weights would need 180 registers, and ptxas spilled 784 bytes.
__device__ __forceinline__ unsigned tf32_here(float x) {
  unsigned r;
  asm volatile("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// W [gridDim.x][ROWS][K]; h [B][K]; out [gridDim.x][B][ROWS] (the last step's product); cycles [gridDim.x]
template <int MODE>  // 1: tf32x1, 3: tf32x3
__global__ void __launch_bounds__(NT, 1) mma_probe(const float* __restrict__ W, const float* __restrict__ h,
                                                   float* out, long long* cycles) {
  extern __shared__ float sm[];
  float* hs = sm;                 // [B][HS]
  float* part = sm + B * HS;      // [WARPS][B][ROWS]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, q = lane % 4; // fragment coordinates
  const float* w = W + (size_t)blockIdx.x * ROWS * K;
  // the weights: B fragments (B[k][n] = W[n][k]) of this warp's 9 k-steps × 5 n-tiles, 2 floats each: 90 registers
  float wb[KSTEPS][NTILE][2];
#pragma unroll
  for (int s = 0; s < KSTEPS; s++)
#pragma unroll
    for (int n = 0; n < NTILE; n++) {
      const int k = warp * KW + s * 8 + q, r = n * 8 + g;
      wb[s][n][0] = __ldcg(w + (size_t)r * K + k);
      wb[s][n][1] = __ldcg(w + (size_t)r * K + k + 4);
    }
  for (int i = tid; i < B * K; i += NT) hs[(i / K) * HS + i % K] = h[i];
  __syncthreads();
  long long t0 = clock64();
  for (int step = 0; step < STEPS; step++) {
    float d[NTILE][4];
#pragma unroll
    for (int n = 0; n < NTILE; n++) d[n][0] = d[n][1] = d[n][2] = d[n][3] = 0.f;
#pragma unroll
    for (int s = 0; s < KSTEPS; s++) {
      const int k = warp * KW + s * 8 + q;
      const float af[4] = {hs[g * HS + k], hs[(g + 8) * HS + k], hs[g * HS + k + 4], hs[(g + 8) * HS + k + 4]};
      unsigned abig[4], asmall[4];
#pragma unroll
      for (int j = 0; j < 4; j++) {
        abig[j] = tf32(af[j]);
        asmall[j] = tf32(af[j] - __uint_as_float(abig[j]));
      }
#pragma unroll
      for (int n = 0; n < NTILE; n++) {
        const unsigned b0 = tf32_here(wb[s][n][0]), b1 = tf32_here(wb[s][n][1]);
        if (MODE == 3) {
          const unsigned s0 = tf32_here(wb[s][n][0] - __uint_as_float(b0));
          const unsigned s1 = tf32_here(wb[s][n][1] - __uint_as_float(b1));
          mma(d[n], asmall, b0, b1);
          mma(d[n], abig, s0, s1);
        }
        mma(d[n], abig, b0, b1);
      }
    }
    // partial sums of this warp: C[m = batch][n = row]
#pragma unroll
    for (int n = 0; n < NTILE; n++) {
      float* p = part + warp * B * ROWS;
      p[g * ROWS + n * 8 + 2 * q] = d[n][0];
      p[g * ROWS + n * 8 + 2 * q + 1] = d[n][1];
      p[(g + 8) * ROWS + n * 8 + 2 * q] = d[n][2];
      p[(g + 8) * ROWS + n * 8 + 2 * q + 1] = d[n][3];
    }
    __syncthreads();
    // the reduction over warps: B·ROWS = 640 sums of 16
    for (int i = tid; i < B * ROWS; i += NT) {
      float acc = 0.f;
#pragma unroll
      for (int v = 0; v < WARPS; v++) acc += part[v * B * ROWS + i];
      if (step == STEPS - 1) out[(size_t)blockIdx.x * B * ROWS + i] = acc;
      // a recurrence the compiler cannot see through: one value of h per step depends on the product (0 · acc)
      if (i == 0) hs[step % K] += 0.f * acc;
    }
    __syncthreads();
  }
  if (tid == 0) cycles[blockIdx.x] = (clock64() - t0) / STEPS;
}

// The FMA form: lane j of a warp holds rows j % 8 + 8n (n = 0 … 4) × 18 of the warp's 72 columns (quarter j / 8):
// 90 registers; per batch tile of 4, the quarters' sums are added by shuffles, then across warps in shared memory.
__global__ void __launch_bounds__(NT, 1) fma_probe(const float* __restrict__ W, const float* __restrict__ h,
                                                   float* out, long long* cycles) {
  extern __shared__ float sm[];
  float* hs = sm;
  float* part = sm + B * HS;  // [WARPS][B][ROWS]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int r0 = lane % 8, cq = lane / 8;  // rows r0 + 8n; column quarter cq (18 columns)
  const int c0 = warp * KW + cq * 18;
  const float* w = W + (size_t)blockIdx.x * ROWS * K;
  float wr[NTILE][18];
#pragma unroll
  for (int n = 0; n < NTILE; n++)
#pragma unroll
    for (int c = 0; c < 18; c++) wr[n][c] = __ldcg(w + (size_t)(r0 + 8 * n) * K + c0 + c);
  for (int i = tid; i < B * K; i += NT) hs[(i / K) * HS + i % K] = h[i];
  __syncthreads();
  long long t0 = clock64();
  for (int step = 0; step < STEPS; step++) {
    for (int b0 = 0; b0 < B; b0 += 4) {
      float acc[NTILE][4];
#pragma unroll
      for (int n = 0; n < NTILE; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll
      for (int c = 0; c < 18; c++) {
        float hv[4];
#pragma unroll
        for (int j = 0; j < 4; j++) hv[j] = hs[(b0 + j) * HS + c0 + c];
#pragma unroll
        for (int n = 0; n < NTILE; n++)
#pragma unroll
          for (int j = 0; j < 4; j++) acc[n][j] = fmaf(wr[n][c], hv[j], acc[n][j]);
      }
#pragma unroll
      for (int n = 0; n < NTILE; n++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
          acc[n][j] += __shfl_xor_sync(0xffffffffu, acc[n][j], 8);
          acc[n][j] += __shfl_xor_sync(0xffffffffu, acc[n][j], 16);
        }
      if (cq == 0) {
        float* p = part + warp * B * ROWS;
#pragma unroll
        for (int n = 0; n < NTILE; n++)
#pragma unroll
          for (int j = 0; j < 4; j++) p[(b0 + j) * ROWS + r0 + 8 * n] = acc[n][j];
      }
    }
    __syncthreads();
    for (int i = tid; i < B * ROWS; i += NT) {
      float acc = 0.f;
      for (int v = 0; v < WARPS; v++) acc += part[v * B * ROWS + i];
      if (step == STEPS - 1) out[(size_t)blockIdx.x * B * ROWS + i] = acc;
      if (i == 0) hs[step % K] += 0.f * acc;
    }
    __syncthreads();
  }
  if (tid == 0) cycles[blockIdx.x] = (clock64() - t0) / STEPS;
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int ctas = std::min(sms, 128);
  std::vector<float> W((size_t)ctas * ROWS * K), h(B * K);
  srand(1);
  auto u = [] { return (float)rand() / RAND_MAX * 2.f - 1.f; };
  for (auto& x : W) x = u() * 0.05f;
  for (auto& x : h) x = u();
  float *dW, *dh, *dout;
  long long* dcyc;
  CHECK(cudaMalloc(&dW, W.size() * 4));
  CHECK(cudaMalloc(&dh, h.size() * 4));
  CHECK(cudaMalloc(&dout, (size_t)ctas * B * ROWS * 4));
  CHECK(cudaMalloc(&dcyc, ctas * 8));
  CHECK(cudaMemcpy(dW, W.data(), W.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dh, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  // fp64 reference
  std::vector<double> ref((size_t)ctas * B * ROWS);
  for (int c = 0; c < ctas; c++)
    for (int b = 0; b < B; b++)
      for (int r = 0; r < ROWS; r++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += (double)W[((size_t)c * ROWS + r) * K + k] * h[b * K + k];
        ref[((size_t)c * B + b) * ROWS + r] = s;
      }
  const size_t smemMma = (size_t)(B * HS + WARPS * B * ROWS) * 4;
  const size_t smemFma = smemMma;
  printf("device %s, %d SMs, %d CTAs × %d threads; W block %d × %d, batch %d, %d steps; shared %zu / %zu B\n",
         prop.name, sms, ctas, NT, ROWS, K, B, STEPS, smemMma, smemFma);
  auto run = [&](const char* name, void (*kernel)(const float*, const float*, float*, long long*), size_t smem) {
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    std::vector<float> ms;
    std::vector<long long> cyc(ctas);
    for (int rep = 0; rep < 6; rep++) {
      cudaEvent_t a, b;
      CHECK(cudaEventCreate(&a));
      CHECK(cudaEventCreate(&b));
      CHECK(cudaEventRecord(a));
      kernel<<<ctas, NT, smem>>>(dW, dh, dout, dcyc);
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      CHECK(cudaGetLastError());
      float t;
      CHECK(cudaEventElapsedTime(&t, a, b));
      if (rep > 0) ms.push_back(t);
    }
    CHECK(cudaMemcpy(cyc.data(), dcyc, ctas * 8, cudaMemcpyDeviceToHost));
    std::vector<float> out((size_t)ctas * B * ROWS);
    CHECK(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost));
    double maxRel = 0, maxAbs = 0, refMax = 0;
    for (size_t i = 0; i < out.size(); i++) {
      maxAbs = std::max(maxAbs, std::fabs(out[i] - ref[i]));
      refMax = std::max(refMax, std::fabs(ref[i]));
    }
    for (size_t i = 0; i < out.size(); i++)
      if (std::fabs(ref[i]) > 1e-3 * refMax) maxRel = std::max(maxRel, std::fabs(out[i] - ref[i]) / std::fabs(ref[i]));
    std::sort(ms.begin(), ms.end());
    std::sort(cyc.begin(), cyc.end());
    printf("%-7s cycles/step (median CTA) %lld, kernel %.3f ms (median of %zu) = %.2f µs/step; max |err| %.3g "
           "(relative to max |ref| %.3g: %.3g), max rel err (|ref| > 1e-3 max) %.3g\n",
           name, cyc[ctas / 2], ms[ms.size() / 2], ms.size(), 1000.0 * ms[ms.size() / 2] / STEPS, maxAbs, refMax,
           maxAbs / refMax, maxRel);
  };
  run("fma", fma_probe, smemFma);
  run("tf32x3", mma_probe<3>, smemMma);
  run("tf32x1", mma_probe<1>, smemMma);
  return 0;
}
