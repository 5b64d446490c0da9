// Bindings to NCCL (libnccl.so.2), NVIDIA's collective communication library, through koffi: what data-parallel
// training needs (a communicator from a unique id, all-reduce, broadcast, group calls, abort). NCCL is found at run
// time like the CUDA libraries (find.ts); a machine without it still trains on one GPU, and asking for it there
// fails with one line (NcclUnavailableError) that names what was looked for.

import koffi, { type LibraryHandle } from "koffi";
import { UserError } from "../../util/errors.js";
import type { DevicePtr, Handle } from "./driver.js";
import { CudaLibraryNotFoundError, type LoadedLibrary, type LoadOptions, loadCudaLibrary } from "./find.js";

/** An ncclComm_t (opaque pointer). */
export type NcclComm = bigint;

/** Bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES): opaque, made by rank 0 and handed to every rank. */
export const NCCL_UNIQUE_ID_BYTES = 128;

/** ncclDataType_t (nccl.h). */
export const NcclDataType = {
  int8: 0,
  uint8: 1,
  int32: 2,
  uint32: 3,
  int64: 4,
  uint64: 5,
  float16: 6,
  float32: 7,
  float64: 8,
  bfloat16: 9,
} as const;
export type NcclDataType = (typeof NcclDataType)[keyof typeof NcclDataType];

/** ncclRedOp_t (nccl.h). */
export const NcclRedOp = { sum: 0, prod: 1, max: 2, min: 3, avg: 4 } as const;
export type NcclRedOp = (typeof NcclRedOp)[keyof typeof NcclRedOp];

/** ncclResult_t names, for messages when ncclGetErrorString is not reached (and for tests). */
export const NCCL_RESULT_NAMES: Readonly<Record<number, string>> = {
  0: "ncclSuccess",
  1: "ncclUnhandledCudaError",
  2: "ncclSystemError",
  3: "ncclInternalError",
  4: "ncclInvalidArgument",
  5: "ncclInvalidUsage",
  6: "ncclRemoteError",
  7: "ncclInProgress",
};

const NCCL_SUCCESS = 0;
const NCCL_IN_PROGRESS = 7;

/** A failed NCCL call: `ncclAllReduce failed: ncclUnhandledCudaError (1): unhandled cuda error — rank 1`. */
export class NcclError extends Error {
  override readonly name = "NcclError";
  constructor(
    readonly call: string,
    readonly code: number,
    readonly description: string,
    readonly context?: string,
  ) {
    super(
      `${call} failed: ${NCCL_RESULT_NAMES[code] ?? "unknown ncclResult_t"} (${code})` +
        (description ? `: ${description}` : "") +
        (context ? ` — ${context}` : ""),
    );
  }
}

/** NCCL is not installed here: one line, naming what was looked for and what to do. */
export class NcclUnavailableError extends UserError {
  constructor(readonly notFound: CudaLibraryNotFoundError) {
    super(
      `training on several GPUs needs NCCL, and ${notFound.summary}; install NCCL (libnccl2, or the nvidia-nccl-cu12 ` +
        "wheel) and add the folder holding libnccl.so.2 to LD_LIBRARY_PATH, or train on one GPU (--gpus 1)",
    );
  }
}

interface RawNccl {
  ncclGetVersion(out: Int32Array): number;
  ncclGetUniqueId(out: Uint8Array): number;
  ncclCommInitRank(out: BigUint64Array, nranks: number, id: { internal: Uint8Array }, rank: number): number;
  ncclAllReduce(
    send: DevicePtr,
    recv: DevicePtr,
    count: number,
    datatype: number,
    op: number,
    comm: NcclComm,
    stream: Handle,
  ): number;
  ncclBroadcast(
    send: DevicePtr,
    recv: DevicePtr,
    count: number,
    datatype: number,
    root: number,
    comm: NcclComm,
    stream: Handle,
  ): number;
  ncclGroupStart(): number;
  ncclGroupEnd(): number;
  ncclCommDestroy(comm: NcclComm): number;
  ncclCommAbort(comm: NcclComm): number;
  ncclCommGetAsyncError(comm: NcclComm, out: Int32Array): number;
  ncclGetErrorString(result: number): string;
}

