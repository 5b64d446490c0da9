/**
 * The Table 5 part of `vpps bench glp4nn`: each convolution layer's training iteration (gradients zeroed, forward,
 * backward) timed on one stream (Caffe's schedule, conv.ts), on GLP4NN's choice of pool sizes (forward, backward), and
 * on every fixed pool size (the oracle), with direct launches and with the iteration captured once as a CUDA graph and
 * replayed. Every configuration's weight and bias gradients are compared bit for bit with one stream's.
 */

import {
  analyseConvLayer,
  type ConfirmedPools,
  type ConvAnalysis,
  ConvLayer,
  type ConvRunner,
  callFootprints,
  confirmPools,
  convThreadsFor,
  type LaunchMode,
  MAX_LAYER_LANES,
  type PoolTrial,
} from "../../conv/index.js";
import { CudaEvent, CudaGraph } from "../../cuda/index.js";
import type { GpuContext } from "../../cuda/runtime/context.js";
import { explainChoice, hardwareQueues, type IntegerSolver } from "../../glp4nn/index.js";
import { median } from "../common.js";
import type { Table5Layer } from "./layers.js";

export interface ConvTiming {
  /** Median and minimum ms per iteration over the repeats. */
  readonly ms: number;
  readonly minMs: number;
  /** dW and db equal one stream's bit for bit. */
  readonly identical: boolean;
  /** Nodes of the captured graph (graph mode). */
  readonly graphNodes?: number;
}

export interface ConvModeResult {
  readonly mode: LaunchMode;
  readonly oneStream: ConvTiming;
  /** GLP4NN's choice: the analyser's pools confirmed by timing (conv-glp.ts confirmPools). */
  readonly glp: { readonly forward: number; readonly backward: number; readonly timing: ConvTiming };
  /** The analyser's pools alone (before the confirmation). */
  readonly model: { readonly forward: number; readonly backward: number; readonly timing: ConvTiming };
  /** The confirmation's timed configurations. */
  readonly trials: readonly PoolTrial[];
  /** Fixed pool sizes → timing (the size 1 is `oneStream`). */
  readonly pools: Readonly<Record<string, ConvTiming>>;
  readonly best: { readonly pool: number; readonly ms: number };
  /**
   * Where GLP4NN's configuration is not the best fixed pool: the two timed again, alone, in fresh interleaved rounds
   * (HELD_OUT_FACTOR times as many iterations each as before). The best pool is the least of 32 noisy medians, so its
   * first-pass time is biased low (the winner's curse); timed again apart from the selection, it is not.
   */
  readonly heldOut?: { readonly glpMs: number; readonly bestMs: number };
  /** The program's launch cost T_launch, µs (0 for graphs), and the tracker's measured one. */
  readonly launchUs: number;
  readonly measuredLaunchUs: number;
  readonly unknownCalls: readonly string[];
  /** The explanation of both choices (`--explain`). */
  readonly explain: string;
}

export interface ConvLayerResult {
  readonly layer: Table5Layer;
  readonly output: { readonly side: number };
  readonly modes: readonly ConvModeResult[];
  /** Modes (or the whole layer: mode "layer") that failed, with the error: the benchmark goes on without them. */
  readonly failed: readonly { readonly mode: LaunchMode | "layer"; readonly error: string }[];
}

const message = (e: unknown) => (e instanceof Error ? `${e.name}: ${e.message}` : String(e)).split("\n")[0]!;

/** `runConvLayer`, a failure recorded (and printed) instead of thrown. */
export function tryConvLayer(
  ctx: GpuContext,
  shape: Table5Layer,
  solver: IntegerSolver,
  o: ConvSuiteOptions,
): ConvLayerResult {
  try {
    return runConvLayer(ctx, shape, solver, o);
  } catch (e) {
    o.log(`${shape.name}: failed: ${message(e)}`);
    return { layer: shape, output: { side: 0 }, modes: [], failed: [{ mode: "layer", error: message(e) }] };
  }
}

export interface ConvSuiteOptions {
  readonly pools: readonly number[];
  readonly modes: readonly LaunchMode[];
  readonly repeats: number;
  readonly log: (line: string) => void;
}

function sameBits(a: Float32Array, b: Float32Array): boolean {
  if (a.length !== b.length) return false;
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
  return true;
}

