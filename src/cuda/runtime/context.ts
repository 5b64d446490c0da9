// What every GPU system (the engines: eager, autobatch, vpps; the persistent RNN layers) stands on: an opened device,
// one stream that all of its work is queued on (kernels, copies and cuBLAS alike, so that stream order is the only
// ordering needed), a cuBLAS handle bound to that stream, one DevicePool sized from the free memory (the engines';
// none for code that allocates its own buffers), compiled modules, and pinned staging buffers for host-to-device
// copies that do not block the host.

import { UserError } from "../../util/errors.js";
import { type CompileResult, compileCuda, compileCudaAsync } from "../compile/compile.js";
import { type Cublas, type CublasHandle, getCublas } from "../ffi/cublas.js";
import { type CudaDevice, openDevice, parseDeviceSpec } from "./device.js";
import { DevicePool, PinnedBuffer } from "./memory.js";
import { type CudaKernel, type CudaModule, loadModule } from "./module.js";
import { CudaEvent, CudaStream } from "./stream.js";
import { StreamPool } from "./stream-pool.js";

const GiB = 1024 ** 3;

/** The pool is at most this large unless asked for: enough for batches of thousands of tree nodes at hidden 512. */
export const DEFAULT_POOL_CAP_BYTES = 4 * GiB;

/** Downloads up to this size go through pinned memory (GpuContext.download). */
const READBACK_BYTES = 4096;

/** min(¼ of the free device memory, 4 GiB): leaves room for cuBLAS workspaces and other processes on the GPU. */
export function defaultPoolBytes(freeBytes: number): number {
  return Math.min(Math.floor(freeBytes / 4), DEFAULT_POOL_CAP_BYTES);
}

/**
 * The GPU index a `--device` string names: `auto` and `cuda` are GPU 0, `cuda:N` is GPU N. `cpu` is refused: the
 * caller asked for a GPU engine.
 */
export function gpuIndexOf(device: string, engine = "this engine"): number {
  const spec = parseDeviceSpec(device);
  if (spec.kind === "cpu") {
    throw new UserError(
      `${engine} runs on a GPU, but --device cpu was given; use --device auto or cuda:N, or --engine cpu`,
    );
  }
  return spec.kind === "auto" ? 0 : spec.index;
}

export interface GpuContextOptions {
  /**
   * `auto` (default: the first GPU), `cuda` or `cuda:N`; or a device the caller opened, which the context borrows
   * (dispose() leaves it open).
   */
  device?: string | CudaDevice;
  /**
   * Pool size in bytes (default: defaultPoolBytes of the free memory); `null`: no pool, for code that allocates its
   * own buffers (`pool` then throws).
   */
  poolBytes?: number | null;
  /** Kernel cache folder; `null` disables the cache. Default: the compile cache's default folder. */
  cacheDir?: string | null;
}

/**
 * A growable page-locked buffer for host-to-device copies. A copy from it is queued on the stream and the host must
 * not overwrite the bytes until the device has read them, so an event recorded after each copy is waited on before
 * the buffer is written again (normally long done: the copy sits at the start of the work it feeds).
 */
export class StagingBuffer {
  private buffer: PinnedBuffer;
  private readonly copied: CudaEvent;
  private pending = false;

  constructor(
    private readonly stream: CudaStream,
    initialBytes = 1 << 20,
  ) {
    this.buffer = PinnedBuffer.alloc(initialBytes);
    this.copied = CudaEvent.create({ timing: false });
  }

  /** The buffer, at least `bytes` long, safe to write (the previous copy from it has completed). */
  acquire(bytes: number): PinnedBuffer {
    if (this.pending) {
      this.copied.synchronize();
      this.pending = false;
    }
    if (bytes > this.buffer.bytes) {
      this.buffer.free();
      this.buffer = PinnedBuffer.alloc(Math.max(bytes, 2 * this.buffer.bytes));
    }
    return this.buffer;
  }

