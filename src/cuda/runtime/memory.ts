// Device memory: one large cuMemAlloc per run, handed out by a bump (arena) allocator in 32-bit *float offsets*, so
// that encoded scripts carry 4-byte operands (2^32 floats = 16 GiB addressable). Weights and optimizer state are
// allocated first and kept with mark(); everything a batch allocates is dropped by reset(). The allocator is pure
// (tested without a GPU); DevicePool adds the device block and copies. PinnedBuffer is page-locked host memory seen
// through typed arrays, for asynchronous copies.

import { UserError } from "../../util/errors.js";
import { type CudaDriver, type DevicePtr, floatBits, getDriver, type Handle, type HostPtr } from "../ffi/driver.js";
import { formatBytes } from "../units.js";

/** Every allocation starts on a 256-byte boundary (cuMemAlloc's own alignment; enough for float4 and coalescing). */
export const POOL_ALIGN_BYTES = 256;
const ALIGN_FLOATS = POOL_ALIGN_BYTES / 4;
/** Offsets are 32-bit float indices. */
export const MAX_POOL_FLOATS = 2 ** 32;

export interface PoolStats {
  capacityBytes: number;
  /** Bytes between the start of the pool and the current top (persistent region included). */
  usedBytes: number;
  /** Highest usedBytes since the pool was made. */
  peakBytes: number;
  /** Bytes kept by reset() (allocated before the last mark()). */
  persistentBytes: number;
}

/**
 * An allocation did not fit: a batch or model too large for the device pool, which the user can make smaller. The
 * message, one line, names the request, the offset it would start at, the pool's state and what to do.
 */
export class DevicePoolOutOfMemory extends UserError {
  constructor(
    readonly requestedBytes: number,
    /** Float offset where the allocation would have started. */
    readonly offset: number,
    readonly stats: PoolStats,
    readonly what?: string,
  ) {
    super(
      `asked for ${formatBytes(requestedBytes)}${what ? ` for ${what}` : ""} at offset ${offset}, ` +
        `pool ${formatBytes(stats.capacityBytes)}, ${formatBytes(stats.usedBytes)} in use ` +
        `(${formatBytes(stats.persistentBytes)} persistent), peak ${formatBytes(stats.peakBytes)}: ` +
        "the batch or model does not fit the GPU's memory pool; use a smaller --batch or --hidden",
    );
  }
}

/** Bump allocator over [0, capacityFloats) float offsets. No free of single allocations: reset() drops a batch. */
export class ArenaAllocator {
  readonly capacityFloats: number;
  private top = 0;
  private persistentTop = 0;
  private peakTop = 0;

  constructor(capacityFloats: number) {
    if (!Number.isInteger(capacityFloats) || capacityFloats < 0 || capacityFloats > MAX_POOL_FLOATS) {
      throw new RangeError(
        `ArenaAllocator: capacity must be an integer number of floats in [0, 2^32], got ${capacityFloats}`,
      );
    }
    this.capacityFloats = capacityFloats;
  }

  /** Reserves `floats` floats and returns their float offset (a multiple of 64, i.e. 256 bytes). */
  alloc(floats: number, what?: string): number {
    if (!Number.isInteger(floats) || floats < 0) {
      throw new RangeError(
        `pool alloc${what ? ` (${what})` : ""}: size must be a whole number of floats, got ${floats}`,
      );
    }
    const offset = Math.ceil(this.top / ALIGN_FLOATS) * ALIGN_FLOATS;
    if (offset + floats > this.capacityFloats) {
      throw new DevicePoolOutOfMemory(floats * 4, offset, this.stats(), what);
    }
    this.top = offset + floats;
    if (this.top > this.peakTop) this.peakTop = this.top;
    return offset;
  }

  /** Everything allocated so far becomes persistent: reset() returns to here. */
  mark(): void {
    this.persistentTop = this.top;
  }

  /** Drops every allocation made since the last mark(). */
  reset(): void {
    this.top = this.persistentTop;
  }

  /** The current top, in floats. */
  get usedFloats(): number {
    return this.top;
  }

  stats(): PoolStats {
    return {
      capacityBytes: this.capacityFloats * 4,
      usedBytes: this.top * 4,
      peakBytes: this.peakTop * 4,
      persistentBytes: this.persistentTop * 4,
    };
  }
}

/** Anything a pool copies to or from: 4-byte elements, so one element per float offset. */
export type PoolArray = Float32Array | Int32Array | Uint32Array;

/** One device allocation carved by an ArenaAllocator. Offsets are in floats from `base`. */
export class DevicePool {
  readonly arena: ArenaAllocator;
  private freed = false;

  private constructor(
    readonly driver: CudaDriver,
    readonly base: DevicePtr,
    capacityFloats: number,
  ) {
    this.arena = new ArenaAllocator(capacityFloats);
  }

