// What one kernel takes of a GPU while it runs, from what the resource tracker records of it (GLP4NN's "profiling
// input", Table 2: blocks #β_K, threads per block τ_K, shared memory per block sm_K, duration T_K, plus the registers
// the paper leaves out), under the paper's assumption that blocks spread evenly over the SMs.
//
// Only a kernel's last wave leaves room for others: a grid larger than one wave (every SM full of its blocks) runs
// alone until its tail, so an instance's footprint is its tail wave, and the time it can overlap with others is
// one wave's share of its duration (the authors' code scales T the same way).

import { type DeviceModel, REGISTER_ALLOCATION_UNIT } from "../cuda/hw/device-model.js";

/** One kernel as the tracker records it (tracker.ts). */
export interface KernelProfile {
  /** For messages and `--explain`. */
  readonly name: string;
  /** Blocks in the grid (x·y·z): #β_K. */
  readonly blocks: number;
  /** Threads per block (x·y·z): τ_K. */
  readonly threadsPerBlock: number;
  /** Registers per thread (cuFuncGetAttribute NUM_REGS). */
  readonly registersPerThread: number;
  /** Static plus dynamic shared memory per block, bytes: sm_K. */
  readonly sharedBytesPerBlock: number;
  /** Duration of one instance, µs (measured with events): T_K. */
  readonly durationUs: number;
  /** Instances that are free to run at once (the samples of a layer, the nodes of a level); absent: no limit. */
  readonly instances?: number;
  /**
   * Blocks of this kernel alone resident per SM, where measured (cuOccupancyMaxActiveBlocksPerMultiprocessor);
   * absent: computed from the device's limits.
   */
  readonly blocksPerSm?: number;
}

/** A kernel's demand on the GPU, per instance, as the analyser's program sees it. */
export interface KernelFootprint {
  readonly profile: KernelProfile;
  /** Threads, registers and shared memory one block holds (threads rounded up to whole warps, registers to the allocation unit, shared memory with the driver's reserve). */
  readonly threadsPerBlock: number;
  readonly registersPerBlock: number;
  readonly sharedPerBlock: number;
  /** Blocks of this kernel alone resident per SM, and what limits it. */
  readonly blocksPerSm: number;
  readonly occupancyLimit: Resource | "blocks per SM" | "measured";
  /** Blocks per wave (blocksPerSm · SMs), waves, and the blocks of the last wave (1 … wave). */
  readonly wave: number;
  readonly waves: number;
  readonly tailBlocks: number;
  /** One wave's share of the duration: how long the tail can overlap with other kernels, µs. */
  readonly tailUs: number;
  /** ⌈tailUs / T_launch⌉: instances one host thread can launch while one runs (Infinity without a launch cost). */
  readonly launchBound: number;
}

/** The resources the program constrains, per GPU. */
export type Resource = "threads" | "blocks" | "registers" | "shared memory";

export const RESOURCES: readonly Resource[] = ["threads", "blocks", "registers", "shared memory"];

/** What one instance's tail wave holds of each resource (whole GPU). */
export function tailDemand(k: KernelFootprint): Record<Resource, number> {
  return {
    threads: k.tailBlocks * k.threadsPerBlock,
    blocks: k.tailBlocks,
    registers: k.tailBlocks * k.registersPerBlock,
    "shared memory": k.tailBlocks * k.sharedPerBlock,
  };
}

/** The whole GPU's capacity of each resource (SMs × the per-SM limit). */
export function gpuCapacity(device: DeviceModel): Record<Resource, number> {
  const n = device.smCount;
  return {
    threads: n * device.maxThreadsPerSm,
    blocks: n * device.maxBlocksPerSm,
    registers: n * device.regsPerSm,
    "shared memory": n * device.sharedPerSm,
  };
}

function check(k: KernelProfile, field: keyof KernelProfile, ok: boolean, expected: string): void {
  if (!ok) {
    throw new RangeError(`kernel '${k.name}': ${field} must be ${expected}; got ${String(k[field])}`);
  }
}

const isInt = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v);

