// GLP4NN for a convolution layer: the resource tracker on the first samples of an iteration on one stream, the
// footprints of cuBLAS's kernels, and the kernel analyser's pool size for the forward and for the backward.
//
// cuBLAS is opaque to the driver API (the paper reads its kernels through CUPTI). Here each GEMM and GEMV call is
// captured once, alone, into a CUDA graph, and the graph's kernel nodes give what it launches — the function (for
// cuFuncGetAttribute and the occupancy calculator), the grid, the block and the dynamic shared memory — without
// running it. Its duration is the tracker's timing of the call, shared out evenly where it launches several kernels.
// A driver that cannot report kernel nodes leaves the GEMMs out of the program, and the explanation says so.
//
// The instances of each kernel are the samples that may run at once: N for im2col, the forward's GEMM y = W·col, the
// input-gradient GEMM and col2im (a pool adds the forward's bias once, after its lanes: not a lane's kernel); 1 for the bias gradient, accumulated sample after sample (conv.ts); for the weight
// gradient's GEMM 1 where a pool sums by a chain of GEMMs, N where it sums by products (the products' additions, one
// per sample on the chain lane, stay out of the program: they are the one-instance chain left).
// The launch cost is the tracker's median host time per launch with direct launches — shared by the host threads
// that issue a pool's work (conv-threads.ts), which launch that many kernels in the time one thread launches one —
// and 0 for a layer replayed as a CUDA graph (one host call launches every kernel of it).

import { deviceModelOfCuda } from "../../cuda/hw/device-model.js";
import { CudaEvent, type CudaKernel, type CudaStream, karg } from "../../cuda/index.js";
import {
  analyseConcurrency,
  type ConcurrencyChoice,
  callProfiles,
  captureFootprint,
  type IntegerSolver,
  type KernelProfile,
  type KernelShape,
  ResourceTracker,
} from "../../streams/index.js";
import { gridFor } from "../gpu/parameters.js";
import {
  CONV_CALLS,
  type ConvCallName,
  type ConvKernelName,
  type ConvRunner,
  isOneByOne,
  type WeightSums,
  weightSumsFromEnv,
} from "./conv.js";
import type { ConvLayer } from "./conv-layer.js";
import { MAX_POOL_LANES } from "./conv-threads.js";
import { EAGER_BLOCK } from "./kernels.js";

/** How the layer's kernels are launched: one call each, or the iteration replayed as one CUDA graph. */
export type LaunchMode = "direct" | "graph";

/** What a cuBLAS call launched (its kernel nodes in a captured graph). */
export interface CallFootprint {
  readonly call: ConvCallName;
  readonly kernels: readonly KernelShape[];
}

export interface ConvAnalysis {
  readonly mode: LaunchMode;
  /** The analyser's choices; undefined where no kernel of the direction could be profiled (then one stream). */
  readonly forward: ConcurrencyChoice | undefined;
  readonly backward: ConcurrencyChoice | undefined;
  /** The pool sizes chosen (1 without a choice). */
  readonly forwardPool: number;
  readonly backwardPool: number;
  /** Host threads issuing a pool's direct launches (1 with CUDA graphs); a pool is at least that large. */
  readonly hostThreads: number;
  /** The tracker's median host time per launch, µs (the program's T_launch with direct launches). */
  readonly measuredLaunchUs: number;
  /** Median duration of each cuBLAS call, µs. */
  readonly calls: readonly { name: string; durationUs: number }[];
  /** The calls whose kernels could not be read (left out of the program). */
  readonly unknown: readonly ConvCallName[];
  /** Why a direction has no choice, where the program refused its profiles (then one stream). */
  readonly errors: readonly string[];
}

const SPIN_SOURCE = `extern "C" __global__ void vp_glp_spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}`;

/** Clock cycles the stream is kept busy before the profiled samples are queued (about 10 ms). */
const SPIN_CYCLES = 20_000_000;

