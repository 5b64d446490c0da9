/**
 * The Tree-LSTM benchmark of issue 6, every engine in one process: SGD training (forward, backward, update; learning
 * rate 0.05, gradient clipping at 5) on SST training trees, in sentences/s against batch size.
 *
 * - hidden 256, embedding 256, batch sizes 1, 2, 4, …, 128: eager, autobatch depth, autobatch agenda (tiled GEMM),
 *   autobatch agenda (cuBLAS), and VPPS with the fused Tree-LSTM cell and with the same cell from plain ops;
 * - hidden 128 (embedding 128) and hidden 512 (embedding 256), batch sizes 1, 8, 128: VPPS (fused cell) and the
 *   autobatch agenda engine with cuBLAS. A model the VPPS planner refuses is skipped with the planner's reason.
 *
 * Engines run one after another, each disposed before the next is created, so that each one's device memory can be
 * told apart. Before timing, each engine's loss on the first batch of 8 is compared with the CPU engine's; an engine
 * more than 1e-3 (relative) off is not timed. The baselines are timed by engine-timing.ts (as bench/batching.ts
 * does), VPPS by vpps-timing.ts (as bench/vpps.ts does).
 *
 * Prints markdown tables: sentences/s per engine and batch size with VPPS's speedup over the better agenda variant;
 * VPPS's host time per batch (build, schedule, submit) against its kernel time and weight bytes per 128 sentences;
 * device memory per engine; VPPS's JIT time. Writes bench/results/treelstm-<device>.json and
 * bench/results/throughput-<device>.svg (hidden 256), but not with --quick.
 *
 *   node --import tsx bench/treelstm.ts [--data <SST train.txt>] [--quick] [--workers N] [--cache <dir>]
 *                                       [--engines a,b,c] [--hidden 128,256,512]
 */
import { existsSync, mkdtempSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import type { PoolStats } from "../src/cuda/index.js";
import type { TreeNode } from "../src/data/tree.js";
import { Vocabulary } from "../src/data/vocab.js";
import { CpuEngine } from "../src/engines/cpu.js";
import type { VariantInfo } from "../src/engines/vpps/vpps.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { type CellFormulation, TreeLstmModel } from "../src/models/treelstm/model.js";
import { renderLogLogPlot } from "../src/report/svg-plot.js";
import { batchAt, deviceSlug, loadBenchTrees, ROOT, resultHeader, writeResult } from "./common.js";
import {
  type BaselineKind,
  type BaselineRow,
  baselineFirstLoss,
  disposeBaseline,
  ENGINE_LABELS,
  MemoryProbe,
  type MemoryRecord,
  type MemoryTrack,
  relativeError,
  requireGpu,
  startBaseline,
  TREELSTM_ENGINES,
  type TreeLstmEngine,
  throughputSeries,
  throughputTitle,
  timeBaselines,
} from "./engine-timing.js";
import {
  chooseVppsVariant,
  createVppsWithJit,
  isPlannerRefusal,
  timeVppsBatch,
  type VppsJit,
  type VppsRow,
  vppsFirstLoss,
  vppsPlannerRefusal,
  vppsWeightFloats,
} from "./vpps-timing.js";

const SCRIPT = "bench/treelstm.ts";
const USAGE = `usage: node --import tsx ${SCRIPT} [options]

  --data <file>        SST train.txt (or a folder holding it); default ../shared/data/sst/train.txt when present,
                       else the synthetic tree task
  --quick              batch sizes 1, 8, 128 with fewer sentences; prints only (writes no files)
  --workers <N>        VPPS schedule worker threads (0: schedule inside fb); default: the engine's
  --cache <dir>        VPPS kernel cache folder; default: a new empty folder (so the first create is a real JIT)
  --engines <a,b,...>  a subset of ${TREELSTM_ENGINES.join(", ")}
  --hidden <h,...>     a subset of 128, 256, 512
  -h, --help           this text`;

/** The headline size: every engine, every batch size. */
const MAIN_HIDDEN = 256;
const HIDDEN_SIZES = [256, 128, 512] as const;
/** Embedding size per hidden size: 128 for the small model, 256 (the benchmark's default) otherwise. */
const EMBED_OF: Readonly<Record<number, number>> = { 128: 128, 256: 256, 512: 256 };
/** The engines run at the other hidden sizes. */
const SWEEP_ENGINES: readonly TreeLstmEngine[] = ["autobatch-agenda-cublas", "vpps-fused"];
const AGENDA_ENGINES: readonly BaselineKind[] = ["autobatch-agenda", "autobatch-agenda-cublas"];
const LOSS_TOLERANCE = 1e-3;
const MAX_TREES = 8192;

class UsageError extends Error {}

interface Flags {
  dataFile: string | undefined;
  quick: boolean;
  workers: number | undefined;
  cacheDir: string | undefined;
  engines: TreeLstmEngine[];
  hidden: number[];
}

/** Comma-separated values of `flag`, each one of `allowed` (kept in `allowed`'s order, duplicates dropped). */
function parseList<T extends string | number>(flag: string, given: string, allowed: readonly T[]): T[] {
  const picked = new Set<T>();
  for (const item of given.split(",").map((s) => s.trim())) {
    const match = allowed.find((a) => String(a) === item);
    if (match === undefined) {
      const what = item === "" ? "an empty item" : `'${item}'`;
      throw new UsageError(`${flag}: ${what} is not one of ${allowed.join(", ")} (given: '${given}')`);
    }
    picked.add(match);
  }
  return allowed.filter((a) => picked.has(a));
}

const VALUE_FLAGS = ["--data", "--workers", "--cache", "--engines", "--hidden"];

/**
 * `--workers -1` as `--workers=-1`: node's parseArgs refuses a value that starts with a dash as ambiguous, and the
 * value's own check then gives the clearer message.
 */
function joinDashValues(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const next = argv[i + 1];
    if (VALUE_FLAGS.includes(a) && next !== undefined && /^-[^-]/.test(next)) {
      out.push(`${a}=${next}`);
      i++;
    } else {
      out.push(a);
    }
  }
  return out;
}

