// The CUDA calls bench/lab/cuda/launch-cost.ts and launch-threads.ts time, on a stream of their own (one per thread in
// launch-threads): the same kernels, buffers and shapes as bench/lab/cuda/launch-cost.cu and launch-threads.cu.
import {
  CudaEvent,
  CudaStream,
  compileCuda,
  getCublas,
  getDriver,
  KernelParams,
  karg,
  loadModule,
  openDevice,
  rowMajorGemm,
  rowMajorGemv,
} from "../../../src/cuda/index.js";

const SOURCE = `extern "C" __global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}
extern "C" __global__ void empty() {}
extern "C" __global__ void args8(float* a, const float* b, int c, int h, int w, int k, int s, int p) {
  if (c < 0) a[0] = b[0] + h + w + k + s + p;
}`;

/** The measured calls by name (launch.raw, launch.kernel, sgemm, sgemv, event.record, stream.wait). */
export type CallName = "launch.raw" | "launch.kernel" | "sgemm" | "sgemv" | "event.record" | "stream.wait";

/**
 * Opens device 0 on this thread, a stream, a cuBLAS handle on it and the buffers; returns the calls, `busy()` that
 * keeps the stream busy (~20 ms spin) so that no call waits for the GPU, and `synchronize()`.
 */
export function openCalls(): {
  device: string;
  calls: Record<CallName, () => void>;
  busy(): void;
  synchronize(): void;
} {
  const device = openDevice(0);
  const driver = getDriver();
  const stream = CudaStream.create({ nonBlocking: true });
  const module = loadModule(compileCuda({ name: "calls.cu", source: SOURCE, arch: device.props.arch }).cubin);
  const [spin, empty, args8] = ["spin", "empty", "args8"].map((n) => module.getFunction(n)) as [
    ReturnType<typeof module.getFunction>,
    ReturnType<typeof module.getFunction>,
    ReturnType<typeof module.getFunction>,
  ];
  const cublas = getCublas();
  const handle = cublas.create();
  cublas.setStream(handle, stream.handle);
  const [A, B, C, x, y] = [32 * 75, 75 * 1024, 32 * 1024, 1024, 32].map((n) => driver.memAlloc(4 * n)) as number[];
  const event = CudaEvent.create({ timing: false });
  const other = CudaStream.create({ nonBlocking: true });
  event.record(other);
  other.synchronize();
  const rawParams = new KernelParams(4).pack([]);
  const gemm = rowMajorGemm({ m: 32, n: 1024, k: 75, A: A!, B: B!, C: C!, beta: 0 });
  const gemv = rowMajorGemv({ rows: 32, cols: 1024, A: B!, x: x!, beta: 1, y: y! });
  const eight = [karg.ptr(C!), karg.ptr(A!), ...[-1, 32, 32, 5, 1, 2].map((v) => karg.i32(v))];
  return {
    device: device.props.name,
    calls: {
      "launch.raw": () => driver.launchKernel(empty.handle, [1], [32], 0, stream.handle, rawParams),
      "launch.kernel": () => args8.launch({ grid: 8, block: 256, stream }, eight),
      sgemm: () => cublas.sgemm(handle, gemm),
      sgemv: () => cublas.sgemv(handle, gemv),
      "event.record": () => event.record(stream),
      "stream.wait": () => stream.wait(event),
    },
    busy: () => spin.launch({ grid: 1, block: 1, stream }, [karg.u64(40_000_000)]),
    synchronize: () => stream.synchronize(),
  };
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}
