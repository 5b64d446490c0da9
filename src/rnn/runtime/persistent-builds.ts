/**
 * The compiled kernels of one persistent layer direction: per layout (units per CTA) the forward and backward
 * builds, compiled and checked the first time a launch needs them (refused where ptxas spills or the CTAs cannot all
 * be resident), the builds with the deferred-cell pipelined loops beside them, and the choice between clusters of 4
 * and pairs. The layer (persistent.ts) picks what to launch; this file builds and keeps.
 */

import { checkNoSpills, KernelSpillError } from "../../cuda/compile/ptxas-report.js";
import type { DeviceModel } from "../../cuda/hw/device-model.js";
import { type CompileResult, type CudaKernel, loadModule } from "../../cuda/index.js";
import {
  backwardKernelSource,
  clustered,
  clusterSize,
  forwardKernelSource,
  RNN_KERNEL_NAMES,
  type RnnKernelOptions,
  sharedBytes,
} from "../codegen/index.js";
import {
  planRnnLayer,
  type RnnCellName,
  type RnnKernelPlan,
  type RnnLayout,
  type WeightPrecision,
} from "../plan/index.js";
import { RnnDoesNotFitError, type RnnGpu } from "./layer-base.js";

/** Build options of a layer's kernels (RnnKernelOptions), and what happens where they spill. */
export interface PersistentBuildOptions extends RnnKernelOptions {
  /**
   * Registers per thread the planner keeps free beyond its estimate (default 0). `create` raises it, up to
   * SPILL_HEADROOM_STEPS (plan/spill-retry.ts), where ptxas spilled the widest layout's kernels; the layouts are
   * planned with it.
   */
  readonly headroom?: number;
  /** Where one-line notices go (a build or layout replaced because it spilled; default: stderr). */
  readonly notice?: (line: string) => void;
}

export const stderrNotice = (line: string) => process.stderr.write(`${line}\n`);

/** The compiled kernels of one layout (units per CTA) of a layer. */
export interface LayoutKernels {
  readonly layout: RnnLayout;
  readonly fwd: CudaKernel;
  readonly bwd: CudaKernel;
  readonly modules: Record<"forward" | "backward", ReturnType<typeof loadModule>>;
  /** Each kernel's static shared memory, which counts against the per-CTA limit with the dynamic. */
  readonly staticShared: Record<"forward" | "backward", number>;
  readonly logs: { forward: string; backward: string };
  /** The options it was built with (a layout may fall back from clusters of 4 to pairs). */
  readonly options: PersistentBuildOptions;
}

/** A loaded kernel and its module. */
export interface LoadedKernel {
  readonly fn: CudaKernel;
  readonly module: ReturnType<typeof loadModule>;
}

/** What the builds need of their layer: its device, cell and size, options, and where loaded modules are kept. */
export interface BuildContext {
  readonly gpu: RnnGpu;
  readonly cell: RnnCellName;
  readonly hidden: number;
  readonly precision: WeightPrecision;
  readonly model: DeviceModel;
  readonly options: PersistentBuildOptions;
  /** The layer's NVRTC compile (its kernel cache). */
  compile(name: string, source: string): CompileResult;
  /** The layer's loaded modules, unloaded with it; a build adds its own and takes out those it refuses. */
  readonly modules: { unload(): void }[];
}

/** The builds of one layer, by layout. */
export class PersistentBuilds {
  /** Compiled layouts by units per CTA; the widest spread (the layer's layouts[0]) is compiled at its creation. */
  private readonly compiled = new Map<number, LayoutKernels>();
  /**
   * The builds with a pipelined loop whose cells are deferred (RnnKernelOptions.pipelinedForward, deferredBackward),
   * by kind and the layout kernels they were built beside: compiled when a launch first needs one.
   */
  private readonly pipelinedBuilds = {
    forward: new Map<LayoutKernels, LoadedKernel>(),
    backward: new Map<LayoutKernels, LoadedKernel>(),
  };

  constructor(private readonly ctx: BuildContext) {}

  /** The modules of one kind: every layout's build, and with `pipelined` the pipelined builds too (phase counters). */
  modulesOf(kind: "forward" | "backward", pipelined: boolean): LoadedKernel["module"][] {
    const out = [...this.compiled.values()].map((k) => k.modules[kind]);
    if (pipelined) out.push(...[...this.pipelinedBuilds[kind].values()].map((d) => d.module));
    return out;
  }