/**
 * The C prototypes (nccl.h, NCCL 2.x). Device buffers are `void *` in C and DevicePtr numbers here: they are passed
 * as `uint64_t`, which the x86-64 and AArch64 calling conventions pass exactly as a pointer. The unique id is a
 * 128-byte struct passed by value.
 */
export const NCCL_PROTOTYPES: Readonly<Record<keyof RawNccl, string>> = {
  ncclGetVersion: "int ncclGetVersion(int *version)",
  ncclGetUniqueId: "int ncclGetUniqueId(uint8_t *uniqueId)",
  ncclCommInitRank: "int ncclCommInitRank(void **comm, int nranks, ncclUniqueId commId, int rank)",
  ncclAllReduce:
    "int ncclAllReduce(uint64_t sendbuff, uint64_t recvbuff, size_t count, int datatype, int op, void *comm, " +
    "void *stream)",
  ncclBroadcast:
    "int ncclBroadcast(uint64_t sendbuff, uint64_t recvbuff, size_t count, int datatype, int root, void *comm, " +
    "void *stream)",
  ncclGroupStart: "int ncclGroupStart()",
  ncclGroupEnd: "int ncclGroupEnd()",
  ncclCommDestroy: "int ncclCommDestroy(void *comm)",
  ncclCommAbort: "int ncclCommAbort(void *comm)",
  ncclCommGetAsyncError: "int ncclCommGetAsyncError(void *comm, int *asyncError)",
  ncclGetErrorString: "const char *ncclGetErrorString(int result)",
};

let typesRegistered = false;

/** Registers the by-value struct the prototypes name (koffi's type names are global: once per process). */
export function ncclTypes(): void {
  if (typesRegistered) return;
  koffi.struct("ncclUniqueId", { internal: koffi.array("uint8_t", NCCL_UNIQUE_ID_BYTES, "Typed") });
  typesRegistered = true;
}

function bindNccl(lib: LibraryHandle): RawNccl {
  ncclTypes();
  const raw: Record<string, unknown> = {};
  for (const [key, prototype] of Object.entries(NCCL_PROTOTYPES)) raw[key] = lib.func(prototype);
  return raw as unknown as RawNccl;
}

/** NCCL with checked results. Obtain it with `getNccl()` (loads once). */
export class Nccl {
  private readonly raw: RawNccl;
  private readonly i32 = new Int32Array(1);
  private readonly u64 = new BigUint64Array(1);

  constructor(readonly library: LoadedLibrary) {
    this.raw = bindNccl(library.handle);
  }

  /** Loads NCCL; throws NcclUnavailableError (one line) when it is not found. */
  static load(options: LoadOptions = {}): Nccl {
    try {
      return new Nccl(loadCudaLibrary("nccl", options));
    } catch (e) {
      throw e instanceof CudaLibraryNotFoundError ? new NcclUnavailableError(e) : e;
    }
  }

  /** The file that loaded. */
  get path(): string {
    return this.library.file ?? this.library.path;
  }

  private check(code: number, call: string, context?: () => string): void {
    if (code === NCCL_SUCCESS) return;
    let description = "";
    try {
      description = this.raw.ncclGetErrorString(code) ?? "";
    } catch {
      // the name alone then
    }
    throw new NcclError(call, code, description, context?.());
  }

  /** NCCL's version code: 22304 for 2.23.4 (NCCL_VERSION_CODE). */
  version(): number {
    this.check(this.raw.ncclGetVersion(this.i32), "ncclGetVersion");
    return this.i32[0]!;
  }

  /** `2.23.4` from the version code (codes ≥ 20900 are MAJOR*10000 + MINOR*100 + PATCH; older, MAJOR*1000 + …). */
  static formatVersion(code: number): string {
    if (code >= 20900) return `${Math.floor(code / 10000)}.${Math.floor((code % 10000) / 100)}.${code % 100}`;
    return `${Math.floor(code / 1000)}.${Math.floor((code % 1000) / 100)}.${code % 100}`;
  }

