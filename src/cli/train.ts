import { join, resolve } from "node:path";
import { cudaAvailable, defaultPoolBytes, getDriver, parseDeviceSpec, queryDeviceProperties } from "../cuda/index.js";
import { recordDataReads } from "../data/text-file.js";
import { checkEngineOptions, createEngine, engineEntry } from "../engines/registry.js";
import type { AnyTask } from "../models/task.js";
import type { ProcessGroup } from "../parallel/index.js";
import { type RankEnv, rankEnvFrom } from "../parallel/index.js";
import { type EpochResult, type TrainSummary, train } from "../train/loop.js";
import { LOCK_FILE, RunDir } from "../train/run-dir.js";
import { type DataFingerprint, dataDifference, dataFingerprint, syntheticFingerprint } from "../train/run-state.js";
import { type MemoryLimit, memoryLimit } from "../util/memory-limit.js";
import { checkModelFits } from "./commands.js";
import { CliError } from "./errors.js";
import { invocation } from "./invocation.js";
import { writeOut } from "./output.js";
import { checkLaunch, joinJob, launchTrain, runsOnGpu } from "./parallel.js";
import { formatDuration, ProgressBar } from "./progress.js";
import { readRun, type SavedRun } from "./run-state.js";
import { stoppable } from "./stop-signals.js";
import { type RunSettingsResolved, resolveRunSettings, type TrainCommandOptions } from "./train-settings.js";

export type { TrainCommandOptions } from "./train-settings.js";

/**
 * `vpps train <model>`: trains, reports progress on stderr and results on stdout. `source(key)` is where an
 * option's value came from (commander's getOptionValueSource: "cli", "default", …): with `--resume`, the run's
 * recorded settings stand unless a flag is given explicitly (train-settings.ts says what each flag may do).
 */