/** Validates a profile against the device, naming the kernel, the field, what was expected and what came. */
export function checkProfile(k: KernelProfile, device: DeviceModel): void {
  check(k, "blocks", isInt(k.blocks) && k.blocks >= 1, "an integer ≥ 1");
  check(
    k,
    "threadsPerBlock",
    isInt(k.threadsPerBlock) && k.threadsPerBlock >= 1 && k.threadsPerBlock <= device.maxThreadsPerSm,
    `an integer in 1 … ${device.maxThreadsPerSm}`,
  );
  check(
    k,
    "registersPerThread",
    isInt(k.registersPerThread) && k.registersPerThread >= 0 && k.registersPerThread <= device.maxRegsPerThread,
    `an integer in 0 … ${device.maxRegsPerThread}`,
  );
  check(
    k,
    "sharedBytesPerBlock",
    isInt(k.sharedBytesPerBlock) && k.sharedBytesPerBlock >= 0 && k.sharedBytesPerBlock <= device.sharedPerBlock,
    `an integer in 0 … ${device.sharedPerBlock} (the device's shared memory per block)`,
  );
  check(k, "durationUs", Number.isFinite(k.durationUs) && k.durationUs > 0, "a duration > 0 µs");
  if (k.instances !== undefined) check(k, "instances", isInt(k.instances) && k.instances >= 1, "an integer ≥ 1");
  if (k.blocksPerSm !== undefined) {
    check(
      k,
      "blocksPerSm",
      isInt(k.blocksPerSm) && k.blocksPerSm >= 1 && k.blocksPerSm <= device.maxBlocksPerSm,
      `an integer in 1 … ${device.maxBlocksPerSm}`,
    );
  }
}

/** A kernel's footprint on `device` when launches cost `launchUs` µs of host time each. */
export function footprint(k: KernelProfile, device: DeviceModel, launchUs: number): KernelFootprint {
  checkProfile(k, device);
  const warp = device.warpSize;
  const warps = Math.ceil(k.threadsPerBlock / warp);
  const threadsPerBlock = warps * warp;
  // the SM hands out registers per warp, in units of REGISTER_ALLOCATION_UNIT
  const regsPerWarp = Math.ceil((k.registersPerThread * warp) / REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT;
  const registersPerBlock = warps * regsPerWarp;
  const sharedPerBlock = k.sharedBytesPerBlock + device.reservedSharedPerBlock;
  const limits: [Resource | "blocks per SM", number][] = [
    ["blocks per SM", device.maxBlocksPerSm],
    ["threads", Math.floor(device.maxThreadsPerSm / threadsPerBlock)],
    ["registers", registersPerBlock > 0 ? Math.floor(device.regsPerSm / registersPerBlock) : Infinity],
    ["shared memory", sharedPerBlock > 0 ? Math.floor(device.sharedPerSm / sharedPerBlock) : Infinity],
  ];
  let [limit, computed] = limits[0]!;
  for (const [what, n] of limits) {
    if (n < computed) [limit, computed] = [what, n];
  }
  if (computed < 1) {
    throw new RangeError(
      `kernel '${k.name}': one block does not fit an SM of ${device.name} (${limit}: ${k.threadsPerBlock} threads, ` +
        `${k.registersPerThread} registers per thread, ${k.sharedBytesPerBlock} B shared memory)`,
    );
  }
  const blocksPerSm = k.blocksPerSm ?? computed;
  const wave = blocksPerSm * device.smCount;
  const waves = Math.ceil(k.blocks / wave);
  const tailBlocks = k.blocks - (waves - 1) * wave;
  const tailUs = k.durationUs / waves;
  return {
    profile: k,
    threadsPerBlock,
    registersPerBlock,
    sharedPerBlock,
    blocksPerSm,
    occupancyLimit: k.blocksPerSm !== undefined ? "measured" : limit,
    wave,
    waves,
    tailBlocks,
    tailUs,
    launchBound: launchUs > 0 ? Math.ceil(tailUs / launchUs) : Infinity,
  };
}
