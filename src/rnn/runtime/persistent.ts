/**
 * One persistent recurrent layer direction on a GPU: the recurrent part as one persistent launch (codegen/dense-*.ts)
 * forward and one backward, between the GEMMs of RnnLayerBase (layer-base.ts: the input projection before, the weight
 * gradients after). The layer's layouts (the widest, and replicated ones for a small layer), its creation (planned
 * again where ptxas spills), and its launches: each picks its layout, replica count, shared memory and loop, and
 * passes the kernel's arguments by name (codegen/params.ts). The kernels themselves are built and kept by
 * persistent-builds.ts. Everything is queued on one stream; nothing here waits except `checkStatus`.
 */

import {
  barrierTimeoutMessage,
  GRID_ERRORS,
  PersistentKernelError,
  readStatusError,
  STATUS_WORDS,
} from "../../codegen/grid-barrier.js";
import { type DeviceModel, deviceModelOfCuda } from "../../cuda/hw/device-model.js";
import { KernelSpillError, PinnedBuffer } from "../../cuda/index.js";
import { UserError } from "../../util/errors.js";
import {
  clustered,
  clusterSize,
  groupRows,
  kernelArgs,
  PENDING_BITS,
  PERSISTENT_BACKWARD_PARAMS,
  PERSISTENT_FORWARD_PARAMS,
  PHASE_GLOBAL,
  PHASE_MAX_CTAS,
  PHASE_NAMES,
  RNN_ERRORS,
  RNN_KERNEL_NAMES,
  type RnnKernelOptions,
  sharedBytes,
} from "../codegen/index.js";
import {
  BATCH_TILE,
  chooseRnnLaunch,
  fitsWithin,
  largestPersistentHidden,
  pipelinedBackward,
  pipelinedForward,
  planRnnLayer,
  planUntilNoSpill,
  type RnnCellName,
  type RnnKernelPlan,
  type RnnLayout,
  rnnLayouts,
  rnnPipelineSetting,
  type WeightPrecision,
} from "../plan/index.js";
import {
  type BackwardArgs,
  type ForwardArgs,
  RnnDoesNotFitError,
  type RnnGpu,
  RnnLayerBase,
  type RnnWorkspace,
} from "./layer-base.js";
import {
  type LayoutKernels,
  type LoadedKernel,
  type PersistentBuildOptions,
  PersistentBuilds,
  stderrNotice,
} from "./persistent-builds.js";

/** Options of a layer: its kernels' (RnnKernelOptions) and how many replicas its launches run. */
export interface PersistentRnnOptions extends PersistentBuildOptions {
  /**
   * Replicas per launch where the layer allows (`chooseRnnLaunch`'s `forced`; 1: the widest layout only); unset:
   * VPPS_RNN_REPLICAS if set, else the cost model picks per batch.
   */
  readonly replicas?: number;
  /**
   * Whether launches of one replica over several batch tiles run the pipelined tile loops (`pipelinedForward`,
   * `pipelinedBackward`); unset: on unless VPPS_RNN_PIPELINE=0 (for comparisons).
   */
  readonly pipeline?: boolean;
  /**
   * The most CTAs a launch may use, so that a concurrent persistent launch (the other direction of a bidirectional
   * layer, on another stream) is co-resident with it; create refuses a layer with no layout that small.
   */
  readonly maxCtas?: number;
}

/** What a launch over a batch runs: a layout's kernels, how many replicas, and the shared memory it needs. */
interface LaunchSetup {
  readonly k: LayoutKernels;
  readonly replicas: number;
  readonly plan: RnnKernelPlan;
  /** Sequences of the largest replica (its per-(unit, sequence) state in shared memory). */
  readonly bcap: number;
  readonly bytes: number;
  readonly lb: number;
  readonly mc: number;
  /** 1: the kernel's pipelined tile loop (a replica's batch spans several tiles; two tile slots of shared memory). */
  readonly pipe: number;
}