function parseFlags(argv: string[]): Flags | "help" {
  const parse = (args: string[]) =>
    parseArgs({
      args,
      strict: true,
      allowPositionals: false,
      options: {
        data: { type: "string" },
        quick: { type: "boolean" },
        workers: { type: "string" },
        cache: { type: "string" },
        engines: { type: "string" },
        hidden: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    });
  let values: ReturnType<typeof parse>["values"];
  try {
    values = parse(joinDashValues(argv)).values;
  } catch (e) {
    throw new UsageError(e instanceof Error ? e.message : String(e));
  }
  if (values.help) return "help";
  let dataFile = values.data;
  if (dataFile !== undefined) {
    if (!existsSync(dataFile)) {
      throw new UsageError(`--data: '${dataFile}' does not exist; give the SST train.txt (one PTB tree per line)`);
    }
    if (statSync(dataFile).isDirectory()) {
      const inside = join(dataFile, "train.txt");
      if (!existsSync(inside)) throw new UsageError(`--data: the folder '${dataFile}' has no train.txt`);
      dataFile = inside;
    }
  }
  let workers: number | undefined;
  if (values.workers !== undefined) {
    if (!/^\d+$/.test(values.workers)) {
      throw new UsageError(
        `--workers: expected an integer >= 0 (schedule worker threads; 0 schedules inside fb); got '${values.workers}'`,
      );
    }
    workers = Number(values.workers);
  }
  if (values.cache !== undefined && existsSync(values.cache) && !statSync(values.cache).isDirectory()) {
    throw new UsageError(`--cache: '${values.cache}' is a file; expected a folder (it is created when missing)`);
  }
  const engines =
    values.engines === undefined ? [...TREELSTM_ENGINES] : parseList("--engines", values.engines, TREELSTM_ENGINES);
  const hidden =
    values.hidden === undefined ? [...HIDDEN_SIZES] : parseList("--hidden", values.hidden, [128, 256, 512] as const);
  return { dataFile, quick: values.quick ?? false, workers, cacheDir: values.cache, engines, hidden };
}

/** One hidden size's model and what runs on it. */
interface Config {
  hidden: number;
  embed: number;
  batches: number[];
  engines: TreeLstmEngine[];
  /** VPPS sentences timed per batch size; the baselines' steps follow batching.ts (`quick`). */
  sentences: number;
  /** VPPS sentences trained untimed first at each batch size (vpps-timing.ts `warmSentences`). */
  warmSentences: number;
}

function configsOf(flags: Flags): Config[] {
  const out: Config[] = [];
  for (const hidden of HIDDEN_SIZES) {
    if (!flags.hidden.includes(hidden)) continue;
    const main = hidden === MAIN_HIDDEN;
    const engines = flags.engines.filter((e) => main || SWEEP_ENGINES.includes(e));
    if (engines.length === 0) {
      console.log(
        `hidden ${hidden}: none of the engines asked for (${flags.engines.join(", ")}) runs at this size ` +
          `(only ${SWEEP_ENGINES.join(", ")} do); skipping it`,
      );
      continue;
    }
    const batches = main && !flags.quick ? [1, 2, 4, 8, 16, 32, 64, 128] : [1, 8, 128];
    out.push({
      hidden,
      embed: EMBED_OF[hidden]!,
      batches,
      engines,
      sentences: flags.quick ? 1024 : 4096,
      warmSentences: flags.quick ? 256 : 2048,
    });
  }
  return out;
}

type VppsEngine = "vpps-fused" | "vpps-ops";

/** What happened to one engine at one hidden size. */
interface EngineRun {
  engine: TreeLstmEngine;
  hidden: number;
  embed: number;
  cell: CellFormulation;
  batches: number[];
  /** timed; wrong-loss (first batch off the CPU engine's); planner-refused (VPPS); failed (an error, in `reason`). */
  status: "timed" | "wrong-loss" | "planner-refused" | "failed";
  reason: string | null;
  /** ms to create the engine (VPPS: the second create, through the kernel cache; the first is in `jit`). */
  createMs: number | null;
  firstBatchLoss: { batch: number; cpu: number; engine: number; relativeError: number } | null;
  memory: MemoryRecord | null;
  /** VPPS only. */
  jit: VppsJit | null;
  chosenVariant: VariantInfo | null;
  weightFloats: number | null;
}

type ResultRow =
  | (BaselineRow & { hidden: number; embed: number })
  | (VppsRow & { engine: VppsEngine; hidden: number; embed: number; variant: string | null });

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e));
const f0 = (x: number) => x.toFixed(0);
const f2 = (x: number) => x.toFixed(2);
const f3 = (x: number) => x.toFixed(3);

