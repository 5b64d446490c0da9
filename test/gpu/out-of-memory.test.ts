// Out of device memory through the public API: Vpps contexts holding the largest pool (16 GiB) until the device is
// full; the next fails with CudaDeviceError, which the command line prints as one line saying what to do. It fills the
// GPU's memory for a few seconds, so other GPU tests must not run beside it: it runs only with VPPS_GPU_ALONE=1
//   VPPS_GPU_ALONE=1 node --import tsx --test test/gpu/out-of-memory.test.ts
// and is skipped, with the reason printed, otherwise and without a GPU.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { CudaDeviceError, cudaAvailable, openDevice } from "../../src/cuda/index.js";

const MiB = 1024 ** 2;
const available = cudaAvailable();
const skipHere = !available.ok
  ? `no usable CUDA GPU: ${available.reason.split("\n")[0]}`
  : process.env["VPPS_GPU_ALONE"] !== "1"
    ? "fills the GPU's memory: run it alone with VPPS_GPU_ALONE=1"
    : false;
if (skipHere) console.log(`skipping: ${skipHere}`);

describe("out of device memory through the public API: one line saying what to do", { skip: skipHere }, () => {
  test("Vpps contexts holding 16 GiB pools until the device is full: the next is CudaDeviceError, printed as one line", async () => {
    const { ParameterCollection, Vpps, CudaDeviceError: PublicCudaDeviceError } = await import("../../src/index.js");
    const { reportError } = await import("../../src/cli/main.js");
    assert.equal(PublicCudaDeviceError, CudaDeviceError, "the public API exports the error class");
    const pc = new ParameterCollection({ seed: 1 });
    pc.addParameters([8, 8], undefined, "W");
    const cacheDir = mkdtempSync(join(tmpdir(), "vpps-oom-"));
    const held: { dispose(): void }[] = [];
    const pool = 16 * 1024 * MiB; // the largest pool (32-bit float offsets)
    let error: unknown;
    try {
      const device = openDevice(0);
      const total = device.props.totalMemory;
      device.close();
      for (let k = 0; k <= Math.ceil(total / pool) + 1 && error === undefined; k++) {
        try {
          held.push(await Vpps.create(pc, { cacheDir, poolBytes: pool, host: { scheduleWorkers: 0 } }));
        } catch (e) {
          error = e;
        }
      }
    } finally {
      for (const v of held) v.dispose();
      rmSync(cacheDir, { recursive: true, force: true });
    }
    console.log(`${held.length} contexts of 16 GiB, then: ${String(error)}`);
    assert.ok(error instanceof CudaDeviceError, `expected CudaDeviceError, got ${String(error)}`);
    assert.equal(error.code, 2);
    assert.equal(error.codeName, "CUDA_ERROR_OUT_OF_MEMORY");
    assert.ok(!error.message.includes("\n"), "one line");
    assert.match(error.message, /^the GPU is out of memory: use a smaller --batch or --hidden, or free the GPU/);
    assert.match(error.message, /\[cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY \(2\), asked for 16\.0 GiB; device has/);
    // the command line prints it as one line, status 1, no trace
    let stderr = "";
    const write = process.stderr.write;
    process.stderr.write = ((s: string) => {
      stderr += s;
      return true;
    }) as typeof process.stderr.write;
    let status: number;
    try {
      status = reportError(error, null);
    } finally {
      process.stderr.write = write;
    }
    assert.equal(status, 1);
    assert.match(stderr, /^vpps: the GPU is out of memory: .*CUDA_ERROR_OUT_OF_MEMORY \(2\).*\n$/);
    assert.equal(stderr.trim().split("\n").length, 1, stderr);
    // and the device is usable afterwards
    const v = await Vpps.create(pc, { poolBytes: 64 * MiB, host: { scheduleWorkers: 0 }, cacheDir: null });
    v.dispose();
  });
});
