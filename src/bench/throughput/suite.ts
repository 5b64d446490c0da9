/**
 * The throughput suite (`vpps bench <model>`), every engine in one process: SGD training (forward, backward, update;
 * learning rate 0.05) on the model's data, in sentences/s against batch size.
 *
 * - the main size (the first of --hidden; Tree-LSTM: hidden 256, embedding 256), every engine at every batch size
 *   (1, 8, 32, 128 by default);
 * - the other sizes (Tree-LSTM: hidden 128 and 512): the agenda engine with cuBLAS and VPPS in its first formulation,
 *   at batch 1, 8 and 128. A model the VPPS planner refuses is skipped with the planner's reason.
 *
 * Engines run one after another, each disposed before the next is created, so that each one's device memory can be
 * told apart. Before timing, each engine's loss on the first batch of 8 is compared with the CPU engine's; an engine
 * more than 1e-3 (relative) off is not timed. The engines that wait for each batch are timed by engine-timing.ts,
 * VPPS by vpps-timing.ts (as `vpps bench vpps timing` does).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { PoolStats } from "../../cuda/index.js";
import { CpuEngine } from "../../engines/cpu.js";
import { ComputationGraph } from "../../graph/graph.js";
import { saveParameters } from "../../model/safetensors.js";
import { type BenchDevice, cpuDevice, gpuDevice, requireGpu } from "../device.js";
import { baselineFirstLoss, disposeBaseline, startBaseline, timeBaselines } from "../engine-timing.js";
import { BenchUsageError, errorMessage } from "../errors.js";
import { checkFirstLoss } from "../first-loss.js";
import { MemoryProbe, type MemoryTrack } from "../memory.js";
import type { BenchModel, BenchNet, BenchSize, BenchTask } from "../model.js";
import { Transcript } from "../output.js";
import {
  chooseVppsVariant,
  createVppsWithJit,
  isPlannerRefusal,
  timeVppsBatch,
  vppsFirstLoss,
  vppsPlannerRefusal,
  vppsWeightFloats,
} from "../vpps-timing.js";
import { type Config, configsOf, type EngineRun, LOSS_TOLERANCE, type ThroughputOptions } from "./config.js";
import { AGENDA_ENGINES, type EngineSpec, engineSpecs } from "./engines.js";
import {
  parseReferenceOutput,
  probeReference,
  REFERENCE_ENGINE,
  type ReferenceRecord,
  referencePython,
  referenceScript,
  runReferenceScript,
} from "./reference.js";
import { printTables, type ResultRow, writeThroughputResults } from "./report.js";

export class ThroughputSuite<T> {
  readonly rows: ResultRow[] = [];
  readonly runs: EngineRun[] = [];
  /** The PyTorch reference's run, when it was asked for and could start (reference.ts). */
  reference: ReferenceRecord | null = null;
  private readonly cpuLosses = new Map<string, number>();

  constructor(
    private readonly o: ThroughputOptions,
    private readonly task: BenchTask<T>,
    /** Device memory (GPU runs only). */
    private readonly probe: MemoryProbe | null,
    private readonly cacheDir: string,
  ) {}

  readonly batchOf = (size: number, k: number): readonly T[] => this.task.batch(size, k);

  /** The engines' network (with the model options given), or the PyTorch reference's (`forReference`: without). */
  private net(c: Config, variant: string, forReference = false): BenchNet<T> {
    const size: BenchSize = { hidden: c.hidden, embed: c.embed };
    return this.task.net(size, variant, forReference ? {} : this.o.modelOptions);
  }

  /** The CPU engine's loss on the first batch of 8, before any update (of the reference's network, or the engines'). */
  private cpuLoss(c: Config, variant: string, forReference = false): number {
    const key = `${c.hidden}:${variant}:${forReference}`;
    let loss = this.cpuLosses.get(key);
    if (loss === undefined) {
      const ref = this.net(c, variant, forReference);
      loss = new CpuEngine(ref.params).forwardScalar(ref.batchLoss(new ComputationGraph(), this.batchOf(8, 0)));
      this.cpuLosses.set(key, loss);
    }
    return loss;
  }

  /** Records the first-batch check; false (and the run marked wrong-loss) when the engine is too far off. */
  private checkLoss(run: EngineRun, cpu: number, loss: number): boolean {
    const what = `${run.engine} (hidden ${run.hidden}, embedding ${run.embed})`;
    const { check, refusal } = checkFirstLoss(what, { batch: 8, cpu, loss, tolerance: LOSS_TOLERANCE });
    run.firstBatchLoss = check;
    console.log(
      `${run.engine}, hidden ${run.hidden}: first batch of 8: loss ${loss.toFixed(6)} (cpu ${cpu.toFixed(6)}), ` +
        `rel. error ${check.relativeError.toExponential(2)}`,
    );
    if (refusal === null) return true;
    run.status = "wrong-loss";
    run.reason = refusal;
    console.error(refusal);
    return false;
  }

  /** Runs every engine of every configuration, one at a time; an engine's failure is recorded, not thrown. */
  async runAll(configs: readonly Config[]): Promise<void> {
    for (const c of configs) {
      const ids = c.engines.map((e) => e.id).join(", ");
      console.log(`\n== hidden ${c.hidden}, embedding ${c.embed}: ${ids}; batch sizes ${c.batches}`);
      for (const spec of c.engines) {
        const run: EngineRun = {
          engine: spec.id,
          hidden: c.hidden,
          embed: c.embed,
          cell: spec.variant,
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
          if (spec.kind === "vpps") await this.runVpps(spec, c, run);
          else this.runBaseline(spec, c, run);
        } catch (e) {
          run.status = "failed";
          run.reason = errorMessage(e);
          console.error(`${spec.id} (hidden ${c.hidden}): failed: ${run.reason}`);
        }
      }
    }
  }

  private runBaseline(spec: EngineSpec, c: Config, run: EngineRun): void {
    const track = spec.onGpu ? this.probe?.track() : undefined;
    const net = this.net(c, spec.variant);
    const t0 = performance.now();
    const r = startBaseline(spec.id, net, spec.open);
    run.createMs = performance.now() - t0;
    try {
      track?.sample();
      const loss = baselineFirstLoss(r, this.batchOf(8, 0));
      track?.sample();
      if (!this.checkLoss(run, this.cpuLoss(c, spec.variant), loss)) return;
      const opts = {
        quick: this.o.quick,
        sentencesPerRepeat: this.o.sentences,
        batchOf: this.batchOf,
        afterRepeat: () => track?.sample(),
      };
      for (const batch of c.batches) {
        // the CPU engines run 4-6 sentences/s at hidden 256, a step of 128 sentences takes half a minute: the short
        // timing (16 sentences per repeat, 3 repeats, 2 at batch 128), one warm-up step below batch 32, none above
        const cpuBudget = spec.onGpu ? {} : { quick: true, warmSteps: batch < 32 ? 1 : 0 };
        for (const { engine, ...rest } of timeBaselines([r], batch, { ...opts, ...cpuBudget })) {
          this.rows.push({ engine, hidden: c.hidden, embed: c.embed, ...rest });
        }
        track?.sample();
      }
      run.status = "timed";
    } finally {
      if (track && r.gpu) this.finishMemory(run, track, () => r.gpu!.ctx.pool.stats());
      disposeBaseline(r);
    }
  }

  /**
   * The PyTorch reference at size `c`, after the engines (reference.ts): its loss on the first batch of 8 with
   * vpps's initial weights checked against the CPU engine's, then its rows added. Where it cannot run (no data file,
   * script, python3 or torch) one line says why and it is recorded as skipped; a failure is recorded like an
   * engine's.
   */
  async runReference(
    c: Config,
    o: { model: string; variant: string; dataPath: string | undefined; maxItems: number; onGpu: boolean },
  ): Promise<void> {
    const run: EngineRun = {
      engine: REFERENCE_ENGINE,
      hidden: c.hidden,
      embed: c.embed,
      cell: o.variant,
      batches: c.batches,
      status: "skipped",
      reason: null,
      createMs: null,
      firstBatchLoss: null,
      memory: null,
      jit: null,
      chosenVariant: null,
      weightFloats: null,
    };
    this.runs.push(run);
    const skip = (why: string): void => {
      run.reason = why;
      console.log(`\nPyTorch reference: skipped: ${why}`);
    };
    if (o.dataPath === undefined) {
      skip("the data here is generated in code (no --data and no data set beside the repository); it reads files");
      return;
    }
    const python = referencePython();
    const script = referenceScript(o.model);
    const probe = probeReference(python, script);
    if (!probe.ok) {
      skip(probe.reason);
      return;
    }
    const dir = mkdtempSync(join(tmpdir(), "vpps-reference-"));
    // also when the benchmark is stopped from outside while the reference runs (reference.ts exits then)
    const cleanup = (): void => rmSync(dir, { recursive: true, force: true });
    process.once("exit", cleanup);
    try {
      const init = join(dir, "initial.safetensors");
      saveParameters(this.net(c, o.variant, true).params, init, { model: o.model });
      const args = [
        script,
        "bench",
        ...["--data", o.dataPath, "--batches", c.batches.join(","), "--max-items", String(o.maxItems)],
        ...["--hidden", String(c.hidden), "--embed", String(c.embed)],
        // the engines' training step (engine-timing.ts): SGD, learning rate 0.05, clip 5
        ...["--optimizer", "sgd", "--lr", "0.05", "--clip", "5"],
        ...["--device", o.onGpu ? "cuda" : "cpu", "--init-from", init, "--json"],
        ...(this.o.sentences !== undefined || this.o.quick ? ["--sentences", String(this.o.sentences ?? 64)] : []),
      ];
      const record: ReferenceRecord = {
        python,
        script,
        args,
        torch: probe.torch,
        cudnn: null,
        device: null,
        items: null,
        vocabulary: null,
      };
      this.reference = record;
      console.log(`\n== PyTorch reference (torch ${probe.torch}): ${python} ${args.join(" ")}`);
      const out = await runReferenceScript(python, args, (line) => console.log(`pytorch: ${line}`));
      if (out.code !== 0) throw new Error(`${script} exited with status ${out.code}: ${out.lastError}`);
      const result = parseReferenceOutput(out.stdout);
      Object.assign(record, {
        torch: result.torch,
        cudnn: result.cudnn,
        device: result.device,
        items: result.items,
        vocabulary: result.vocabulary,
      });
      if (result.firstBatchLoss === null) throw new Error("it printed no first-batch loss (it was given --init-from)");
      if (!this.checkLoss(run, this.cpuLoss(c, o.variant, true), result.firstBatchLoss)) return;
      for (const r of result.rows) {
        this.rows.push({
          engine: REFERENCE_ENGINE,
          hidden: c.hidden,
          embed: c.embed,
          batch: r.batch,
          sentencesPerSecond: r.sentencesPerSecond,
          msPerBatch: r.msPerBatch,
          repeats: r.repeats,
          stepsPerRepeat: r.stepsPerRepeat,
          device: result.device,
        });
      }
      run.status = "timed";
    } catch (e) {
      run.status = "failed";
      run.reason = errorMessage(e);
      console.error(`PyTorch reference: failed: ${run.reason}`);
    } finally {
      process.removeListener("exit", cleanup);
      cleanup();
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

  private async runVpps(spec: EngineSpec, c: Config, run: EngineRun): Promise<void> {
    const makeNet = () => this.net(c, spec.variant);
    const probe = this.probe!;
    const refusal = vppsPlannerRefusal(makeNet(), probe.props);
    if (refusal !== null) {
      this.plannerRefused(run, refusal);
      return;
    }
    const track = probe.track();
    let created: Awaited<ReturnType<typeof createVppsWithJit<BenchNet<T>>>>;
    try {
      created = await createVppsWithJit(makeNet, {
        ...(spec.offChip !== undefined ? { offChip: spec.offChip } : {}),
        cacheDir: this.cacheDir,
        workers: this.o.workers,
        log: (l) => console.log(l),
        afterFirstCreate: () => track.sample(),
      });
    } catch (e) {
      if (!isPlannerRefusal(e)) throw e;
      this.plannerRefused(run, errorMessage(e));
      return;
    }
    const { vpps, net, jit } = created;
    run.jit = jit;
    run.createMs = jit.createMs[1];
    try {
      track.sample();
      const weightFloats = vppsWeightFloats(vpps);
      run.weightFloats = weightFloats;
      const check = await vppsFirstLoss(vpps, net, makeNet, this.batchOf);
      track.sample();
      if (!this.checkLoss(run, check.cpu, check.vpps)) return;
      run.chosenVariant = (await chooseVppsVariant(vpps, net, this.batchOf)) ?? null;
      track.sample();
      for (const batch of c.batches) {
        // as a user training at this batch size: the variant profile runs on batches of this size
        vpps.profileAgain();
        const v = await chooseVppsVariant(vpps, net, this.batchOf, batch);
        console.log(`${spec.id} hidden ${c.hidden} batch ${batch}: profile kept ${v?.name ?? "the only variant"}`);
        const row = await timeVppsBatch(vpps, net, {
          cell: spec.variant,
          batch,
          sentences: c.sentences,
          warmSentences: c.warmSentences,
          batchOf: this.batchOf,
          indicesOf: (size, k) => this.task.indices(size, k),
          weightFloats,
          agenda: this.agendaAt(c.hidden, batch),
        });
        this.rows.push({
          engine: spec.id,
          hidden: c.hidden,
          embed: c.embed,
          ...row,
          variant: vpps.chosenVariant?.name ?? null,
        });
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
      console.error(`${run.engine} (hidden ${run.hidden}): could not read device memory: ${errorMessage(e)}`);
    }
    run.memory = track.record(stats);
  }

  /** The row measured in this run for one engine, hidden size and batch size. */
  at(engine: string, hidden: number, batch: number): ResultRow | undefined {
    return this.rows.find((r) => r.engine === engine && r.hidden === hidden && r.batch === batch);
  }

  /** The cuBLAS agenda engine's sentences/s, else the tiled-GEMM one's (this run's numbers). */
  private agendaAt(hidden: number, batch: number): number | undefined {
    return (
      this.at("autobatch-agenda-cublas", hidden, batch)?.sentencesPerSecond ??
      this.at("autobatch-agenda", hidden, batch)?.sentencesPerSecond
    );
  }

  /** The faster of the two agenda variants at one point, when either ran. */
  bestAgenda(hidden: number, batch: number): { engine: string; sentencesPerSecond: number } | null {
    let best: { engine: string; sentencesPerSecond: number } | null = null;
    for (const engine of AGENDA_ENGINES) {
      const r = this.at(engine, hidden, batch);
      if (r && (!best || r.sentencesPerSecond > best.sentencesPerSecond)) {
        best = { engine, sentencesPerSecond: r.sentencesPerSecond };
      }
    }
    return best;
  }
}

/**
 * Runs the suite for `model`: prints progress and the tables, writes `<model>.json`, `.md` and `.svg` into the
 * results folder (not with --quick unless --out is given). Returns the exit status: 1 when an engine failed or
 * disagreed with the CPU engine.
 */
export async function runThroughput<T>(model: BenchModel<T>, o: ThroughputOptions): Promise<number> {
  const specs = o.specs ?? engineSpecs(model as BenchModel<unknown>);
  const configs = configsOf(model as BenchModel<unknown>, o, specs);
  if (configs.length === 0) throw new BenchUsageError("nothing to run with these --engines and --hidden");
  const what = `vpps bench ${model.name}`;
  const onGpu = configs.some((c) => c.engines.some((e) => e.onGpu));
  if (onGpu) requireGpu(what);
  const task = model.load(o.dataFile, model.maxItems);
  const probe = onGpu ? MemoryProbe.open() : null;
  const device: BenchDevice = probe ? gpuDevice(probe.deviceName) : cpuDevice();
  const cacheDir = o.cacheDir ?? mkdtempSync(join(tmpdir(), "vpps-bench-kernels-"));
  const vocabulary = task.vocabulary === undefined ? "" : `, vocabulary ${task.vocabulary}`;
  console.log(
    `${what}: ${device.name}; ${task.source}, ${task.items} ${model.unit}${vocabulary}` +
      (onGpu ? `; VPPS kernel cache ${cacheDir}` : "") +
      Object.entries(o.modelOptions ?? {})
        .map(([k, v]) => `; --${k} ${v}`)
        .join(""),
  );
  const suite = new ThroughputSuite(o, task, probe, cacheDir);
  try {
    await suite.runAll(configs);
  } finally {
    probe?.close();
  }
  if (o.reference) {
    await suite.runReference(configs[0]!, {
      model: model.name,
      variant: model.variants[0]!.name,
      dataPath: task.path,
      maxItems: model.maxItems,
      onGpu,
    });
  }
  const tables = new Transcript();
  printTables(tables, suite, model as BenchModel<unknown>, configs, task.source, device.name);
  if (o.quick && o.out === undefined) {
    console.log("\n--quick: no files written (--out <dir> writes them)");
  } else {
    for (const path of writeThroughputResults({ model, o, task, device, configs, suite, cacheDir, tables })) {
      console.log(`wrote ${path}`);
    }
  }
  const failed = suite.runs.filter((r) => r.status === "failed" || r.status === "wrong-loss");
  if (failed.length > 0) {
    console.error(`\n${what}: ${failed.length} engine run(s) failed or disagreed with the CPU engine (see above)`);
    return 1;
  }
  return 0;
}
