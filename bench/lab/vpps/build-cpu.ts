/**
 * CPU-only micro-benchmark of the main thread's share of a VPPS training step (data-parallel training: each rank's main thread,
 * not its GPU, bounds data-parallel training). The step timed: renew the graph, build the Tree-LSTM loss of an SST
 * batch (`TreeLstmModel.buildBatchLoss`, as `trainEpoch` does), and hand the nodes up to the loss over as
 * `SchedulePool.post` does: a loan of the graph's shared node arrays and a copy of its input values where the
 * checkout has `ComputationGraph.lend` (two loans stay out, as batches in flight do), else a snapshot into a reused
 * buffer. Also times the worker's side of the hand-over, `fromLent` or `fromSnapshot`. No GPU, no worker threads.
 *
 *   node --import tsx bench/lab/vpps/build-cpu.ts
 *   BASE=/work/main node --import tsx bench/lab/vpps/build-cpu.ts     # this checkout against another, interleaved
 *
 * Environment: SST (directory with train.txt, default ../shared/data/sst), SIZES (default "1,8,128"), SAMPLES (timed
 * samples per size, default 60), WARMUP (samples, default 15, and at least one pass over the trees: the first epoch
 * fills the models' per-tree caches), FIRST=1 (the first epoch instead: 5 warm-up samples, then samples of trees
 * neither model has seen, at most one pass, each tree's loss units counted before its build as trainEpoch does
 * once per run, timed apart), POOL=1 (the hand-over is `SchedulePool.post` itself, to a pool of one
 * worker per checkout: lending or snapshotting and the message; each batch is then taken back, untimed, before the
 * next build), CELL (fused or ops), HIDDEN and EMBED (default 256).
 * A sample is as many consecutive batches as make up 128 trees (one batch at 128, 128 batches at 1), so that the
 * timer's resolution does not matter at batch 1. BASE: the root of another checkout (its node_modules present): each
 * sample is then run by both checkouts in turn (who goes first alternates), each with its own graph, model and
 * snapshot buffer; the rebuilt graphs of the two must be equal field by field (the snapshot's format may differ), and
 * each line adds the median of the per-sample ratios this/base, which on a shared machine whose speed drifts within
 * seconds is what to quote (runs one after the other differ by ±30%).
 */
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { H100_SXM } from "../../../src/cuda/hw/device-model.js";
import { readTrees } from "../../../src/data/sst.js";
import type { TreeNode } from "../../../src/data/tree.js";
import { Vocabulary } from "../../../src/data/vocab.js";
import type { SchedulePool } from "../../../src/engines/vpps/schedule/pool.js";
import type { ComputationGraph, Expression } from "../../../src/graph/graph.js";
import type { CellFormulation } from "../../../src/models/treelstm/model.js";

const env = process.env;
const dir = env["SST"] ?? join(import.meta.dirname, "../../../../shared/data/sst");
const first = env["FIRST"] === "1";
const samplesAsked = Number(env["SAMPLES"] ?? 60);
const warmupSamples = Number(env["WARMUP"] ?? (first ? 5 : 15));
const sizes = (env["SIZES"] ?? "1,8,128").split(",").map(Number);
const cell = (env["CELL"] ?? "fused") as CellFormulation;
const hidden = Number(env["HIDDEN"] ?? 256);
const embed = Number(env["EMBED"] ?? 256);
const base = env["BASE"];
const usePool = env["POOL"] === "1";

const trees: TreeNode[] = readTrees(join(dir, "train.txt"));
const vocab = Vocabulary.fromTrees(trees);

type GraphModule = typeof import("../../../src/graph/graph.js");
type ModelModule = typeof import("../../../src/models/treelstm/model.js");
type TaskModule = typeof import("../../../src/models/treelstm/task.js");
type PoolModule = typeof import("../../../src/engines/vpps/schedule/pool.js");
type PlanModule = typeof import("../../../src/engines/vpps/plan/plan.js");
type ParamsModule = typeof import("../../../src/model/parameters.js");