  /** A new unique id (rank 0 makes it; every rank passes it to `commInitRank`). */
  getUniqueId(): Uint8Array {
    const id = new Uint8Array(NCCL_UNIQUE_ID_BYTES);
    this.check(this.raw.ncclGetUniqueId(id), "ncclGetUniqueId");
    return id;
  }

  /**
   * This rank's communicator, on the CUDA device current on this thread (the caller makes its context current).
   * Collective: blocks until all `nranks` ranks have called it with the same id.
   */
  commInitRank(nranks: number, id: Uint8Array, rank: number): NcclComm {
    if (id.length !== NCCL_UNIQUE_ID_BYTES) {
      throw new RangeError(`ncclCommInitRank: the unique id has ${id.length} bytes; expected ${NCCL_UNIQUE_ID_BYTES}`);
    }
    this.check(
      this.raw.ncclCommInitRank(this.u64, nranks, { internal: id }, rank),
      "ncclCommInitRank",
      () => `rank ${rank} of ${nranks}`,
    );
    return this.u64[0]!;
  }

  /** Sums (or `op`s) `count` elements over all ranks, `send` → `recv` (may be equal: in place), queued on `stream`. */
  allReduce(
    send: DevicePtr,
    recv: DevicePtr,
    count: number,
    datatype: NcclDataType,
    op: NcclRedOp,
    comm: NcclComm,
    stream: Handle,
  ): void {
    this.check(
      this.raw.ncclAllReduce(send, recv, count, datatype, op, comm, stream),
      "ncclAllReduce",
      () => `${count} elements`,
    );
  }

  /** Copies `count` elements of `root`'s `send` into every rank's `recv`, queued on `stream`. */
  broadcast(
    send: DevicePtr,
    recv: DevicePtr,
    count: number,
    datatype: NcclDataType,
    root: number,
    comm: NcclComm,
    stream: Handle,
  ): void {
    this.check(
      this.raw.ncclBroadcast(send, recv, count, datatype, root, comm, stream),
      "ncclBroadcast",
      () => `${count} elements from rank ${root}`,
    );
  }

  /** Starts a group: the collectives until `groupEnd` are launched together (one launch for several buckets). */
  groupStart(): void {
    this.check(this.raw.ncclGroupStart(), "ncclGroupStart");
  }

  groupEnd(): void {
    this.check(this.raw.ncclGroupEnd(), "ncclGroupEnd");
  }

  /** Frees a communicator after its work is done (waits for it). */
  commDestroy(comm: NcclComm): void {
    this.check(this.raw.ncclCommDestroy(comm), "ncclCommDestroy");
  }

  /** Frees a communicator at once, stopping its pending operations: after a peer has failed. */
  commAbort(comm: NcclComm): void {
    this.check(this.raw.ncclCommAbort(comm), "ncclCommAbort");
  }

  /** The communicator's asynchronous error (ncclSuccess, ncclInProgress or a failure code). */
  commGetAsyncError(comm: NcclComm): number {
    this.check(this.raw.ncclCommGetAsyncError(comm, this.i32), "ncclCommGetAsyncError");
    return this.i32[0]!;
  }

  /** Throws the communicator's asynchronous error, if it has one (a peer failed, a network error). */
  checkAsyncError(comm: NcclComm, context?: string): void {
    const code = this.commGetAsyncError(comm);
    if (code !== NCCL_SUCCESS && code !== NCCL_IN_PROGRESS) {
      this.check(code, "NCCL communicator (asynchronous error)", context === undefined ? undefined : () => context);
    }
  }

  errorString(code: number): string {
    return this.raw.ncclGetErrorString(code);
  }
}

let cached: Nccl | undefined;

/** NCCL, loaded once per process. Throws NcclUnavailableError when it is not installed. */
export function getNccl(): Nccl {
  cached ??= Nccl.load();
  return cached;
}
