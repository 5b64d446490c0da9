// The eager GPU engine: one kernel (or cuBLAS call) per node, in node order, on one stream — what PyTorch's eager
// mode does, and the baseline the batching engines are measured against. It computes exactly the CPU reference's
// math (src/ops/*.ts), node by node.
//
// Memory. Each graph gets a region of the context's pool: values and gradients at the graph's own value offsets, and
// an append-only "aux" area for what the host prepares per forward call (input values, lookup row lists, pointer
// tables of sum nodes), sent with one copy from pinned memory. A node's value is read through a per-node device
// address, so some nodes cost nothing: parameter nodes point at the parameter's weights (and gradient), input nodes
// at their uploaded values, pickRange nodes at the slice of their argument (placed in node order, after the argument:
// chunk.ts placeNodes).

import {
  EAGER_KERNEL_NAMES,
  EAGER_PROGRAM,
  type EagerKernelName,
  eagerKernelSource,
} from "../../codegen/eager-kernels.js";
import {
  type CudaKernel,
  floatBits,
  GpuContext,
  type GpuContextOptions,
  karg,
  type StagingBuffer,
} from "../../cuda/index.js";
import { type IntegerSolver, loadSolver } from "../../glp4nn/index.js";
import type { ComputationGraph, Expression } from "../../graph/graph.js";
import { Op } from "../../graph/opcodes.js";
import type { ParameterCollection } from "../../model/parameters.js";
import type { Trainer } from "../../optim/trainers.js";
import type { DataParallelEngine, GradientReducer } from "../data-parallel.js";
import { type EngineCapabilities, requireCollection, requireExpression, requireScalar } from "../engine.js";
import { DeviceParameters } from "../gpu/parameters.js";
import { type ForwardChunk, placeNodes, planChunk } from "./chunk.js";
import { EagerConvs } from "./conv-node.js";
import { forwardWorks } from "./kernel-table.js";
import { type LevelChoice, LevelProfiler } from "./level-glp.js";
import { chunkLevels } from "./levels.js";
import { type EagerLaunchCounts, EagerNodeKernels, type NodeAddresses } from "./node-kernels.js";

export type { EagerLaunchCounts } from "./node-kernels.js";
export interface EagerEngineOptions extends GpuContextOptions {
  /**
   * GLP4NN's stream pool (the results do not depend on it): N streams for the samples of a convolution and for the
   * independent nodes of each level of a forward pass; "auto": the kernel analyser chooses the level's pool size from
   * the first forward call's kernels (level-glp.ts) and each convolution's from a profile of the layer
   * (src/conv/auto.ts).
   * 1, the default, runs everything on the engine's stream.
   */
  streams?: number | "auto";
  /** `streams: "auto"`: the solver (default: HiGHS, loaded in the background; until it is, one stream). */
  solver?: IntegerSolver;
  /** `streams: "auto"`: called with each choice and why (`--explain`): the levels', once each convolution's. */
  explain?: (text: string) => void;
}

/** `streams` as given on the command line: "auto" or a whole number 1 … MAX_EAGER_STREAMS; one line otherwise. */
export function parseStreams(value: string): number | "auto" {
  const v = value.trim();
  if (v === "auto") return "auto";
  if (!/^\d+$/.test(v) || Number(v) < 1 || Number(v) > MAX_EAGER_STREAMS) {
    throw new RangeError(`--streams must be auto or a whole number 1 … ${MAX_EAGER_STREAMS}; got '${value}'`);
  }
  return Number(v);
}

/** The most streams `streams` takes: the resident kernels of every architecture since Pascal. */
export const MAX_EAGER_STREAMS = 128;

const MIN_REGION_FLOATS = 1 << 16;

/** The eager engine; see the top of this file. Create it with `createEngine("eager", params)` or directly. */
export class EagerEngine implements DataParallelEngine {
  readonly name = "eager";
  readonly capabilities: EngineCapabilities = { forwardOnly: true, nodeGradients: true };
  readonly ctx: GpuContext;
  readonly device: DeviceParameters;
  private readonly k: Readonly<Record<EagerKernelName, CudaKernel>>;
  private readonly staging: StagingBuffer;
  private readonly nodes: EagerNodeKernels;
  private readonly counts: EagerLaunchCounts = { kernels: 0, cublas: 0, copies: 0 };

