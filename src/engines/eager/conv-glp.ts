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
import { CudaEvent, CudaGraph, type CudaKernel, type CudaStream, gridFor, karg } from "../../cuda/index.js";
import {
  analyseConcurrency,
  type ConcurrencyChoice,
  callProfiles,
  captureFootprint,
  type IntegerSolver,
  type KernelProfile,
  type KernelShape,
  median,
  ResourceTracker,
} from "../../streams/index.js";
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

/** One timed configuration of a confirmation: the forward's and the backward's pools and the iteration's median ms. */
export interface PoolTrial {
  readonly forward: number;
  readonly backward: number;
  readonly ms: number;
}

/** The analyser's pools after the timed confirmation (confirmPools). */
export interface ConfirmedPools {
  readonly forwardPool: number;
  readonly backwardPool: number;
  readonly trials: readonly PoolTrial[];
  /** What the confirmation did, for `--explain`. */
  readonly text: string;
}

/** A candidate is taken over the analyser's pool only when it is at least this much faster (timing noise). */
export const CONFIRM_MARGIN = 0.02;
/** Each candidate is timed over about this many ms of iterations (at least 5, at most 50 iterations). */
export const CONFIRM_MS = 30;
/** Timed iterations of one candidate per round; each round's first call of a candidate also runs untimed leads. */
export const ROUND_ITERATIONS = 3;
/** Untimed iterations before a candidate's first round (buffers, cuBLAS's kernels, the dispatch threads' code). */
export const FIRST_WARM = 3;

/**
 * The pools a confirmation times for a direction whose analysed pool is `pool`: a quarter, half, the pool itself,
 * double and quadruple, each rounded as the analysis rounds (balancedPool for `samples`, then threadPool for `hostThreads`), at most
 * MAX_POOL_LANES, without repeats, in increasing order.
 */
export function neighbourPools(pool: number, samples: number, hostThreads: number): number[] {
  const round = (k: number) =>
    Math.min(MAX_POOL_LANES, threadPool(balancedPool(Math.max(1, Math.min(k, MAX_POOL_LANES)), samples), hostThreads));
  return [...new Set([Math.ceil(pool / 4), Math.ceil(pool / 2), pool, 2 * pool, 4 * pool].map(round))].sort(
    (a, b) => a - b,
  );
}

/**
 * The ms of each of `iterations` iterations of `layer` on (f, b), after `warm` untimed ones, launched directly or
 * replayed as a CUDA graph (captured for this call and destroyed after it, as the benchmark's rounds do).
 */
export function timeIterationsMs(
  layer: ConvLayer,
  mode: LaunchMode,
  f: ConvRunner,
  b: ConvRunner,
  iterations: number,
  warm: number,
): number[] {
  const ctx = layer.ctx;
  const run = () => layer.iteration(f, b);
  for (let w = 0; w < warm; w++) run();
  const graph = mode === "graph" ? CudaGraph.capture(ctx.stream, run) : undefined;
  const once = graph === undefined ? run : () => graph.launch();
  const events = Array.from({ length: iterations + 1 }, () => CudaEvent.create());
  try {
    if (graph !== undefined) graph.launch(); // the graph's first replay (upload) untimed
    events[0]!.record(ctx.stream);
    for (let i = 1; i <= iterations; i++) {
      once();
      events[i]!.record(ctx.stream);
    }
    ctx.synchronize();
    return events.slice(1).map((e, i) => CudaEvent.elapsedMs(events[i]!, e));
  } finally {
    for (const e of events) e.destroy();
    graph?.destroy();
  }
}

/**
 * Beyond the paper: the analyser's pools confirmed by timing, on the layer's first iterations. The program knows
 * what fits on the GPU at once and the launch cost, not how a lane's kernels wait for one another (the weight sums'
 * chain, a lane's samples in turn), and the best pool also moves between hosts of one GPU model (docs/GLP4NN.md). So
 * every pairing of the forward's pool and its neighbours (neighbourPools: ×¼, ×½, ×2, ×4) with the backward's is
 * timed, and the fastest replaces the analysed pair only when at least CONFIRM_MARGIN faster. Jointly, because the
 * two directions' pools interact: on CaffeNet conv5 with direct launches, 8 backward lanes saved 1.3 ms after an
 * 8-lane forward and 0.4 ms after a 4-lane one, so trying the forward's neighbours with the analysed backward first
 * kept 4/8, 10% slower than 8/8 (session 18). The candidates are timed in interleaved rounds (choosePools), as the
 * benchmark times its configurations: timed one after the other, the first candidate measured up to 2× slower than
 * the benchmark measured it afterwards (Siamese conv1, 4/4 lanes, 3.2 against 1.6 ms: session 17), and it was always
 * the analyser's own.
 */