export async function runTrain(
  task: AnyTask,
  opts: TrainCommandOptions,
  source: (key: string) => string | undefined = () => "cli",
): Promise<void> {
  checkEngineOptions(opts.engine, { batching: opts.batching, device: opts.device, streams: opts.streams });
  if (opts.explain && (opts.streams ?? "1") !== "auto") {
    throw new CliError("--explain prints GLP4NN's choice of streams: give it with --engine eager --streams auto");
  }
  if (opts.offChip !== undefined && opts.engine !== "vpps" && opts.resume === undefined) {
    throw new CliError(`--off-chip places VPPS's weight matrices: give it with --engine vpps (not ${opts.engine})`);
  }
  if (opts.data !== undefined && opts.data.trim() === "") {
    throw new CliError("--data is empty; give a data directory, or leave --data out for the synthetic task");
  }
  // WORLD_SIZE set: this process is one rank (started by --gpus, torchrun or a scheduler), whatever --gpus says
  const rankEnv = rankEnvFrom();
  const gpus = opts.gpus ?? 1;
  if (rankEnv === null && gpus > 1) {
    // a resumed run's batch is checked by the ranks, which read it from the run
    const batch = opts.resume !== undefined && source("batch") !== "cli" ? gpus : opts.batch;
    checkLaunch(gpus, batch, opts.engine, opts.device, source("device") === "cli");
    return launchTrain(gpus, invocation.args, runsOnGpu(opts.engine, opts.device));
  }
  const parallel = rankEnv !== null && rankEnv.worldSize > 1 ? rankEnv : null;
  // only rank 0 speaks, evaluates and writes the run's directory
  const speaks = parallel === null || parallel.rank === 0;
  const noun = task.data.noun;
  const log = (s: string) => {
    if (!opts.json && speaks) writeOut(`${s}\n`);
  };
  // lines about the run's directory and settings: on stderr under --json, where stdout is one JSON object
  const note = (s: string) => {
    if (speaks) opts.json ? process.stderr.write(`${s}\n`) : writeOut(`${s}\n`);
  };
  // the output directory is checked, created and locked before anything else: a run that cannot save fails now,
  // not after an epoch of training
  const outArg = opts.out ?? opts.resume;
  const outFlag = opts.out !== undefined ? "--out" : "--resume";
  const out = outArg === undefined || !speaks ? undefined : RunDir.open(outArg, { flag: outFlag, note });
  try {
    const saved = opts.resume !== undefined ? readRun(task, opts.resume, "--resume", task.defaults, note) : null;
    const s = resolveRunSettings(task, opts, saved, source, note);
    let group: ProcessGroup | undefined;
    let device = s.device;
    if (parallel) {
      const lock = out ? [join(out.path, LOCK_FILE)] : [];
      ({ group, device } = joinJob(parallel, s.batch, s.engine, s.device, lock));
    }
    // `vpps bench parallel` asks for the device all-reduces' time per epoch (CUDA events around each)
    const allReduceMs: number[] | undefined = group && process.env.VPPS_TIME_ALLREDUCE === "1" ? [] : undefined;
    if (allReduceMs) group!.startTiming();
    out?.checkOtherRun({ model: task.name, ...(saved ? { resumeDir: saved.dir } : {}), force: opts.force });
    // the data, known by content: every file read is hashed on the way in (data/text-file.ts)
    const { value: data, files } = recordDataReads(() =>
      s.data
        ? task.data.fromDirectory(s.data, {
            ...(s.maxSentences ? { maxTrain: s.maxSentences } : {}),
            options: s.options,
          })
        : task.data.synthetic.make(s.dataSeed),
    );
    const fingerprint = s.data ? dataFingerprint(s.data, files) : syntheticFingerprint(s.dataSeed);
    if (saved) checkSameData(saved, fingerprint, s.data, opts.acceptDataChange === true, note);
    const trainSet = s.maxSentences ? data.train.slice(0, s.maxSentences) : data.train;
    const vocab = saved ? saved.vocab : task.vocabulary.build(trainSet, s.options);
    checkModelFits(task, s.options, task.vocabulary.size(vocab), {
      optimizer: s.optimizer,
      advice: saved ? `the sizes come from ${opts.resume}/state.json` : undefined,
    });
    const devSet = s.data ?? `synthetic (seed ${s.dataSeed})`;
    if (saved) log(`resuming from ${saved.checkpoint} after epoch ${saved.state.epochs.length}`);
    log(
      `data: ${data.source}: ${trainSet.length} training ${noun}, ${data.dev.length} dev ${noun}, ` +
        task.vocabulary.describe(vocab),
    );
    log(
      `model: ${task.describe(s.options)}; ` +
        `${s.optimizer} lr ${s.learningRate}, batch ${s.batch}, seed ${s.seed}, engine ${s.engine}` +
        (s.shuffle === "batches" ? ", fixed batches (--shuffle batches)" : ""),
    );
    if (parallel) {
      log(
        `data-parallel: ${parallel.worldSize} ranks, ${s.batch / parallel.worldSize} ${noun} each per batch of ` +
          `${s.batch}${runsOnGpu(s.engine, s.device) ? " (NCCL)" : " (gradients summed on the host, over TCP)"}`,
      );
    }
    const entry = engineEntry(s.engine);
    if (entry.prepare !== undefined && !parallel) {
      // VPPS's JIT on worker threads, before the synchronous training loop: progress lines, and Ctrl-C / SIGTERM
      // end the process at once (the parameters' shapes are all it reads)
      const shapes = task.create(s.options, vocab, s.seed).params;
      const prepare = entry.prepare.bind(entry);
      await stoppable("compiling the VPPS kernels (those compiled stay in the kernel cache)", () =>
        prepare(shapes, { device, progress: note }),
      );
    }
    const metrics = task.metrics;
    const bar = new ProgressBar();
    const { summary } = train({
      task,
      options: s.options,
      train: trainSet,
      dev: data.dev,
      vocab,
      epochs: s.epochs,
      batch: s.batch,
      learningRate: s.learningRate,
      optimizer: s.optimizer,
      seed: s.seed,
      shuffle: s.shuffle,
      clipThreshold: s.clip,
      // the evaluation engine, where one is needed, comes from the registry with the same options
      makeEngine: (params) =>
        createEngine(s.engine, params, {
          batching: s.batching,
          device,
          // the stream pool changes no result (bit for bit), so it is this invocation's, not the run's
          ...(s.engine === "eager" && opts.streams !== undefined ? { streams: opts.streams } : {}),
          ...(s.engine === "vpps" && opts.offChip !== undefined ? { offChip: opts.offChip } : {}),
          ...(opts.explain ? { explain: (text: string) => note(text) } : {}),
        }),
      ...(group ? { group } : {}),
      ...(out ? { runDir: out } : {}),
      ...(saved
        ? {
            resume: {
              checkpoint: saved.checkpoint,
              epochsDone: saved.state.epochs.length,
              previous: saved.state.epochs,
              state: saved.state,
            },
          }
        : {}),
      devSet,
      settings: {
        data: s.data,
        dataFingerprint: fingerprint,
        dataSeed: s.dataSeed,
        maxSentences: s.maxSentences ?? null,
        epochs: s.epochs,
        engine: s.engine,
        batching: s.batching,
        device: s.device,
        modelOptions: { ...s.options },
      },
      // the one memory estimate: activations are this process's on the CPU (a GPU engine's are on the device)
      memory: {
        limit: memoryLimit(),
        hostActivations: !runsOnGpu(s.engine, s.device),
        ...deviceMemory(runsOnGpu(s.engine, s.device), device),
        sizeFlags: task.options
          .filter((o) => o.planLabel !== undefined)
          .map((o) => o.flag.split(" ")[0]!)
          .join(" or "),
      },
      onNote: note,
      onProgress: (p) => {
        if (!speaks) return;
        const eta = (p.sentencesTotal - p.sentencesDone) / Math.max(p.sentencesPerSecond, 1e-9);
        bar.update(`epoch ${p.epoch}/${s.epochs}`, p.sentencesDone, p.sentencesTotal, {
          [`${noun}/s`]: p.sentencesPerSecond.toFixed(1),
          ETA: formatDuration(eta),
          // data-parallel: the bar shows rank 0's share of the batches (a mean over the ranks would cost a host
          // collective per update); the epoch line's train loss is over every rank's
          [parallel ? "loss (rank 0)" : "loss"]: p.loss.toFixed(4),
        });
      },
      onEpoch: (e: EpochResult) => {
        allReduceMs?.push(group!.takeAllReduceMs());
        if (!speaks) return;
        bar.finish();
        const dev = metrics.map((m) => `${m.name} ${(100 * e.devMetrics[m.key]!).toFixed(2)}%`).join("  ");
        log(
          `epoch ${e.epoch}: train loss ${e.trainLoss.toFixed(4)}  dev ${dev}  ` +
            `${e.sentencesPerSecond.toFixed(1)} ${noun}/s  ${formatDuration(e.seconds)}` +
            (e.checkpoint ? `  checkpoint ${e.checkpoint}` : ""),
        );
      },
    });
    group?.close(); // every rank has finished: a rank exiting now is no failure
    if (!speaks) return;
    reportRun({
      opts,
      s,
      out,
      data: data.source,
      summary,
      devSet,
      log,
      metricName: metrics[0].name,
      noun,
      parallel,
      allReduceMs,
    });
  } finally {
    out?.close(); // a run that failed before writing anything leaves no directory behind
  }
}

