// bench/lab/cuda/launch-threads.ts from C: P std::threads, each with its own stream and cuBLAS handle on the runtime's
// primary context, start together and issue CALLS calls each behind a spin kernel; the rate is P·CALLS over the
// slowest thread's time, median of ROUNDS rounds after a warm-up round.
//   nvcc -O2 -o launch-threads bench/lab/cuda/launch-threads.cu -lcuda -lcublas && ./launch-threads [CALLS] [ROUNDS]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>
#include <cuda.h>
#include <thread>
#include <vector>

__global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}
__global__ void empty() {}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 300;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 9;
  cudaFree(nullptr);
  CUcontext ctx;
  cuCtxGetCurrent(&ctx);
  const int counts[] = {1, 2, 4, 8};
  std::printf("{\"calls\": %d, \"rounds\": %d, \"results\": {", calls, rounds);
  for (int kind = 0; kind < 2; kind++) {
    std::printf("%s\"%s\": {", kind ? ", " : "", kind ? "launch" : "sgemm");
    for (int ci = 0; ci < 4; ci++) {
      const int P = counts[ci];
      std::vector<double> rates, perThread;
      for (int r = 0; r <= rounds; r++) {
        std::atomic<int> ready{0};
        std::atomic<bool> go{false};
        std::vector<double> us(P);
        std::vector<std::thread> ts;
        for (int t = 0; t < P; t++) {
          ts.emplace_back([&, t] {
            cuCtxSetCurrent(ctx);
            cudaStream_t s;
            cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
            cublasHandle_t h;
            cublasCreate(&h);
            cublasSetStream(h, s);
            float *A, *B, *C;
            cudaMalloc(&A, 4 * 32 * 75);
            cudaMalloc(&B, 4 * 75 * 1024);
            cudaMalloc(&C, 4 * 32 * 1024);
            const float one = 1, zero = 0;
            CUfunction f;
            cudaGetFuncBySymbol(reinterpret_cast<cudaFunction_t*>(&f), reinterpret_cast<const void*>(empty));
            auto call = [&] {
              if (kind == 0)
                cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1024, 32, 75, &one, B, 1024, A, 75, &zero, C, 1024);
              else
                cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, reinterpret_cast<CUstream>(s), nullptr, nullptr);
            };
            spin<<<1, 1, 0, s>>>(40000000LL);
            call();
            ready++;
            while (!go.load()) {}
            auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < calls; i++) call();
            us[t] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
            cudaStreamSynchronize(s);
            cublasDestroy(h);
            cudaFree(A);
            cudaFree(B);
            cudaFree(C);
            cudaStreamDestroy(s);
          });
        }
        while (ready.load() < P) {}
        go = true;
        for (auto& t : ts) t.join();
        if (r == 0) continue;
        double slowest = *std::max_element(us.begin(), us.end());
        rates.push_back(P * calls / (slowest / 1000));
        perThread.push_back(median(us) / calls);
      }
      std::fprintf(stderr, "native %s threads %d: %.1f calls/ms in all, %.2f µs per call per thread\n",
                   kind ? "launch" : "sgemm", P, median(rates), median(perThread));
      std::printf("%s\"%d\": {\"callsPerMs\": %.2f, \"usPerCallPerThread\": %.3f}", ci ? ", " : "", P, median(rates),
                  median(perThread));
    }
    std::printf("}");
  }
  std::printf("}}\n");
  return 0;
}