  private graph: ComputationGraph | null = null;
  private generation = -1;
  /** Nodes [0, computed) of the current graph have values on the device (or queued). */
  private computed = 0;
  // the current region: float offsets in the pool and capacities
  private valueCap = 0;
  private auxCap = 0;
  private valuesOff = 0;
  private gradsOff = 0;
  private auxOff = 0;
  private auxTop = 0;
  /** Device address of each node's value and gradient; of each sum node's pointer tables. */
  private readonly at: NodeAddresses = {
    valPtr: new Float64Array(1024),
    gradPtr: new Float64Array(1024),
    tablePtr: new Float64Array(1024),
  };
  /** Lookup gathers of the forward calls on this graph, replayed as scatters by backward. */
  private chunks: ForwardChunk[] = [];
  private reach = new Uint8Array(1024);
  /** Streams for the nodes of a level (1: node order on the engine's stream). */
  private levelStreams = 1;
  /** `streams: "auto"`: the profile of the first forward call until it is analysed. */
  private profiler: LevelProfiler | undefined;
  private solver: IntegerSolver | undefined;
  private readonly explainTo: ((text: string) => void) | undefined;
  /** `streams: "auto"`: what the analyser chose, once it has. */
  levelChoice: LevelChoice | undefined;

  constructor(
    readonly params: ParameterCollection,
    opts: EagerEngineOptions = {},
  ) {
    requireCollection(params, "eager");
    const auto = opts.streams === "auto";
    const streams = auto ? 1 : (opts.streams ?? 1);
    if (typeof streams !== "number" || !Number.isInteger(streams) || streams < 1 || streams > MAX_EAGER_STREAMS) {
      throw new RangeError(
        `eager engine: streams must be "auto" or an integer in 1 … ${MAX_EAGER_STREAMS}; got ${opts.streams}`,
      );
    }
    this.levelStreams = streams;
    this.explainTo = opts.explain;
    this.solver = opts.solver;
    this.ctx = GpuContext.open(opts);
    try {
      this.k = this.ctx.kernels(EAGER_PROGRAM, eagerKernelSource(), EAGER_KERNEL_NAMES).kernels;
      this.device = new DeviceParameters(this.ctx, params);
      this.staging = this.ctx.staging();
      const convs = new EagerConvs(this.ctx, this.k, streams);
      this.nodes = new EagerNodeKernels(this.ctx, this.k, this.at, this.device, this.counts, convs);
      if (auto) {
        this.profiler = new LevelProfiler(this.ctx);
        convs.chooseByLayer(() => this.solver, opts.explain);
        if (this.solver === undefined) {
          loadSolver().then(
            (s) => {
              this.solver = s;
            },
            () => {
              // without HiGHS the engine stays on one stream (the analysis cannot run)
            },
          );
        }
      }
    } catch (e) {
      this.ctx.dispose();
      throw e;
    }
  }

