// Bindings to cuBLAS (libcublas.so.*) through koffi: handle, stream, pointer mode, SGEMV, SGEMM and strided-batched
// SGEMM, plus the mapping from row-major matrices (how vpps stores them) to cuBLAS's column-major calls.
//
// Row-major ⇔ column-major. A row-major r×c matrix with leading dimension ld (= c when packed) occupies exactly the
// memory of its transpose, a column-major c×r matrix with the same ld. So for row-major C = op(A)·op(B) we ask cuBLAS
// for the column-major product Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands (B first), keep each operand's transpose flag,
// and swap m and n. A row-major y = op(A)·x becomes a column-major call on Aᵀ: flip the transpose flag and swap the
// dimensions. `rowMajorGemm`/`rowMajorGemv` do this arithmetic and are tested on the CPU against naive loops.

import type { LibraryHandle } from "koffi";
import type { DevicePtr, Handle } from "./driver.js";
import { type LoadedLibrary, loadCudaLibrary } from "./find.js";

/** A cublasHandle_t. */
export type CublasHandle = bigint;

/** cublasOperation_t. */
export const CublasOp = { N: 0, T: 1, C: 2 } as const;
export type CublasOp = (typeof CublasOp)[keyof typeof CublasOp];

/** cublasPointerMode_t: where alpha and beta live. The typed calls below pass them from the host. */
export const CublasPointerMode = { Host: 0, Device: 1 } as const;

/** cublasStatus_t names (cublas_api.h). */
export const CUBLAS_STATUS_NAMES: Readonly<Record<number, string>> = {
  0: "CUBLAS_STATUS_SUCCESS",
  1: "CUBLAS_STATUS_NOT_INITIALIZED",
  3: "CUBLAS_STATUS_ALLOC_FAILED",
  7: "CUBLAS_STATUS_INVALID_VALUE",
  8: "CUBLAS_STATUS_ARCH_MISMATCH",
  11: "CUBLAS_STATUS_MAPPING_ERROR",
  13: "CUBLAS_STATUS_EXECUTION_FAILED",
  14: "CUBLAS_STATUS_INTERNAL_ERROR",
  15: "CUBLAS_STATUS_NOT_SUPPORTED",
  16: "CUBLAS_STATUS_LICENSE_ERROR",
};

export function cublasStatusName(code: number): string {
  return CUBLAS_STATUS_NAMES[code] ?? `CUBLAS_STATUS_${code}`;
}

/** A failed cuBLAS call: `cublasSgemm_v2 failed: CUBLAS_STATUS_INVALID_VALUE (7) — m=0 n=4 k=3 ...`. */
export class CublasError extends Error {
  override readonly name = "CublasError";
  constructor(
    readonly call: string,
    readonly code: number,
    readonly context?: string,
  ) {
    super(`${call} failed: ${cublasStatusName(code)} (${code})${context ? ` — ${context}` : ""}`);
  }
}

// --- column-major argument records (exactly cuBLAS's parameters) ---

export interface GemmArgs<P> {
  transa: CublasOp;
  transb: CublasOp;
  m: number;
  n: number;
  k: number;
  alpha: number;
  A: P;
  lda: number;
  B: P;
  ldb: number;
  beta: number;
  C: P;
  ldc: number;
}

export interface StridedBatchedGemmArgs<P> extends GemmArgs<P> {
  /** Strides between consecutive matrices, in elements. */
  strideA: number;
  strideB: number;
  strideC: number;
  batchCount: number;
}

export interface GemvArgs<P> {
  trans: CublasOp;
  m: number;
  n: number;
  alpha: number;
  A: P;
  lda: number;
  x: P;
  incx: number;
  beta: number;
  y: P;
  incy: number;
}

// --- row-major requests ---