/** Each configuration of a layer is timed over at least this much of one stream's time (ms)… */
const MIN_TIMED_MS = 150;
/** …in at most this many iterations. */
const MAX_REPEATS = 60;
/** GLP4NN's and the best pool's second timing runs this many times the first pass's iterations (two of 33 configs). */
const HELD_OUT_FACTOR = 4;
/** Timed iterations of a configuration per round (after one untimed lead iteration of its own). */
const PER_ROUND = 2;

/**
 * A configuration ready to time: one iteration queued by `once`, between `begin` and `end` (a CUDA graph is captured
 * and instantiated at `begin` and destroyed at `end`); its gradients checked against one stream's.
 */
interface Prepared {
  readonly begin: () => void;
  readonly once: () => void;
  readonly end: () => void;
  readonly identical: boolean;
  readonly graphNodes?: number;
}

/**
 * Warms a configuration up (direct: three iterations, as dispatch threads compile their code on their first jobs;
 * graph: one uncaptured iteration, then a capture and one replay) and compares its dW and db with one stream's.
 *
 * With CUDA graphs only one configuration's graph exists at a time: captured again for each round. With every
 * configuration's graph instantiated at once (33 graphs of up to 3,600 nodes), the ones instantiated last ran slower
 * on CaffeNet conv5 — pools 30, 31, 32 and GLP4NN's, prepared last, 9.4 → 9.8 → 10.3 ms against 9.2 ms for the same
 * pool sizes in a run that prepared only them.
 */
function prepare(
  layer: ConvLayer,
  mode: LaunchMode,
  forward: ConvRunner,
  backward: ConvRunner,
  reference: { dW: Float32Array; db: Float32Array },
): Prepared {
  const iteration = () => layer.iteration(forward, backward);
  if (mode === "direct") {
    for (let w = 0; w < 3; w++) iteration();
    const got = layer.results(["dW", "db"]);
    const nothing = () => {};
    return {
      begin: nothing,
      once: iteration,
      end: nothing,
      identical: sameBits(got.dW!, reference.dW) && sameBits(got.db!, reference.db),
    };
  }
  iteration(); // buffers allocated, cuBLAS's kernels loaded
  let graph: CudaGraph | undefined = CudaGraph.capture(layer.ctx.stream, iteration);
  graph.launch();
  const got = layer.results(["dW", "db"]);
  const graphNodes = graph.nodeCount();
  graph.destroy();
  graph = undefined;
  return {
    begin: () => {
      graph = CudaGraph.capture(layer.ctx.stream, iteration);
    },
    once: () => graph!.launch(),
    end: () => {
      layer.ctx.synchronize();
      graph?.destroy();
      graph = undefined;
    },
    identical: sameBits(got.dW!, reference.dW) && sameBits(got.db!, reference.db),
    graphNodes,
  };
}

/**
 * Times prepared configurations in interleaved rounds: each round runs every configuration (in an order rotated
 * round by round) after a synchronize, as one untimed lead iteration and PER_ROUND timed ones back to back (so each
 * timed iteration follows one of its own, as in steady training). A slow spell of the host or the GPU then touches
 * every configuration alike instead of whichever was being timed, which made neighbouring pool sizes differ by ±10%
 * between runs when each was timed in one block. Returns the iterations' times (ms) per configuration.
 */
function timeRounds(layer: ConvLayer, configs: readonly Prepared[], repeats: number): number[][] {
  const ctx = layer.ctx;
  const rounds = Math.ceil(repeats / PER_ROUND);
  const times = configs.map(() => [] as number[]);
  const events = Array.from({ length: PER_ROUND + 1 }, () => CudaEvent.create());
  try {
    for (let r = 0; r < rounds; r++) {
      for (let j = 0; j < configs.length; j++) {
        const i = (j + r) % configs.length;
        const c = configs[i]!;
        c.begin();
        ctx.synchronize();
        c.once();
        events[0]!.record(ctx.stream);
        for (let k = 1; k <= PER_ROUND; k++) {
          c.once();
          events[k]!.record(ctx.stream);
        }
        ctx.synchronize();
        for (let k = 1; k <= PER_ROUND; k++) times[i]!.push(CudaEvent.elapsedMs(events[k - 1]!, events[k]!));
        c.end();
      }
    }
  } finally {
    for (const e of events) e.destroy();
  }
  return times;
}