  /** Queues a copy of the buffer's first `bytes` to device address `dst`. */
  upload(dst: number, bytes: number): void {
    if (bytes === 0) return;
    const driver = this.buffer.driver;
    driver.memcpyHtoDAsync(dst, this.buffer.u8.subarray(0, bytes), bytes, this.stream.handle);
    this.copied.record(this.stream);
    this.pending = true;
  }

  dispose(): void {
    if (this.pending) this.copied.synchronize();
    this.buffer.free();
    this.copied.destroy();
  }
}

/** A compiled module's kernels by name, with what the compile reported. */
export interface KernelSet<N extends string> {
  readonly module: CudaModule;
  readonly kernels: Readonly<Record<N, CudaKernel>>;
  readonly compile: CompileResult;
}

/** GLP4NN's stream pool of a context: CUDA streams, events, and a cuBLAS handle per stream. */
export type CudaStreamPool = StreamPool<CudaStream, CudaEvent, CublasHandle>;

/** One system's hold on a GPU. Everything it creates is released by dispose(), in reverse order. */
export class GpuContext {
  private readonly modules = new Map<string, KernelSet<string>>();
  private readonly stagings: StagingBuffer[] = [];
  /** Pinned memory for small downloads, made on the first one. */
  private readback: PinnedBuffer | undefined;
  private pool_: CudaStreamPool | undefined;
  private readonly attachments = new Map<string, { dispose(): void }>();
  private disposed = false;

  private constructor(
    readonly device: CudaDevice,
    /** Whether dispose() closes the device (it was opened by open(), not borrowed). */
    private readonly ownsDevice: boolean,
    readonly stream: CudaStream,
    private readonly devicePool: DevicePool | undefined,
    readonly cublas: Cublas,
    readonly cublasHandle: CublasHandle,
    readonly cacheDir: string | null | undefined,
  ) {}

  /**
   * Opens the device (unless one is given), creates the stream, the cuBLAS handle and the pool. Throws
   * CudaLibraryNotFoundError when the driver or cuBLAS is missing, CudaError when the device cannot be used.
   */
  static open(opts: GpuContextOptions = {}): GpuContext {
    const given = opts.device ?? "auto";
    const owned = typeof given === "string";
    const device = typeof given === "string" ? openDevice(gpuIndexOf(given)) : given;
    const undo: (() => void)[] = owned ? [() => device.close()] : [];
    try {
      const stream = CudaStream.create({ nonBlocking: true });
      undo.push(() => stream.destroy());
      const cublas = getCublas();
      const handle = cublas.create();
      undo.push(() => cublas.destroy(handle));
      cublas.setStream(handle, stream.handle);
      const pool =
        opts.poolBytes === null
          ? undefined
          : DevicePool.create(opts.poolBytes ?? defaultPoolBytes(device.memInfo().free));
      if (pool) undo.push(() => pool.free());
      return new GpuContext(device, owned, stream, pool, cublas, handle, opts.cacheDir);
    } catch (e) {
      for (const f of undo.reverse()) {
        try {
          f();
        } catch {
          // keep the first error
        }
      }
      throw e;
    }
  }

  /** The device memory the engines allocate from. Throws for a context opened with `poolBytes: null`. */
  get pool(): DevicePool {
    if (this.devicePool === undefined) {
      throw new Error("GpuContext: this context was opened without a device pool (poolBytes: null)");
    }
    return this.devicePool;
  }

  /** The device's name, e.g. `NVIDIA H100 80GB HBM3`. */
  get deviceName(): string {
    return this.device.props.name;
  }

  /**
   * Compiles (or reads from the kernel cache) and loads `source`, once per context and program name, and looks up
   * `names`. Throws NvrtcCompileError (log, options, numbered source) when the source does not compile.
   */
  kernels<N extends string>(program: string, source: string, names: readonly N[]): KernelSet<N> {
    const known = this.modules.get(program);
    if (known) return known as KernelSet<N>;
    return this.load(compileCuda(this.request(program, source)), program, names);
  }