class TreeLstmBench {
  readonly rows: ResultRow[] = [];
  readonly runs: EngineRun[] = [];
  private readonly cpuLosses = new Map<string, number>();

  constructor(
    private readonly flags: Flags,
    private readonly trees: readonly TreeNode[],
    readonly vocab: Vocabulary,
    private readonly probe: MemoryProbe,
    private readonly cacheDir: string,
  ) {}

  readonly batchOf = (size: number, k: number): TreeNode[] => batchAt(this.trees, size, k);

  private makeModel(c: Config, cell: CellFormulation): TreeLstmModel {
    return new TreeLstmModel({ vocabSize: this.vocab.size, embed: c.embed, hidden: c.hidden, seed: 1, cell });
  }

  /** The CPU engine's loss on the first batch of 8, before any update. */
  private cpuLoss(c: Config, cell: CellFormulation): number {
    const key = `${c.hidden}:${cell}`;
    let loss = this.cpuLosses.get(key);
    if (loss === undefined) {
      const ref = this.makeModel(c, cell);
      loss = new CpuEngine(ref.params).forwardScalar(
        ref.buildBatchLoss(new ComputationGraph(), this.batchOf(8, 0), this.vocab),
      );
      this.cpuLosses.set(key, loss);
    }
    return loss;
  }