/**
 * The compiled kernels of one (cell, hidden, precision) and the launches of a layer direction. A layer has one or
 * more layouts (`rnnLayouts`): the widest spread over all SMs, and for a layer that fills only part of the register
 * file, layouts with more units per CTA whose replicas run a batch's sequences side by side. Each launch picks the
 * layout and replica count for its batch (`chooseRnnLaunch`; VPPS_RNN_REPLICAS=N forces N, 1 = no replicas); a
 * layout's kernels are compiled the first time a batch needs them.
 */
export class PersistentRnnLayer extends RnnLayerBase {
  readonly path = "persistent" as const;
  readonly model: DeviceModel;
  private readonly statusBack: PinnedBuffer;
  /**
   * Whether launches use the CTA pairs' multicast copies (where the batch fits one group): on, unless
   * VPPS_RNN_MULTICAST=0 (for comparisons; the kernels are clustered either way).
   */
  readonly multicast = process.env.VPPS_RNN_MULTICAST !== "0";
  /**
   * Whether launches whose one replica holds several batch tiles of sequences run the pipelined tile loops
   * (each tile's loads issued a tile ahead, hidden behind the previous tile's product): `options.pipeline`, else on
   * unless VPPS_RNN_PIPELINE=0 (for comparisons).
   */
  readonly pipeline: boolean;
  /** VPPS_RNN_REPLICAS=N: every launch runs N replicas where the layer allows (comparisons); unset: the model picks. */
  readonly forcedReplicas: number | undefined;
  /** The module of each kind's last launch (the layout's build, or its pipelined one), for phases(). */
  private readonly lastModule: Partial<Record<"forward" | "backward", LoadedKernel["module"]>> = {};
  /** The compiled kernels of each layout (persistent-builds.ts). */
  private readonly builds: PersistentBuilds;
  /**
   * The layouts launches choose from: `layouts` less those whose kernels spilled when compiled (the planner's
   * register estimate is a model; NVRTC may need a few more registers than nvcc — such a layout is dropped and the
   * next best used, never an error).
   */
  private usable: RnnLayout[];
  /** The layout and replicas of the last launch of each kernel, for `phases` and the benchmark. */
  private readonly last: Partial<Record<"forward" | "backward", LaunchSetup>> = {};
  /** Every layout the planner fits, widest first (with clusters of 4: the widest whose grid they divide). */
  readonly layouts: readonly RnnLayout[];
  /** The widest layout's plans (one CTA per SM, no replicas). */
  readonly forwardPlan: RnnKernelPlan;
  readonly backwardPlan: RnnKernelPlan;

  private constructor(
    gpu: RnnGpu,
    cell: RnnCellName,
    hidden: number,
    readonly precision: WeightPrecision,
    planned: readonly RnnLayout[],
    private readonly options: PersistentRnnOptions,
  ) {
    super(gpu, cell, hidden);
    this.model = deviceModelOfCuda(gpu.device.props);
    this.builds = new PersistentBuilds({
      gpu,
      cell,
      hidden,
      precision,
      model: this.model,
      options,
      compile: (name, source) => this.compile(name, source),
      modules: this.modules,
    });
    try {
      this.layouts = [this.builds.widestForQuads(planned[0]!), ...planned.slice(1)];
      this.builds.kernelsOf(this.layouts[0]!);
    } catch (e) {
      // refused (a spill: create may plan again): nothing of this layer stays loaded
      for (const m of this.modules.splice(0)) m.unload();
      throw e;
    }
    const layouts = this.layouts;
    this.forwardPlan = layouts[0]!.forward;
    this.backwardPlan = layouts[0]!.backward;
    this.usable = [...layouts];
    const env = process.env.VPPS_RNN_REPLICAS;
    const forced = options.replicas ?? (env ? Number(env) : undefined);
    if (forced !== undefined && !(Number.isInteger(forced) && forced >= 1)) {
      const from = options.replicas !== undefined ? "option 'replicas'" : "VPPS_RNN_REPLICAS";
      throw new UserError(
        `persistent ${cell}: ${from} must be a positive integer (replicas per launch); got '${
          options.replicas ?? env
        }'`,
      );
    }
    this.forcedReplicas = forced;
    this.pipeline = rnnPipelineSetting(options.pipeline, process.env.VPPS_RNN_PIPELINE);
    this.statusBack = PinnedBuffer.alloc(4 * STATUS_WORDS);
  }