/** Captures each cuBLAS call of an iteration once (alone, not run) and reads its kernels. */
export function callFootprints(layer: ConvLayer, runner: ConvRunner): Map<ConvCallName, CallFootprint> {
  const out = new Map<ConvCallName, CallFootprint>();
  const tried = new Set<ConvCallName>();
  runner.trace = {
    kernel: (_name, _kernel, _n, _stream, launch) => launch(),
    blas(name, stream: CudaStream, call) {
      if (!tried.has(name)) {
        tried.add(name);
        const kernels = captureFootprint(stream, call);
        if (kernels !== undefined) out.set(name, { call: name, kernels });
      }
      call();
    },
  };
  try {
    layer.iteration(runner);
    layer.ctx.synchronize();
  } finally {
    runner.trace = undefined;
  }
  return out;
}

/** Profiles one iteration of `layer` on `runner` (one lane) and analyses the forward and the backward. */
export function analyseConvLayer(
  layer: ConvLayer,
  runner: ConvRunner,
  opts: {
    mode: LaunchMode;
    solver: IntegerSolver;
    connections: number;
    footprints?: Map<ConvCallName, CallFootprint>;
    /** Host threads issuing a pool's direct launches (conv-threads.ts; default 1): T_launch is shared by them. */
    hostThreads?: number;
    /** How the pools sum the weight gradient (default weightSumsFromEnv()). */
    weightSums?: WeightSums;
  },
): ConvAnalysis {
  if (runner.lanes.count !== 1) throw new RangeError("analyseConvLayer: profile on a runner of one lane");
  const ctx = layer.ctx;
  const footprints = opts.footprints ?? callFootprints(layer, runner);
  const tracker = new ResourceTracker<CudaStream>({ event: () => CudaEvent.create() });
  const spin = ctx.kernels("vpps_glp_spin.cu", SPIN_SOURCE, ["vp_glp_spin"] as const).kernels.vp_glp_spin;
  const byName = new Map<string, ConvKernelName>();
  runner.trace = {
    kernel(name, kernel: CudaKernel, n, stream, launch) {
      byName.set(kernel.name, name);
      tracker.launch(kernel, { grid: gridFor(n), block: EAGER_BLOCK }, stream, launch);
    },
    blas: (name, stream, call) => tracker.timeCall(name, stream, call),
  };
  let measuredLaunchUs: number;
  const kernelProfiles = new Map<string, KernelProfile>();
  let calls: { name: string; durationUs: number }[];
  try {
    // the stream ahead of the host, so that the events time the kernels and not the gaps between launches
    spin.launch({ grid: 1, block: 1, stream: ctx.stream }, [karg.u64(SPIN_CYCLES)]);
    layer.iteration(runner);
    tracker.collect();
    measuredLaunchUs = tracker.launchUs();
    for (const p of tracker.profiles()) kernelProfiles.set(byName.get(p.name) ?? p.name, p);
    calls = tracker.opaque();
  } finally {
    runner.trace = undefined;
    tracker.dispose();
  }
  const G = layer.G;
  const durationOf = (call: string) => calls.find((c) => c.name === call)?.durationUs;
  const unknown: ConvCallName[] = [];
  const profile = (name: ConvKernelName | ConvCallName, instances: number): KernelProfile[] => {
    const k = kernelProfiles.get(name);
    if (k !== undefined) return [{ ...k, name, instances }];
    const f = footprints.get(name as ConvCallName);
    const d = durationOf(name);
    if (f === undefined || d === undefined) {
      if ((CONV_CALLS as readonly string[]).includes(name)) unknown.push(name as ConvCallName);
      return [];
    }
    return callProfiles(name, f.kernels, d, instances);
  };
  const direct = isOneByOne(G);
  const forwardKernels = [...(direct ? [] : profile("im2col", G.n)), ...profile("gemm y=W·col", G.n)];
  const backwardKernels = [
    ...profile("gemv db+=dy·1", 1),
    ...(direct ? [] : profile("im2col", G.n)),
    ...profile("gemm dW+=dy·colᵀ", (opts.weightSums ?? weightSumsFromEnv()) === "products" ? G.n : 1),
    ...profile("gemm col=Wᵀ·dy", G.n),
    ...profile("col2im", G.n),
  ];
  const device = deviceModelOfCuda(ctx.device.props);
  const hostThreads = opts.mode === "direct" ? Math.max(1, opts.hostThreads ?? 1) : 1;
  const launchUs = opts.mode === "direct" ? measuredLaunchUs / hostThreads : 0;
  const errors: string[] = [];
  const analyse = (what: string, kernels: KernelProfile[]) => {
    if (kernels.length === 0) return undefined;
    try {
      return analyseConcurrency(
        {
          label:
            `${layer.shape.name} ${what} (${opts.mode} launches` +
            (hostThreads > 1
              ? `, from ${hostThreads} host threads: T_launch ${measuredLaunchUs.toFixed(2)} µs / ${hostThreads})`
              : ")"),
          kernels,
          device,
          launchUs,
          connections: opts.connections,
        },
        opts.solver,
      );
    } catch (e) {
      // a profile the program refuses (the message names the kernel and field): this direction stays on one stream
      errors.push(`${what}: ${e instanceof Error ? e.message : String(e)}`);
      return undefined;
    }
  };
  // Beyond the program: the samples are dealt round-robin, so a pool of L lanes runs ⌈N / L⌉ samples on its busiest
  // lane; the smallest pool with as many samples a lane finishes in as many rounds, with fewer streams. In direct mode
  // the pool then gets the nearest whole number of lanes per host thread (threadPool).
  const pool = (k: number) => threadPool(balancedPool(k, G.n), hostThreads);
  const forward = analyse("forward", forwardKernels);
  const backward = analyse("backward", backwardKernels);
  return {
    mode: opts.mode,
    forward,
    backward,
    forwardPool: pool(forward?.poolSize ?? 1),
    backwardPool: pool(backward?.poolSize ?? 1),
    hostThreads,
    measuredLaunchUs,
    calls,
    unknown: [...new Set(unknown)],
    errors,
  };
}