export function confirmPools(
  layer: ConvLayer,
  a: ConvAnalysis,
  o: { runnerOf: (lanes: number) => ConvRunner; iterations?: number },
): ConfirmedPools {
  return choosePools(
    a,
    layer.G.n,
    (forward, backward, iterations, warm) =>
      timeIterationsMs(layer, a.mode, o.runnerOf(forward), o.runnerOf(backward), iterations, warm),
    o.iterations,
  );
}

/**
 * confirmPools' choice with the timing given: `timeMs(forward, backward, iterations, warm)` gives the ms of each of
 * `iterations` iterations on those pools after `warm` untimed ones (on a GPU, timeIterationsMs). The candidates (the
 * forward's neighbours × the backward's, in that order) are timed in rounds, ROUND_ITERATIONS iterations of each per
 * round, the order rotating from round to round, FIRST_WARM untimed iterations before a candidate's first round and
 * one (a lead) before each later one; a candidate's time is the median of all its timed iterations. The iterations
 * per candidate: enough for CONFIRM_MS of the analysed pools' iteration (5 … 50) unless given. Apart from CUDA so
 * that its order and margin are tested in CI.
 */
export function choosePools(
  a: Pick<ConvAnalysis, "forwardPool" | "backwardPool" | "hostThreads">,
  samples: number,
  timeMs: (forward: number, backward: number, iterations: number, warm: number) => number[],
  fixedIterations?: number,
): ConfirmedPools {
  const iterations =
    fixedIterations ??
    Math.min(
      50,
      Math.max(5, Math.ceil(CONFIRM_MS / median(timeMs(a.forwardPool, a.backwardPool, ROUND_ITERATIONS, FIRST_WARM)))),
    );
  const rounds = Math.max(2, Math.ceil(iterations / ROUND_ITERATIONS));
  const configs = neighbourPools(a.forwardPool, samples, a.hostThreads).flatMap((f) =>
    neighbourPools(a.backwardPool, samples, a.hostThreads).map((b) => [f, b] as const),
  );
  // the analysed pair is among them when the analysis rounded its pools as neighbourPools does; else timed too
  if (!configs.some(([f, b]) => f === a.forwardPool && b === a.backwardPool)) {
    configs.unshift([a.forwardPool, a.backwardPool] as const);
  }
  const times = configs.map(() => [] as number[]);
  for (let r = 0; r < rounds; r++) {
    for (let j = 0; j < configs.length; j++) {
      const c = (r + j) % configs.length;
      const [forward, backward] = configs[c]!;
      times[c]!.push(...timeMs(forward, backward, ROUND_ITERATIONS, r === 0 ? FIRST_WARM : 1));
    }
  }
  const trials: PoolTrial[] = configs.map(([forward, backward], c) => ({ forward, backward, ms: median(times[c]!) }));
  const base = trials.find((t) => t.forward === a.forwardPool && t.backward === a.backwardPool)!;
  const fastest = trials.reduce((x, t) => (t.ms < x.ms ? t : x), base);
  const chosen = fastest.ms <= (1 - CONFIRM_MARGIN) * base.ms ? fastest : base;
  const text =
    `confirmed by timing (${rounds} interleaved rounds of ${ROUND_ITERATIONS} iterations per configuration, median; ` +
    `the fastest taken only when ${100 * CONFIRM_MARGIN}% faster than the analyser's): ` +
    trials.map((t) => `${t.forward}/${t.backward} ${t.ms.toFixed(3)} ms`).join(", ") +
    ` → forward ${chosen.forward}, backward ${chosen.backward} (the analyser: ${a.forwardPool}/${a.backwardPool})`;
  return { forwardPool: chosen.forward, backwardPool: chosen.backward, trials, text };
}