function timingOf(p: Prepared, times: readonly number[]): ConvTiming {
  return {
    ms: median(times),
    minMs: Math.min(...times),
    identical: p.identical,
    ...(p.graphNodes !== undefined ? { graphNodes: p.graphNodes } : {}),
  };
}

/** Runs one Table 5 layer; see the top of this file. */
export function runConvLayer(
  ctx: GpuContext,
  shape: Table5Layer,
  solver: IntegerSolver,
  o: ConvSuiteOptions,
): ConvLayerResult {
  const layer = ConvLayer.open(shape, ctx);
  try {
    const one = layer.runner(1);
    layer.iteration(one);
    const reference = layer.results(["dW", "db"]) as { dW: Float32Array; db: Float32Array };
    const footprints = callFootprints(layer, one);
    const modes: ConvModeResult[] = [];
    const failed: { mode: LaunchMode; error: string }[] = [];
    for (const mode of o.modes) {
      try {
        modes.push(runMode(layer, one, mode, reference, footprints, solver, o));
      } catch (e) {
        o.log(`${shape.name} ${mode}: failed: ${message(e)}`);
        failed.push({ mode, error: message(e) });
      }
    }
    one.dispose();
    return { layer: shape, output: { side: layer.G.ho }, modes, failed };
  } finally {
    layer.dispose();
  }
}