/** One checkout's graph and model: a step (renew, build, hand-over), the worker's rebuild, loss units. */
interface Contender {
  readonly name: string;
  readonly G: GraphModule;
  readonly cg: ComputationGraph;
  readonly build: (batch: readonly TreeNode[]) => Expression;
  /** POOL=1: a schedule pool of one worker, to time `post` itself. */
  readonly pool: SchedulePool<number> | undefined;
  /** The task's loss units of a tree (what trainEpoch counts). */
  readonly units: (tree: TreeNode) => number;
  buffer: ArrayBuffer | undefined;
  readonly loans: { release: () => void }[];
  readonly ms: number[];
  readonly buildMs: number[];
  readonly unitsMs: number[];
  readonly snapshotMs: number[];
  readonly rebuildMs: number[];
}

async function contender(name: string, root: string | undefined): Promise<Contender> {
  const url = (path: string) => pathToFileURL(join(resolve(root ?? join(import.meta.dirname, "../../..")), path)).href;
  // .js when this file was compiled (line-level `node --cpu-prof` profiles need JavaScript: tsx maps to line 1)
  const ext = import.meta.url.endsWith(".ts") ? "ts" : "js";
  const G: GraphModule = await import(url(`src/graph/graph.${ext}`));
  const M: ModelModule = await import(url(`src/models/treelstm/model.${ext}`));
  const T: TaskModule = await import(url(`src/models/treelstm/task.${ext}`));
  const model = new M.TreeLstmModel({ vocabSize: vocab.size, embed, hidden, seed: 1, cell });
  const task = new T.TreeLstmTaskModel(model, vocab);
  const cg = new G.ComputationGraph();
  let pool: SchedulePool<number> | undefined;
  if (usePool) {
    const P: PoolModule = await import(url(`src/engines/vpps/schedule/pool.${ext}`));
    const L: PlanModule = await import(url(`src/engines/vpps/plan/plan.${ext}`));
    const A: ParamsModule = await import(url(`src/model/parameters.${ext}`));
    const plan = L.planVpps(A.onChipMatrices(model.params), H100_SXM);
    pool = new P.SchedulePool<number>({ workers: 1, params: model.params.all, plans: [plan] });
  }
  return {
    name,
    G,
    cg,
    build: (batch) => {
      cg.renew();
      cg.training = true;
      cg.dropoutKey = 12345;
      return model.buildBatchLoss(cg, batch, vocab);
    },
    pool,
    units: (t) => task.lossUnits(t),
    buffer: undefined,
    loans: [],
    ms: [],
    buildMs: [],
    unitsMs: [],
    snapshotMs: [],
    rebuildMs: [],
  };
}

const contenders = [await contender("this", undefined)];
if (base !== undefined) contenders.push(await contender(`base ${base}`, base));

const median = (xs: number[]) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** The graph fields a worker reads, compared between the two checkouts' rebuilt graphs. */
function sameGraph(a: ComputationGraph, b: ComputationGraph, where: string): void {
  for (const k of ["size", "valueSize", "argsSize", "inputSize", "training", "dropoutKey", "collection"] as const) {
    if (a[k] !== b[k]) throw new Error(`${where}: ${k} ${a[k]} ≠ ${b[k]}`);
  }
  const n = a.size;
  const arrays = ["op", "rows", "cols", "argStart", "argCount", "aux", "aux2", "auxF", "depth", "valueOffset"] as const;
  for (const k of arrays) {
    const x = a[k].subarray(0, n);
    const y = b[k].subarray(0, n);
    for (let i = 0; i < n; i++) if (x[i] !== y[i]) throw new Error(`${where}: ${k}[${i}] ${x[i]} ≠ ${y[i]}`);
  }
  for (let i = 0; i < a.argsSize; i++) if (a.args[i] !== b.args[i]) throw new Error(`${where}: args[${i}] differ`);
  for (let i = 0; i < a.inputSize; i++) {
    if (a.inputData[i] !== b.inputData[i]) throw new Error(`${where}: inputData[${i}] differ`);
  }
  const pa = Object.keys(a.parameters).join(",");
  const pb = Object.keys(b.parameters).join(",");
  if (pa !== pb) throw new Error(`${where}: parameters in use ${pa} ≠ ${pb}`);
}

