// DyNet-style autobatching on the GPU. Each forward call plans the newly requested nodes into batches of equal
// signature (plan.ts, the same plans as the CPU autobatch engine), encodes the whole pass — per-node records of every
// batch in one host table, and the batches' launches (cuda-backend.ts) — then sends the table with one copy and issues
// the launches on one stream. Backward runs the plan's batches in reverse the same way. Parameters stay on the device
// (DeviceParameters: parameter nodes point at them, gradients accumulate there, the trainer's update runs there).
// Nothing waits for the device except reading a value.

import {
  type CudaKernel,
  floatBits,
  GpuContext,
  type GpuContextOptions,
  type KernelArg,
  karg,
  type LaunchCounts,
  type RowMajorGemm,
  type StagingBuffer,
} from "../../cuda/index.js";
import type { ComputationGraph, Expression } from "../../graph/graph.js";
import { Op, opName } from "../../graph/opcodes.js";
import type { ParameterCollection } from "../../model/parameters.js";
import type { Trainer } from "../../optim/trainers.js";
import type { DataParallelEngine, GradientReducer } from "../data-parallel.js";
import { type EngineCapabilities, requireCollection, requireExpression, requireScalar } from "../engine.js";
import { DeviceParameters } from "../gpu/parameters.js";
import { GpuRnnNodes } from "../gpu/rnn-node.js";
import {
  AuxOverflow,
  CudaBatchBackend,
  type DeviceCommand,
  type EncodedPass,
  type NodeCommand,
  type ParameterSite,
} from "./cuda-backend.js";
import {
  AB_GEMM_TILE,
  AUTOBATCH_KERNEL_NAMES,
  AUTOBATCH_PROGRAM,
  type AutobatchKernelName,
  autobatchKernelSource,
} from "./cuda-kernels.js";
import { BackwardScratch, runBackward, runForward } from "./executor.js";
import { type BatchPlan, BatchPlanner, type BatchStrategy } from "./plan.js";

/** Device work queued so far: our kernels (including the trainer's), cuBLAS calls, copies and memsets. */
export type AutobatchLaunchCounts = LaunchCounts;

/**
 * What the engine needs from a device. `CudaAutobatchDevice` is the real one; the unit tests run the engine on an
 * emulator of the same commands over a Float32Array, which checks every table and launch without a GPU.
 */
export interface AutobatchDevice extends ParameterSite {
  readonly name: string;
  /** Drops the previous region and reserves `floats` floats of the pool; returns their offset. */
  allocRegion(floats: number): number;
  /** Queues a copy of `words` to pool offset `offset` (the caller may reuse `words` as soon as this returns). */
  upload(offset: number, words: Uint32Array): void;
  run(command: DeviceCommand): void;
  /** Waits for the queued work and copies `out.length` floats from pool offset `offset`. */
  download(offset: number, out: Float32Array): Float32Array;
  update(trainer: Trainer): void;
  touchedRows(index: number): number[];
  /** A parameter's accumulated gradient (waits for queued work). */
  readGradient(index: number): Float32Array;
  syncToHost(): void;
  /** Copies the trainer's state kept on the device (Adam's moments) into it; none where the trainer updates. */
  syncTrainerToHost?(trainer: Trainer): void;
  /** Uploads the ParameterCollection's values over the device's copy (another engine trained them). */
  reloadFromHost(): void;
  /** Sums the gradients over the reducer's ranks before every update; absent where the device cannot. */
  setGradientReducer?(reducer: GradientReducer | null): void;
  synchronize(): void;
  launchCounts(): AutobatchLaunchCounts;
  dispose(): void;
}

/**
 * How product batches multiply: "cublas" (default) or "kernels", the engine's own tiled GEMM. Measured on an H100
 * (`vpps bench autobatch batching`, Tree-LSTM hidden 256): a cuBLAS call costs the host 15–24 µs, one of our
 * launches 4–8 µs, but our simple kernel is slow enough on the device that the step becomes device-bound, and cuBLAS
 * was faster at every batch size (5767 vs 4546 sentences/s at batch 64). For small matrices, where the device has
 * time to spare, "kernels" can be the faster choice.
 */
