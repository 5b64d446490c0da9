/**
 * Host cost of one call into CUDA from Node through koffi, against the same calls from C (bench/cuda/launch-cost.cu,
 * built by bench/cuda/launch-cost.sh on the GPU machine). What bounds GLP4NN's direct launches and the eager engine:
 * a host thread issues one kernel every T_launch, so kernels shorter than that cannot overlap (issue 19).
 *
 *   node --import tsx bench/cuda/launch-cost.ts [--json FILE]
 *
 * Each measure: a spin kernel keeps the stream busy (~20 ms) so that the queue never drains and no call waits for the
 * GPU; then CALLS calls are issued back to back and timed on the host (performance.now); median over ROUNDS rounds,
 * after a warm-up round. Calls per round stay well under the driver's queue depth (1024 pending launches).
 * Measures (the names match the C program's):
 *   launch.raw      cuLaunchKernel of an empty kernel, the `void**` array packed once (the FFI call alone)
 *   launch.kernel   CudaKernel.launch with 8 typed arguments, packed per call (what the eager engine and conv do)
 *   sgemm           cublasSgemm_v2 of CIFAR10 conv1's forward GEMM (32 × 1024 × 75)
 *   sgemv           cublasSgemv_v2 (32 × 1024)
 *   event.record    cuEventRecord
 *   stream.wait     cuStreamWaitEvent
 */
import { writeFileSync } from "node:fs";
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
} from "../../src/cuda/index.js";

const CALLS = Number(process.env["CALLS"] ?? 400);
const ROUNDS = Number(process.env["ROUNDS"] ?? 15);

const SOURCE = `extern "C" __global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}
extern "C" __global__ void empty() {}
extern "C" __global__ void args8(float* a, const float* b, int c, int h, int w, int k, int s, int p) {
  if (c < 0) a[0] = b[0] + h + w + k + s + p;
}`;

const device = openDevice(0);
const driver = getDriver();
const stream = CudaStream.create({ nonBlocking: true });
const compiled = compileCuda({ name: "launch_cost.cu", source: SOURCE, arch: device.props.arch });
const module = loadModule(compiled.cubin, "launch_cost.cu");
const spin = module.getFunction("spin");
const empty = module.getFunction("empty");
const args8 = module.getFunction("args8");
const cublas = getCublas();
const handle = cublas.create();
cublas.setStream(handle, stream.handle);
const A = driver.memAlloc(4 * 32 * 75);
const B = driver.memAlloc(4 * 75 * 1024);
const C = driver.memAlloc(4 * 32 * 1024);
const x = driver.memAlloc(4 * 1024);
const y = driver.memAlloc(4 * 32);
const event = CudaEvent.create({ timing: false });
const other = CudaStream.create({ nonBlocking: true });
event.record(other);
other.synchronize();

const rawParams = new KernelParams(4).pack([]);
const gemm = rowMajorGemm({ m: 32, n: 1024, k: 75, A, B, C, beta: 0 });
const gemv = rowMajorGemv({ rows: 32, cols: 1024, A: B, x, beta: 1, y });

const measures: Record<string, () => void> = {
  "launch.raw": () => driver.launchKernel(empty.handle, [1], [32], 0, stream.handle, rawParams),
  "launch.kernel": () =>
    args8.launch({ grid: 8, block: 256, stream }, [
      karg.ptr(C),
      karg.ptr(A),
      karg.i32(-1),
      karg.i32(32),
      karg.i32(32),
      karg.i32(5),
      karg.i32(1),
      karg.i32(2),
    ]),
  sgemm: () => cublas.sgemm(handle, gemm),
  sgemv: () => cublas.sgemv(handle, gemv),
  "event.record": () => event.record(stream),
  "stream.wait": () => stream.wait(event),
};

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

const results: Record<string, { usPerCall: number; min: number; max: number }> = {};
for (const [name, call] of Object.entries(measures)) {
  const rounds: number[] = [];
  for (let r = 0; r <= ROUNDS; r++) {
    spin.launch({ grid: 1, block: 1, stream }, [karg.u64(40_000_000)]);
    const t0 = performance.now();
    for (let i = 0; i < CALLS; i++) call();
    const t1 = performance.now();
    stream.synchronize();
    if (r > 0) rounds.push(((t1 - t0) * 1000) / CALLS);
  }
  results[name] = { usPerCall: median(rounds), min: Math.min(...rounds), max: Math.max(...rounds) };
  console.log(`node ${name}: ${median(rounds).toFixed(2)} µs/call (min ${Math.min(...rounds).toFixed(2)})`);
}

const out = process.argv.indexOf("--json");
if (out > 0) {
  writeFileSync(
    process.argv[out + 1]!,
    `${JSON.stringify({ device: device.props.name, calls: CALLS, rounds: ROUNDS, results }, null, 2)}\n`,
  );
}
cublas.destroy(handle);