  /** Records the first-batch check; false (and the run marked wrong-loss) when the engine is too far off. */
  private checkLoss(run: EngineRun, cpu: number, loss: number): boolean {
    const relErr = relativeError(loss, cpu);
    run.firstBatchLoss = { batch: 8, cpu, engine: loss, relativeError: relErr };
    console.log(
      `${run.engine}, hidden ${run.hidden}: first batch of 8: loss ${loss.toFixed(6)} (cpu ${cpu.toFixed(6)}), ` +
        `rel. error ${relErr.toExponential(2)}`,
    );
    if (relErr <= LOSS_TOLERANCE) return true;
    run.status = "wrong-loss";
    run.reason =
      `first-batch loss ${loss} differs from the CPU engine's ${cpu} by ${relErr.toExponential(2)} relative ` +
      `(more than ${LOSS_TOLERANCE})`;
    console.error(`${run.engine} (hidden ${run.hidden}, embedding ${run.embed}): ${run.reason}; not timing it`);
    return false;
  }

  /** Runs every engine of every configuration, one at a time; an engine's failure is recorded, not thrown. */
  async runAll(configs: readonly Config[]): Promise<void> {
    for (const c of configs) {
      console.log(`\n== hidden ${c.hidden}, embedding ${c.embed}: ${c.engines.join(", ")}; batch sizes ${c.batches}`);
      for (const engine of c.engines) {
        const cell: CellFormulation = engine === "vpps-ops" ? "ops" : "fused";
        const run: EngineRun = {
          engine,
          hidden: c.hidden,
          embed: c.embed,
          cell,
          batches: c.batches,
          status: "failed",
          reason: null,
          createMs: null,
          firstBatchLoss: null,
          memory: null,
          jit: null,
          chosenVariant: null,
          weightFloats: null,
        };
        this.runs.push(run);
        try {
          if (engine === "vpps-fused" || engine === "vpps-ops") await this.runVpps(engine, c, run);
          else this.runBaseline(engine, c, run);
        } catch (e) {
          run.status = "failed";
          run.reason = message(e);
          console.error(`${engine} (hidden ${c.hidden}): failed: ${run.reason}`);
        }
      }
    }
  }

  private runBaseline(kind: BaselineKind, c: Config, run: EngineRun): void {
    const track = this.probe.track();
    const model = this.makeModel(c, "fused");
    const t0 = performance.now();
    const r = startBaseline(kind, model);
    run.createMs = performance.now() - t0;
    try {
      track.sample();
      const loss = baselineFirstLoss(r, this.batchOf(8, 0), this.vocab);
      track.sample();
      if (!this.checkLoss(run, this.cpuLoss(c, "fused"), loss)) return;
      const opts = {
        quick: this.flags.quick,
        batchOf: this.batchOf,
        vocab: this.vocab,
        afterRepeat: () => track.sample(),
      };
      for (const batch of c.batches) {
        for (const { engine, ...rest } of timeBaselines([r], batch, opts)) {
          this.rows.push({ engine, hidden: c.hidden, embed: c.embed, ...rest });
        }
        track.sample();
      }
      run.status = "timed";
    } finally {
      this.finishMemory(run, track, () => r.ctx.pool.stats());
      disposeBaseline(r);
    }
  }

  /** The planner's refusal (the weights do not fit in the registers) is a property of the model, not a failure. */
  private plannerRefused(run: EngineRun, why: string): void {
    run.status = "planner-refused";
    run.reason = why;
    console.log(
      `${run.engine}, hidden ${run.hidden}, embedding ${run.embed}: skipped; the VPPS planner refuses it:\n${why}`,
    );
  }