/**
 * The device memory a GPU run can use on the GPU `device` names (cuda:N, else the first), when it can be queried: the
 * engines allocate from one device pool of min(¼ of the free memory, 4 GiB) (src/cuda/runtime/context.ts
 * defaultPoolBytes), so that pool, taken at the GPU's total memory, is the limit, not the whole GPU.
 */
function deviceMemory(gpu: boolean, device: string): { device?: MemoryLimit } {
  if (!gpu || !cudaAvailable().ok) return {};
  const spec = parseDeviceSpec(device);
  const index = spec.kind === "cuda" ? spec.index : 0;
  try {
    const p = queryDeviceProperties(getDriver(), index);
    const bytes = defaultPoolBytes(p.totalMemory);
    return {
      device: { bytes, source: `the engines' device pool of GPU ${index}, ${p.name}: ¼ of its memory, at most 4 GiB` },
    };
  } catch {
    return {}; // a device that cannot be queried: the engine says why when it starts
  }
}

/**
 * Refuses to resume `saved` on data whose content differs from the fingerprint the run recorded (unless `accept`,
 * `--accept-data-change`), naming the files that differ; says so when the same data are read from a new place. A
 * run saved before fingerprints were recorded is resumed with a line saying the data cannot be checked.
 */
function checkSameData(
  saved: SavedRun,
  now: DataFingerprint,
  dir: string | null,
  accept: boolean,
  note: (line: string) => void,
): void {
  const was = saved.state.training.dataFingerprint;
  if (was === undefined) {
    note(`--resume ${saved.dir}: the run recorded no fingerprint of its data (an older vpps): not checked`);
    return;
  }
  if (was.digest === now.digest) {
    if (saved.state.training.data !== undefined && saved.state.training.data !== dir) {
      note(`the data in ${dir} are the run's (same content as in ${saved.state.training.data}): resuming there`);
    }
    return;
  }
  const what = dataDifference(now, was);
  if (!accept) {
    throw new CliError(
      `--resume ${saved.dir}: the data in ${dir ?? "the synthetic task"} are not those the run trained on ` +
        `(${what}); resume on the run's own data, start a new run (another --out), or add --accept-data-change ` +
        "to continue on these",
    );
  }
  note(`--accept-data-change: continuing the run on changed data (${what})`);
}

