/**
 * What both paths of one recurrent layer direction on a GPU share (persistent.ts, the persistent kernels;
 * stepwise.ts, a GEMM per step): the device, stream and cuBLAS handle they run on, the argument and
 * workspace types, the helper kernels, and `RnnLayerBase` — the input projection of all steps as one GEMM before the
 * recurrent part, and the weight-gradient GEMMs over all steps after it (W_hh's gradient needs h(t−1) of every row,
 * which the forward saves). Everything is queued on one stream; nothing here waits.
 *
 * Buffers are the caller's (device pointers); `RnnWorkspace` sizes and owns the scratch ones.
 */

import { STATUS_WORDS } from "../../codegen/grid-barrier.js";
import {
  type CompileResult,
  type CudaKernel,
  compileCuda,
  type DevicePtr,
  GpuContext,
  karg,
  loadModule,
  openDevice,
} from "../../cuda/index.js";
import { UserError } from "../../util/errors.js";
import { PENDING_BITS, savedFloats } from "../codegen/index.js";
import type { RnnCellName } from "../plan/index.js";
import { gatesOf } from "../spec.js";

/** The 2-D grid of a helper over a rows × cols matrix (256 threads a block): ≤ 4 blocks a row, ≤ 1024 in all. */
function rowGrid(rows: number, cols: number): [number, number, number] {
  const x = Math.min(4, Math.ceil(cols / 256));
  return [x, Math.max(1, Math.min(rows, Math.floor(1024 / x))), 1];
}

/** A layer too large for the registers of this GPU: names the size, the reason and the largest that fits. */
export class RnnDoesNotFitError extends UserError {
  override readonly name = "RnnDoesNotFitError";
}

/**
 * Helper kernels of the layer: the bias broadcast of the input projection, a direction's columns copied out, a fill.
 * The matrix ones run a 2-D grid (rowGrid): rows by blockIdx.y, columns by the x threads — no division per element.
 */
const HELPER_SOURCE = `
extern "C" __global__ void rnn_add_bias(float* p, const float* b1, const float* b2, int rows, int cols, int b2_cols) {
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
      p[(size_t)r * cols + c] += b1[c] + (c < b2_cols ? b2[c] : 0.f);
    }
  }
}
// dst[r·ldd + c] = src[r·lds + c] for r < rows, c < cols: a layer direction's y into its columns of a wider output
extern "C" __global__ void rnn_copy_cols(float* dst, int ldd, const float* src, int lds, int rows, int cols) {
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
      dst[(size_t)r * ldd + c] = src[(size_t)r * lds + c];
    }
  }
}
extern "C" __global__ void rnn_fill_value(float* p, float v, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = v;
}
`;

/**
 * What a layer direction runs on: a GpuContext's device, stream and cuBLAS handle bound to it (an engine's context, or
 * a second stream of one), and its kernel cache folder (undefined: the default; null: none).
 */
export type RnnGpu = Pick<GpuContext, "device" | "stream" | "cublas" | "cublasHandle"> &
  Partial<Pick<GpuContext, "cacheDir">>;

/** A context of its own for the standalone layer (backend, benchmark, tests); dispose() frees it. */
export type OwnedRnnGpu = GpuContext;

/**
 * Opens GPU `index` with its own stream and cuBLAS handle, and no device pool: the layer allocates its own buffers.
 * The device stays open after dispose() (as openDevice's does), so that the next layer's context finds it ready.
 */
export function openRnnGpu(index: number): OwnedRnnGpu {
  return GpuContext.open({ device: openDevice(index), poolBytes: null });
}

/** Device pointers of one layer direction's parameters (PyTorch layout) and their gradients. */
export interface RnnDeviceWeights {
  readonly wih: DevicePtr; // [G·H, in]
  readonly whh: DevicePtr; // [G·H, H]
  readonly bih: DevicePtr; // [G·H]
  readonly bhh: DevicePtr; // [G·H]
}

/** The packed batch's step table on the device (ints) and on the host. */
export interface PackedSteps {
  readonly batchSizes: Int32Array;
  readonly offsets: Int32Array;
  readonly total: number;
  readonly dBatchSizes: DevicePtr;
  readonly dOffsets: DevicePtr;
}

export interface ForwardArgs {
  readonly weights: RnnDeviceWeights;
  readonly x: DevicePtr; // [N, in]
  readonly h0: DevicePtr; // [B, H]
  readonly c0: DevicePtr; // [B, H] (LSTM)
  readonly y: DevicePtr; // [N, ldy], this direction's first column
  readonly ldy: number;
  readonly hn: DevicePtr;
  readonly cn: DevicePtr;
  readonly steps: PackedSteps;
  readonly reverse: boolean;
  readonly train: boolean;
  readonly ws: RnnWorkspace;
}