export type GemmMode = "kernels" | "cublas";

/** The GPU: a GpuContext, the parameters on it, the autobatch kernels, two staging buffers (forward, backward). */
export class CudaAutobatchDevice implements AutobatchDevice {
  readonly parameters: DeviceParameters;
  private readonly kernels: Readonly<Record<AutobatchKernelName, CudaKernel>>;
  private readonly staging: [StagingBuffer, StagingBuffer];
  private next = 0;
  private readonly counts: AutobatchLaunchCounts = { kernels: 0, cublas: 0, copies: 0 };
  private readonly base: number;
  /** Node commands: device addresses by node id (set for the node and its arguments), and the rnn op's state. */
  private nodeVal = new Float64Array(1024);
  private nodeGrad = new Float64Array(1024);
  private rnn: GpuRnnNodes | undefined;

  private constructor(
    readonly ctx: GpuContext,
    params: ParameterCollection,
    readonly gemmMode: GemmMode,
  ) {
    this.kernels = ctx.kernels(AUTOBATCH_PROGRAM, autobatchKernelSource(), AUTOBATCH_KERNEL_NAMES).kernels;
    this.parameters = new DeviceParameters(ctx, params);
    this.staging = [ctx.staging(), ctx.staging()];
    this.base = ctx.pool.ptr(0);
  }

  static open(params: ParameterCollection, opts: AutobatchGpuOptions = {}): CudaAutobatchDevice {
    const gemm = opts.gemm ?? "cublas";
    if (gemm !== "kernels" && gemm !== "cublas") {
      throw new RangeError(`autobatch: gemm must be "kernels" or "cublas"; got ${JSON.stringify(gemm)}`);
    }
    const ctx = GpuContext.open(opts);
    try {
      return new CudaAutobatchDevice(ctx, params, gemm);
    } catch (e) {
      ctx.dispose();
      throw e;
    }
  }

  get name(): string {
    return this.ctx.deviceName;
  }

  paramValueOffset(index: number): number {
    return this.parameters.valueOffset[index]!;
  }
  paramGradOffset(index: number): number {
    return this.parameters.gradOffset[index]!;
  }
  touch(index: number, row: number): void {
    this.parameters.touch(index, row);
  }
  touchedRows(index: number): number[] {
    return this.parameters.touchedRows(index);
  }
  readGradient(index: number): Float32Array {
    return this.parameters.readGradient(index);
  }

  allocRegion(floats: number): number {
    this.ctx.pool.reset();
    return this.ctx.pool.alloc(floats, "autobatch region (node values, gradients, tables and scratch)");
  }

  upload(offset: number, words: Uint32Array): void {
    if (words.length === 0) return;
    // alternate buffers so that the backward table never waits for the forward copy (and vice versa)
    const staging = this.staging[this.next]!;
    this.next ^= 1;
    const buf = staging.acquire(4 * words.length);
    buf.u32.set(words);
    staging.upload(this.ctx.pool.ptr(offset), 4 * words.length);
    this.counts.copies++;
  }

  run(c: DeviceCommand): void {
    const ctx = this.ctx;
    if (c.kind === "kernel") {
      const args: KernelArg[] = [karg.ptr(this.base), karg.ptr(this.base + 4 * c.rec), ...c.args];
      this.kernels[c.name].launch({ grid: c.grid, block: c.block, stream: ctx.stream }, args);
      this.counts.kernels++;
    } else if (c.kind === "gemm") {
      const g = c.gemm;
      if (this.gemmMode === "kernels" && this.gemmKernel(g)) return;
      const at = (off: number) => this.base + 4 * off;
      const call: RowMajorGemm<number> = { ...g, A: at(g.A), B: at(g.B), C: at(g.C) };
      ctx.cublas.sgemmRowMajor(ctx.cublasHandle, call);
      this.counts.cublas++;
    } else if (c.kind === "node") {
      this.runNode(c);
    } else {
      ctx.device.driver.memsetD32Async(ctx.pool.ptr(c.offset), floatBits(c.value), c.count, ctx.stream.handle);
      this.counts.copies++;
    }
  }

