/**
 * The few numbers of a GPU that decide how VPPS distributes weights over registers.
 *
 * Planning must work without a GPU (tests, `vpps plan` on a laptop), so the planner takes this plain record instead
 * of a live device; the CUDA layer fills one from the driver's attributes when a GPU is present.
 */
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
  });
}
