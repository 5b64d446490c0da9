// The pieces persistent kernels share outside vpps/: the spill check, the register budget, the grid barrier.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  barrierTimeoutMessage,
  FIRST_KERNEL_ERROR,
  GRID_BARRIER_CUDA,
  GRID_ERRORS,
  PersistentKernelError,
  readStatusError,
  STATUS_WORDS,
} from "../src/codegen/grid-barrier.js";
import { checkNoSpills, KernelSpillError } from "../src/cuda/compile/ptxas-report.js";
import { deviceModelOfCuda, H100_SXM, H200, registersPerThread } from "../src/cuda/hw/device-model.js";
import { INTERPRETER_RESERVED_REGS, registerBudget, THREADS_PER_CTA } from "../src/engines/vpps/plan/plan.js";
import { VppsKernelError } from "../src/engines/vpps/runtime/pipeline.js";

describe("checkNoSpills (the JIT's refusal of kernels that use local memory)", () => {
  test("a kernel without local memory passes", () => {
    assert.doesNotThrow(() => checkNoSpills("k", { numRegs: 255, localBytes: 0 }));
  });

  test("local memory is refused with the kernel, its registers, its local bytes and the advice", () => {
    assert.throws(
      () => checkNoSpills("vpps_m_cta2_rpw4", { numRegs: 128, localBytes: 96 }, "choose a smaller rpw"),
      (e: unknown) =>
        e instanceof KernelSpillError &&
        e.kernel === "vpps_m_cta2_rpw4" &&
        e.registers === 128 &&
        e.localBytes === 96 &&
        /^vpps_m_cta2_rpw4: uses 96 bytes of local memory per thread with 128 registers\/thread; expected 0 .*: choose a smaller rpw$/.test(
          e.message,
        ),
    );
  });

  test("without advice the message still says what to do", () => {
    assert.throws(() => checkNoSpills("k", { numRegs: 64, localBytes: 8 }), /give each thread less to hold/);
  });
});

describe("registersPerThread (the register budget of a persistent kernel)", () => {
  test("256-thread CTAs on a 64K-register SM: 255 (the ISA's cap) at one CTA per SM, 128 at two", () => {
    assert.equal(registersPerThread(H100_SXM, 256, 1), 255);
    assert.equal(registersPerThread(H100_SXM, 256, 2), 128);
    assert.equal(registersPerThread(H200, 256, 2), 128);
  });

  test("rounded down to whole allocation units (256 registers per warp: 8 per thread)", () => {
    // 3 CTAs of 256 threads: 65536 / 768 = 85.3 registers per thread, which the SM allocates as 80
    assert.equal(registersPerThread(H100_SXM, 256, 3), 80);
    assert.equal(registersPerThread(H100_SXM, 128, 4), 128);
    assert.equal(registersPerThread(H100_SXM, 1024, 1), 64);
  });

  test("refuses a CTA size that is not whole warps, naming the argument", () => {
    assert.throws(
      () => registersPerThread(H100_SXM, 100, 1),
      /threadsPerCta must be a multiple of the warp size 32; got 100/,
    );
    assert.throws(() => registersPerThread(H100_SXM, 256, 0), /ctasPerSm must be a positive integer; got 0/);
  });

  test("the VPPS plan's budget is this less the interpreter's reserve", () => {
    const b = registerBudget(H100_SXM, 2);
    assert.equal(b.limitPerThread, registersPerThread(H100_SXM, THREADS_PER_CTA, 2));
    assert.equal(b.forParameters, b.limitPerThread - INTERPRETER_RESERVED_REGS);
  });
});

describe("deviceModelOfCuda (the device model of an opened GPU)", () => {
  test("takes the driver's numbers, the opt-in shared memory per block and the compute capability", () => {
    const m = deviceModelOfCuda({
      index: 0,
      name: "NVIDIA H100 80GB HBM3",
      ccMajor: 9,
      ccMinor: 0,
      arch: "sm_90",
      smCount: 132,
      warpSize: 32,
      maxThreadsPerBlock: 1024,
      maxThreadsPerSm: 2048,
      maxBlocksPerSm: 32,
      regsPerSm: 65536,
      regsPerBlock: 65536,
      maxRegsPerThread: 255,
      sharedPerSm: 233472,
      sharedPerBlock: 49152,
      sharedPerBlockOptin: 232448,
      reservedSharedPerBlock: 1024,
      l2CacheBytes: 52428800,
      clockKhz: 0,
      memoryClockKhz: 0,
      memoryBusWidthBits: 0,
      totalMemory: 85e9,
      cooperativeLaunch: true,
    });
    assert.deepEqual(m, {
      name: "NVIDIA H100 80GB HBM3",
      smCount: 132,
      regsPerSm: 65536,
      maxRegsPerThread: 255,
      sharedPerSm: 233472,
      sharedPerBlock: 232448,
      warpSize: 32,
      arch: "sm_90",
      maxThreadsPerSm: 2048,
      maxBlocksPerSm: 32,
      reservedSharedPerBlock: 1024,
    });
  });
});

describe("the grid barrier's status block (src/codegen/grid-barrier.ts)", () => {
  test("zero is no error; an error's words decode by position; the timeout message names barrier and counts", () => {
    assert.equal(readStatusError([0, 0, 0, 0, 0, 0]), undefined);
    const e = readStatusError([GRID_ERRORS.barrierTimeout, 17, 42, 3, 4, 900]);
    assert.deepEqual(e, { code: 1, cta: 17, a: 42, b: 3, c: 4, pc: 900, words: [1, 17, 42, 3, 4, 900] });
    assert.match(
      barrierTimeoutMessage(e!, "step 9"),
      /^timed out waiting on barrier 42 at step 9: expected 4 signals, saw 3/,
    );
    assert.ok(FIRST_KERNEL_ERROR > GRID_ERRORS.barrierTimeout);
    assert.equal(STATUS_WORDS, 6);
  });

  test("the CUDA text defines the barrier and report functions a persistent kernel calls", () => {
    for (const fn of ["ld_acquire", "red_release_add", "report_error", "vpps_signal", "vpps_wait", "global_ns"]) {
      assert.match(GRID_BARRIER_CUDA, new RegExp(`\\b${fn}\\(`), fn);
    }
    assert.match(GRID_BARRIER_CUDA, /kBarrierSpinLimit/);
    assert.match(GRID_BARRIER_CUDA, /kErrBarrierTimeout/);
  });

  test("VPPS's kernel errors are persistent-kernel errors", () => {
    assert.ok(new VppsKernelError("m", 1, 2, 3, []) instanceof PersistentKernelError);
    assert.equal(new VppsKernelError("m", 1, 2, 3, []).name, "VppsKernelError");
  });
});