  /**
   * `kernels` with NVRTC on a worker thread, so that several programs compile at once (each `await` of a cache
   * hit or a compile; loading the module stays on this thread).
   */
  async kernelsAsync<N extends string>(program: string, source: string, names: readonly N[]): Promise<KernelSet<N>> {
    const known = this.modules.get(program);
    if (known) return known as KernelSet<N>;
    const compile = await compileCudaAsync(this.request(program, source));
    // another call may have loaded the program while this one compiled
    return (this.modules.get(program) as KernelSet<N> | undefined) ?? this.load(compile, program, names);
  }

  private request(program: string, source: string) {
    return {
      name: program,
      source,
      arch: this.device.props.arch,
      ...(this.cacheDir !== undefined ? { cacheDir: this.cacheDir } : {}),
    };
  }

  private load<N extends string>(compile: CompileResult, program: string, names: readonly N[]): KernelSet<N> {
    const module = loadModule(compile.cubin, program);
    try {
      const kernels = {} as Record<N, CudaKernel>;
      for (const n of names) kernels[n] = module.getFunction(n);
      const set: KernelSet<N> = { module, kernels, compile };
      this.modules.set(program, set as KernelSet<string>);
      return set;
    } catch (e) {
      module.unload();
      throw e;
    }
  }

  /**
   * The context's stream pool with at least `size` streams (GLP4NN, stream-pool.ts): created on first use, grown
   * when a larger one is asked for, freed with the context. Work forked to it from `stream` joins back to `stream`.
   */
  streamPool(size: number): CudaStreamPool {
    if (this.pool_ === undefined) this.pool_ = StreamPool.cuda(size, this.cublas);
    else this.pool_.grow(size);
    return this.pool_;
  }

  /** A new staging buffer on this context's stream (freed with the context). */
  staging(initialBytes?: number): StagingBuffer {
    const s = new StagingBuffer(this.stream, initialBytes);
    this.stagings.push(s);
    return s;
  }

  /** Copies `out.length` floats from device address `src` after the stream's queued work; waits for them. */
  download(src: number, out: Float32Array): Float32Array {
    if (out.length === 0) return out;
    if (out.byteLength <= READBACK_BYTES) {
      // through pinned memory: a truly asynchronous copy, then one wait
      this.readback ??= PinnedBuffer.alloc(READBACK_BYTES);
      this.device.driver.memcpyDtoHAsync(
        this.readback.u8.subarray(0, out.byteLength),
        src,
        out.byteLength,
        this.stream.handle,
      );
      this.stream.synchronize();
      out.set(this.readback.f32.subarray(0, out.length));
    } else {
      this.stream.synchronize();
      this.device.driver.memcpyDtoH(out, src, out.byteLength);
    }
    return out;
  }

  /** Waits for everything queued on the stream; kernel faults surface here. */
  synchronize(): void {
    this.stream.synchronize();
  }

  /**
   * The object attached under `key`, made by `make` the first time: something that lives as long as the context and
   * is disposed with it, before the stream pool (e.g. a convolution's dispatch threads, which use the pool's streams).
   */
  attached<T extends { dispose(): void }>(key: string, make: () => T): T {
    let a = this.attachments.get(key);
    if (a === undefined) {
      a = make();
      this.attachments.set(key, a);
    }
    return a as T;
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    try {
      this.stream.synchronize();
    } finally {
      for (const a of [...this.attachments.values()].reverse()) a.dispose();
      this.attachments.clear();
      this.pool_?.dispose();
      for (const s of this.stagings) s.dispose();
      this.readback?.free();
      for (const m of this.modules.values()) m.module.unload();
      this.modules.clear();
      this.devicePool?.free();
      this.cublas.destroy(this.cublasHandle);
      this.stream.destroy();
      if (this.ownsDevice) this.device.close();
    }
  }
}