/** C (m×n) = alpha·op(A)·op(B) + beta·C, all row-major; op(A) is m×k, op(B) is k×n. Leading dimensions default to packed. */
export interface RowMajorGemm<P> {
  transA?: boolean;
  transB?: boolean;
  m: number;
  n: number;
  k: number;
  alpha?: number;
  A: P;
  lda?: number;
  B: P;
  ldb?: number;
  beta?: number;
  C: P;
  ldc?: number;
}

export interface RowMajorStridedBatchedGemm<P> extends RowMajorGemm<P> {
  strideA: number;
  strideB: number;
  strideC: number;
  batchCount: number;
}

/** y = alpha·op(A)·x + beta·y with A stored row-major as rows×cols. */
export interface RowMajorGemv<P> {
  trans?: boolean;
  rows: number;
  cols: number;
  alpha?: number;
  A: P;
  lda?: number;
  x: P;
  incx?: number;
  beta?: number;
  y: P;
  incy?: number;
}

/** The column-major cuBLAS call computing a row-major GEMM (see the note at the top of this file). */
export function rowMajorGemm<P>(g: RowMajorGemm<P>): GemmArgs<P> {
  const transA = g.transA ?? false;
  const transB = g.transB ?? false;
  return {
    transa: transB ? CublasOp.T : CublasOp.N,
    transb: transA ? CublasOp.T : CublasOp.N,
    m: g.n,
    n: g.m,
    k: g.k,
    alpha: g.alpha ?? 1,
    A: g.B,
    lda: g.ldb ?? (transB ? g.k : g.n),
    B: g.A,
    ldb: g.lda ?? (transA ? g.m : g.k),
    beta: g.beta ?? 0,
    C: g.C,
    ldc: g.ldc ?? g.n,
  };
}

export function rowMajorStridedBatchedGemm<P>(g: RowMajorStridedBatchedGemm<P>): StridedBatchedGemmArgs<P> {
  return {
    ...rowMajorGemm(g),
    strideA: g.strideB,
    strideB: g.strideA,
    strideC: g.strideC,
    batchCount: g.batchCount,
  };
}

/** The column-major cuBLAS call computing a row-major GEMV. */
export function rowMajorGemv<P>(g: RowMajorGemv<P>): GemvArgs<P> {
  return {
    trans: g.trans ? CublasOp.N : CublasOp.T,
    m: g.cols,
    n: g.rows,
    alpha: g.alpha ?? 1,
    A: g.A,
    lda: g.lda ?? g.cols,
    x: g.x,
    incx: g.incx ?? 1,
    beta: g.beta ?? 0,
    y: g.y,
    incy: g.incy ?? 1,
  };
}

// --- the C prototypes (cublas_api.h). Device pointers (`float *`) are declared `uint64_t`: the same register on
// every 64-bit ABI, and it lets DevicePtr numbers through. alpha/beta are host `float *` (host pointer mode). ---

interface RawCublas {
  cublasGetProperty(type: number, value: Int32Array): number;
  cublasCreate_v2(out: BigUint64Array): number;
  cublasDestroy_v2(handle: CublasHandle): number;
  cublasSetStream_v2(handle: CublasHandle, stream: Handle): number;
  cublasSetPointerMode_v2(handle: CublasHandle, mode: number): number;
  cublasSgemv_v2(
    handle: CublasHandle,
    trans: number,
    m: number,
    n: number,
    alpha: Float32Array,
    A: DevicePtr,
    lda: number,
    x: DevicePtr,
    incx: number,
    beta: Float32Array,
    y: DevicePtr,
    incy: number,
  ): number;
  cublasSgemm_v2(
    handle: CublasHandle,
    transa: number,
    transb: number,
    m: number,
    n: number,
    k: number,
    alpha: Float32Array,
    A: DevicePtr,
    lda: number,
    B: DevicePtr,
    ldb: number,
    beta: Float32Array,
    C: DevicePtr,
    ldc: number,
  ): number;
  cublasSgemmStridedBatched(
    handle: CublasHandle,
    transa: number,
    transb: number,
    m: number,
    n: number,
    k: number,
    alpha: Float32Array,
    A: DevicePtr,
    lda: number,
    strideA: number,
    B: DevicePtr,
    ldb: number,
    strideB: number,
    beta: Float32Array,
    C: DevicePtr,
    ldc: number,
    strideC: number,
    batchCount: number,
  ): number;
}