  /** NVRTC's logs of the widest layout's kernels (with ptxas's register report), for tests and `vpps plan rnn`. */
  get compileLogs(): { forward: string; backward: string } {
    return this.builds.kernelsOf(this.layouts[0]!).logs;
  }

  /** Plans, compiles and loads the kernels; a layer that does not fit is refused with the largest that does. */
  static create(
    gpu: RnnGpu,
    cell: RnnCellName,
    hidden: number,
    precision: WeightPrecision = "fp32",
    options: PersistentRnnOptions = {},
  ): PersistentRnnLayer {
    const model = deviceModelOfCuda(gpu.device.props);
    const plan = planRnnLayer(cell, hidden, model, precision);
    if (!plan.fits) {
      const largest = largestPersistentHidden(cell, model, precision);
      throw new RnnDoesNotFitError(
        `persistent ${cell}, hidden ${hidden}, ${precision} weights on ${model.name}: ${plan.reason}; the largest ` +
          `that fits is hidden ${largest}`,
      );
    }
    // VPPS_RNN_CLUSTER=0/1: the kernels without / with clusters (and so multicast) whatever the plan, for comparisons;
    // VPPS_RNN_CLUSTER_SIZE=2/4: CTAs per cluster
    const env = process.env.VPPS_RNN_CLUSTER;
    const size = process.env.VPPS_RNN_CLUSTER_SIZE;
    if (size !== undefined && size !== "" && size !== "2" && size !== "4") {
      throw new UserError(`VPPS_RNN_CLUSTER_SIZE must be 2 or 4 (CTAs per cluster); got '${size}'`);
    }
    const opts = {
      ...options,
      ...(env === "0" || env === "1" ? { cluster: env === "1" } : {}),
      ...(size === "2" || size === "4" ? { clusterSize: Number(size) as 2 | 4 } : {}),
    };
    // the planner's register estimate is a model: where ptxas spills the widest layout's kernels (a refusal at its
    // first compile), the layer is re-planned with a few registers per thread kept free, then more; a layer that
    // spills even so does not fit (the backend then runs it on the non-persistent path and says so)
    return planUntilNoSpill({
      base: opts.headroom ?? 0,
      what: `persistent ${cell} ${hidden}`,
      notice: opts.notice ?? stderrNotice,
      attempt: (headroom) => {
        const layouts = rnnLayouts(cell, hidden, model, precision, headroom);
        if (layouts.length === 0) {
          throw new RnnDoesNotFitError(
            `persistent ${cell}, hidden ${hidden}, ${precision} weights on ${model.name}: its planned kernels spill ` +
              `registers to local memory, and no layout fits with ${headroom} registers per thread kept free`,
          );
        }
        if (opts.maxCtas !== undefined && !fitsWithin(layouts, opts.maxCtas)) {
          throw new RnnDoesNotFitError(
            `persistent ${cell}, hidden ${hidden}: no layout runs within ${opts.maxCtas} CTAs (the narrowest ` +
              `needs ${layouts.at(-1)!.forward.ctas})`,
          );
        }
        return new PersistentRnnLayer(gpu, cell, hidden, precision, layouts, { ...opts, headroom });
      },
      giveUp: (headroom, e) =>
        new RnnDoesNotFitError(
          `persistent ${cell}, hidden ${hidden}, ${precision} weights: its kernels spill registers to local memory ` +
            `even with ${headroom} registers per thread kept free (${e.message})`,
        ),
    });
  }

