// Kernel arguments for cuLaunchKernel, which takes `void **kernelParams`: an array of pointers, one per kernel
// parameter, each pointing at the parameter's value. The values live in native memory (koffi.alloc) so that their
// addresses are fixed and the pointer array is computed once; packing then only writes numbers, no allocation.

import koffi from "koffi";
import type { DevicePtr } from "./driver.js";

/** Kernel argument kinds: `u64` for device pointers (and 64-bit sizes), the rest as in C. */
export type KernelArgType = "u64" | "i32" | "u32" | "f32";

export interface KernelArg {
  type: KernelArgType;
  value: number;
}

/** Shorthands: `[karg.u64(x), karg.f32(2), karg.i32(n)]`. */
export const karg = {
  u64: (value: number): KernelArg => ({ type: "u64", value }),
  ptr: (value: DevicePtr): KernelArg => ({ type: "u64", value }),
  i32: (value: number): KernelArg => ({ type: "i32", value }),
  u32: (value: number): KernelArg => ({ type: "u32", value }),
  f32: (value: number): KernelArg => ({ type: "f32", value }),
} as const;

// The native slots are small; free them when a KernelParams is collected rather than asking callers to.
const nativeSlots = new FinalizationRegistry<bigint>((base) => koffi.free(base));

/**
 * Packs typed kernel arguments into the `void**` array cuLaunchKernel takes: one 8-byte slot per argument in native
 * memory (koffi.alloc, so its address never moves), and an array of the slots' addresses computed once.
 * Reusable: the driver reads the values during cuLaunchKernel.
 */
export class KernelParams {
  readonly maxArgs: number;
  private readonly pointers: BigUint64Array;
  private readonly u32: Uint32Array;
  private readonly i32: Int32Array;
  private readonly f32: Float32Array;

  constructor(maxArgs = 64) {
    this.maxArgs = maxArgs;
    const base: bigint = koffi.alloc("uint64_t", maxArgs);
    nativeSlots.register(this, base);
    const memory = koffi.view(base, maxArgs * 8);
    this.u32 = new Uint32Array(memory);
    this.i32 = new Int32Array(memory);
    this.f32 = new Float32Array(memory);
    this.pointers = new BigUint64Array(maxArgs);
    for (let i = 0; i < maxArgs; i++) this.pointers[i] = base + BigInt(8 * i);
  }

  /** Writes the values and returns the `void**` array (valid until the next pack). */
  pack(args: readonly KernelArg[]): BigUint64Array {
    if (args.length > this.maxArgs) {
      throw new RangeError(`kernel arguments: ${args.length} given, this KernelParams holds at most ${this.maxArgs}`);
    }
    for (let i = 0; i < args.length; i++) {
      const { type, value } = args[i]!;
      const w = 2 * i; // slot i starts at 32-bit word 2i; little-endian, so the low word comes first
      switch (type) {
        case "u64":
          if (!Number.isSafeInteger(value) || value < 0) throw argError(i, type, value, "a non-negative safe integer");
          this.u32[w] = value % 0x1_0000_0000;
          this.u32[w + 1] = Math.floor(value / 0x1_0000_0000);
          break;
        case "i32":
          if (!Number.isInteger(value) || value < -0x8000_0000 || value > 0x7fff_ffff) {
            throw argError(i, type, value, "an integer in [-2^31, 2^31)");
          }
          this.i32[w] = value;
          break;
        case "u32":
          if (!Number.isInteger(value) || value < 0 || value > 0xffff_ffff) {
            throw argError(i, type, value, "an integer in [0, 2^32)");
          }
          this.u32[w] = value;
          break;
        case "f32":
          this.f32[w] = value;
          break;
        default:
          throw new TypeError(`kernel argument ${i}: unknown type "${type as string}", expected u64, i32, u32 or f32`);
      }
    }
    return this.pointers;
  }

  /** The bytes of slot `i` as last packed (for tests). */
  slot(i: number): { u32lo: number; u32hi: number; f32: number; i32: number } {
    return { u32lo: this.u32[2 * i]!, u32hi: this.u32[2 * i + 1]!, f32: this.f32[2 * i]!, i32: this.i32[2 * i]! };
  }
}

function argError(i: number, type: string, value: number, expected: string): RangeError {
  return new RangeError(`kernel argument ${i} (${type}): expected ${expected}, got ${value}`);
}
