/**
 * The Table 5 part of `vpps bench glp4nn`: each convolution layer's training iteration (gradients zeroed, forward,
 * backward) timed on one stream (Caffe's schedule, conv.ts), on GLP4NN's choice of pool sizes (forward, backward), and
 * on every fixed pool size (the oracle), with direct launches and with the iteration captured once as a CUDA graph and
 * replayed. Every configuration's weight and bias gradients are compared bit for bit with one stream's.
 */
import { CudaEvent, CudaGraph } from "../../cuda/index.js";
import type { ConvRunner } from "../../engines/eager/conv.js";
import { analyseConvLayer, type ConvAnalysis, callFootprints, type LaunchMode } from "../../engines/eager/conv-glp.js";
import { ConvLayer, MAX_LAYER_LANES } from "../../engines/eager/conv-layer.js";
import { convThreadsFor } from "../../engines/eager/conv-threads.js";
import type { GpuContext } from "../../engines/gpu/context.js";
import { explainChoice, hardwareQueues, type IntegerSolver } from "../../streams/index.js";
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
  readonly glp: { readonly forward: number; readonly backward: number; readonly timing: ConvTiming };
  /** Fixed pool sizes → timing (the size 1 is `oneStream`). */
  readonly pools: Readonly<Record<string, ConvTiming>>;
  readonly best: { readonly pool: number; readonly ms: number };
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
const MIN_TIMED_MS = 40;
/** …in at most this many iterations. */
const MAX_REPEATS = 25;

/** Times `repeats` iterations of the layer on the given runners, one launch mode. */
function timeIterations(
  layer: ConvLayer,
  mode: LaunchMode,
  forward: ConvRunner,
  backward: ConvRunner,
  repeats: number,
  reference: { dW: Float32Array; db: Float32Array },
): ConvTiming {
  const ctx = layer.ctx;
  const events = Array.from({ length: repeats + 1 }, () => CudaEvent.create());
  let graph: CudaGraph | undefined;
  try {
    const once =
      mode === "direct"
        ? () => layer.iteration(forward, backward)
        : (() => {
            // warm uncaptured first: buffers allocated, cuBLAS's kernels loaded
            layer.iteration(forward, backward);
            const g = CudaGraph.capture(ctx.stream, () => layer.iteration(forward, backward));
            graph = g;
            return () => g.launch();
          })();
    // warm-up: in direct mode three iterations, as dispatch threads' code is compiled on their first jobs
    for (let w = 0; w < (mode === "direct" ? 3 : 1); w++) once();
    events[0]!.record(ctx.stream);
    for (let r = 1; r <= repeats; r++) {
      once();
      events[r]!.record(ctx.stream);
    }
    ctx.synchronize();
    const times = events.slice(1).map((e, r) => CudaEvent.elapsedMs(events[r]!, e));
    const got = layer.results(["dW", "db"]);
    return {
      ms: median(times),
      minMs: Math.min(...times),
      identical: sameBits(got.dW!, reference.dW) && sameBits(got.db!, reference.db),
      ...(graph !== undefined ? { graphNodes: graph.nodeCount() } : {}),
    };
  } finally {
    graph?.destroy();
    for (const e of events) e.destroy();
  }
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
  // direct launches: a pool's work issued from several host threads (conv-threads.ts); a graph is captured from one
  const threadsFor = (k: number) => (mode === "direct" ? convThreadsFor(k) : 1);
  const hostThreads = threadsFor(MAX_LAYER_LANES);
  const analysis: ConvAnalysis = analyseConvLayer(layer, one, {
    mode,
    solver,
    connections,
    footprints,
    hostThreads,
  });
  const pools: Record<string, ConvTiming> = {};
  // short layers are timed over more iterations (at least ~40 ms of one stream, at most 25), so that the pool
  // sizes' medians are compared above the run-to-run noise of a few host threads
  const probe = timeIterations(layer, mode, one, one, o.repeats, reference);
  const repeats = Math.min(MAX_REPEATS, Math.max(o.repeats, Math.ceil(MIN_TIMED_MS / probe.ms)));
  const oneStream = repeats > o.repeats ? timeIterations(layer, mode, one, one, repeats, reference) : probe;
  pools["1"] = oneStream;
  for (const k of o.pools) {
    if (k === 1) continue;
    const r = layer.runner(k, { threads: threadsFor(k) });
    try {
      pools[String(k)] = timeIterations(layer, mode, r, r, repeats, reference);
    } finally {
      r.dispose();
    }
  }
  const [kf, kb] = [analysis.forwardPool, analysis.backwardPool];
  let glpTiming: ConvTiming;
  if (kf === kb && pools[String(kf)] !== undefined) glpTiming = pools[String(kf)]!;
  else {
    const rf = kf === 1 ? one : layer.runner(kf, { threads: threadsFor(kf) });
    const rb = kb === 1 ? one : kb === kf ? rf : layer.runner(kb, { threads: threadsFor(kb) });
    try {
      glpTiming = timeIterations(layer, mode, rf, rb, repeats, reference);
    } finally {
      for (const r of new Set([rf, rb])) if (r !== one) r.dispose();
    }
  }
  const best = Object.entries(pools).reduce((b, [k, t]) => (t.ms < b.ms ? { pool: Number(k), ms: t.ms } : b), {
    pool: 1,
    ms: oneStream.ms,
  });
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
          ? `, and a lane for each of the ${analysis.hostThreads} host threads issuing direct launches (the program's ` +
            "T_launch is shared by them)"
          : "") +
        ")"
      : "";
  const refused = threadsNote + analysis.errors.map((e) => `\n(no analysis, one stream: ${e})`).join("");
  const unknown =
    refused +
    (analysis.unknown.length === 0
      ? ""
      : `\n(cuBLAS calls left out, their kernels not readable on this driver: ${analysis.unknown.join(", ")})`);
  const result: ConvModeResult = {
    mode,
    oneStream,
    glp: { forward: kf, backward: kb, timing: glpTiming },
    pools,
    best,
    launchUs: mode === "direct" ? analysis.measuredLaunchUs : 0,
    measuredLaunchUs: analysis.measuredLaunchUs,
    unknownCalls: analysis.unknown,
    explain: explain + unknown,
  };
  o.log(
    `${shape.name.padEnd(18)} ${mode.padEnd(6)} 1 stream ${oneStream.ms.toFixed(3)} ms; GLP4NN ${kf}/${kb} ` +
      `${glpTiming.ms.toFixed(3)} ms (${(oneStream.ms / glpTiming.ms).toFixed(2)}×); best fixed ${best.pool} ` +
      `${best.ms.toFixed(3)} ms (${(oneStream.ms / best.ms).toFixed(2)}×)` +
      `${Object.values(pools).every((t) => t.identical) && glpTiming.identical ? "" : "; GRADIENTS DIFFER"}`,
  );
  return result;
}