for (const batch of sizes) {
  const per = Math.max(1, Math.round(128 / batch));
  for (const c of contenders) {
    for (const a of [c.ms, c.buildMs, c.unitsMs, c.snapshotMs, c.rebuildMs]) a.length = 0;
  }
  let nodes = 0;
  let start = 0;
  // the first pass over the data is the first epoch (every tree new to the model's caches): warm up past it
  const pass = Math.floor(trees.length / (per * batch));
  const warmup = first ? warmupSamples : Math.max(warmupSamples, pass + 2);
  const samples = first ? Math.min(samplesAsked, pass - warmup) : samplesAsked;
  for (let s = 0; s < warmup + samples; s++) {
    const batches: TreeNode[][] = [];
    for (let j = 0; j < per; j++, start += batch) {
      if (start + batch > trees.length) start = 0;
      batches.push(trees.slice(start, start + batch));
    }
    const rebuilt: ComputationGraph[] = [];
    for (let k = 0; k < contenders.length; k++) {
      // alternate who goes first, so that neither always finds the other's data in the caches
      const c = contenders[(k + s) % contenders.length]!;
      let build = 0;
      let snap = 0;
      let rebuild = 0;
      let units = 0;
      let last: ComputationGraph | undefined;
      for (const b of batches) {
        // the first epoch counts each tree's loss units before its first build (trainEpoch keeps them after)
        const b0 = performance.now();
        if (first) {
          let count = 0;
          for (const t of b) count += c.units(t);
          if (count < 0) throw new Error("unreachable");
        }
        const b1 = performance.now();
        const lossExpr = c.build(b);
        const u1 = performance.now();
        units += b1 - b0;
        build += u1 - b1;
        const cg = c.cg as ComputationGraph & { lend?: ComputationGraph["lend"] };
        if (c.pool !== undefined) {
          c.pool.post(cg, lossExpr, 0, 0);
          snap += performance.now() - u1;
          // the worker schedules it now: wait for it outside the timed part (the next build then has the cores)
          c.pool.release(c.pool.take(true)!);
          continue;
        }
        let rebuilt: () => ComputationGraph;
        if (cg.lend !== undefined) {
          const loan = cg.lend(lossExpr.id + 1);
          const inputs = new Float32Array(cg.inputSize);
          inputs.set(cg.inputData.subarray(0, cg.inputSize));
          c.loans.push(loan);
          rebuilt = () => c.G.ComputationGraph.fromLent(loan.graph, inputs);
        } else {
          c.buffer = cg.snapshot(lossExpr.id + 1, c.buffer);
          rebuilt = () => c.G.ComputationGraph.fromSnapshot(c.buffer!);
        }
        const b2 = performance.now();
        snap += b2 - u1;
        last = rebuilt();
        rebuild += performance.now() - b2;
        if (c.loans.length > 2) c.loans.shift()!.release();
      }
      if (s === warmup + samples - 1 && c === contenders[0]) nodes = c.cg.size;
      rebuilt[(k + s) % contenders.length] = last!;
      if (s < warmup) continue;
      c.ms.push(build + snap);
      c.buildMs.push(build);
      c.unitsMs.push(units);
      c.snapshotMs.push(snap);
      c.rebuildMs.push(rebuild);
    }
    if (rebuilt.length === 2 && !usePool) sameGraph(rebuilt[0]!, rebuilt[1]!, `batch ${batch}, sample ${s}`);
  }
  for (const c of contenders) {
    const ratio = (f: (c: Contender) => number[]) => median(f(contenders[0]!).map((x, k) => x / f(c)[k]!)).toFixed(3);
    const vs =
      c === contenders[0] || contenders.length < 2
        ? ""
        : `; median per-sample ratio this/base: step ${ratio((c) => c.ms)} (build ${ratio((c) => c.buildMs)}, ` +
          `hand-over ${ratio((c) => c.snapshotMs)})` +
          (first ? `, loss units ${ratio((c) => c.unitsMs)}` : "") +
          (usePool ? "" : `, worker rebuild ${ratio((c) => c.rebuildMs)}`);
    const perBatch = (xs: number[]) => (median(xs) / per).toFixed(4);
    console.log(
      `build-cpu ${c.name} batch ${batch}: per batch (median) step ${perBatch(c.ms)} ms = build ` +
        `${perBatch(c.buildMs)} + hand-over ${perBatch(c.snapshotMs)}` +
        (usePool ? " (SchedulePool.post to one worker)" : `; worker rebuild ${perBatch(c.rebuildMs)} ms`) +
        (first ? `; loss units before the build ${perBatch(c.unitsMs)} ms` : "") +
        `${vs} [${first ? "first epoch, " : ""}${samples} samples of ${per} batch(es), ~${nodes} nodes/batch, ` +
        `${cell} H${hidden} E${embed}]`,
    );
  }
}
for (const c of contenders) c.pool?.dispose();
