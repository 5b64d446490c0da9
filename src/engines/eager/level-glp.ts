// GLP4NN for the eager engine's independent nodes (`streams: "auto"`): the first forward call runs on one stream with
// the resource tracker on every launch (the stream kept ahead of the host by a spin kernel, so that events time the
// kernels), cuBLAS calls' kernels are read by capturing a call into a CUDA graph (src/glp4nn/footprints.ts), and the
// kernel analyser sizes the pool for a level of the graph: every kernel with as many instances as a level has nodes
// (the median over the profiled levels).
//
// Beyond the paper's program, one check: a level on L streams costs the host 2·L event calls more (fork and join,
// each about a launch), so the pool is kept only where the model predicts it faster than one stream by 20% or more:
//   one stream: w · max(T, T_launch)       L streams: max((w + 2L) · T_launch, w · T / L)
// with w the level's nodes and T a node's median kernel time. Where kernels are shorter than a launch (the eager
// engine's usual case) both the program's ⌈T/T_launch⌉ term and this check give one stream.

import { deviceModelOfCuda } from "../../cuda/hw/device-model.js";
import { CudaEvent, type CudaKernel, type CudaStream, type GpuContext, karg } from "../../cuda/index.js";
import {
  analyseConcurrency,
  callProfiles,
  captureFootprint,
  explainChoice,
  hardwareQueues,
  type IntegerSolver,
  type KernelProfile,
  type KernelShape,
  median,
  ResourceTracker,
} from "../../glp4nn/index.js";
import type { LaunchTracker } from "./node-kernels.js";

const SPIN_SOURCE = `extern "C" __global__ void vp_level_spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}`;

/** About 2 ms on a 1.7 GHz GPU: the profiled launches are queued while it runs. */
const SPIN_CYCLES = 4_000_000;

/**
 * The pool is kept only where predicted at least this much faster than one stream: more than the prediction's error.
 * With 3% the Tree-LSTM at batch 128 took 2 streams in two H100 runs and measured +1.0% and −3.8% against one
 * stream. With 10% it took 2 streams once, predicted 10.8% faster (launch 4.75 µs measured on one stream, kernels
 * 5.54 µs), and measured 4.0% slower (the median over its batches): the model's launch cost is one stream's, and
 * launches that alternate between streams and cuBLAS handles cost the host more (docs/journal/glp4nn.md).
 */
export const REQUIRED_GAIN = 0.2;

export interface LevelChoice {
  readonly streams: number;
  /** The analyser's pool size before the fork/join check. */
  readonly analysed: number;
  readonly launchUs: number;
  readonly width: number;
  readonly text: string;
}

/** The predicted time of a level of `width` nodes of `kernelUs` each on `streams` streams, µs (top of this file). */
export function levelTimeUs(width: number, kernelUs: number, launchUs: number, streams: number): number {
  if (streams <= 1) return width * Math.max(kernelUs, launchUs);
  return Math.max((width + 2 * streams) * launchUs, (width * kernelUs) / streams);
}

/** The pool size to use: the analyser's, or 1 where the fork/join cost eats the predicted gain. */
export function levelStreams(analysed: number, width: number, kernelUs: number, launchUs: number): number {
  if (analysed <= 1) return 1;
  const one = levelTimeUs(width, kernelUs, launchUs, 1);
  const pooled = levelTimeUs(width, kernelUs, launchUs, analysed);
  return pooled <= (1 - REQUIRED_GAIN) * one ? analysed : 1;
}

/** Tracks the launches of profiled forward calls; see the top of this file. */
export class LevelProfiler implements LaunchTracker {
  private readonly tracker = new ResourceTracker<CudaStream>({ event: () => CudaEvent.create() });
  private readonly seen = new Map<string, number>();
  private readonly footprints = new Map<string, KernelShape[]>();
  readonly widths: number[] = [];

  constructor(private readonly ctx: GpuContext) {}

  /** Keeps the stream busy while a profiled forward is queued. */
  start(): void {
    const spin = this.ctx.kernels("vpps_level_spin.cu", SPIN_SOURCE, ["vp_level_spin"] as const).kernels.vp_level_spin;
    spin.launch({ grid: 1, block: 1, stream: this.ctx.stream }, [karg.u64(SPIN_CYCLES)]);
  }

  launch(kernel: CudaKernel, shape: { grid: number; block: number }, stream: CudaStream, launch: () => void): void {
    this.tracker.launch(kernel, shape, stream, launch);
  }

  timeCall(name: string, stream: CudaStream, call: () => void): void {
    const n = (this.seen.get(name) ?? 0) + 1;
    this.seen.set(name, n);
    // the second call (the first loads cuBLAS's kernels): captured alone, not run, for its kernels' footprint
    if (n === 2) {
      const shapes = captureFootprint(stream, call);
      if (shapes !== undefined) this.footprints.set(name, shapes);
    }
    this.tracker.timeCall(name, stream, call);
  }

  /** Whether enough was seen to analyse: every kernel timed, at least one level. */
  ready(): boolean {
    return this.widths.length > 0 && this.tracker.records().length > 0;
  }

  /** Collects the timings (waits for the profiled work) and runs the analysis. */
  analyse(solver: IntegerSolver): LevelChoice {
    this.tracker.collect();
    const width = Math.max(1, Math.round(median(this.widths)));
    const kernels: KernelProfile[] = this.tracker.profiles(width);
    const opaque: string[] = [];
    for (const c of this.tracker.opaque()) {
      const shapes = this.footprints.get(c.name);
      if (shapes === undefined) opaque.push(c.name);
      else kernels.push(...callProfiles(c.name, shapes, c.durationUs, width));
    }
    const launchUs = this.tracker.launchUs();
    const device = deviceModelOfCuda(this.ctx.device.props);
    if (kernels.length === 0) {
      return { streams: 1, analysed: 1, launchUs, width, text: "GLP4NN: no kernel profiled; 1 stream" };
    }
    let choice: ReturnType<typeof analyseConcurrency>;
    try {
      choice = analyseConcurrency(
        {
          label: `a level of the graph (median ${width} nodes)`,
          kernels,
          device,
          launchUs,
          connections: hardwareQueues(),
        },
        solver,
      );
    } catch (e) {
      // a profile the program refuses (the message names the kernel and the field): one stream
      const why = e instanceof Error ? e.message : String(e);
      return { streams: 1, analysed: 1, launchUs, width, text: `GLP4NN: no analysis (${why}); 1 stream` };
    }
    const kernelUs = median(kernels.map((k) => k.durationUs));
    const streams = levelStreams(choice.poolSize, width, kernelUs, launchUs);
    const one = levelTimeUs(width, kernelUs, launchUs, 1);
    const pooled = levelTimeUs(width, kernelUs, launchUs, choice.poolSize);
    const lines = [
      explainChoice(choice),
      `fork/join: a level on L streams costs 2·L event calls more; median kernel ${kernelUs.toFixed(2)} µs, ` +
        `launch ${launchUs.toFixed(2)} µs, ${width} nodes: one stream ${one.toFixed(1)} µs, ${choice.poolSize} streams ` +
        `${pooled.toFixed(1)} µs per level`,
      `eager engine: ${streams} stream(s) for the independent nodes of each level` +
        (streams === choice.poolSize ? "" : ` (the pool's predicted gain is under ${100 * REQUIRED_GAIN}%)`),
    ];
    if (opaque.length > 0) lines.push(`left out (kernels not readable on this driver): ${opaque.join(", ")}`);
    return { streams, analysed: choice.poolSize, launchUs, width, text: lines.join("\n") };
  }

  dispose(): void {
    this.tracker.dispose();
  }
}