/** The run's results on stdout: one JSON object (`--json`) or the per-epoch table and the best dev metric. */
function reportRun(r: {
  opts: TrainCommandOptions;
  s: RunSettingsResolved;
  out: RunDir | undefined;
  data: string;
  summary: TrainSummary;
  devSet: string;
  log: (line: string) => void;
  metricName: string;
  /** What the task's examples are called (sentences, trees, images). */
  noun: string;
  parallel: RankEnv | null;
  allReduceMs: number[] | undefined;
}): void {
  const { opts, s, out, summary, devSet, log, parallel, allReduceMs } = r;
  if (opts.json) {
    const settings = {
      ...s.options,
      epochs: s.epochs,
      batch: s.batch,
      seed: s.seed,
      shuffle: s.shuffle,
      engine: s.engine,
      batching: s.batching,
      device: s.device,
      clip: s.clip,
      ...(s.maxSentences ? { maxSentences: s.maxSentences } : {}),
      ...(out ? { out: out.path } : {}),
      ...(opts.resume !== undefined ? { resume: resolve(opts.resume) } : {}),
    };
    writeOut(
      `${JSON.stringify({
        data: r.data,
        learningRate: s.learningRate,
        ...settings,
        optimizer: s.optimizer,
        ...summary,
        ...(parallel ? { ranks: parallel.worldSize } : {}),
        ...(allReduceMs ? { allReduceMs } : {}),
      })}\n`,
    );
    return;
  }
  // the columns: the first metric (what devAccuracy holds: entity F1 for the taggers) and the task's examples per second
  const devHead = `dev ${r.metricName}`;
  const rateHead = `${r.noun}/s`;
  log("");
  log(`epoch  train loss  ${devHead.padStart(7)}  ${rateHead.padStart(7)}    time`);
  for (const e of summary.epochs) {
    log(
      `${String(e.epoch).padStart(5)}  ${e.trainLoss.toFixed(4).padStart(10)}  ` +
        `${`${(100 * e.devAccuracy).toFixed(2)}%`.padStart(Math.max(7, devHead.length))}  ` +
        `${e.sentencesPerSecond.toFixed(1).padStart(Math.max(7, rateHead.length))}  ${formatDuration(e.seconds).padStart(6)}` +
        (e.devSet === devSet ? "" : e.devSet === undefined ? "  (dev set not recorded)" : "  (another dev set)"),
    );
  }
  log(`best dev ${r.metricName} ${(100 * summary.bestDevAccuracy).toFixed(2)}%; ${summary.parameters} parameters`);
}