  private async runVpps(engine: VppsEngine, c: Config, run: EngineRun): Promise<void> {
    const cell: CellFormulation = engine === "vpps-ops" ? "ops" : "fused";
    const makeModel = () => this.makeModel(c, cell);
    const refusal = vppsPlannerRefusal(makeModel(), this.probe.props);
    if (refusal !== null) {
      this.plannerRefused(run, refusal);
      return;
    }
    const track = this.probe.track();
    let created: Awaited<ReturnType<typeof createVppsWithJit>>;
    try {
      created = await createVppsWithJit(makeModel, {
        cacheDir: this.cacheDir,
        workers: this.flags.workers,
        log: (l) => console.log(l),
        afterFirstCreate: () => track.sample(),
      });
    } catch (e) {
      if (!isPlannerRefusal(e)) throw e;
      this.plannerRefused(run, message(e));
      return;
    }
    const { vpps, model, jit } = created;
    run.jit = jit;
    run.createMs = jit.createMs[1];
    try {
      track.sample();
      const weightFloats = vppsWeightFloats(vpps);
      run.weightFloats = weightFloats;
      const check = await vppsFirstLoss(vpps, model, makeModel, this.batchOf, this.vocab);
      track.sample();
      if (!this.checkLoss(run, check.cpu, check.vpps)) return;
      run.chosenVariant = (await chooseVppsVariant(vpps, model, this.batchOf, this.vocab)) ?? null;
      track.sample();
      for (const batch of c.batches) {
        // as bench/vpps.ts and a user training at this batch size: the variant profile runs on batches of this size
        vpps.profileAgain();
        const v = await chooseVppsVariant(vpps, model, this.batchOf, this.vocab, batch);
        console.log(`${engine} hidden ${c.hidden} batch ${batch}: profile kept ${v?.name ?? "the only variant"}`);
        const row = await timeVppsBatch(vpps, model, {
          cell,
          batch,
          sentences: c.sentences,
          warmSentences: c.warmSentences,
          batchOf: this.batchOf,
          vocab: this.vocab,
          weightFloats,
          agenda: this.agendaAt(c.hidden, batch),
        });
        this.rows.push({ engine, hidden: c.hidden, embed: c.embed, ...row, variant: vpps.chosenVariant?.name ?? null });
        track.sample();
      }
      run.status = "timed";
    } finally {
      this.finishMemory(run, track, () => vpps.deviceMemory());
      vpps.dispose();
    }
  }

  /** The engine's memory record; a failing read (after a device fault) leaves the pool's numbers out. */
  private finishMemory(run: EngineRun, track: MemoryTrack, pool: () => PoolStats): void {
    let stats: PoolStats | null = null;
    try {
      track.sample();
      stats = pool();
    } catch (e) {
      console.error(`${run.engine} (hidden ${run.hidden}): could not read device memory: ${message(e)}`);
    }
    run.memory = track.record(stats);
  }

  /** The rows measured in this run for one engine and hidden size. */
  at(engine: TreeLstmEngine, hidden: number, batch: number): ResultRow | undefined {
    return this.rows.find((r) => r.engine === engine && r.hidden === hidden && r.batch === batch);
  }

  /** As bench/vpps.ts: the cuBLAS agenda engine, else the tiled-GEMM one (this run's numbers). */
  private agendaAt(hidden: number, batch: number): number | undefined {
    return (
      this.at("autobatch-agenda-cublas", hidden, batch)?.sentencesPerSecond ??
      this.at("autobatch-agenda", hidden, batch)?.sentencesPerSecond
    );
  }

  /** The faster of the two agenda variants at one point, when either ran. */
  bestAgenda(hidden: number, batch: number): { engine: BaselineKind; sentencesPerSecond: number } | null {
    let best: { engine: BaselineKind; sentencesPerSecond: number } | null = null;
    for (const engine of AGENDA_ENGINES) {
      const r = this.at(engine, hidden, batch);
      if (r && (!best || r.sentencesPerSecond > best.sentencesPerSecond)) {
        best = { engine, sentencesPerSecond: r.sentencesPerSecond };
      }
    }
    return best;
  }
}