  /**
   * A node computed on its own (the rnn op) by the eager engine's implementation, on the engine's stream and cuBLAS
   * handle: the node's and its arguments' addresses are set from the command's offsets (only those are read).
   */
  private runNode(c: NodeCommand): void {
    if (c.op !== Op.Rnn) throw new Error(`autobatch (GPU): no node command for ${opName(c.op)} (only rnn has one)`);
    const { g, node } = c;
    if (this.nodeVal.length < g.size) {
      this.nodeVal = new Float64Array(Math.max(g.size, 2 * this.nodeVal.length));
      this.nodeGrad = new Float64Array(this.nodeVal.length);
    }
    const at = (offset: number) => this.base + 4 * offset;
    this.nodeVal[node] = at(c.val[0]!);
    this.nodeGrad[node] = at(c.grad[0]!);
    for (let a = 0; a < g.argCount[node]!; a++) {
      const x = g.arg(node, a);
      this.nodeVal[x] = at(c.val[a + 1]!);
      this.nodeGrad[x] = at(c.grad[a + 1]!);
    }
    this.rnn ??= new GpuRnnNodes(this.ctx, "autobatch (GPU)");
    if (c.backward) this.rnn.backward(g, node, this.nodeVal, this.nodeGrad);
    else this.rnn.forward(g, node, this.nodeVal);
  }

  /** Launches a packed row-major GEMM as one of our kernels; false if it is not one of their three shapes. */
  private gemmKernel(g: RowMajorGemm<number>): boolean {
    const ta = g.transA ?? false;
    const tb = g.transB ?? false;
    const beta = g.beta ?? 0;
    if (g.lda !== undefined || g.ldb !== undefined || g.ldc !== undefined || (g.alpha ?? 1) !== 1) return false;
    if ((beta !== 0 && beta !== 1) || (ta && tb)) return false;
    const name = ta ? "ab_gemm_tn" : tb ? "ab_gemm_nt" : "ab_gemm_nn";
    const grid = [Math.ceil(g.n / AB_GEMM_TILE), Math.ceil(g.m / AB_GEMM_TILE)] as const;
    this.kernels[name].launch({ grid, block: 256, stream: this.ctx.stream }, [
      karg.ptr(this.base),
      karg.u32(g.A),
      karg.u32(g.B),
      karg.u32(g.C),
      karg.i32(g.m),
      karg.i32(g.n),
      karg.i32(g.k),
      karg.i32(ta ? g.m : g.k),
      karg.i32(tb ? g.k : g.n),
      karg.i32(beta),
    ]);
    this.counts.kernels++;
    return true;
  }

  download(offset: number, out: Float32Array): Float32Array {
    return this.ctx.download(this.ctx.pool.ptr(offset), out);
  }

  update(trainer: Trainer): void {
    this.parameters.update(trainer);
  }
  syncToHost(): void {
    this.parameters.syncToHost();
  }
  syncTrainerToHost(trainer: Trainer): void {
    this.parameters.syncTrainerToHost(trainer);
  }
  reloadFromHost(): void {
    this.parameters.reloadFromHost();
  }
  setGradientReducer(reducer: GradientReducer | null): void {
    this.parameters.setGradientReducer(reducer);
  }
  synchronize(): void {
    this.ctx.synchronize();
  }

  launchCounts(): AutobatchLaunchCounts {
    return { ...this.counts, kernels: this.counts.kernels + this.parameters.launches };
  }

  dispose(): void {
    try {
      try {
        this.rnn?.dispose();
      } finally {
        this.parameters.dispose();
      }
    } finally {
      this.ctx.dispose();
    }
  }
}