/** One launch mode of a layer: the analysis, one stream, every fixed pool, GLP4NN's choice. */
function runMode(
  layer: ConvLayer,
  one: ConvRunner,
  mode: LaunchMode,
  reference: { dW: Float32Array; db: Float32Array },
  footprints: ReturnType<typeof callFootprints>,
  solver: IntegerSolver,
  o: ConvSuiteOptions,
): ConvModeResult {
  const shape = layer.shape;
  const connections = hardwareQueues();
  // direct launches: every pool's work issued from one set of host threads (src/conv/threads.ts; a pool of fewer lanes
  // than threads leaves some idle, as min(lanes, threads) threads would issue it), so that no idle set competes for
  // the cores while another is timed; a graph is captured from one thread
  const hostThreads = mode === "direct" ? convThreadsFor(MAX_LAYER_LANES) : 1;
  const analysis: ConvAnalysis = analyseConvLayer(layer, one, {
    mode,
    solver,
    connections,
    footprints,
    hostThreads,
  });
  // short layers are timed over more iterations (at least ~150 ms of one stream, at most 60), so that the pool
  // sizes' medians are compared above the run-to-run noise of a few host threads
  const oneP = prepare(layer, mode, one, one, reference);
  const probe = timeRounds(layer, [oneP], o.repeats);
  const repeats = Math.min(MAX_REPEATS, Math.max(o.repeats, Math.ceil(MIN_TIMED_MS / median(probe[0]!))));
  // one runner per pool size (as the engine keeps one per size), shared by the confirmation and every configuration
  const runners = layer.runners(one, { threads: hostThreads });
  const runnerOf = runners.of;
  const sizes = o.pools.filter((k) => k !== 1);
  const prepared: Prepared[] = [oneP];
  let timings: ConvTiming[];
  let confirmed: ConfirmedPools;
  let glpIndex: number;
  let modelIndex: number;
  let heldOut: ConvModeResult["heldOut"];
  let bestIndex: number;
  try {
    // GLP4NN's choice: the analyser's pools confirmed by timing them and their neighbours (conv-glp.ts)
    confirmed = confirmPools(layer, analysis, { runnerOf });
    // every configuration prepared at once (all of one pool's lanes share one set of dispatch threads), then timed in
    // interleaved rounds: one stream, every fixed pool, GLP4NN's choice and the analyser's where they are none of them
    for (const k of sizes) {
      const r = runnerOf(k);
      prepared.push(prepare(layer, mode, r, r, reference));
    }
    const extra = new Map<string, number>();
    const indexOf = (f: number, b: number): number => {
      if (f === b && f === 1) return 0;
      if (f === b && sizes.includes(f)) return 1 + sizes.indexOf(f);
      const key = `${f}/${b}`;
      let i = extra.get(key);
      if (i === undefined) {
        i = prepared.length;
        prepared.push(prepare(layer, mode, runnerOf(f), runnerOf(b), reference));
        extra.set(key, i);
      }
      return i;
    };
    glpIndex = indexOf(confirmed.forwardPool, confirmed.backwardPool);
    modelIndex = indexOf(analysis.forwardPool, analysis.backwardPool);
    const times = timeRounds(layer, prepared, repeats);
    timings = prepared.map((p, i) => timingOf(p, times[i]!));
    // the best fixed pool (one stream included) and GLP4NN's configuration timed again, apart from the selection
    bestIndex = [0, ...sizes.map((_, i) => 1 + i)].reduce((b, i) => (timings[i]!.ms < timings[b]!.ms ? i : b), 0);
    if (bestIndex !== glpIndex) {
      const again = timeRounds(layer, [prepared[glpIndex]!, prepared[bestIndex]!], HELD_OUT_FACTOR * repeats);
      heldOut = { glpMs: median(again[0]!), bestMs: median(again[1]!) };
    }
  } finally {
    for (const p of prepared) p.end();
    runners.dispose();
  }
  const [kf, kb] = [confirmed.forwardPool, confirmed.backwardPool];
  const oneStream = timings[0]!;
  const pools: Record<string, ConvTiming> = { "1": oneStream };
  sizes.forEach((k, i) => {
    pools[String(k)] = timings[1 + i]!;
  });
  const glpTiming = timings[glpIndex]!;
  const modelTiming = timings[modelIndex]!;
  // the best fixed pool: index 0 is one stream, 1 + i the pool sizes[i]
  const best = { pool: bestIndex === 0 ? 1 : sizes[bestIndex - 1]!, ms: timings[bestIndex]!.ms };
  const explain = [analysis.forward, analysis.backward]
    .map((c, i) =>
      c === undefined
        ? `${shape.name} ${i === 0 ? "forward" : "backward"}: no kernel profiled; 1 stream`
        : explainChoice(c),
    )
    .join("\n\n");
  const [pf, pb] = [analysis.forward?.poolSize ?? 1, analysis.backward?.poolSize ?? 1];
  const threadsNote =
    pf !== analysis.forwardPool || pb !== analysis.backwardPool
      ? `\n(pools: forward ${pf} → ${analysis.forwardPool}, backward ${pb} → ${analysis.backwardPool} streams: the ` +
        `smallest pool that deals the ${layer.G.n} samples in as many rounds` +
        (analysis.hostThreads > 1
          ? `, then to the nearest whole number of lanes for each of the ${analysis.hostThreads} host threads issuing direct ` +
            "launches (the program's T_launch is shared by them, and the busiest thread sets the pace)"
          : "") +
        ")"
      : "";
  const errors = analysis.errors.map((e) => `\n(no analysis, one stream: ${e})`).join("");
  const refused = `${threadsNote}\n${confirmed.text}${errors}`;
  const unknown =
    refused +
    (analysis.unknown.length === 0
      ? ""
      : `\n(cuBLAS calls left out, their kernels not readable on this driver: ${analysis.unknown.join(", ")})`);
  const result: ConvModeResult = {
    mode,
    oneStream,
    glp: { forward: kf, backward: kb, timing: glpTiming },
    model: { forward: analysis.forwardPool, backward: analysis.backwardPool, timing: modelTiming },
    trials: confirmed.trials,
    pools,
    best,
    ...(heldOut !== undefined ? { heldOut } : {}),
    launchUs: mode === "direct" ? analysis.measuredLaunchUs : 0,
    measuredLaunchUs: analysis.measuredLaunchUs,
    unknownCalls: analysis.unknown,
    explain: explain + unknown,
  };
  o.log(
    `${shape.name.padEnd(18)} ${mode.padEnd(6)} 1 stream ${oneStream.ms.toFixed(3)} ms; GLP4NN ${kf}/${kb} ` +
      `${glpTiming.ms.toFixed(3)} ms (${(oneStream.ms / glpTiming.ms).toFixed(2)}×); best fixed ${best.pool} ` +
      `${best.ms.toFixed(3)} ms (${(oneStream.ms / best.ms).toFixed(2)}×)` +
      (heldOut === undefined
        ? ""
        : `; timed again: GLP4NN ${heldOut.glpMs.toFixed(3)} ms, best ${heldOut.bestMs.toFixed(3)} ms`) +
      `${Object.values(pools).every((t) => t.identical) && glpTiming.identical ? "" : "; GRADIENTS DIFFER"}`,
  );
  return result;
}
