import { checkEngineOptions, createEngine } from "../engines/registry.js";
import type { AnyTask } from "../models/task.js";
import type { OptimizerName } from "../optim/trainers.js";
import { type EpochResult, train } from "../train/loop.js";
import { checkModelFits, pickModelOptions } from "./commands.js";
import { writeOut } from "./output.js";
import { formatDuration, ProgressBar } from "./progress.js";
import { readRun } from "./run-state.js";

/** `vpps train <model>`'s options: the training loop's, and the model's own (`task.options`) by key. */
export interface TrainCommandOptions {
  data?: string;
  epochs: number;
  batch: number;
  lr?: number;
  optimizer?: OptimizerName;
  seed: number;
  engine: string;
  batching: "depth" | "agenda";
  device: string;
  maxSentences?: number;
  json: boolean;
  out?: string;
  clip: number;
  resume?: string;
  [modelOption: string]: unknown;
}

/** `vpps train <model>`: trains, reports progress on stderr and results on stdout. */
export function runTrain(task: AnyTask, opts: TrainCommandOptions): void {
  const noun = task.data.noun;
  checkEngineOptions(opts.engine, { batching: opts.batching, device: opts.device });
  let options = pickModelOptions(task, opts);
  const saved = opts.resume ? readRun(task, opts.resume, "--resume", options) : null;
  if (saved) {
    // the model's shape and vocabulary are the checkpoint's, whatever the command line says (and so is the split
    // of a data file, where a model option chooses it)
    options = saved.options;
    Object.assign(opts, options);
    opts.out ??= opts.resume;
  }
  // `--data ""` is refused by its parser: only an absent --data means the synthetic task
  const data =
    opts.data !== undefined
      ? task.data.fromDirectory(opts.data, { ...(opts.maxSentences ? { maxTrain: opts.maxSentences } : {}), options })
      : task.data.synthetic.make(opts.seed);
  const trainSet = opts.maxSentences ? data.train.slice(0, opts.maxSentences) : data.train;
  const vocab = saved ? saved.vocab : task.vocabulary.build(trainSet, options);
  const optimizer: OptimizerName = opts.optimizer ?? "adam";
  checkModelFits(task, options, task.vocabulary.size(vocab), {
    optimizer,
    advice: saved ? `the sizes come from ${opts.resume}/state.json` : undefined,
  });
  const lr = opts.lr ?? (optimizer === "adam" ? 0.001 : 0.1);
  const log = (s: string) => {
    if (!opts.json) writeOut(`${s}\n`);
  };
  if (saved) log(`resuming from ${saved.checkpoint} after epoch ${saved.state.epochs.length}`);
  log(
    `data: ${data.source}: ${trainSet.length} training ${noun}, ${data.dev.length} dev ${noun}, ` +
      task.vocabulary.describe(vocab),
  );
  log(
    `model: ${task.describe(options)}; ` +
      `${optimizer} lr ${lr}, batch ${opts.batch}, seed ${opts.seed}, engine ${opts.engine}`,
  );
  const metrics = task.metrics;
  const bar = new ProgressBar();
  const { summary } = train({
    task,
    options,
    train: trainSet,
    dev: data.dev,
    vocab,
    epochs: opts.epochs,
    batch: opts.batch,
    learningRate: lr,
    optimizer,
    seed: opts.seed,
    clipThreshold: opts.clip,
    // the evaluation engine, where one is needed, comes from the registry with the same options
    makeEngine: (params) => createEngine(opts.engine, params, { batching: opts.batching, device: opts.device }),
    ...(opts.out ? { outDir: opts.out } : {}),
    ...(saved
      ? {
          resume: { checkpoint: saved.checkpoint, epochsDone: saved.state.epochs.length, previous: saved.state.epochs },
        }
      : {}),
    onProgress: (p) => {
      const eta = (p.sentencesTotal - p.sentencesDone) / Math.max(p.sentencesPerSecond, 1e-9);
      bar.update(`epoch ${p.epoch}/${opts.epochs}`, p.sentencesDone, p.sentencesTotal, {
        "sent/s": p.sentencesPerSecond.toFixed(1),
        ETA: formatDuration(eta),
        loss: p.loss.toFixed(4),
      });
    },
    onEpoch: (e: EpochResult) => {
      bar.finish();
      const dev = metrics.map((m) => `${m.name} ${(100 * e.devMetrics[m.key]!).toFixed(2)}%`).join("  ");
      log(
        `epoch ${e.epoch}: train loss ${e.trainLoss.toFixed(4)}  dev ${dev}  ` +
          `${e.sentencesPerSecond.toFixed(1)} sent/s  ${formatDuration(e.seconds)}` +
          (e.checkpoint ? `  checkpoint ${e.checkpoint}` : ""),
      );
    },
  });
  if (opts.json) {
    writeOut(`${JSON.stringify({ data: data.source, learningRate: lr, ...opts, optimizer, ...summary })}\n`);
    return;
  }
  log("");
  log("epoch  train loss  dev acc  sent/s   time");
  for (const e of summary.epochs) {
    log(
      `${String(e.epoch).padStart(5)}  ${e.trainLoss.toFixed(4).padStart(10)}  ${(100 * e.devAccuracy).toFixed(2).padStart(6)}%  ` +
        `${e.sentencesPerSecond.toFixed(1).padStart(6)}  ${formatDuration(e.seconds).padStart(6)}`,
    );
  }
  log(`best dev ${metrics[0].name} ${(100 * summary.bestDevAccuracy).toFixed(2)}%; ${summary.parameters} parameters`);
}