  /**
   * The kernels of a layout, compiled and checked the first time. Clusters of 4 (VPPS_RNN_CLUSTER_SIZE=4) are kept
   * only where the device holds all of a launch's clusters at once (cuOccupancyMaxActiveClusters; the GPCs differ in
   * SM count), else the layout is built with pairs.
   */
  kernelsOf(layout: RnnLayout): LayoutKernels {
    const have = this.compiled.get(layout.forward.unitsPerCta);
    if (have) return have;
    let k = this.build(layout, this.ctx.options);
    const why = this.quadsMissing(layout, k);
    if (why.length > 0) {
      // opt-in (VPPS_RNN_CLUSTER_SIZE=4): say why it is not used
      process.stderr.write(
        `vpps: persistent ${this.ctx.cell} ${this.ctx.hidden}: pairs instead of clusters of 4 (${why.join("; ")})\n`,
      );
      this.unloadKernels(k);
      k = this.build(layout, { ...this.ctx.options, clusterSize: 2 });
    }
    this.compiled.set(layout.forward.unitsPerCta, k);
    return k;
  }

  /** Why a build's clusters of 4 cannot all be resident at once (empty: they can, or it has none). */
  private quadsMissing(layout: RnnLayout, k: LayoutKernels): string[] {
    const why: string[] = [];
    for (const kind of ["forward", "backward"] as const) {
      const p = layout[kind];
      if (clusterSize(p, k.options) !== 4) continue;
      const grid = p.ctas * p.replicas;
      const n = (kind === "forward" ? k.fwd : k.bwd).maxActiveClusters(grid, p.threads, sharedBytes(p, 1));
      if (n === undefined || n * 4 < grid) {
        why.push(`${kind}: ${grid / 4} clusters of 4 needed, ${n ?? "unknown"} resident at once`);
      }
    }
    return why;
  }

  private unloadKernels(k: LayoutKernels): void {
    for (const m of Object.values(k.modules)) {
      m.unload();
      this.ctx.modules.splice(this.ctx.modules.indexOf(m), 1);
    }
  }

  /**
   * With clusters of 4 asked for: the widest layout, or one with a few more units per CTA (the same registers per
   * thread) whose grid divides into clusters of 4 that are all resident at once — e.g. LSTM 1152: 128 CTAs need 32
   * clusters, an H100's GPCs hold 30; 10 units per CTA make 116 CTAs, 29 clusters.
   */
  widestForQuads(widest: RnnLayout): RnnLayout {
    const quads = { ...this.ctx.options, clusterSize: 4 as const };
    if (
      this.ctx.options.clusterSize !== 4 ||
      (!clustered(widest.forward, quads) && !clustered(widest.backward, quads))
    ) {
      return widest;
    }
    const u0 = widest.forward.unitsPerCta;
    for (let u = u0; u <= u0 + 4; u++) {
      const p =
        u === u0
          ? { fits: true as const, ...widest }
          : planRnnLayer(
              this.ctx.cell,
              this.ctx.hidden,
              this.ctx.model,
              this.ctx.precision,
              1,
              u,
              this.ctx.options.headroom ?? 0,
            );
      if (!p.fits || p.forward.unitsPerCta !== u || p.forward.ctas % 4 !== 0) continue;
      if (
        p.forward.weightRegisters > widest.forward.weightRegisters ||
        p.backward.weightRegisters > widest.backward.weightRegisters
      ) {
        continue;
      }
      const layout = { forward: p.forward, backward: p.backward };
      const k = this.build(layout, this.ctx.options);
      if (this.quadsMissing(layout, k).length === 0) {
        this.compiled.set(u, k);
        return layout;
      }
      this.unloadKernels(k);
    }
    return widest;
  }

  private build(layout: RnnLayout, options: PersistentBuildOptions): LayoutKernels {
    const name = this.kernelName(layout, options);
    const f = this.load(`${name}_fwd`, layout.forward, forwardKernelSource(layout.forward, options));
    let b: ReturnType<PersistentBuilds["load"]>;
    try {
      b = this.load(`${name}_bwd`, layout.backward, backwardKernelSource(layout.backward, options));
    } catch (e) {
      f.module.unload();
      this.ctx.modules.splice(this.ctx.modules.indexOf(f.module), 1);
      throw e;
    }
    return {
      layout,
      fwd: f.fn,
      bwd: b.fn,
      modules: { forward: f.module, backward: b.module },
      staticShared: { forward: f.staticShared, backward: b.staticShared },
      logs: { forward: f.log, backward: b.log },
      options,
    };
  }