export interface AutobatchGpuOptions extends GpuContextOptions {
  /** Batching strategy (default "agenda", DyNet's better one). */
  strategy?: BatchStrategy;
  /** How product batches multiply (default "cublas"); see GemmMode. */
  gemm?: GemmMode;
}

/** Host time spent per stage since construction, ms (the benchmark's profile). */
export interface AutobatchHostTime {
  plan: number;
  /** Addresses, records and commands. */
  encode: number;
  /** The table upload and the launches (koffi calls into the driver and cuBLAS). */
  issue: number;
}

const MIN_VALUE_FLOATS = 1 << 16;
const MIN_AUX_FLOATS = 1 << 20;
const ALIGN = 64;
const alignUp = (n: number) => Math.ceil(n / ALIGN) * ALIGN;

/** Autobatching on a CUDA GPU; see the top of this file. Create it with `createEngine("autobatch", params)`. */
export class AutobatchGpuEngine implements DataParallelEngine {
  readonly name = "autobatch";
  readonly capabilities: EngineCapabilities = { forwardOnly: true, nodeGradients: true };
  readonly strategy: BatchStrategy;
  readonly device: AutobatchDevice;
  /** The plan of the latest forward call and of the latest backward pass. */
  lastForwardPlan: BatchPlan | null = null;
  lastBackwardPlan: BatchPlan | null = null;
  readonly hostTime: AutobatchHostTime = { plan: 0, encode: 0, issue: 0 };

  private readonly backend: CudaBatchBackend;
  private readonly planner = new BatchPlanner();
  private readonly scratch = new BackwardScratch();
  private graph: ComputationGraph | null = null;
  private generation = -1;
  /** Nodes [0, computed) of the current graph have values (or have them queued). */
  private computed = 0;
  private valueCap = 0;
  private auxCap = 0;

  /** `device` replaces the GPU (the tests' emulator); by default the GPU named by `opts.device` is opened. */
  constructor(
    readonly params: ParameterCollection,
    opts: AutobatchGpuOptions = {},
    device?: AutobatchDevice,
  ) {
    requireCollection(params, "autobatch");
    const strategy = opts.strategy ?? "agenda";
    if (strategy !== "depth" && strategy !== "agenda") {
      throw new RangeError(`autobatch: strategy must be "depth" or "agenda"; got ${JSON.stringify(strategy)}`);
    }
    this.strategy = strategy;
    this.device = device ?? CudaAutobatchDevice.open(params, opts);
    this.backend = new CudaBatchBackend(this.device);
  }

  launchCounts(): AutobatchLaunchCounts {
    return this.device.launchCounts();
  }

  forward(e: Expression): void {
    requireExpression(e, "forward", "e");
    const g = e.graph;
    g.check(e, "forward", "e");
    this.params.checkGraph(g, this.name);
    if (g !== this.graph || g.generation !== this.generation) {
      this.graph = g;
      this.generation = g.generation;
      this.computed = 0;
      this.lastForwardPlan = null;
      this.backend.resetGraph();
    }
    if (g.valueSize > this.valueCap) {
      this.relayout(Math.max(g.valueSize, 2 * this.valueCap), Math.max(this.auxCap, 2 * g.valueSize + 16 * g.size));
    }
    if (e.id < this.computed) return;
    for (;;) {
      const t0 = performance.now();
      const plan = this.planner.plan(g, e.id, this.strategy, this.computed);
      const t1 = performance.now();
      this.hostTime.plan += t1 - t0;
      let pass: EncodedPass;
      try {
        this.backend.beginPass();
        this.backend.assignAddresses(g, plan.from, e.id);
        this.backend.planProducts(g, plan);
        runForward(g, plan, this.backend);
        pass = this.backend.endPass();
      } catch (err) {
        if (!(err instanceof AuxOverflow)) throw err;
        // a larger region starts the graph over: plan again from its first node
        this.relayout(this.valueCap, 2 * this.auxCap + err.neededFloats);
        continue;
      } finally {
        this.hostTime.encode += performance.now() - t1;
      }
      this.issue(pass);
      this.lastForwardPlan = plan;
      this.computed = e.id + 1;
      return;
    }
  }