export interface BackwardArgs extends ForwardArgs {
  readonly grads: RnnDeviceWeights; // accumulated (β = 1)
  readonly dy: DevicePtr; // [N, lddy]
  readonly lddy: number;
  readonly dhn: DevicePtr;
  readonly dcn: DevicePtr;
  readonly dx: DevicePtr; // [N, in]
  readonly dxAccumulate: boolean;
  readonly dh0: DevicePtr;
  readonly dc0: DevicePtr;
}

/** Scratch of one layer direction for batches of up to `rows` packed rows and `batch` sequences. */
export class RnnWorkspace {
  private readonly ptrs: DevicePtr[] = [];
  readonly xw: DevicePtr;
  readonly saved: DevicePtr;
  readonly dpreH: DevicePtr;
  readonly dpreX: DevicePtr;
  readonly ones: DevicePtr;
  readonly status: DevicePtr;
  /** The non-persistent path's per-step buffers: h(t−1)·W_hhᵀ [B, G·H], dpre·W_hh [B, H], carries [2, B, H]. */
  readonly stepHw: DevicePtr;
  readonly stepRec: DevicePtr;
  readonly stepCarry: DevicePtr;
  /** A direction's hidden states [rows, hidden], 16-byte aligned (for callers whose output is not). */
  readonly y: DevicePtr;

  constructor(
    private readonly gpu: RnnGpu,
    readonly cell: RnnCellName,
    readonly hidden: number,
    readonly rows: number,
    readonly batch: number,
  ) {
    const d = gpu.device.driver;
    const G = gatesOf(cell);
    const alloc = (floats: number) => {
      const p = d.memAlloc(Math.max(1, floats) * 4);
      this.ptrs.push(p);
      return p;
    };
    try {
      this.xw = alloc(rows * G * hidden);
      this.saved = alloc(savedFloats(cell, hidden, rows));
      this.dpreH = alloc(rows * G * hidden);
      this.dpreX = G === 3 ? alloc(rows * G * hidden) : this.dpreH;
      this.ones = alloc(rows);
      this.status = alloc(STATUS_WORDS);
      this.stepHw = alloc(batch * G * hidden);
      this.stepRec = alloc(batch * hidden);
      this.stepCarry = alloc(2 * batch * hidden);
      this.y = alloc(rows * hidden);
    } catch (e) {
      this.dispose();
      throw e;
    }
  }

  dispose(): void {
    for (const p of this.ptrs.splice(0)) this.gpu.device.driver.memFree(p);
  }
}

/**
 * What both paths of a layer direction share: the helper kernels, the input projection before the recurrent part and
 * the weight-gradient GEMMs after it (over the same `saved` layout), and forward/backward as their composition.
 */
export abstract class RnnLayerBase {
  readonly G: number;
  protected readonly addBias: CudaKernel;
  protected readonly fillValue: CudaKernel;
  protected readonly copyCols: CudaKernel;
  protected readonly modules: { unload(): void }[] = [];

  protected constructor(
    readonly gpu: RnnGpu,
    readonly cell: RnnCellName,
    readonly hidden: number,
  ) {
    this.G = gatesOf(cell);
    const h = this.compile("rnn_helpers", HELPER_SOURCE);
    const mh = loadModule(h.cubin, "rnn helpers");
    this.modules.push(mh);
    this.addBias = mh.getFunction("rnn_add_bias");
    this.fillValue = mh.getFunction("rnn_fill_value");
    this.copyCols = mh.getFunction("rnn_copy_cols");
  }

  /**
   * dst[r·ldd + c] = src[r·lds + c] (rows × cols floats), on the stream: a direction's y, computed in an aligned
   * workspace (the kernels load 16-byte vectors of it), into its columns of a graph node's value.
   */
  copyColumns(dst: DevicePtr, ldd: number, src: DevicePtr, lds: number, rows: number, cols: number): void {
    const n = rows * cols;
    if (n === 0) return;
    this.copyCols.launch({ grid: rowGrid(rows, cols), block: 256, stream: this.stream }, [
      karg.ptr(dst),
      karg.i32(ldd),
      karg.ptr(src),
      karg.i32(lds),
      karg.i32(rows),
      karg.i32(cols),
    ]);
  }

  /** Which path this is, for messages and benchmarks. */
  abstract readonly path: "persistent" | "stepwise";
  /** The recurrent part of the forward (after inputProjection). */
  abstract forwardRecurrent(a: ForwardArgs): void;
  /** The recurrent part of the backward (gate gradients into the workspace, dh0/dc0). */
  abstract backwardRecurrent(a: BackwardArgs): void;
  /** Waits for the stream and throws if a launch reported a failure. */
  abstract checkStatus(ws: RnnWorkspace): void;

  protected compile(name: string, source: string): CompileResult {
    return compileCuda({
      name,
      source,
      arch: this.gpu.device.props.arch,
      options: ["-std=c++17", "--ptxas-options=-v"],
      ...(this.gpu.cacheDir !== undefined ? { cacheDir: this.gpu.cacheDir } : {}),
    });
  }

  protected get stream() {
    return this.gpu.stream;
  }