  private kernelName(layout: RnnLayout, options: PersistentBuildOptions): string {
    const tag =
      (options.phases ? "_phases" : "") +
      (options.cluster === undefined ? "" : `_cluster${+options.cluster}`) +
      (options.clusterSize === 4 ? "_cs4" : "") +
      `_u${layout.forward.unitsPerCta}`;
    return `rnn_${this.ctx.cell}_${this.ctx.hidden}_${this.ctx.precision}${tag}`;
  }

  /**
   * Compiles and loads one kernel of a plan, refusing one that spills or whose CTAs cannot all be resident at once,
   * and lets it have all the dynamic shared memory a block can (the launch's batch decides how much it takes).
   */
  private load(name: string, plan: RnnKernelPlan, source: string) {
    const { cell, hidden, gpu } = this.ctx;
    const c = this.ctx.compile(name, source);
    const module = loadModule(c.cubin, `rnn ${plan.kind}`);
    this.ctx.modules.push(module);
    const fn = module.getFunction(plan.kind === "forward" ? RNN_KERNEL_NAMES.forward : RNN_KERNEL_NAMES.backward);
    const staticShared = fn.attributes().sharedBytes;
    try {
      checkNoSpills(
        `persistent ${cell} ${plan.kind} kernel (hidden ${hidden}, ${plan.unitsPerCta} units per CTA)`,
        fn.attributes(),
        this.ctx.precision === "fp16" ? "use a smaller hidden size" : "use a smaller hidden size or fp16 weights",
      );
      // the largest launch may ask for everything a block can have (its batch decides); residency at the smallest
      // (less the kernel's static shared memory: the multicast barriers)
      fn.setMaxDynamicSharedBytes(gpu.device.props.sharedPerBlockOptin - staticShared);
      const perSm = fn.maxActiveBlocksPerSm(plan.threads, sharedBytes(plan, 1));
      if (perSm < 1 || plan.ctas > perSm * this.ctx.model.smCount) {
        throw new RnnDoesNotFitError(
          `persistent ${cell} ${plan.kind} kernel (hidden ${hidden}): ${plan.ctas} CTAs of ${plan.threads} threads ` +
            `cannot all be resident at once (${perSm} per SM × ${this.ctx.model.smCount} SMs); ` +
            "its steps would wait on CTAs that never start",
        );
      }
    } catch (e) {
      // a refused kernel's module is not kept (the caller may try another layout or build)
      module.unload();
      this.ctx.modules.splice(this.ctx.modules.indexOf(module), 1);
      throw e;
    }
    return { fn, module, staticShared, log: c.log };
  }

  /**
   * The kernel a launch runs: the layout's build, or (`deferred`: a pipelined launch whose replica holds more than two
   * tiles, `pipelinedForward`) the build whose pipelined loop defers each tile's cell past the next tile's wait (RnnKernelOptions
   * pipelinedForward, deferredBackward), compiled the first time a launch needs it. A build of its own: with the
   * forward's pipelined loop in the same kernel the step loop of GRU 1152 measured 28% slower at batch 4 (0.69 →
   * 0.89 ms), and with both backward loops in one kernel the eager one 14% slower at batch 8 (LSTM 1152).
   */
  kernelFor(kind: "forward" | "backward", k: LayoutKernels, deferred: boolean): LoadedKernel {
    const base = { fn: kind === "forward" ? k.fwd : k.bwd, module: k.modules[kind] };
    if (!deferred) return base;
    let d = this.pipelinedBuilds[kind].get(k);
    if (!d) {
      const plan = k.layout[kind];
      const name = `${this.kernelName(k.layout, k.options)}_${kind === "forward" ? "fwd" : "bwd"}_deferred`;
      try {
        d =
          kind === "forward"
            ? this.load(name, plan, forwardKernelSource(plan, { ...k.options, pipelinedForward: true }))
            : this.load(name, plan, backwardKernelSource(plan, { ...k.options, deferredBackward: true }));
      } catch (e) {
        if (!(e instanceof KernelSpillError)) throw e;
        // the pipelined build is an optimisation: where ptxas spills it (LSTM 1024's forward at 512 threads, 8 bytes
        // with NVRTC 13), this layout's launches keep the build that compiled clean, its step loop
        (this.ctx.options.notice ?? stderrNotice)(
          `vpps: persistent ${this.ctx.cell} ${this.ctx.hidden}: the ${kind} kernel's pipelined build spills ` +
            `(${e.localBytes} bytes per thread); its launches of several batch tiles run the step loop instead`,
        );
        d = base;
      }
      this.pipelinedBuilds[kind].set(k, d);
    }
    return d;
  }
}
