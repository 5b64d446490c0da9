// GLP4NN's kernel analyser (src/glp4nn/analyser.ts) on cases worked by hand from the quantities of the paper's
// Table 2 (#SM, C, sm_max, β_max, τ_max; per kernel #β_K, τ_K, sm_K, T_K; T_launch), plus registers: the paper's
// Fig. 6 example, a kernel that fills the GPU, kernels too short for their launch cost, and register-, thread-,
// shared-memory-, queue- and instance-bound pools. Each expected number is derived in the comment above it.

import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import { type DeviceModel, H100_SXM, maxResidentGrids } from "../src/cuda/hw/device-model.js";
import {
  analyseConcurrency,
  type ConcurrencyProblem,
  explainChoice,
  footprint,
  hardwareQueues,
  type IntegerSolver,
  type KernelProfile,
  loadSolver,
} from "../src/glp4nn/index.js";

/** Tesla K40C (Kepler, sm_35), the GPU of the paper's Fig. 6: 15 SMs, 48 KiB of shared memory per SM. */
const K40C: DeviceModel = {
  name: "Tesla K40c",
  smCount: 15,
  regsPerSm: 65_536,
  maxRegsPerThread: 255,
  sharedPerSm: 48 * 1024,
  sharedPerBlock: 48 * 1024,
  warpSize: 32,
  arch: "sm_35",
  maxThreadsPerSm: 2048,
  maxBlocksPerSm: 16,
  reservedSharedPerBlock: 0,
};

let solver: IntegerSolver;
before(async () => {
  solver = await loadSolver();
});

function kernel(
  name: string,
  blocks: number,
  threads: number,
  regs: number,
  durationUs: number,
  more: Partial<KernelProfile> = {},
): KernelProfile {
  return {
    name,
    blocks,
    threadsPerBlock: threads,
    registersPerThread: regs,
    sharedBytesPerBlock: 0,
    durationUs,
    ...more,
  };
}

function solve(kernels: KernelProfile[], device: DeviceModel, more: Partial<ConcurrencyProblem> = {}) {
  return analyseConcurrency({ label: "a test", kernels, device, launchUs: 5, connections: 8, ...more }, solver);
}

