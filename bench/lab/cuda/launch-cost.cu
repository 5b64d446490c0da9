// The calls of bench/lab/cuda/launch-cost.ts issued from C: the host cost of cuLaunchKernel, cuBLAS, event record and
// stream wait without Node and koffi, on the same stream setup (a spin kernel keeps the stream busy; CALLS calls back
// to back; median of ROUNDS rounds after a warm-up round). Built and run by bench/lab/cuda/launch-cost.sh:
//   nvcc -O2 -o launch-cost bench/lab/cuda/launch-cost.cu -lcuda -lcublas && ./launch-cost [CALLS] [ROUNDS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>
#include <cuda.h>
#include <functional>
#include <string>
#include <vector>

__global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}
__global__ void empty() {}
__global__ void args8(float* a, const float* b, int c, int h, int w, int k, int s, int p) {
  if (c < 0) a[0] = b[0] + h + w + k + s + p;
}

#define CHECK(x)                                                   \
  do {                                                             \
    auto r_ = (x);                                                 \
    if (r_ != 0) {                                                 \
      std::fprintf(stderr, "%s failed: %d\n", #x, (int)r_);        \
      std::exit(1);                                                \
    }                                                              \
  } while (0)

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 400;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 15;
  cudaFree(nullptr);  // the runtime's primary context, which the driver calls below use
  cudaStream_t stream, other;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  CUfunction fEmpty, fArgs8;
  CHECK(cudaGetFuncBySymbol(reinterpret_cast<cudaFunction_t*>(&fEmpty), reinterpret_cast<const void*>(empty)));
  CHECK(cudaGetFuncBySymbol(reinterpret_cast<cudaFunction_t*>(&fArgs8), reinterpret_cast<const void*>(args8)));
  cublasHandle_t handle;
  CHECK(cublasCreate(&handle));
  CHECK(cublasSetStream(handle, stream));
  float *A, *B, *C, *x, *y;
  CHECK(cudaMalloc(&A, 4 * 32 * 75));
  CHECK(cudaMalloc(&B, 4 * 75 * 1024));
  CHECK(cudaMalloc(&C, 4 * 32 * 1024));
  CHECK(cudaMalloc(&x, 4 * 1024));
  CHECK(cudaMalloc(&y, 4 * 32));
  CUevent event;
  CHECK(cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  CHECK(cuEventRecord(event, other));
  CHECK(cudaStreamSynchronize(other));
  const float one = 1.0f, zero = 0.0f;
  int c = -1, h = 32, w = 32, k = 5, s = 1, p = 2;
  void* params8[] = {&C, &A, &c, &h, &w, &k, &s, &p};
  CUstream cs = reinterpret_cast<CUstream>(stream);

  std::vector<std::pair<std::string, std::function<void()>>> measures = {
      {"launch.raw", [&] { CHECK(cuLaunchKernel(fEmpty, 1, 1, 1, 32, 1, 1, 0, cs, nullptr, nullptr)); }},
      {"launch.kernel", [&] { CHECK(cuLaunchKernel(fArgs8, 8, 1, 1, 256, 1, 1, 0, cs, params8, nullptr)); }},
      // row-major C[32×1024] = A[32×75]·B[75×1024] as column-major Cᵀ = Bᵀ·Aᵀ
      {"sgemm", [&] { CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1024, 32, 75, &one, B, 1024, A, 75, &zero, C, 1024)); }},
      {"sgemv", [&] { CHECK(cublasSgemv(handle, CUBLAS_OP_T, 1024, 32, &one, B, 1024, x, 1, &one, y, 1)); }},
      {"event.record", [&] { CHECK(cuEventRecord(event, cs)); }},
      {"stream.wait", [&] { CHECK(cuStreamWaitEvent(cs, event, 0)); }},
  };
  std::printf("{\"calls\": %d, \"rounds\": %d, \"results\": {", calls, rounds);
  bool first = true;
  for (auto& [name, call] : measures) {
    std::vector<double> us;
    for (int r = 0; r <= rounds; r++) {
      spin<<<1, 1, 0, stream>>>(40000000LL);
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; i++) call();
      auto t1 = std::chrono::steady_clock::now();
      CHECK(cudaStreamSynchronize(stream));
      if (r > 0) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
    }
    std::sort(us.begin(), us.end());
    double med = us.size() % 2 ? us[us.size() / 2] : (us[us.size() / 2 - 1] + us[us.size() / 2]) / 2;
    std::fprintf(stderr, "native %s: %.2f µs/call (min %.2f)\n", name.c_str(), med, us.front());
    std::printf("%s\"%s\": {\"usPerCall\": %.3f, \"min\": %.3f, \"max\": %.3f}", first ? "" : ", ", name.c_str(), med,
                us.front(), us.back());
    first = false;
  }
  std::printf("}}\n");
  return 0;
}
