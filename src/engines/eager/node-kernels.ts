// What the eager engine's kernel entries (kernel-table.ts) launch with: the context's stream, the compiled kernels,
// every node's device addresses (value, gradient, and the pointer tables of sum nodes), and the launch counters.
// `forward` and `backward` run one node through its op's entry.

import { EAGER_BLOCK, type EagerKernelName } from "../../codegen/eager-kernels.js";
import {
  type CublasHandle,
  type CudaKernel,
  type CudaStream,
  type DevicePtr,
  type GpuContext,
  gridFor,
  type KernelArg,
  karg,
  type LaunchCounts,
  type RowMajorGemm,
} from "../../cuda/index.js";
import type { ComputationGraph } from "../../graph/graph.js";
import type { DeviceParameters } from "../gpu/parameters.js";
import { GpuRnnNodes } from "../gpu/rnn-node.js";
import type { EagerConvs } from "./conv-node.js";
import { EAGER_KERNELS } from "./kernel-table.js";

/** What GLP4NN's resource tracker needs of the launches (src/glp4nn/tracker.ts's ResourceTracker). */
export interface LaunchTracker {
  launch(kernel: CudaKernel, shape: { grid: number; block: number }, stream: CudaStream, launch: () => void): void;
  timeCall(name: string, stream: CudaStream, call: () => void): void;
}

export type { LaunchCounts as EagerLaunchCounts } from "../../cuda/index.js";

/** Device addresses by node id: value, gradient, and (sum nodes) the argument pointer tables. Owned by the engine. */
export interface NodeAddresses {
  valPtr: Float64Array;
  gradPtr: Float64Array;
  tablePtr: Float64Array;
}

/** Launches one node's forward or backward work on the context's stream. */
export class EagerNodeKernels {
  /** Where node work is queued: the context's stream, or a lane of the stream pool (a level's nodes at once). */
  private stream: CudaStream;
  private blas: CublasHandle;
  /** Set while the engine profiles (GLP4NN's `streams: "auto"`): every launch and cuBLAS call goes through it. */
  tracker: LaunchTracker | undefined;

  constructor(
    readonly ctx: GpuContext,
    readonly k: Readonly<Record<EagerKernelName, CudaKernel>>,
    private readonly at: NodeAddresses,
    readonly device: DeviceParameters,
    readonly counts: LaunchCounts,
    /** Convolutions: per-sample im2col + GEMMs on the engine's lanes or GLP4NN's (conv-node.ts). */
    readonly conv: EagerConvs,
  ) {
    this.stream = ctx.stream;
    this.blas = ctx.cublasHandle;
  }

  /** Queues node work on `stream` with `blas` (a pool lane) until the next call; `use()` returns to the context's. */
  use(stream: CudaStream = this.ctx.stream, blas: CublasHandle = this.ctx.cublasHandle): void {
    this.stream = stream;
    this.blas = blas;
  }

  /** Device address of each node's value (the engine grows the arrays; read them through these getters). */
  get valPtr(): Float64Array {
    return this.at.valPtr;
  }
  get gradPtr(): Float64Array {
    return this.at.gradPtr;
  }
  get tablePtr(): Float64Array {
    return this.at.tablePtr;
  }

  /** Computes node i from its arguments (nothing for inputs, parameters, lookups and pickRange views). */
  forward(g: ComputationGraph, i: number): void {
    EAGER_KERNELS[g.op[i]!]!.forward(this, g, i);
  }

  /** Adds node i's gradient contribution into its arguments' gradients (lookup rows are scattered per chunk). */
  backward(g: ComputationGraph, i: number): void {
    EAGER_KERNELS[g.op[i]!]!.backward(this, g, i);
  }

  /** A grid-stride launch over n elements (on the context's stream unless another is given). */
  launch(kernel: CudaKernel, n: number, args: KernelArg[], stream: CudaStream = this.stream): void {
    const grid = gridFor(n);
    if (this.tracker === undefined) kernel.launch({ grid, block: EAGER_BLOCK, stream }, args);
    else
      this.tracker.launch(kernel, { grid, block: EAGER_BLOCK }, stream, () =>
        kernel.launch({ grid, block: EAGER_BLOCK, stream }, args),
      );
    this.counts.kernels++;
  }

  /** A launch of one block (kernels that reduce over the node, such as the softmax loss). */
  launchBlock(kernel: CudaKernel, args: KernelArg[]): void {
    const stream = this.stream;
    if (this.tracker === undefined) kernel.launch({ grid: 1, block: EAGER_BLOCK, stream }, args);
    else
      this.tracker.launch(kernel, { grid: 1, block: EAGER_BLOCK }, stream, () =>
        kernel.launch({ grid: 1, block: EAGER_BLOCK, stream }, args),
      );
    this.counts.kernels++;
  }

