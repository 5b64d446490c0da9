// GLP4NN's resource tracker on a GPU (src/streams/tracker.ts): the eager engine's im2col for a CaffeNet conv1 sample
// and a cuBLAS GEMM, timed on their first launches with the stream kept ahead of the host (a spin kernel queued
// first), their attributes read from the driver, and the analyser's choice for them printed (`--explain`).
// Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { deviceModelOfCuda } from "../../src/cuda/hw/device-model.js";
import { CudaEvent, type CudaStream, cudaAvailable, karg } from "../../src/cuda/index.js";
import { EAGER_KERNEL_NAMES, EAGER_PROGRAM, eagerKernelSource } from "../../src/engines/eager/kernels.js";
import { GpuContext } from "../../src/engines/gpu/context.js";
import { gridFor } from "../../src/engines/gpu/parameters.js";
import {
  analyseConcurrency,
  explainChoice,
  hardwareQueues,
  loadSolver,
  ResourceTracker,
} from "../../src/streams/index.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const MiB = 1024 ** 2;
const SPIN = `extern "C" __global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}`;

describe("the resource tracker on a GPU", { skip }, () => {
  test("CaffeNet conv1's im2col and GEMM of one sample: attributes, occupancy, durations, launch cost, the analysis", async () => {
    const ctx = GpuContext.open({ poolBytes: 64 * MiB });
    const tracker = new ResourceTracker<CudaStream>({ event: () => CudaEvent.create() });
    try {
      const k = ctx.kernels(EAGER_PROGRAM, eagerKernelSource(), EAGER_KERNEL_NAMES).kernels;
      const spin = ctx.kernels("vpps_spin.cu", SPIN, ["spin"]).kernels.spin;
      // CaffeNet conv1 (Table 5): 3×227×227, 96 filters of 11×11, stride 4 → 55×55; columns [363, 3025]
      const [C, H, K, S, Ho] = [3, 227, 11, 4, 55];
      const x = ctx.pool.alloc(C * H * H, "image");
      const col = ctx.pool.alloc(C * K * K * Ho * Ho, "columns");
      const W = ctx.pool.alloc(96 * C * K * K, "filters");
      const y = ctx.pool.alloc(96 * Ho * Ho, "output");
      // the stream ahead of the host, so that events time the kernels and not the launch gaps
      spin.launch({ grid: 1, block: 1, stream: ctx.stream }, [karg.u64(20_000_000)]);
      const n = C * Ho * Ho;
      for (let s = 0; s < 8; s++) {
        tracker.launch(k.vp_im2col, { grid: gridFor(n), block: 256 }, ctx.stream, () =>
          k.vp_im2col.launch({ grid: gridFor(n), block: 256, stream: ctx.stream }, [
            karg.ptr(ctx.pool.ptr(col)),
            karg.ptr(ctx.pool.ptr(x)),
            ...[C, H, H, K, S, 0, Ho, Ho].map((v) => karg.i32(v)),
          ]),
        );
        tracker.timeCall("cublasSgemm (96 × 3025 × 363)", ctx.stream, () =>
          ctx.cublas.sgemmRowMajor(ctx.cublasHandle, {
            m: 96,
            n: Ho * Ho,
            k: C * K * K,
            A: ctx.pool.ptr(W),
            B: ctx.pool.ptr(col),
            C: ctx.pool.ptr(y),
          }),
        );
      }
      tracker.collect();
      const [im2col, gemm] = tracker.records();
      const shape = im2col!.shape!;
      console.log(
        `im2col: ${shape.blocks} blocks × ${shape.threadsPerBlock}, ${shape.registersPerThread} registers, ` +
          `${shape.blocksPerSm} blocks/SM; durations ${im2col!.durationsUs.map((d) => d.toFixed(1)).join(" ")} µs; ` +
          `GEMM ${gemm!.durationsUs.map((d) => d.toFixed(1)).join(" ")} µs; launch ${tracker.launchUs().toFixed(2)} µs`,
      );
      assert.equal(im2col!.launches, 8);
      assert.equal(im2col!.durationsUs.length, 5, "the first 5 launches timed");
      assert.ok(shape.registersPerThread > 0 && shape.registersPerThread <= 255, "registers from cuFuncGetAttribute");
      assert.equal(shape.localBytes, 0, "no spills");
      assert.ok(shape.blocksPerSm >= 1 && shape.blocksPerSm <= 32, "occupancy from the driver");
      for (const d of [...im2col!.durationsUs, ...gemm!.durationsUs])
        assert.ok(d > 0 && d < 10_000, `duration ${d} µs`);
      const launch = tracker.launchUs();
      assert.ok(launch > 0 && launch < 1000, `launch cost ${launch} µs`);

      const choice = analyseConcurrency(
        {
          label: "CaffeNet conv1's im2col (one sample)",
          kernels: tracker.profiles(256),
          device: deviceModelOfCuda(ctx.device.props),
          launchUs: launch,
          connections: hardwareQueues(),
        },
        await loadSolver(),
      );
      console.log(explainChoice(choice));
      assert.ok(choice.poolSize >= 1 && choice.poolSize <= choice.cap.value);
    } finally {
      tracker.dispose();
      ctx.dispose();
    }
  });
});