  /** The layout and replicas a launch over `batch` sequences uses (the benchmark prints them). */
  launchFor(batch: number): {
    readonly unitsPerCta: number;
    readonly ctas: number;
    readonly replicas: number;
    /** CTAs per cluster of the forward and backward kernels (0: none). */
    readonly cluster: readonly [number, number];
  } {
    const c = this.choose(batch);
    return {
      unitsPerCta: c.layout.forward.unitsPerCta,
      ctas: c.layout.forward.ctas,
      replicas: c.replicas,
      cluster: [clusterSize(c.layout.forward, c.k.options), clusterSize(c.layout.backward, c.k.options)],
    };
  }

  /** The layout (compiled) and replicas for a batch; a layout whose kernels spill is dropped and the choice redone. */
  private choose(batch: number): { layout: RnnLayout; replicas: number; k: LayoutKernels } {
    for (;;) {
      const c = chooseRnnLaunch(this.usable, batch, this.forcedReplicas, this.options.maxCtas);
      try {
        return { ...c, k: this.builds.kernelsOf(c.layout) };
      } catch (e) {
        if (!(e instanceof KernelSpillError) || c.layout === this.layouts[0] || this.usable.length === 1) throw e;
        this.usable = this.usable.filter((l) => l !== c.layout);
      }
    }
  }

  /**
   * Instrumented layers (options.phases): zeroes the phase counters of a kernel before the launches to profile, or
   * (after them, stream synchronized) returns the cycles per CTA of each phase (PHASE_NAMES), averaged over the CTAs
   * of the last launch (its layout's module).
   */
  phases(kind: "forward" | "backward", reset = false): Record<(typeof PHASE_NAMES)[number], number> | null {
    if (!this.options.phases) throw new Error("phases: this layer was not built with options.phases");
    const d = this.gpu.device.driver;
    const setup = this.last[kind];
    const launched = setup ? this.lastModule[kind] : undefined;
    const modules = launched ? [launched] : this.builds.modulesOf(kind, false);
    if (reset) {
      for (const m of this.builds.modulesOf(kind, true)) {
        const g = m.getGlobal(PHASE_GLOBAL);
        d.memsetD32Async(g.ptr, 0, g.bytes / 4, this.stream.handle);
      }
      return null;
    }
    this.stream.synchronize();
    const g = modules[0]!.getGlobal(PHASE_GLOBAL);
    const host = new BigUint64Array(PHASE_MAX_CTAS * PHASE_NAMES.length);
    d.memcpyDtoH(host, g.ptr);
    const ctas = setup ? Math.min(PHASE_MAX_CTAS, setup.plan.ctas * setup.replicas) : this.forwardPlan.ctas;
    const out = {} as Record<(typeof PHASE_NAMES)[number], number>;
    PHASE_NAMES.forEach((name, i) => {
      let sum = 0;
      for (let c = 0; c < ctas; c++) sum += Number(host[c * PHASE_NAMES.length + i]);
      out[name] = sum / ctas;
    });
    return out;
  }