  forwardScalar(e: Expression): number {
    requireScalar(e, "forwardScalar", "e");
    return this.value(e)[0]!;
  }

  backward(loss: Expression): void {
    requireScalar(loss, "backward", "loss");
    const g = loss.graph;
    const last = loss.id;
    for (;;) {
      this.forward(loss);
      const t0 = performance.now();
      // the forward plan serves backward (with its gathered inputs) when one forward call computed exactly [0, loss]
      const fp = this.lastForwardPlan;
      const plan = fp && fp.from === 0 && fp.upTo === last ? fp : this.planner.plan(g, last, this.strategy, 0);
      const t1 = performance.now();
      this.hostTime.plan += t1 - t0;
      let pass: EncodedPass;
      try {
        this.backend.beginPass();
        this.backend.seedBackward(g, last);
        this.backend.beginBackward(plan);
        runBackward(g, plan, last, this.backend, this.scratch);
        this.backend.finishBackward();
        pass = this.backend.endPass();
      } catch (err) {
        if (!(err instanceof AuxOverflow)) throw err;
        this.relayout(this.valueCap, 2 * this.auxCap + err.neededFloats);
        continue; // forward runs again in the new region
      } finally {
        this.hostTime.encode += performance.now() - t1;
      }
      this.issue(pass);
      this.lastBackwardPlan = plan;
      return;
    }
  }

  value(e: Expression): Float32Array {
    requireExpression(e, "value", "e");
    this.forward(e);
    return this.device.download(this.backend.val[e.id]!, new Float32Array(e.size));
  }

  /** The node's gradient from the last backward; for a parameter node, the parameter's accumulated gradient. */
  gradient(e: Expression): Float32Array {
    requireExpression(e, "gradient", "e");
    const g = e.graph;
    if (g !== this.graph || g.generation !== this.generation || e.id >= this.computed) {
      throw new Error("gradient: run backward on this graph first");
    }
    return this.device.download(this.backend.grad[e.id]!, new Float32Array(e.size));
  }

  update(trainer: Trainer): void {
    this.device.update(trainer);
  }

  syncToHost(): void {
    this.device.syncToHost();
  }

  /** Sums the gradients over `reducer`'s ranks before every update (DeviceParameters); null: this process alone. */
  setGradientReducer(reducer: GradientReducer | null): void {
    if (!this.device.setGradientReducer) {
      throw new Error(`autobatch: the device '${this.device.name}' cannot train data-parallel (no setGradientReducer)`);
    }
    this.device.setGradientReducer(reducer);
  }

  syncTrainerToHost(trainer: Trainer): void {
    this.device.syncTrainerToHost?.(trainer);
  }

  /** Uploads the ParameterCollection's values over the engine's device copy, e.g. after another engine trained them. */
  reloadParameters(): void {
    this.device.reloadFromHost();
  }

  dispose(): void {
    this.device.dispose();
  }

  /** Lays out a new region; the current graph is recomputed from its first node. */
  private relayout(valueFloats: number, auxFloats: number): void {
    const v = alignUp(Math.max(MIN_VALUE_FLOATS, valueFloats));
    const a = alignUp(Math.max(MIN_AUX_FLOATS, auxFloats));
    // if the pool cannot hold the region, the next forward must lay out again rather than use the old one
    this.valueCap = 0;
    this.auxCap = 0;
    this.computed = 0;
    this.lastForwardPlan = null;
    const base = this.device.allocRegion(2 * v + a);
    this.valueCap = v;
    this.auxCap = a;
    this.backend.layout(base, base + v, base + 2 * v, a);
  }

  private issue(pass: EncodedPass): void {
    const t0 = performance.now();
    this.device.upload(pass.tableOffset, pass.table);
    for (const c of pass.commands) this.device.run(c);
    this.hostTime.issue += performance.now() - t0;
  }
}