/** VPPS's sentences/s over the better agenda variant's, per hidden size and batch size measured here. */
function speedups(bench: TreeLstmBench, configs: readonly Config[]) {
  const out = [];
  for (const c of configs) {
    for (const batch of c.batches) {
      const best = bench.bestAgenda(c.hidden, batch);
      const fused = bench.at("vpps-fused", c.hidden, batch)?.sentencesPerSecond ?? null;
      const ops = bench.at("vpps-ops", c.hidden, batch)?.sentencesPerSecond ?? null;
      if (!best || (fused === null && ops === null)) continue;
      out.push({
        hidden: c.hidden,
        batch,
        bestAgenda: best,
        vppsFused: fused,
        vppsOps: ops,
        fusedOverBestAgenda: fused === null ? null : fused / best.sentencesPerSecond,
        opsOverBestAgenda: ops === null ? null : ops / best.sentencesPerSecond,
      });
    }
  }
  return out;
}

function printTables(bench: TreeLstmBench, configs: readonly Config[], source: string, device: string): void {
  for (const c of configs) {
    const cols = c.engines;
    const hasSpeedup =
      cols.some((e) => e.startsWith("vpps")) && cols.some((e) => AGENDA_ENGINES.includes(e as BaselineKind));
    const vppsCols = (["vpps-fused", "vpps-ops"] as const).filter((e) => cols.includes(e));
    const head = ["batch", ...cols.map((e) => ENGINE_LABELS[e])];
    if (hasSpeedup) head.push(...vppsCols.map((e) => `${ENGINE_LABELS[e]} / best agenda`));
    console.log(
      `\nTree-LSTM training, hidden ${c.hidden}, embedding ${c.embed}, ${source}, on ${device} (sentences/s)`,
    );
    console.log(`| ${head.join(" | ")} |`);
    console.log(`| ${head.map((h) => `${"-".repeat(Math.max(3, h.length - 1))}:`).join(" | ")} |`);
    for (const b of c.batches) {
      const cells = [
        String(b),
        ...cols.map((e) => {
          const r = bench.at(e, c.hidden, b);
          return r ? f0(r.sentencesPerSecond) : "–";
        }),
      ];
      if (hasSpeedup) {
        const best = bench.bestAgenda(c.hidden, b);
        for (const e of vppsCols) {
          const r = bench.at(e, c.hidden, b);
          cells.push(r && best ? `${f2(r.sentencesPerSecond / best.sentencesPerSecond)}×` : "–");
        }
      }
      console.log(`| ${cells.join(" | ")} |`);
    }
  }

  const vppsRows = bench.rows.filter((r): r is Extract<ResultRow, { cell: CellFormulation }> => "cell" in r);
  if (vppsRows.length > 0) {
    console.log(
      "\nVPPS host ms per batch (main thread: build; schedule = workers' time when workers > 0) against kernel ms",
    );
    console.log(
      "| hidden | cell | batch | ms/batch | build | schedule | workers | snapshot | wait | submit | kernel | weight MiB / 128 sentences |",
    );
    console.log(
      "| -----: | ---- | ----: | -------: | ----: | -------: | ------: | -------: | ---: | -----: | -----: | -------------------------: |",
    );
    for (const r of vppsRows) {
      console.log(
        `| ${r.hidden} | ${r.cell} | ${r.batch} | ${f3(r.msPerBatch)} | ${f3(r.buildMs)} | ${f3(r.scheduleMs)} | ` +
          `${r.workers} | ${f3(r.snapshotMs)} | ${f3(r.waitMs)} | ${f3(r.submitMs)} | ${f3(r.kernelMs)} | ` +
          `${f0(r.weightBytesPer128 / 2 ** 20)} |`,
      );
    }
  }

  console.log("\nDevice memory per engine (device-wide used = total − free, cuMemGetInfo; MiB)");
  console.log("| engine | hidden | used before | peak − before | pool reserved | pool peak | status |");
  console.log("| ------ | -----: | ----------: | ------------: | ------------: | --------: | ------ |");
  for (const run of bench.runs) {
    const m = run.memory;
    const pool = (x: number | null | undefined) => (x === null || x === undefined ? "–" : f0(x));
    console.log(
      `| ${run.engine} | ${run.hidden} | ${m ? f0(m.baselineMiB) : "–"} | ${m ? f0(m.peakOverBaselineMiB) : "–"} | ` +
        `${pool(m?.poolCapacityMiB)} | ${pool(m?.poolPeakMiB)} | ${run.status} |`,
    );
  }

  const jits = bench.runs.filter((r) => r.jit !== null);
  if (jits.length > 0) {
    console.log("\nVPPS JIT: create ms (first: compiles every variant; second: through the kernel cache)");
    console.log("| engine | hidden | first create | cached create | variants: JIT ms (cache hit) | chosen |");
    console.log("| ------ | -----: | -----------: | ------------: | ---------------------------- | ------ |");
    for (const r of jits) {
      const j = r.jit!;
      const variants = j.first.map((v) => `${v.name} ${f0(v.jitMs)}${v.cacheHit ? " (hit)" : ""}`).join(", ");
      console.log(
        `| ${r.engine} | ${r.hidden} | ${f0(j.createMs[0])} | ${f0(j.createMs[1])} | ${variants} | ` +
          `${r.chosenVariant?.name ?? "–"} |`,
      );
    }
  }

  const notTimed = bench.runs.filter((r) => r.status !== "timed");
  if (notTimed.length > 0) {
    console.log("\nNot timed (or not to the end):");
    for (const r of notTimed) console.log(`- ${r.engine}, hidden ${r.hidden}: ${r.status}: ${r.reason ?? ""}`);
  }
}