  /** Allocates the pool (needs a current context: openDevice). `bytes` is rounded down to 256 and capped at 16 GiB. */
  static create(bytes: number, driver: CudaDriver = getDriver()): DevicePool {
    if (!Number.isSafeInteger(bytes) || bytes < POOL_ALIGN_BYTES) {
      throw new RangeError(`DevicePool: size must be at least ${POOL_ALIGN_BYTES} bytes, got ${bytes}`);
    }
    const floats = Math.min(Math.floor(bytes / POOL_ALIGN_BYTES) * ALIGN_FLOATS, MAX_POOL_FLOATS);
    const base = driver.memAlloc(floats * 4);
    return new DevicePool(driver, base, floats);
  }

  alloc(floats: number, what?: string): number {
    return this.arena.alloc(floats, what);
  }

  mark(): void {
    this.arena.mark();
  }

  reset(): void {
    this.arena.reset();
  }

  stats(): PoolStats {
    return this.arena.stats();
  }

  /** The device address of a float offset. */
  ptr(offset: number): DevicePtr {
    return this.base + 4 * offset;
  }

  private checkRange(offset: number, count: number, call: string): void {
    if (this.freed) throw new Error(`DevicePool.${call}: the pool was freed`);
    if (!Number.isInteger(offset) || offset < 0 || offset + count > this.arena.capacityFloats) {
      throw new RangeError(
        `DevicePool.${call}: floats [${offset}, ${offset + count}) fall outside the pool of ${this.arena.capacityFloats} floats`,
      );
    }
  }

  /** Copies `data` to `offset`; with a stream the copy is queued (truly asynchronous only from pinned memory). */
  upload(offset: number, data: PoolArray, stream?: Handle): void {
    this.checkRange(offset, data.length, "upload");
    if (stream === undefined) this.driver.memcpyHtoD(this.ptr(offset), data, data.byteLength);
    else this.driver.memcpyHtoDAsync(this.ptr(offset), data, data.byteLength, stream);
  }

  /** Copies `out.length` elements from `offset` into `out`. */
  download(offset: number, out: PoolArray, stream?: Handle): void {
    this.checkRange(offset, out.length, "download");
    if (stream === undefined) this.driver.memcpyDtoH(out, this.ptr(offset), out.byteLength);
    else this.driver.memcpyDtoHAsync(out, this.ptr(offset), out.byteLength, stream);
  }

  /** Sets `count` floats from `offset` to `value` (0 by default). */
  fill(offset: number, count: number, value = 0, stream?: Handle): void {
    this.checkRange(offset, count, "fill");
    if (stream === undefined) this.driver.memsetD32(this.ptr(offset), floatBits(value), count);
    else this.driver.memsetD32Async(this.ptr(offset), floatBits(value), count, stream);
  }

  free(): void {
    if (this.freed) return;
    this.freed = true;
    this.driver.memFree(this.base);
  }
}

interface PinnedViews {
  f32: Float32Array;
  i32: Int32Array;
  u32: Uint32Array;
  u8: Uint8Array;
}

/**
 * Page-locked host memory (cuMemAllocHost) with typed views of the same bytes. Copies from and to it can overlap
 * with kernels. The views must not be used after free(): they would point at released memory.
 */
export class PinnedBuffer {
  private freed = false;
  readonly buffer: ArrayBuffer;
  private readonly views: PinnedViews;

  private constructor(
    readonly driver: CudaDriver,
    readonly ptr: HostPtr,
    readonly bytes: number,
  ) {
    this.buffer = driver.hostView(ptr, bytes);
    const words = Math.floor(bytes / 4);
    this.views = {
      f32: new Float32Array(this.buffer, 0, words),
      i32: new Int32Array(this.buffer, 0, words),
      u32: new Uint32Array(this.buffer, 0, words),
      u8: new Uint8Array(this.buffer),
    };
  }

  /** Allocates `bytes` of pinned memory (needs a current context: openDevice). */
  static alloc(bytes: number, driver: CudaDriver = getDriver()): PinnedBuffer {
    if (!Number.isSafeInteger(bytes) || bytes <= 0) {
      throw new RangeError(`PinnedBuffer: size must be a positive number of bytes, got ${bytes}`);
    }
    return new PinnedBuffer(driver, driver.memAllocHost(bytes), bytes);
  }

  private live(): PinnedViews {
    if (this.freed) throw new Error("PinnedBuffer: used after free()");
    return this.views;
  }

  get f32(): Float32Array {
    return this.live().f32;
  }
  get i32(): Int32Array {
    return this.live().i32;
  }
  get u32(): Uint32Array {
    return this.live().u32;
  }
  get u8(): Uint8Array {
    return this.live().u8;
  }

  free(): void {
    if (this.freed) return;
    this.freed = true;
    this.driver.memFreeHost(this.ptr);
  }
}
