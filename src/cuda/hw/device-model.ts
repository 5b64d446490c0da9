/**
 * The few numbers of a GPU that decide how a persistent kernel (VPPS, the persistent RNNs) distributes weights over
 * registers, and the register-budget arithmetic they share.
 *
 * Planning must work without a GPU (tests, `vpps plan` on a laptop), so the planners take this plain record instead
 * of a live device; deviceModelOfCuda fills one from an opened GPU's properties.
 */
import type { DeviceProperties as CudaDeviceProperties } from "../runtime/device.js";

export interface DeviceModel {
  /** Human-readable name, printed in plans and kernel headers. */
  readonly name: string;
  /** Streaming multiprocessors: the grid has `smCount * ctasPerSm` persistent CTAs. */
  readonly smCount: number;
  /** 32-bit registers in one SM's register file. */
  readonly regsPerSm: number;
  /** Architectural limit on registers one thread may address (255 since Kepler). */
  readonly maxRegsPerThread: number;
  /** Shared memory per SM in bytes. */
  readonly sharedPerSm: number;
  /** Shared memory one block may use (with the opt-in attribute) in bytes. */
  readonly sharedPerBlock: number;
  /** Threads per warp. */
  readonly warpSize: number;
  /** Compute capability as `sm_XY`, the nvcc/NVRTC architecture of generated kernels. */
  readonly arch: string;
  /** Threads and blocks resident on one SM at most (any mix of kernels): GLP4NN's τ_max and β_max. */
  readonly maxThreadsPerSm: number;
  readonly maxBlocksPerSm: number;
  /** Shared memory the driver keeps per resident block (1 KiB since compute capability 8.0), out of sharedPerSm. */
  readonly reservedSharedPerBlock: number;
}

const KIB = 1024;

/** NVIDIA H100 SXM5 (Hopper, compute capability 9.0). */
export const H100_SXM: DeviceModel = Object.freeze({
  name: "NVIDIA H100 SXM",
  smCount: 132,
  regsPerSm: 65_536,
  maxRegsPerThread: 255,
  sharedPerSm: 228 * KIB,
  sharedPerBlock: 227 * KIB,
  warpSize: 32,
  arch: "sm_90",
  maxThreadsPerSm: 2048,
  maxBlocksPerSm: 32,
  reservedSharedPerBlock: KIB,
});

/** NVIDIA H200: the same Hopper SM as the H100 SXM, with more and faster HBM (which VPPS does not depend on). */
export const H200: DeviceModel = Object.freeze({ ...H100_SXM, name: "NVIDIA H200" });

/** Structural view of the device properties the CUDA layer reads from the driver (no import of that layer). */
export interface DeviceProperties {
  readonly name: string;
  readonly smCount: number;
  readonly regsPerSm: number;
  readonly maxRegsPerThread: number;
  readonly sharedPerSm: number;
  readonly sharedPerBlock: number;
  readonly warpSize: number;
  readonly maxThreadsPerSm: number;
  readonly maxBlocksPerSm: number;
  /** Absent: 0 (drivers before CUDA 11 do not report it). */
  readonly reservedSharedPerBlock?: number;
  /** Compute capability, e.g. `{ major: 9, minor: 0 }`; when absent the architecture defaults to `sm_90`. */
  readonly computeCapability?: { readonly major: number; readonly minor: number };
}

/**
 * Builds a device model from the driver's properties, refusing values that would make a plan meaningless
 * (the error names the field, what was expected and what came).
 */
export function deviceModelFromProperties(props: DeviceProperties): DeviceModel {
  const positive: (keyof DeviceProperties)[] = [
    "smCount",
    "regsPerSm",
    "maxRegsPerThread",
    "sharedPerSm",
    "sharedPerBlock",
    "warpSize",
    "maxThreadsPerSm",
    "maxBlocksPerSm",
  ];
  for (const key of positive) {
    const value = props[key];
    if (typeof value !== "number" || !Number.isInteger(value) || value <= 0) {
      throw new Error(`deviceModelFromProperties: '${key}' must be a positive integer; got ${String(value)}`);
    }
  }
  if (props.warpSize !== 32) {
    throw new Error(
      `deviceModelFromProperties: 'warpSize' must be 32 (the generated kernel assumes it); got ${props.warpSize}`,
    );
  }
  const reserved = props.reservedSharedPerBlock ?? 0;
  if (!Number.isInteger(reserved) || reserved < 0) {
    throw new Error(`deviceModelFromProperties: 'reservedSharedPerBlock' must be an integer ≥ 0; got ${reserved}`);
  }
  const cc = props.computeCapability;
  return Object.freeze({
    name: props.name,
    smCount: props.smCount,
    regsPerSm: props.regsPerSm,
    maxRegsPerThread: props.maxRegsPerThread,
    sharedPerSm: props.sharedPerSm,
    sharedPerBlock: props.sharedPerBlock,
    warpSize: props.warpSize,
    arch: cc === undefined ? "sm_90" : `sm_${cc.major}${cc.minor}`,
    maxThreadsPerSm: props.maxThreadsPerSm,
    maxBlocksPerSm: props.maxBlocksPerSm,
    reservedSharedPerBlock: reserved,
  });
}

