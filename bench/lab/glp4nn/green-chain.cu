// Would reserving SMs for the weight chain help CaffeNet conv3's backward? (GLP4NN; docs/journal/glp4nn.md, "why CaffeNet stops below 2×".) A native
// experiment with the backward's two GEMM streams of CaffeNet conv3 (N = 256, C = 256, 13×13, F = 384, 3×3):
//   chain: 256 dW GEMMs (dW[384, 2304] += dy[n][384, 169] · col[n][2304, 169]ᵀ) one after another on one stream;
//   lanes: 256 input-gradient GEMMs (col[2304, 169] = Wᵀ[2304, 384] · dy[n][384, 169]) dealt over L streams.
// Timed (CUDA events, median of 7): each alone; both at once on the whole GPU; both at once with the chain on a green
// context of k SMs and the lanes on one of the other SMs (cuDevSmResourceSplitByCount, cuGreenCtxStreamCreate). Also
// checks that dW comes out bit for bit the same when the chain runs on a green context.
//   nvcc -O2 -o green-chain bench/lab/glp4nn/green-chain.cu -lcuda -lcublas && ./green-chain
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <functional>
#include <vector>

#define CK(x)                                                               \
  do {                                                                      \
    long long r_ = (long long)(x);                                          \
    if (r_ != 0) {                                                          \
      std::fprintf(stderr, "%s failed: %lld (line %d)\n", #x, r_, __LINE__); \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

constexpr int N = 256, F = 384, ROWS = 2304, PLANE = 169, L = 8;
static float *dW, *W, *dy, *cols[L], *colB[L];
static const float one = 1.f, zero = 0.f;

struct Side {
  CUcontext ctx;
  cublasHandle_t h;
  CUstream s;
};

static Side makeSide(CUcontext ctx, CUstream s) {
  Side x{ctx, nullptr, s};
  CK(cuCtxSetCurrent(ctx));
  CK(cublasCreate(&x.h));
  CK(cublasSetStream(x.h, (cudaStream_t)s));
  return x;
}

// row-major C[m×n] (+)= op(A)·op(B) through column-major cuBLAS
static void chainGemm(Side& c, int n) {
  CK(cuCtxSetCurrent(c.ctx)); // a handle is called from the context it was made in
  // dW[F, ROWS] += dy[F, PLANE] · col[ROWS, PLANE]ᵀ  ⇔  dWᵀ[ROWS, F] += col · dyᵀ (column-major: C = A·B)
  CK(cublasSgemm(c.h, CUBLAS_OP_T, CUBLAS_OP_N, ROWS, F, PLANE, &one, cols[n % L], PLANE, dy + (size_t)n * F * PLANE,
                 PLANE, &one, dW, ROWS));
}
static void laneGemm(Side& c, int n) {
  CK(cuCtxSetCurrent(c.ctx));
  // col[ROWS, PLANE] = Wᵀ[ROWS, F] · dy[F, PLANE]  ⇔  colᵀ[PLANE, ROWS] = dyᵀ · W
  CK(cublasSgemm(c.h, CUBLAS_OP_N, CUBLAS_OP_N, PLANE, ROWS, F, &one, dy + (size_t)n * F * PLANE, PLANE, W, ROWS,
                 &zero, colB[n % L], PLANE));
}

struct On {
  CUstream s;
  CUcontext ctx;
};

static float timeIt(CUcontext primary, CUstream timing, std::vector<On> all, const std::function<void()>& body) {
  std::vector<float> ms;
  for (int r = 0; r < 8; r++) {
    CK(cuCtxSetCurrent(primary));
    CUevent a, b;
    CK(cuEventCreate(&a, 0));
    CK(cuEventCreate(&b, 0));
    CK(cuEventRecord(a, timing));
    for (On o : all) {
      CK(cuCtxSetCurrent(o.ctx));
      CK(cuStreamWaitEvent(o.s, a, 0));
    }
    body();
    std::vector<CUevent> done;
    for (On o : all) {
      CK(cuCtxSetCurrent(o.ctx));
      CUevent e;
      CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
      CK(cuEventRecord(e, o.s));
      done.push_back(e);
    }
    CK(cuCtxSetCurrent(primary));
    for (CUevent e : done) CK(cuStreamWaitEvent(timing, e, 0));
    CK(cuEventRecord(b, timing));
    CK(cuEventSynchronize(b));
    float t;
    CK(cuEventElapsedTime(&t, a, b));
    if (r > 0) ms.push_back(t);
    CK(cuEventDestroy(a));
    CK(cuEventDestroy(b));
    for (CUevent e : done) CK(cuEventDestroy(e));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int main() {
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext primary;
  CK(cuDevicePrimaryCtxRetain(&primary, dev));
  CK(cuCtxSetCurrent(primary));
  CK(cudaMalloc(&dW, sizeof(float) * F * ROWS));
  CK(cudaMalloc(&W, sizeof(float) * F * ROWS));
  CK(cudaMalloc(&dy, sizeof(float) * (size_t)N * F * PLANE));
  for (int k = 0; k < L; k++) {
    CK(cudaMalloc(&cols[k], sizeof(float) * ROWS * PLANE));
    CK(cudaMalloc(&colB[k], sizeof(float) * ROWS * PLANE));
  }
  {
    std::vector<float> h((size_t)N * F * PLANE);
    unsigned s = 1;
    for (auto& v : h) v = ((s = s * 1664525u + 1013904223u) >> 8) / 16777216.f - 0.5f;
    CK(cudaMemcpy(dy, h.data(), sizeof(float) * h.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(W, h.data(), sizeof(float) * F * ROWS, cudaMemcpyHostToDevice));
    for (int k = 0; k < L; k++) CK(cudaMemcpy(cols[k], h.data() + k * 1000, sizeof(float) * ROWS * PLANE, cudaMemcpyHostToDevice));
  }
  CUstream timing;
  CK(cuStreamCreate(&timing, CU_STREAM_NON_BLOCKING));
  // the whole GPU: the chain and the lanes on streams of the primary context
  CUstream cs;
  CK(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
  Side chain = makeSide(primary, cs);
  std::vector<Side> lanes;
  std::vector<CUstream> laneStreams;
  for (int k = 0; k < L; k++) {
    CUstream s;
    CK(cuCtxSetCurrent(primary));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    lanes.push_back(makeSide(primary, s));
    laneStreams.push_back(s);
  }
  auto runChain = [&](Side& c) {
    for (int n = 0; n < N; n++) chainGemm(c, n);
  };
  auto runLanes = [&](std::vector<Side>& ls) {
    for (int n = 0; n < N; n++) laneGemm(ls[n % L], n);
  };
  std::vector<On> laneOn, all;
  for (CUstream s : laneStreams) laneOn.push_back({s, primary});
  all = laneOn;
  all.push_back({cs, primary});
  CK(cudaMemset(dW, 0, sizeof(float) * F * ROWS));
  runChain(chain);
  CK(cudaDeviceSynchronize());
  std::vector<float> ref(F * ROWS), got(F * ROWS);
  CK(cudaMemcpy(ref.data(), dW, sizeof(float) * ref.size(), cudaMemcpyDeviceToHost));
  float chainAlone = timeIt(primary, timing, {{cs, primary}}, [&] { runChain(chain); });
  float lanesAlone = timeIt(primary, timing, laneOn, [&] { runLanes(lanes); });
  float shared = timeIt(primary, timing, all, [&] {
    runChain(chain);
    runLanes(lanes);
  });
  std::printf("whole GPU: chain alone %.2f ms, lanes alone %.2f ms, both at once %.2f ms\n", chainAlone, lanesAlone,
              shared);
  CUdevResource input;
  CK(cuDeviceGetDevResource(dev, &input, CU_DEV_RESOURCE_TYPE_SM));
  std::printf("SMs: %u\n", input.sm.smCount);
  for (unsigned k : {16u, 24u, 32u, 40u, 48u, 64u}) {
    CUdevResource group, rest;
    unsigned nb = 1;
    CK(cuDevSmResourceSplitByCount(&group, &nb, &input, &rest, 0, k));
    CUdevResourceDesc da, db;
    CK(cuDevResourceGenerateDesc(&da, &group, 1));
    CK(cuDevResourceGenerateDesc(&db, &rest, 1));
    CUgreenCtx ga, gb;
    CK(cuGreenCtxCreate(&ga, da, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CK(cuGreenCtxCreate(&gb, db, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CUcontext ca, cb;
    CK(cuCtxFromGreenCtx(&ca, ga));
    CK(cuCtxFromGreenCtx(&cb, gb));
    CUstream gs;
    CK(cuGreenCtxStreamCreate(&gs, ga, CU_STREAM_NON_BLOCKING, 0));
    Side gchain = makeSide(ca, gs);
    std::vector<Side> glanes;
    std::vector<CUstream> gls;
    for (int j = 0; j < L; j++) {
      CUstream s;
      CK(cuGreenCtxStreamCreate(&s, gb, CU_STREAM_NON_BLOCKING, 0));
      glanes.push_back(makeSide(cb, s));
      gls.push_back(s);
    }
    std::vector<On> glOn, gall;
    for (CUstream s : gls) glOn.push_back({s, cb});
    gall = glOn;
    gall.push_back({gs, ca});
    CK(cuCtxSetCurrent(primary));
    CK(cudaMemset(dW, 0, sizeof(float) * F * ROWS));
    CK(cudaDeviceSynchronize());
    runChain(gchain);
    CK(cuStreamSynchronize(gs));
    CK(cuCtxSetCurrent(primary));
    CK(cudaMemcpy(got.data(), dW, sizeof(float) * got.size(), cudaMemcpyDeviceToHost));
    bool same = std::memcmp(got.data(), ref.data(), sizeof(float) * got.size()) == 0;
    float gChain = timeIt(primary, timing, {{gs, ca}}, [&] { runChain(gchain); });
    float gLanes = timeIt(primary, timing, glOn, [&] { runLanes(glanes); });
    float gBoth = timeIt(primary, timing, gall, [&] {
      runChain(gchain);
      runLanes(glanes);
    });
    std::printf(
        "chain on %u SMs (%u granted), lanes on %u: chain alone %.2f ms, lanes alone %.2f ms, both at once %.2f ms "
        "(whole GPU %.2f); dW %s the whole GPU's\n",
        k, group.sm.smCount, rest.sm.smCount, gChain, gLanes, gBoth, shared, same ? "bit for bit" : "DIFFERS from");
    for (auto& x : glanes) {
      CK(cuCtxSetCurrent(cb));
      CK(cublasDestroy(x.h));
    }
    CK(cuCtxSetCurrent(ca));
    CK(cublasDestroy(gchain.h));
    CK(cuCtxSetCurrent(primary));
  }
  return 0;
}