const METHOD = {
  baselines:
    "eager and autobatch engines (engine-timing.ts, as bench/batching.ts): per batch: build the graph, backward " +
    "(which runs forward), SGD update on the device, then read the loss (one wait per batch); warm-up, then the " +
    "median over repeats of (steps / steps' time). Launches = kernels + cuBLAS calls + async copies/memsets per " +
    "batch, the update's included. Profile: host ms per batch by stage (build; autobatch: plan, encode, issue), the " +
    "wait at the loss read, and the device's span between CUDA events recorded before backward and after update. " +
    "issueCost: host µs per command kind, from extra untimed steps with the device's run/upload wrapped. Unlike " +
    "bench/batching.ts the engines run one after another, not side by side.",
  vpps:
    "VPPS (vpps-timing.ts, as bench/vpps.ts): the plan variant is profiled again at each batch size (a row's " +
    "`variant`); per batch: build the graph, then Vpps.fb (schedule, encode, one pinned " +
    "copy, memsets, one launch, returning the previous batch's loss); the host builds batch k+1 while the GPU runs " +
    "batch k. Throughput = sentences / wall time of all batches of a size (after an untimed warm-up of 2,048 " +
    "sentences, at least 5 batches), ending with a " +
    "synchronize. Kernel ms from CUDA events around two consecutive launches in every 16. With schedule workers (a row's `workers` > 0) " +
    "scheduleMs is the workers' time. vsAutobatchAgenda: against this run's agenda engine with cuBLAS (else the " +
    "tiled-GEMM one) at the same hidden and batch size.",
  weightBytes:
    "weightBytesPer128 (VPPS): bytes of the weight matrices, read from DRAM into registers once per launch (and " +
    "written back once), times the launches 128 sentences take at that batch size. Not measured for the baselines.",
  jit:
    "VPPS is created twice per cell and hidden size: the first create compiles every rpw/CTA variant with NVRTC, " +
    "all at once, into the kernel cache (`options.cacheDir`); its kernels carry a name unique to the configuration " +
    "and run, so that neither that cache nor NVRTC's own cache of programs it has seen serves them (a cold JIT); " +
    "the second create reads them back from the kernel cache. runs[].jit.createMs is [first, second]. The " +
    "baselines' createMs includes their kernels' compile or cache read (default cache).",
  memory:
    "runs[].memory: device-wide used memory (total − free from cuMemGetInfo, GPU 0) sampled before the engine is " +
    "created (baselineMiB) and after its creation, the first-batch check, each timed repeat (baselines, outside " +
    "the timed window) or each batch size (VPPS), and before it is disposed; peakOverBaselineMiB = peak − baseline. " +
    "Device-wide: it includes anything else allocated on the GPU meanwhile (the benchmark holds the CUDA context " +
    "for the whole run, so the context itself is in the baseline; engines are disposed before the next one is " +
    "created). Each engine reserves one DevicePool up front (min(¼ of free memory, 4 GiB)), which dominates the " +
    "device-wide number; poolPeakMiB is the most of that pool in use at once: for the baselines the pool's own " +
    "high-water mark, for VPPS (which reserves the rest of its pool for batches at creation) its fixed buffers plus " +
    "the largest batch's values and gradients (Vpps.deviceMemory()).",
  correctness:
    `before timing, each engine's loss on the first batch of 8 (fresh weights) is compared with the CPU engine's; ` +
    `an engine whose |loss − cpu| / max(1, |cpu|) exceeds ${LOSS_TOLERANCE} is not timed (status wrong-loss).`,
};