/**
 * The smallest number of lanes that deals `samples` samples round-robin in as many rounds as `lanes` lanes do
 * (⌈samples / lanes⌉ on the busiest lane): 32 samples on 22 lanes take 2 rounds, as on 16.
 */
export function balancedPool(lanes: number, samples: number): number {
  if (!Number.isInteger(lanes) || lanes < 1)
    throw new RangeError(`balancedPool: lanes must be an integer ≥ 1; got ${lanes}`);
  if (samples < 1 || lanes >= samples) return Math.max(1, Math.min(lanes, samples));
  return Math.ceil(samples / Math.ceil(samples / lanes));
}

/**
 * A direct-mode pool of `lanes` lanes issued by `threads` host threads, rounded to the nearest whole number of lanes
 * per thread (ties up; at least one lane per thread, at most MAX_POOL_LANES). Thread t issues the lanes k ≡ t mod P
 * (conv-threads.ts), so the program's T_launch is shared by the P threads only when each has a lane, and the busiest
 * thread issues ⌈L / P⌉ of every L samples: with direct launches the host's issue is the bound, and 5 lanes on 4
 * threads run at the pace of 8 with the GPU concurrency of 5 (measured: pools of 5, 6 and 7 on 4 threads each ran
 * slower than the better of 4 and 8 on 15 of the 16 Table 5 layers, and slower than both on 9, the small ones;
 * bench/results/h100/issue19/session15/rounded-up/). One thread keeps any pool.
 */
export function threadPool(lanes: number, threads: number): number {
  if (!Number.isInteger(lanes) || lanes < 1)
    throw new RangeError(`threadPool: lanes must be an integer ≥ 1; got ${lanes}`);
  if (!Number.isInteger(threads) || threads < 1) {
    throw new RangeError(`threadPool: threads must be an integer ≥ 1; got ${threads}`);
  }
  if (threads === 1) return lanes;
  const perThread = Math.max(1, Math.floor(lanes / threads + 0.5));
  return Math.min(Math.max(threads, MAX_POOL_LANES - (MAX_POOL_LANES % threads)), perThread * threads);
}
