import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { readTrees } from "../data/sst.js";
import { splitSynthetic } from "../data/synthetic.js";
import type { TreeNode } from "../data/tree.js";
import { Vocabulary } from "../data/vocab.js";
import { createEngine } from "../engines/index.js";
import { type EpochResult, trainTreeLstm } from "../models/train-treelstm.js";
import type { CellFormulation } from "../models/treelstm.js";
import type { OptimizerName } from "../train/trainers.js";
import { formatDuration, ProgressBar } from "./progress.js";

export interface TrainCommandOptions {
  data?: string;
  epochs: number;
  batch: number;
  hidden: number;
  embed: number;
  lr?: number;
  optimizer?: OptimizerName;
  seed: number;
  engine: string;
  batching: "depth" | "agenda";
  device: string;
  maxSentences?: number;
  json: boolean;
  out?: string;
  cell: CellFormulation;
  clip: number;
  dropout: number;
  resume?: string;
}

/** A user-facing failure: printed as one line, no stack trace. */
export class CliError extends Error {}

interface Dataset {
  train: TreeNode[];
  dev: TreeNode[];
  source: string;
}

function loadData(opts: TrainCommandOptions): Dataset {
  if (!opts.data) {
    const { train, dev } = splitSynthetic(opts.seed);
    return { train, dev, source: "synthetic sentiment trees (no --data given)" };
  }
  const dir = resolve(opts.data);
  for (const f of ["train.txt", "dev.txt"]) {
    if (!existsSync(join(dir, f))) {
      throw new CliError(
        `--data ${opts.data}: no ${f} there; the directory must hold train.txt and dev.txt with one PTB tree per line`,
      );
    }
  }
  const train = readTrees(join(dir, "train.txt"), opts.maxSentences ? { maxTrees: opts.maxSentences } : {});
  const dev = readTrees(join(dir, "dev.txt"));
  return { train, dev, source: dir };
}

interface SavedState {
  options: { hidden: number; embed: number; cell: CellFormulation };
  epochs: EpochResult[];
  vocabulary: string[];
}

/** Reads `<dir>/state.json` of an earlier run with --out; names what is missing or malformed. */
function readState(dir: string): SavedState & { checkpoint: string } {
  const path = join(resolve(dir), "state.json");
  if (!existsSync(path)) throw new CliError(`--resume ${dir}: no state.json there (it is written by a run with --out)`);
  let state: SavedState;
  try {
    state = JSON.parse(readFileSync(path, "utf8")) as SavedState;
  } catch (e) {
    throw new CliError(`--resume ${dir}: state.json is not valid JSON (${(e as Error).message})`);
  }
  const last = state.epochs?.[state.epochs.length - 1];
  if (!last || !Array.isArray(state.vocabulary) || !state.options) {
    throw new CliError(`--resume ${dir}: state.json has no finished epoch, options or vocabulary`);
  }
  const checkpoint = join(resolve(dir), `epoch-${last.epoch}.safetensors`);
  if (!existsSync(checkpoint)) throw new CliError(`--resume ${dir}: the checkpoint ${checkpoint} is missing`);
  return { ...state, checkpoint };
}

/** `vpps train treelstm`: trains, reports progress on stderr and results on stdout. */
export function runTrainTreeLstm(opts: TrainCommandOptions): void {
  const data = loadData(opts);
  const train = opts.maxSentences ? data.train.slice(0, opts.maxSentences) : data.train;
  const saved = opts.resume ? readState(opts.resume) : null;
  if (saved) {
    // the model's shape and vocabulary are the checkpoint's, whatever the command line says
    opts.hidden = saved.options.hidden;
    opts.embed = saved.options.embed;
    opts.cell = saved.options.cell;
    opts.out ??= opts.resume;
  }
  const vocab = saved ? Vocabulary.fromJSON(saved.vocabulary) : Vocabulary.fromTrees(train);
  const optimizer: OptimizerName = opts.optimizer ?? "adam";
  const lr = opts.lr ?? (optimizer === "adam" ? 0.001 : 0.1);
  const log = (s: string) => {
    if (!opts.json) process.stdout.write(`${s}\n`);
  };
  // fail before loading anything heavy when the engine cannot be made
  const makeEngine = (params: Parameters<typeof createEngine>[1]) =>
    createEngine(opts.engine, params, { batching: opts.batching, device: opts.device });
  if (saved) log(`resuming from ${saved.checkpoint} after epoch ${saved.epochs.length}`);
  log(`data: ${data.source}: ${train.length} training trees, ${data.dev.length} dev trees, vocabulary ${vocab.size}`);
  log(
    `model: Tree-LSTM (${opts.cell} cell), hidden ${opts.hidden}, embedding ${opts.embed}; ` +
      `${optimizer} lr ${lr}, batch ${opts.batch}, seed ${opts.seed}, engine ${opts.engine}`,
  );
  const bar = new ProgressBar();
  const { summary } = trainTreeLstm({
    train,
    dev: data.dev,
    vocab,
    epochs: opts.epochs,
    batch: opts.batch,
    hidden: opts.hidden,
    embed: opts.embed,
    learningRate: lr,
    optimizer,
    seed: opts.seed,
    cell: opts.cell,
    clipThreshold: opts.clip,
    dropout: opts.dropout,
    makeEngine,
    ...(opts.out ? { outDir: opts.out } : {}),
    ...(saved
      ? { resume: { checkpoint: saved.checkpoint, epochsDone: saved.epochs.length, previous: saved.epochs } }
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
      log(
        `epoch ${e.epoch}: train loss ${e.trainLoss.toFixed(4)}  dev root accuracy ${(100 * e.devAccuracy).toFixed(2)}%  ` +
          `${e.sentencesPerSecond.toFixed(1)} sent/s  ${formatDuration(e.seconds)}` +
          (e.checkpoint ? `  checkpoint ${e.checkpoint}` : ""),
      );
    },
  });
  if (opts.json) {
    process.stdout.write(
      `${JSON.stringify({ data: data.source, learningRate: lr, ...opts, optimizer, ...summary })}\n`,
    );
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
  log(`best dev root accuracy ${(100 * summary.bestDevAccuracy).toFixed(2)}%; ${summary.parameters} parameters`);
}