async function main(flags: Flags): Promise<number> {
  const configs = configsOf(flags);
  if (configs.length === 0) throw new UsageError("nothing to run with these --engines and --hidden");
  requireGpu(SCRIPT);
  const { trees, source } = loadBenchTrees(flags.dataFile, MAX_TREES);
  const vocab = Vocabulary.fromTrees(trees);
  const probe = MemoryProbe.open();
  const device = probe.deviceName;
  const cacheDir = flags.cacheDir ?? mkdtempSync(join(tmpdir(), "vpps-bench-kernels-"));
  console.log(
    `${SCRIPT}: ${device}; ${source}, ${trees.length} trees, vocabulary ${vocab.size}; VPPS kernel cache ${cacheDir}`,
  );
  const bench = new TreeLstmBench(flags, trees, vocab, probe, cacheDir);
  try {
    await bench.runAll(configs);
  } finally {
    probe.close();
  }
  printTables(bench, configs, source, device);

  const failed = bench.runs.filter((r) => r.status === "failed" || r.status === "wrong-loss");
  if (flags.quick) {
    console.log("\n--quick: no files written");
  } else {
    const slug = deviceSlug(device);
    const result = {
      ...resultHeader({
        benchmark: "treelstm",
        command: `node --import tsx ${SCRIPT} ${process.argv.slice(2).join(" ")}`.trim(),
        device,
        data: source,
        trees: trees.length,
        vocabulary: vocab.size,
      }),
      options: {
        engines: flags.engines,
        hidden: flags.hidden,
        workers: flags.workers ?? null,
        cacheDir,
      },
      models: configs.map((c) => ({
        name: "treelstm",
        hidden: c.hidden,
        embed: c.embed,
        optimizer: "sgd",
        learningRate: 0.05,
        clip: 5,
        batches: c.batches,
        engines: c.engines,
      })),
      method: METHOD,
      runs: bench.runs,
      rows: bench.rows,
      speedup: speedups(bench, configs),
      targets: { vppsBatch1: 5000, vppsBatch8: 15000, vppsBatch128: 30000, vppsVsAgendaUpTo32: 3 },
    };
    console.log(`\nwrote ${writeResult(`treelstm-${slug}`, result)}`);
    const series = throughputSeries(bench.rows, MAIN_HIDDEN);
    if (series.length === 0) {
      console.log(`no rows at hidden ${MAIN_HIDDEN}: no plot written`);
    } else {
      const svg = join(ROOT, "bench", "results", `throughput-${slug}.svg`);
      writeFileSync(
        svg,
        renderLogLogPlot(series, {
          title: throughputTitle(device, source, MAIN_HIDDEN),
          xLabel: "batch size (trees)",
          yLabel: "sentences / s",
        }),
      );
      console.log(`wrote ${svg}`);
    }
  }
  if (failed.length > 0) {
    console.error(`\n${SCRIPT}: ${failed.length} engine run(s) failed or disagreed with the CPU engine (see above)`);
    return 1;
  }
  return 0;
}

try {
  const flags = parseFlags(process.argv.slice(2));
  if (flags === "help") {
    console.log(USAGE);
  } else {
    process.exitCode = await main(flags);
  }
} catch (e) {
  if (!(e instanceof UsageError)) throw e;
  console.error(`${SCRIPT}: ${e.message}\n\n${USAGE}`);
  process.exitCode = 2;
}