  /** Device work queued so far (this engine's nodes plus the parameter updates). */
  launchCounts(): EagerLaunchCounts {
    return { ...this.counts, kernels: this.counts.kernels + this.device.launches };
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
      this.auxTop = 0;
      this.chunks = [];
    }
    if (e.id < this.computed) return;
    if (g.valueSize > this.valueCap) this.relayout(Math.max(g.valueSize, 2 * this.valueCap), this.auxCap);
    this.growNodeArrays(g.size);
    let plan = planChunk(g, this.computed, e.id);
    if (this.auxTop + plan.floats > this.auxCap) {
      // start over in a larger region: the earlier chunks would not move with it
      if (this.computed > 0) plan = planChunk(g, 0, e.id);
      this.relayout(this.valueCap, Math.max(2 * this.auxCap, 2 * plan.floats));
    }
    const from = this.computed;
    const chunkPtr = this.ctx.pool.ptr(this.auxOff + this.auxTop);
    placeNodes(
      g,
      from,
      e.id,
      plan,
      {
        values: this.ctx.pool.ptr(this.valuesOff),
        grads: this.ctx.pool.ptr(this.gradsOff),
        chunkPtr,
        paramValue: (p) => this.device.valuePtr(p),
        paramGrad: (p) => this.device.gradPtr(p),
      },
      this.at,
    );
    const buf = this.staging.acquire(4 * plan.floats);
    const chunk = plan.write(buf, chunkPtr, this.at.valPtr, this.at.gradPtr, this.at.tablePtr);
    if (plan.floats > 0) {
      this.staging.upload(chunkPtr, 4 * plan.floats);
      this.counts.copies++;
    }
    this.auxTop += plan.floats;
    this.chunks.push(chunk);
    const valuesPtr = this.ctx.pool.ptr(this.valuesOff);
    for (const l of chunk.lookups) {
      this.nodes.launch(this.k.vp_gather_rows, l.count * l.dim, [
        karg.ptr(valuesPtr),
        karg.ptr(this.device.valuePtr(l.param)),
        karg.ptr(l.rowsPtr),
        karg.ptr(l.offsetsPtr),
        karg.i32(l.count),
        karg.i32(l.dim),
      ]);
    }
    if (this.levelStreams > 1) this.forwardLevels(g, from, e.id);
    else if (this.profiler !== undefined && this.levelChoice === undefined) this.forwardProfiled(g, from, e.id);
    else for (let i = from; i <= e.id; i++) this.nodes.forward(g, i);
    this.computed = e.id + 1;
  }

  /** `streams: "auto"`: node order on one stream with every launch tracked; analysed once the solver is there. */
  private forwardProfiled(g: ComputationGraph, from: number, to: number): void {
    const p = this.profiler!;
    if (!p.ready()) {
      const levels = chunkLevels(g, from, to, forwardWorks);
      for (let k = 0; k < levels.count; k++) p.widths.push(levels.starts[k + 1]! - levels.starts[k]!);
      p.start();
      try {
        for (let i = from; i <= to; i++) {
          // a convolution is sized on its own (src/conv/auto.ts): its kernels are not a level's
          this.nodes.tracker = g.op[i] === Op.Conv2d ? undefined : p;
          this.nodes.forward(g, i);
        }
      } finally {
        this.nodes.tracker = undefined;
      }
    } else {
      for (let i = from; i <= to; i++) this.nodes.forward(g, i);
    }
    if (p.ready() && this.solver !== undefined) {
      this.levelChoice = p.analyse(this.solver);
      p.dispose();
      this.profiler = undefined;
      this.levelStreams = this.levelChoice.streams;
      this.explainTo?.(this.levelChoice.text);
    }
  }

  /**
   * Nodes [from, to] level by level: a level of several nodes is forked to the pool's lanes (node k of the level on
   * lane k mod L, its cuBLAS calls on the lane's handle) and joined back before the next; a level of one node, and
   * convolutions (which fork their samples to the pool themselves), run on the engine's stream. Each node's kernels
   * are the one-stream ones on the same inputs, so the values are one stream's bit for bit.
   */
  private forwardLevels(g: ComputationGraph, from: number, to: number): void {
    const levels = chunkLevels(g, from, to, forwardWorks);
    const pool = this.ctx.streamPool(this.levelStreams);
    const origin = this.ctx.stream;
    const { nodes, starts } = levels;
    for (let k = 0; k < levels.count; k++) {
      const a = starts[k]!;
      const b = starts[k + 1]!;
      let spread = 0;
      for (let q = a; q < b; q++) if (g.op[nodes[q]!] !== Op.Conv2d) spread++;
      if (spread < 2) {
        for (let q = a; q < b; q++) this.nodes.forward(g, nodes[q]!);
        continue;
      }
      const lanes = Math.min(this.levelStreams, spread);
      pool.fork(origin, lanes);
      let j = 0;
      try {
        for (let q = a; q < b; q++) {
          const i = nodes[q]!;
          if (g.op[i] === Op.Conv2d) continue;
          const lane = pool.lane(j++, lanes);
          this.nodes.use(lane.stream, lane.blas);
          this.nodes.forward(g, i);
        }
      } finally {
        this.nodes.use();
        pool.join(origin, lanes);
      }
      for (let q = a; q < b; q++) if (g.op[nodes[q]!] === Op.Conv2d) this.nodes.forward(g, nodes[q]!);
    }
  }

  forwardScalar(e: Expression): number {
    requireScalar(e, "forwardScalar", "e");
    this.forward(e);
    return this.ctx.download(this.at.valPtr[e.id]!, new Float32Array(1))[0]!;
  }

  backward(loss: Expression): void {
    requireScalar(loss, "backward", "loss");
    const g = loss.graph;
    this.forward(loss);
    const driver = this.ctx.device.driver;
    const stream = this.ctx.stream.handle;
    const last = loss.id;
    const top = this.computed - 1;
    // one memset for the whole gradient region of the computed nodes, then the seed dLoss/dLoss = 1
    driver.memsetD32Async(
      this.ctx.pool.ptr(this.gradsOff),
      0,
      g.valueOffset[top]! + g.rows[top]! * g.cols[top]!,
      stream,
    );
    driver.memsetD32Async(this.at.gradPtr[last]!, floatBits(1), 1, stream);
    this.counts.copies += 2;
    if (this.reach.length < g.size) this.reach = new Uint8Array(Math.max(g.size, 2 * this.reach.length));
    const reach = this.reach;
    reach.fill(0, 0, last + 1);
    reach[last] = 1;
    for (let i = last; i >= 0; i--) {
      if (reach[i] === 0) continue;
      const n = g.argCount[i]!;
      const s = g.argStart[i]!;
      for (let a = 0; a < n; a++) reach[g.args[s + a]!] = 1;
      this.nodes.backward(g, i);
    }
    // lookup gradients into the tables, a row's uses added in node order (no atomics: the same sum on every run);
    // unreached lookups add their zeroed gradient (and are not marked touched)
    const gradsPtr = this.ctx.pool.ptr(this.gradsOff);
    for (const c of this.chunks) {
      for (const l of c.lookups) {
        this.nodes.launch(this.k.vp_scatter_add_rows, l.distinct * l.dim, [
          karg.ptr(this.device.gradPtr(l.param)),
          karg.ptr(gradsPtr),
          karg.ptr(l.distinctRowsPtr),
          karg.ptr(l.startsPtr),
          karg.ptr(l.sourcesPtr),
          karg.i32(l.distinct),
          karg.i32(l.dim),
        ]);
      }
    }
  }

  value(e: Expression): Float32Array {
    requireExpression(e, "value", "e");
    this.forward(e);
    return this.ctx.download(this.at.valPtr[e.id]!, new Float32Array(e.size));
  }

  /** The node's gradient from the last backward; for a parameter node, the parameter's accumulated gradient. */
  gradient(e: Expression): Float32Array {
    requireExpression(e, "gradient", "e");
    const g = e.graph;
    if (g !== this.graph || g.generation !== this.generation || e.id >= this.computed) {
      throw new Error("gradient: run backward on this graph first");
    }
    return this.ctx.download(this.at.gradPtr[e.id]!, new Float32Array(e.size));
  }

  update(trainer: Trainer): void {
    this.device.update(trainer);
  }

  /** Sums the gradients over `reducer`'s ranks before every update (DeviceParameters); null: this process alone. */
  setGradientReducer(reducer: GradientReducer | null): void {
    this.device.setGradientReducer(reducer);
  }

  syncToHost(): void {
    this.device.syncToHost();
  }

  syncTrainerToHost(trainer: Trainer): void {
    this.device.syncTrainerToHost(trainer);
  }

  dispose(): void {
    try {
      try {
        this.profiler?.dispose();
        this.nodes.dispose();
      } finally {
        this.device.dispose();
      }
    } finally {
      this.ctx.dispose();
    }
  }

  // ---- layout ----------------------------------------------------------------------------------------------------

  /** Drops the current region and lays out a larger one; the current graph is recomputed from its first node. */
  private relayout(valueFloats: number, auxFloats: number): void {
    const pool = this.ctx.pool;
    pool.reset();
    this.valueCap = 0;
    this.auxCap = 0;
    this.computed = 0;
    this.auxTop = 0;
    this.chunks = [];
    const v = Math.max(MIN_REGION_FLOATS, valueFloats);
    const a = Math.max(MIN_REGION_FLOATS, auxFloats);
    this.valuesOff = pool.alloc(v, "node values");
    this.gradsOff = pool.alloc(v, "node gradients");
    this.auxOff = pool.alloc(a, "inputs, lookup rows and pointer tables of a batch");
    this.valueCap = v;
    this.auxCap = a;
  }

  private growNodeArrays(n: number): void {
    if (n <= this.at.valPtr.length) return;
    const grow = (a: Float64Array) => {
      const b = new Float64Array(Math.max(n, 2 * a.length));
      b.set(a);
      return b;
    };
    this.at.valPtr = grow(this.at.valPtr);
    this.at.gradPtr = grow(this.at.gradPtr);
    this.at.tablePtr = grow(this.at.tablePtr);
  }
}