  /**
   * The recurrent part alone (after inputProjection): one persistent launch. `ctas` (tests only) launches the widest
   * layout, one replica, with fewer CTAs than its plan, as if some never became resident: their units never arrive
   * and the launch must end with an error.
   */
  forwardRecurrent(a: ForwardArgs, ctas?: number): void {
    const { total, batchSizes } = a.steps;
    this.fillPending(a.y, total, this.hidden, a.ldy);
    this.gpu.device.driver.memsetD32Async(a.ws.status, 0, STATUS_WORDS, this.stream.handle);
    const B = batchSizes[0] ?? 0;
    const sh = this.setup("forward", B, ctas !== undefined);
    const p = sh.plan;
    const grid = ctas ?? p.ctas * sh.replicas;
    const { fn, module } = this.kernelFor("forward", sh);
    this.lastModule.forward = module;
    const args = kernelArgs(
      PERSISTENT_FORWARD_PARAMS,
      {
        w: a.weights.whh,
        xw: a.ws.xw,
        bhn: a.weights.bhh + 4 * 2 * this.hidden, // GRU's b_hn (unused otherwise)
        h0: a.h0,
        c0: a.c0,
        y: a.y,
        ldy: a.ldy,
        hn: a.hn,
        cn: a.cn,
        saved: a.ws.saved,
        train: a.train ? 1 : 0,
        batch_sizes: a.steps.dBatchSizes,
        offsets: a.steps.dOffsets,
        steps: batchSizes.length,
        total,
        reverse: a.reverse ? 1 : 0,
        bcap: sh.bcap,
        lb: sh.lb,
        status: a.ws.status,
        mc: sh.mc,
        nrep: sh.replicas,
        pipe: sh.pipe,
      },
      RNN_KERNEL_NAMES.forward,
    );
    fn.launch({ grid, block: p.threads, sharedBytes: sh.bytes, stream: this.stream }, args);
  }

  /**
   * The layout, replicas, shared memory and rows per wait of a launch over `batch` sequences (`widest`: the widest
   * layout, one replica), refused in one line beyond what a CTA can have.
   */
  private setup(kind: "forward" | "backward", B: number, widest = false): LaunchSetup {
    const choice = widest
      ? { layout: this.layouts[0]!, replicas: 1, k: this.builds.kernelsOf(this.layouts[0]!) }
      : this.choose(B);
    const k = choice.k;
    const plan = choice.layout[kind];
    const bcap = Math.ceil(B / choice.replicas);
    const sh = this.sharedFor(plan, bcap, k.staticShared[kind], k.options, choice.replicas);
    const out = { k, replicas: choice.replicas, plan, bcap, ...sh };
    this.last[kind] = out;
    return out;
  }

  /** The build a launch runs: its layout's, or the deferred-cell one where its replica holds more than two tiles. */
  private kernelFor(kind: "forward" | "backward", sh: LaunchSetup): LoadedKernel {
    return this.builds.kernelFor(kind, sh.k, sh.pipe !== 0 && pipelinedForward(sh.replicas, sh.bcap));
  }

  /**
   * Shared memory and rows per wait of a launch whose replicas hold at most `batch` sequences each, refused in one
   * line beyond what a CTA can have.
   */
  private sharedFor(
    plan: RnnKernelPlan,
    batch: number,
    staticShared: number,
    options: RnnKernelOptions,
    replicas: number,
  ): { bytes: number; lb: number; mc: number; pipe: number } {
    // the kernel's static shared memory (a clustered build's two barriers) counts against the same limit
    const max = this.gpu.device.props.sharedPerBlockOptin - staticShared;
    const pipelined = plan.kind === "backward" ? pipelinedBackward(replicas, batch) : pipelinedForward(replicas, batch);
    if (this.pipeline && pipelined) {
      // several tiles in a launch of one replica: the pipelined loops, one tile per wait in two slots. Measured on an
      // H100 against the step loops: the backward's 10–25% faster for the widest layouts (LSTM 1152, GRU 1152, RNN
      // 2304 at batch 16 and 64; RNN 1792 even), 4–11% slower for replicated ones (RNN 1152 33 × 4, LSTM 512 26 × 5 at
      // batch 64), which keep the step loop; the forward's (from three tiles) 3–35% faster at batch 12 to 64 for the
      // widest layouts.
      const bytes = sharedBytes(plan, batch, 2 * BATCH_TILE);
      if (bytes <= max) return { bytes, lb: 2 * BATCH_TILE, mc: 0, pipe: 1 };
    }
    if (this.multicast && clustered(plan, options)) {
      // the pair's multicast: the whole batch in one group, two buffers (a step's copies land in the other)
      const full = Math.max(1, Math.ceil(batch / BATCH_TILE)) * BATCH_TILE;
      const bytes = sharedBytes(plan, batch, 2 * full);
      if (bytes <= max) return { bytes, lb: full, mc: 1, pipe: 0 };
    }
    const lb = groupRows(plan, batch, max);
    if (lb === 0) {
      let most = 1;
      while (groupRows(plan, most * 2, max) > 0) most *= 2;
      while (groupRows(plan, most + 1, max) > 0) most++;
      throw new RnnDoesNotFitError(
        `persistent ${this.cell} ${plan.kind} kernel (hidden ${this.hidden}): a batch of ${batch} sequences needs ` +
          `${sharedBytes(plan, batch)} bytes of shared memory per CTA, more than the ${max} a CTA can have; split ` +
          `it into batches of at most ${most}`,
      );
    }
    return { bytes: sharedBytes(plan, batch, lb), lb, mc: 0, pipe: 0 };
  }