const CUBLAS_PROTOTYPES: Record<keyof RawCublas, string> = {
  cublasGetProperty: "int cublasGetProperty(int type, int *value)",
  cublasCreate_v2: "int cublasCreate_v2(void **handle)",
  cublasDestroy_v2: "int cublasDestroy_v2(void *handle)",
  cublasSetStream_v2: "int cublasSetStream_v2(void *handle, void *stream)",
  cublasSetPointerMode_v2: "int cublasSetPointerMode_v2(void *handle, int mode)",
  cublasSgemv_v2:
    "int cublasSgemv_v2(void *handle, int trans, int m, int n, const float *alpha, uint64_t A, int lda, " +
    "uint64_t x, int incx, const float *beta, uint64_t y, int incy)",
  cublasSgemm_v2:
    "int cublasSgemm_v2(void *handle, int transa, int transb, int m, int n, int k, const float *alpha, " +
    "uint64_t A, int lda, uint64_t B, int ldb, const float *beta, uint64_t C, int ldc)",
  cublasSgemmStridedBatched:
    "int cublasSgemmStridedBatched(void *handle, int transa, int transb, int m, int n, int k, const float *alpha, " +
    "uint64_t A, int lda, int64_t strideA, uint64_t B, int ldb, int64_t strideB, const float *beta, " +
    "uint64_t C, int ldc, int64_t strideC, int batchCount)",
};

function bindCublas(lib: LibraryHandle): RawCublas {
  const raw: Record<string, unknown> = {};
  for (const [key, prototype] of Object.entries(CUBLAS_PROTOTYPES)) raw[key] = lib.func(prototype);
  return raw as unknown as RawCublas;
}

const CUBLAS_SUCCESS = 0;
// libraryPropertyType (library_types.h)
const MAJOR_VERSION = 0;
const MINOR_VERSION = 1;
const PATCH_LEVEL = 2;

/** cuBLAS with checked results. Obtain it with `getCublas()`; a handle needs a current context (openDevice). */
export class Cublas {
  private readonly raw: RawCublas;
  private readonly out = new BigUint64Array(1);
  // Host-side alpha and beta, read by cuBLAS before the call returns (host pointer mode).
  private readonly alpha = new Float32Array(1);
  private readonly beta = new Float32Array(1);

  constructor(readonly library: LoadedLibrary) {
    this.raw = bindCublas(library.handle);
  }

  /** Loads cuBLAS. Throws CudaLibraryNotFoundError. */
  static load(): Cublas {
    return new Cublas(loadCudaLibrary("cublas"));
  }

  /** The library file in use (the mapped file when known, else the name that loaded). */
  get path(): string {
    return this.library.file ?? this.library.path;
  }

  private check(code: number, call: string, context?: () => string): void {
    if (code !== CUBLAS_SUCCESS) throw new CublasError(call, code, context?.());
  }

  /** The library's version, e.g. `13.0.2`. */
  version(): string {
    const v = new Int32Array(1);
    const parts: number[] = [];
    for (const type of [MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL]) {
      this.check(this.raw.cublasGetProperty(type, v), "cublasGetProperty");
      parts.push(v[0]!);
    }
    return parts.join(".");
  }

  create(): CublasHandle {
    this.check(this.raw.cublasCreate_v2(this.out), "cublasCreate_v2");
    return this.out[0]!;
  }

  destroy(handle: CublasHandle): void {
    this.check(this.raw.cublasDestroy_v2(handle), "cublasDestroy_v2");
  }

