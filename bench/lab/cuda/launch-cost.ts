/**
 * Host cost of one call into CUDA from Node through koffi, against the same calls from C (bench/lab/cuda/launch-cost.cu,
 * built by bench/lab/cuda/launch-cost.sh on the GPU machine). What bounds GLP4NN's direct launches and the eager engine:
 * a host thread issues one kernel every T_launch, so kernels shorter than that cannot overlap (GLP4NN).
 *
 *   node --import tsx bench/lab/cuda/launch-cost.ts [--json FILE]
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
import { median, openCalls } from "./calls.js";

const CALLS = Number(process.env["CALLS"] ?? 400);
const ROUNDS = Number(process.env["ROUNDS"] ?? 15);

const { device, calls: measures, busy, synchronize } = openCalls();

const results: Record<string, { usPerCall: number; min: number; max: number }> = {};
for (const [name, call] of Object.entries(measures)) {
  const rounds: number[] = [];
  for (let r = 0; r <= ROUNDS; r++) {
    busy();
    const t0 = performance.now();
    for (let i = 0; i < CALLS; i++) call();
    const t1 = performance.now();
    synchronize();
    if (r > 0) rounds.push(((t1 - t0) * 1000) / CALLS);
  }
  results[name] = { usPerCall: median(rounds), min: Math.min(...rounds), max: Math.max(...rounds) };
  console.log(`node ${name}: ${median(rounds).toFixed(2)} µs/call (min ${Math.min(...rounds).toFixed(2)})`);
}

const out = process.argv.indexOf("--json");
if (out > 0) {
  writeFileSync(
    process.argv[out + 1]!,
    `${JSON.stringify({ device, calls: CALLS, rounds: ROUNDS, results }, null, 2)}\n`,
  );
}