  /**
   * Fills `cols` floats of each of `rows` rows `ld` floats apart with the pending mark (−0.0) before a Lamport launch:
   * one driver memset (a strided one where ld > cols).
   */
  protected fillPending(p: DevicePtr, rows: number, cols: number, ld: number): void {
    if (rows === 0 || cols === 0) return;
    this.gpu.device.driver.memsetD2D32Async(p, 4 * ld, PENDING_BITS, cols, rows, this.stream.handle);
  }

  /** xw = x·W_ihᵀ + b_ih + b_hh (GRU: b_hh's n part stays in the kernel). */
  inputProjection(a: ForwardArgs, inputSize: number): void {
    const { total } = a.steps;
    const GH = this.G * this.hidden;
    this.gpu.cublas.sgemmRowMajor(this.gpu.cublasHandle, {
      m: total,
      n: GH,
      k: inputSize,
      A: a.x,
      B: a.weights.wih,
      transB: true,
      C: a.ws.xw,
    });
    if (total === 0) return;
    this.addBias.launch({ grid: rowGrid(total, GH), block: 256, stream: this.stream }, [
      karg.ptr(a.ws.xw),
      karg.ptr(a.weights.bih),
      karg.ptr(a.weights.bhh),
      karg.i32(total),
      karg.i32(GH),
      karg.i32(this.G === 3 ? 2 * this.hidden : GH),
    ]);
  }

  /** The whole forward of a layer direction: input projection, then the recurrent launch. */
  forward(a: ForwardArgs, inputSize: number): void {
    this.inputProjection(a, inputSize);
    this.forwardRecurrent(a);
  }

  /** The weight gradients (accumulated) and (unless `withDx` is false) dx, each one GEMM over all steps. */
  backwardGemms(a: BackwardArgs, inputSize: number, withDx = true): void {
    this.recurrentWeightGradients(a);
    this.inputSideGradients(a, inputSize, withDx);
  }

  /**
   * The recurrent weights' gradients over all steps, U_hh (one GEMM) and b_hh: the recurrent part's own share of the
   * backward GEMMs (`vpps bench rnn` times it with the recurrent kernels). Also fills `ws.ones`, which
   * `inputSideGradients` reads: call this one first.
   */
  recurrentWeightGradients(a: BackwardArgs): void {
    const { total } = a.steps;
    const H = this.hidden;
    const GH = this.G * H;
    const cb = this.gpu.cublas;
    const h = this.gpu.cublasHandle;
    const hprev = a.ws.saved + 4 * total * H * (this.G === 4 ? 5 : this.G === 3 ? 4 : 0);
    cb.sgemmRowMajor(h, { m: GH, n: H, k: total, A: a.ws.dpreH, transA: true, B: hprev, C: a.grads.whh, beta: 1 });
    this.fillValue.launch({ grid: Math.min(256, Math.ceil(total / 256)), block: 256, stream: this.stream }, [
      karg.ptr(a.ws.ones),
      karg.f32(1),
      karg.i32(total),
    ]);
    cb.sgemvRowMajor(h, { rows: total, cols: GH, A: a.ws.dpreH, trans: true, x: a.ws.ones, y: a.grads.bhh, beta: 1 });
  }

  /**
   * The input side's gradients, W_ih and b_ih, and dx unless `withDx` is false: the backward counterparts of the
   * input projection, which the paper does as GEMMs outside the recurrent part. Reads `ws.ones` as
   * `recurrentWeightGradients` left it.
   */
  inputSideGradients(a: BackwardArgs, inputSize: number, withDx = true): void {
    const { total } = a.steps;
    const GH = this.G * this.hidden;
    const cb = this.gpu.cublas;
    const h = this.gpu.cublasHandle;
    cb.sgemmRowMajor(h, {
      m: GH,
      n: inputSize,
      k: total,
      A: a.ws.dpreX,
      transA: true,
      B: a.x,
      C: a.grads.wih,
      beta: 1,
    });
    cb.sgemvRowMajor(h, { rows: total, cols: GH, A: a.ws.dpreX, trans: true, x: a.ws.ones, y: a.grads.bih, beta: 1 });
    if (withDx) this.inputGradient(a, inputSize);
  }

  /**
   * dx (= or += by `a.dxAccumulate`) from the gate gradients of a finished backward, one GEMM on this layer's stream
   * (any layer object of the same cell and size can run it: it reads only `a`).
   */
  inputGradient(a: BackwardArgs, inputSize: number): void {
    const { total } = a.steps;
    const GH = this.G * this.hidden;
    this.gpu.cublas.sgemmRowMajor(this.gpu.cublasHandle, {
      m: total,
      n: inputSize,
      k: GH,
      A: a.ws.dpreX,
      B: a.weights.wih,
      C: a.dx,
      beta: a.dxAccumulate ? 1 : 0,
    });
  }

  backward(a: BackwardArgs, inputSize: number): void {
    this.backwardRecurrent(a);
    this.backwardGemms(a, inputSize);
  }

  dispose(): void {
    for (const m of this.modules.splice(0)) m.unload();
  }
}