  /** An asynchronous device-to-device copy of `bytes`. */
  copy(dst: number, src: number, bytes: number): void {
    this.ctx.device.driver.memcpyDtoDAsync(dst, src, bytes, this.stream.handle);
    this.counts.copies++;
  }

  /** y = alpha·op(W)·x + beta·y with W row-major [rows, cols]. */
  gemv(trans: boolean, rows: number, cols: number, W: number, x: number, y: number, beta: number): void {
    const call = () => this.ctx.cublas.sgemvRowMajor(this.blas, { trans, rows, cols, A: W, x, y, beta });
    if (this.tracker === undefined) call();
    else this.tracker.timeCall(`cublasSgemv ${trans ? "T " : ""}${rows}×${cols}`, this.stream, call);
    this.counts.cublas++;
  }

  /** dW += dy·xᵀ (a rank-1 GEMM, k = 1) and dx += Wᵀ·dy, for node w = W [rows, cols] and node x; dy an address. */
  gemvBackward(rows: number, cols: number, w: number, x: number, dy: number): void {
    const cublas = this.ctx.cublas;
    cublas.sgemmRowMajor(this.blas, {
      m: rows,
      n: cols,
      k: 1,
      A: dy,
      B: this.valPtr[x]!,
      beta: 1,
      C: this.gradPtr[w]!,
    });
    this.counts.cublas++;
    this.gemv(true, rows, cols, this.valPtr[w]!, dy, this.gradPtr[x]!, 1);
  }

  /** Row-major C = alpha·op(A)·op(B) + beta·C (the row-batch ops' products). */
  gemm(g: RowMajorGemm<DevicePtr>): void {
    const call = () => this.ctx.cublas.sgemmRowMajor(this.blas, g);
    if (this.tracker === undefined) call();
    else this.tracker.timeCall(`cublasSgemm ${g.m}×${g.n}×${g.k}`, this.stream, call);
    this.counts.cublas++;
  }

  /**
   * A device vector of at least n ones (a bias gradient as one GEMV: db += dYᵀ·1, a fixed-order sum where atomics
   * would add in a different order on every run). Grows by doubling; filled on the engine's stream.
   */
  ones(n: number): DevicePtr {
    if (n > this.onesFloats) {
      const driver = this.ctx.device.driver;
      if (this.onesPtr) driver.memFree(this.onesPtr);
      this.onesFloats = Math.max(n, 2 * this.onesFloats, 4096);
      this.onesPtr = driver.memAlloc(4 * this.onesFloats);
      this.launch(this.k.vp_fill, this.onesFloats, [karg.ptr(this.onesPtr), karg.f32(1), karg.i32(this.onesFloats)]);
    }
    return this.onesPtr;
  }
  private onesPtr: DevicePtr = 0;
  private onesFloats = 0;

  /** The `rnn` op's layers and workspaces (gpu/rnn-node.ts), made at the first rnn node. */
  rnn(): GpuRnnNodes {
    this.rnnState ??= new GpuRnnNodes(this.ctx, "eager engine");
    return this.rnnState;
  }
  private rnnState: GpuRnnNodes | undefined;

  /** Frees what the node kernels allocated for themselves (the convolutions' buffers, the rnn op's). */
  dispose(): void {
    try {
      this.rnnState?.dispose();
      if (this.onesPtr) this.ctx.device.driver.memFree(this.onesPtr);
      this.onesPtr = 0;
      this.onesFloats = 0;
    } finally {
      this.conv.dispose();
    }
  }

  /** y = [x₁; x₂; …] (or its gradient) in launches of up to four arguments. */
  concat(g: ComputationGraph, i: number, backward: boolean): void {
    const count = g.argCount[i]!;
    const base = backward ? this.gradPtr[i]! : this.valPtr[i]!;
    const table = backward ? this.gradPtr : this.valPtr;
    let at = 0;
    for (let a0 = 0; a0 < count; a0 += 4) {
      const ptrs: KernelArg[] = [];
      const lens: KernelArg[] = [];
      let len = 0;
      let longest = 0;
      for (let a = a0; a < a0 + 4; a++) {
        const node = a < count ? g.arg(i, a) : -1;
        ptrs.push(karg.ptr(node >= 0 ? table[node]! : 0));
        const n = node >= 0 ? g.rows[node]! : 0;
        lens.push(karg.i32(n));
        len += n;
        longest = Math.max(longest, n);
      }
      const y = karg.ptr(base + 4 * at);
      // the gradient: thread e adds element e of every slice (repeated arguments in a fixed order, kernels.ts)
      if (backward) this.launch(this.k.vp_concat4_backward, longest, [y, ...ptrs, ...lens]);
      else this.launch(this.k.vp_concat4, len, [y, ...ptrs, ...lens]);
      at += len;
    }
  }
}