/**
 * The device model of an opened GPU, from the properties the CUDA layer read from the driver (shared memory per
 * block: the opt-in limit, which a kernel may ask for).
 */
export function deviceModelOfCuda(props: CudaDeviceProperties): DeviceModel {
  return deviceModelFromProperties({
    name: props.name,
    smCount: props.smCount,
    regsPerSm: props.regsPerSm,
    maxRegsPerThread: props.maxRegsPerThread,
    sharedPerSm: props.sharedPerSm,
    sharedPerBlock: props.sharedPerBlockOptin,
    warpSize: props.warpSize,
    maxThreadsPerSm: props.maxThreadsPerSm,
    maxBlocksPerSm: props.maxBlocksPerSm,
    reservedSharedPerBlock: props.reservedSharedPerBlock,
    computeCapability: { major: props.ccMajor, minor: props.ccMinor },
  });
}

/**
 * Kernels (grids) one device runs at once, by compute capability: the CUDA C Programming Guide's "maximum number of
 * resident grids per device" (GLP4NN's C, its Table 1 for Fermi to Volta). No driver attribute reports it.
 * Architectures newer than the table get 128, the value of every architecture since 7.5.
 */
export function maxResidentGrids(arch: string): number {
  const m = /^sm_(\d+?)(\d)[a-z]?$/.exec(arch);
  if (!m) throw new Error(`maxResidentGrids: '${arch}' is not an architecture like sm_90`);
  const cc = 10 * Number(m[1]) + Number(m[2]);
  return RESIDENT_GRIDS[cc] ?? (cc < 20 ? 1 : cc < 30 ? 16 : 128);
}

/** The Programming Guide's table where it is not 128 (the embedded chips 5.3, 6.2, 7.2; Kepler and Maxwell). */
const RESIDENT_GRIDS: Readonly<Record<number, number>> = {
  30: 16,
  32: 4,
  35: 32,
  37: 32,
  50: 32,
  52: 32,
  53: 16,
  62: 16,
  72: 16,
};

/**
 * Registers the SM allocates to a warp at a time (compute capability 7.0 to 9.0): a thread's count is in effect
 * rounded up to a multiple of REGISTER_ALLOCATION_UNIT / warpSize (8).
 */
export const REGISTER_ALLOCATION_UNIT = 256;

/**
 * The most registers one thread may use so that `ctasPerSm` CTAs of `threadsPerCta` threads are resident on one SM
 * together, as a persistent kernel needs: the SM's register file shared among their warps, rounded down to whole
 * allocation units, and at most the ISA's per-thread limit (`maxRegsPerThread`, 255). For 256-thread CTAs on a
 * 64K-register SM: 255 with one CTA per SM, 128 with two.
 */
export function registersPerThread(device: DeviceModel, threadsPerCta: number, ctasPerSm: number): number {
  for (const [name, v] of [
    ["threadsPerCta", threadsPerCta],
    ["ctasPerSm", ctasPerSm],
  ] as const) {
    if (!Number.isInteger(v) || v <= 0)
      throw new RangeError(`registersPerThread: ${name} must be a positive integer; got ${v}`);
  }
  if (threadsPerCta % device.warpSize !== 0) {
    throw new RangeError(
      `registersPerThread: threadsPerCta must be a multiple of the warp size ${device.warpSize}; got ${threadsPerCta}`,
    );
  }
  const warps = (threadsPerCta / device.warpSize) * ctasPerSm;
  const perWarp = Math.floor(device.regsPerSm / warps / REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT;
  return Math.min(device.maxRegsPerThread, perWarp / device.warpSize);
}

/**
 * Registers one thread of a `threads`-thread CTA may use, `ctasPerSm` CTAs per SM (default one), as ptxas enforces it. Besides the SM-wide budget
 * (registersPerThread), the register file is split evenly between the SM's four schedulers and a warp's registers
 * come from its scheduler's quarter, so the scheduler with the most warps (⌈warps / 4⌉) bounds them: 9 warps get 168
 * registers, not 224 (__launch_bounds__(288, 1)). The persistent RNN planner uses it; VPPS's 256-thread CTAs are
 * not affected (8 warps: the two limits agree).
 */
export function schedulerRegisterLimit(device: DeviceModel, threads: number, ctasPerSm = 1): number {
  const warps = threads / device.warpSize;
  // each CTA's warps spread over the four schedulers: its busiest holds ⌈warps / 4⌉, once per resident CTA
  const perScheduler = device.regsPerSm / 4 / (Math.ceil(warps / 4) * ctasPerSm * device.warpSize);
  return Math.min(registersPerThread(device, threads, ctasPerSm), Math.floor(perScheduler / 8) * 8);
}