  /** The recurrent backward launch alone (gate gradients into the workspace, dh0/dc0). */
  backwardRecurrent(a: BackwardArgs): void {
    const { total, batchSizes } = a.steps;
    const GH = this.G * this.hidden;
    this.fillPending(a.ws.dpreH, total, GH, GH);
    this.gpu.device.driver.memsetD32Async(a.ws.status, 0, STATUS_WORDS, this.stream.handle);
    const B = batchSizes[0] ?? 0;
    const sh = this.setup("backward", B);
    const p = sh.plan;
    const { fn, module } = this.kernelFor("backward", sh);
    this.lastModule.backward = module;
    const args = kernelArgs(
      PERSISTENT_BACKWARD_PARAMS,
      {
        w: a.weights.whh,
        saved: a.ws.saved,
        y: a.y,
        ldy: a.ldy,
        c0: a.c0,
        dy: a.dy,
        lddy: a.lddy,
        dhn: a.dhn,
        dcn: a.dcn,
        dpre_h: a.ws.dpreH,
        dpre_x: a.ws.dpreX,
        dh0: a.dh0,
        dc0: a.dc0,
        batch_sizes: a.steps.dBatchSizes,
        offsets: a.steps.dOffsets,
        steps: batchSizes.length,
        total,
        reverse: a.reverse ? 1 : 0,
        bcap: sh.bcap,
        lb: sh.lb,
        status: a.ws.status,
        mc: sh.mc,
        nrep: sh.replicas,
        pipe: sh.pipe,
      },
      RNN_KERNEL_NAMES.backward,
    );
    fn.launch({ grid: p.ctas * sh.replicas, block: p.threads, sharedBytes: sh.bytes, stream: this.stream }, args);
  }

  /** Waits for the stream and throws PersistentKernelError if a launch reported a failure. */
  checkStatus(ws: RnnWorkspace): void {
    const d = this.gpu.device.driver;
    d.memcpyDtoHAsync(this.statusBack.u8, ws.status, 4 * STATUS_WORDS, this.stream.handle);
    this.stream.synchronize();
    const e = readStatusError(this.statusBack.i32);
    if (!e) return;
    const what = `persistent ${this.cell} kernel, CTA ${e.cta}`;
    const message =
      e.code === RNN_ERRORS.pollTimeout
        ? `${what}: step ${e.a} waited too long for row ${e.b}, column ${e.c} of another CTA's output ` +
          "(a CTA failed earlier or the grid is not co-resident)"
        : e.code === GRID_ERRORS.barrierTimeout
          ? `${what}: ${barrierTimeoutMessage(e, "a step")}`
          : `${what}: error code ${e.code}`;
    throw new PersistentKernelError(message, e.code, e.cta, -1, e.words);
  }

  override dispose(): void {
    super.dispose();
    this.statusBack.free();
  }
}

/** The pending mark's bits, for tests that look at a buffer between launches. */
export const RNN_PENDING_BITS = PENDING_BITS;