  setStream(handle: CublasHandle, stream: Handle): void {
    this.check(this.raw.cublasSetStream_v2(handle, stream), "cublasSetStream_v2");
  }

  /** The typed calls below pass alpha/beta from the host, so leave the handle in CublasPointerMode.Host. */
  setPointerMode(handle: CublasHandle, mode: number): void {
    this.check(this.raw.cublasSetPointerMode_v2(handle, mode), "cublasSetPointerMode_v2");
  }

  /** Column-major SGEMV, exactly cuBLAS's parameters. */
  sgemv(handle: CublasHandle, a: GemvArgs<DevicePtr>): void {
    this.alpha[0] = a.alpha;
    this.beta[0] = a.beta;
    const code = this.raw.cublasSgemv_v2(
      handle,
      a.trans,
      a.m,
      a.n,
      this.alpha,
      a.A,
      a.lda,
      a.x,
      a.incx,
      this.beta,
      a.y,
      a.incy,
    );
    this.check(code, "cublasSgemv_v2", () => `trans=${a.trans} m=${a.m} n=${a.n} lda=${a.lda}`);
  }

  /** Column-major SGEMM, exactly cuBLAS's parameters. */
  sgemm(handle: CublasHandle, a: GemmArgs<DevicePtr>): void {
    this.alpha[0] = a.alpha;
    this.beta[0] = a.beta;
    const code = this.raw.cublasSgemm_v2(
      handle,
      a.transa,
      a.transb,
      a.m,
      a.n,
      a.k,
      this.alpha,
      a.A,
      a.lda,
      a.B,
      a.ldb,
      this.beta,
      a.C,
      a.ldc,
    );
    this.check(code, "cublasSgemm_v2", () => gemmContext(a));
  }

  sgemmStridedBatched(handle: CublasHandle, a: StridedBatchedGemmArgs<DevicePtr>): void {
    this.alpha[0] = a.alpha;
    this.beta[0] = a.beta;
    const code = this.raw.cublasSgemmStridedBatched(
      handle,
      a.transa,
      a.transb,
      a.m,
      a.n,
      a.k,
      this.alpha,
      a.A,
      a.lda,
      a.strideA,
      a.B,
      a.ldb,
      a.strideB,
      this.beta,
      a.C,
      a.ldc,
      a.strideC,
      a.batchCount,
    );
    this.check(code, "cublasSgemmStridedBatched", () => `${gemmContext(a)} batch=${a.batchCount}`);
  }

  /** Row-major C = alpha·op(A)·op(B) + beta·C. */
  sgemmRowMajor(handle: CublasHandle, g: RowMajorGemm<DevicePtr>): void {
    this.sgemm(handle, rowMajorGemm(g));
  }

  sgemmStridedBatchedRowMajor(handle: CublasHandle, g: RowMajorStridedBatchedGemm<DevicePtr>): void {
    this.sgemmStridedBatched(handle, rowMajorStridedBatchedGemm(g));
  }

  /** Row-major y = alpha·op(A)·x + beta·y. */
  sgemvRowMajor(handle: CublasHandle, g: RowMajorGemv<DevicePtr>): void {
    this.sgemv(handle, rowMajorGemv(g));
  }
}

function gemmContext(a: GemmArgs<DevicePtr>): string {
  return `transa=${a.transa} transb=${a.transb} m=${a.m} n=${a.n} k=${a.k} lda=${a.lda} ldb=${a.ldb} ldc=${a.ldc}`;
}

let cublasInstance: Cublas | undefined;
let cublasFailure: Error | undefined;

/** The process-wide cuBLAS bindings, loaded on first use (a failure is remembered and rethrown). */
export function getCublas(): Cublas {
  if (cublasInstance) return cublasInstance;
  if (cublasFailure) throw cublasFailure;
  try {
    cublasInstance = Cublas.load();
    return cublasInstance;
  } catch (e) {
    cublasFailure = e instanceof Error ? e : new Error(String(e));
    throw cublasFailure;
  }
}