describe("the analyser, on hand-worked cases", () => {
  // Caffe's im2col with 512 threads per block, grid [18,1,1], 33 registers per thread (Fig. 6). A warp takes
  // ⌈33·32/256⌉·256 = 1280 registers, a block 16·1280 = 20480, so 3 blocks fit an SM (65536/20480): one wave of
  // 45 blocks holds all 18. One instance: 18·512 = 9216 threads and 18·20480 = 368640 registers of the GPU's
  // 15·2048 = 30720 and 15·65536 = 983040. Threads allow ⌊30720/9216⌋ = 3 at once, registers ⌊983040/368640⌋ = 2.
  // T = 100 µs, T_launch = 5 µs: ⌈100/5⌉ = 20 and C = min(32, 8, 20) = 8 do not bind.
  const im2col = kernel("im2col", 18, 512, 33, 100);

  test("Fig. 6 (CaffeNet conv1's im2col on a K40C): 3 streams as printed (registers ignored), 2 with registers", () => {
    const paper = solve([im2col], K40C, { ignoreRegisters: true });
    assert.equal(paper.poolSize, 3, "the paper's program gives Fig. 6's 3");
    assert.deepEqual(paper.chosen, [3]);
    assert.match(paper.reason, /one more im2col exceeds the GPU's threads \(needs 9216, 3072 free\)/);
    assert.doesNotMatch(paper.program, /registers:/);
    const ours = solve([im2col], K40C);
    assert.equal(ours.poolSize, 2);
    assert.match(ours.reason, /registers \(needs 368640, 245760 free\)/);
    assert.match(ours.program, /registers: 368640 x0 <= 983040/);
    const f = ours.kernels[0]!;
    assert.deepEqual(
      [f.registersPerBlock, f.blocksPerSm, f.occupancyLimit, f.waves, f.tailBlocks],
      [20480, 3, "registers", 1, 18],
    );
  });

  // An H100 GEMM of 256 threads with 64 registers: 8 warps · 2048 = 16384 registers per block, 4 blocks per SM.
  // 528 blocks = 132 · 4, exactly one wave: an instance holds every register of the GPU, so a second never fits.
  test("a kernel that fills the GPU (a whole wave, or whole waves) runs alone: 1 stream", () => {
    for (const blocks of [528, 3 * 528]) {
      const c = solve([kernel("gemm", blocks, 256, 64, 200)], H100_SXM, { launchUs: 4 });
      assert.equal(c.poolSize, 1, `${blocks} blocks`);
      assert.equal(c.kernels[0]!.tailBlocks, 528, "the last wave is full");
      assert.match(c.reason, /registers \(needs 8650752, 0 free\)/);
    }
  });

  // T = 3 µs and T_launch = 5 µs: the host launches nothing more while one runs, ⌈3/5⌉ = 1, so C = 1.
  test("kernels shorter than a launch get 1 stream, whatever else fits", () => {
    const c = solve([kernel("tiny", 1, 256, 16, 3), kernel("tiny2", 2, 128, 16, 2)], H100_SXM);
    assert.equal(c.poolSize, 1);
    assert.equal(c.cap.launch, 1);
    assert.match(c.reason, /the cap C = 1: the launch cost/);
    assert.match(explainChoice(c), /⌈max T′ \/ T_launch⌉ 1\) = 1/);
  });

  // 255 registers per thread round to 256: a block of 256 threads takes 65536, one SM's whole file. 66 blocks hold
  // 66·65536 = 4325376 of 8650752 registers: 2 at once. Threads (66·256 = 16896 of 270336) would allow 16, blocks
  // (66 of 4224) 64, shared memory (the 1 KiB reserve, 67584 of 30818304) 456: registers bind. Without them the
  // cap C = min(128, 8, ⌈500/5⌉) = 8 binds (the hardware queues); with 32 queues, threads: 16.
  test("register-bound: 2 streams; the paper's program would take the 8 hardware queues, or 16 with 32 queues", () => {
    const k = [kernel("fat", 66, 256, 255, 500)];
    const ours = solve(k, H100_SXM);
    assert.equal(ours.poolSize, 2);
    assert.match(ours.reason, /registers \(needs 4325376, 0 free\)/);
    const paper = solve(k, H100_SXM, { ignoreRegisters: true });
    assert.equal(paper.poolSize, 8);
    assert.match(paper.reason, /the cap C = 8: the hardware queues \(CUDA_DEVICE_MAX_CONNECTIONS\)/);
    const wide = solve(k, H100_SXM, { ignoreRegisters: true, connections: 32 });
    assert.equal(wide.poolSize, 16);
    assert.match(wide.reason, /threads \(needs 16896, 0 free\)/);
  });

  // 100 KiB of shared memory per block plus the 1 KiB reserve = 103424 B: 2 blocks per SM (233472 B). 132 blocks
  // are half a wave and hold 132·103424 = 13651968 B of 30818304: 2 at once (3 would need 40955904).
  test("shared-memory-bound: 2 streams", () => {
    const c = solve([kernel("smem", 132, 128, 32, 400, { sharedBytesPerBlock: 100 * 1024 })], H100_SXM);
    assert.equal(c.poolSize, 2);
    assert.match(c.reason, /shared memory \(needs 13651968, 3514368 free\)/);
  });

  // 256 threads, 32 registers: 8 blocks per SM (threads and registers both), a wave of 1056. 2376 blocks are two
  // waves and a tail of 264; T′ = 300/3 = 100 µs, ⌈100/10⌉ = 10. The tail holds 264·256 = 67584 threads (a quarter
  // of 270336) and 264·8192 = 2162688 registers (a quarter of 8650752): 4 at once, both exactly full.
  test("a kernel of several waves overlaps its tail: 4 streams, T′ a third of T", () => {
    const c = solve([kernel("waves", 2376, 256, 32, 300)], H100_SXM, { launchUs: 10 });
    const f = c.kernels[0]!;
    assert.deepEqual(
      [f.blocksPerSm, f.wave, f.waves, f.tailBlocks, f.tailUs, f.launchBound],
      [8, 1056, 3, 264, 100, 10],
    );
    assert.equal(c.poolSize, 4);
    assert.match(c.reason, /threads \(needs 67584, 0 free\), registers \(needs 2162688, 0 free\)/);
  });

  // On the K40C: A (30 blocks of 512, half the GPU's threads) may run once (instances 1); B (14 blocks of 256 = 3584
  // threads) fills the rest: ⌊(30720 − 15360)/3584⌋ = 4. Pool 5 = 1 + 4, 29696 threads resident.
  test("a mix of kernels: the most resident threads, each kernel within its own bound", () => {
    const c = solve([kernel("A", 30, 512, 16, 100, { instances: 1 }), kernel("B", 14, 256, 16, 100)], K40C);
    assert.deepEqual(c.chosen, [1, 4]);
    assert.equal(c.poolSize, 5);
    assert.equal(c.used.threads, 29696);
    assert.match(c.reason, /one more B exceeds the GPU's threads \(needs 3584, 1024 free\)/);
  });

  // Without the instance bound, 2 A, 1 A + 4 B and 8 B all fill the 30720 threads: ties go to the fewest streams.
  test("ties in resident threads go to the smallest pool", () => {
    const c = solve([kernel("A", 30, 512, 16, 100), kernel("B", 15, 256, 16, 100)], K40C);
    assert.equal(c.used.threads, 30720);
    assert.deepEqual(c.chosen, [2, 0]);
  });

  // Small long kernels, 3 samples: nothing binds but the samples available.
  test("instance-bound: a layer of 3 samples gets 3 streams", () => {
    const c = solve([kernel("per-sample", 4, 128, 32, 80, { instances: 3 })], H100_SXM);
    assert.equal(c.poolSize, 3);
    assert.match(c.reason, /every kernel is at its own bound: per-sample 3 \(instances available\)/);
  });

  test("--explain prints every kernel's footprint, the resources, C and the reason", () => {
    const text = explainChoice(solve([im2col, kernel("sgemm", 60, 256, 64, 180)], K40C));
    assert.match(text, /^GLP4NN: \d+ stream\(s\) for a test on Tesla K40c \(15 SMs, sm_35\), launch cost 5\.00 µs/);
    for (const w of [
      "im2col",
      "sgemm",
      "registers",
      "shared memory",
      "C = min(resident kernels of sm_35 32",
      "pool = Σ x =",
    ])
      assert.ok(text.includes(w), `explanation lacks '${w}':\n${text}`);
  });
});

describe("the analyser's inputs and limits", () => {
  test("a profile that does not fit is refused, naming the kernel, the field, the expected and the actual", () => {
    assert.throws(
      () => footprint(kernel("k", 0, 256, 32, 1), H100_SXM, 5),
      /kernel 'k': blocks must be an integer ≥ 1; got 0/,
    );
    assert.throws(
      () => footprint(kernel("k", 1, 4096, 32, 1), H100_SXM, 5),
      /threadsPerBlock must be an integer in 1 … 2048; got 4096/,
    );
    assert.throws(
      () => footprint(kernel("k", 1, 32, 300, 1), H100_SXM, 5),
      /registersPerThread must be an integer in 0 … 255; got 300/,
    );
    assert.throws(
      () => footprint(kernel("k", 1, 32, 32, 0), H100_SXM, 5),
      /durationUs must be a duration > 0 µs; got 0/,
    );
    // 2048 threads of 64 registers need 131072 registers, two SMs' worth
    assert.throws(
      () => footprint(kernel("k", 1, 2048, 64, 1), H100_SXM, 5),
      /kernel 'k': one block does not fit an SM of NVIDIA H100 SXM \(registers/,
    );
    assert.throws(() => solve([], H100_SXM), /concurrency analysis of a test: no kernels given/);
    assert.throws(
      () => solve([kernel("k", 1, 32, 32, 1)], H100_SXM, { connections: 40 }),
      /connections must be an integer 1 … 32; got 40/,
    );
  });

  test("a measured occupancy replaces the computed one", () => {
    const f = footprint(kernel("k", 1000, 256, 32, 50, { blocksPerSm: 2 }), H100_SXM, 5);
    assert.deepEqual([f.blocksPerSm, f.occupancyLimit, f.wave, f.waves, f.tailBlocks], [2, "measured", 264, 4, 208]);
  });

  test("CUDA_DEVICE_MAX_CONNECTIONS: 8 by default, 1 … 32, anything else refused in one line", () => {
    assert.equal(hardwareQueues({}), 8);
    assert.equal(hardwareQueues({ CUDA_DEVICE_MAX_CONNECTIONS: "32" }), 32);
    assert.throws(
      () => hardwareQueues({ CUDA_DEVICE_MAX_CONNECTIONS: "0" }),
      /CUDA_DEVICE_MAX_CONNECTIONS is '0'; CUDA takes an integer 1 … 32 \(default 8\)/,
    );
    assert.throws(() => hardwareQueues({ CUDA_DEVICE_MAX_CONNECTIONS: "many" }), /is 'many'/);
  });

  test("resident kernels per architecture (the paper's Table 1 and the Programming Guide)", () => {
    const got = [
      "sm_13",
      "sm_20",
      "sm_35",
      "sm_52",
      "sm_53",
      "sm_60",
      "sm_70",
      "sm_72",
      "sm_90",
      "sm_100",
      "sm_120a",
    ].map(maxResidentGrids);
    assert.deepEqual(got, [1, 16, 32, 32, 16, 128, 128, 16, 128, 128, 128]);
    assert.throws(() => maxResidentGrids("hopper"), /'hopper' is not an architecture like sm_90/);
  });

  test("the solver returns integers (a knapsack whose relaxation is fractional)", () => {
    const s = solver.maximise({
      variables: ["a", "b"],
      objective: [5, 4],
      rows: [{ name: "w", coefficients: [6, 4], sense: "<=", bound: 9 }],
      lower: [0, 0],
      upper: [10, 10],
    });
    // the relaxation takes a = 1.5; integers: a = 0, b = 2 (8) beats a = 1, b = 0 (5)
    assert.deepEqual(s.values, [0, 2]);
    assert.equal(s.objective, 8);
  });
});
