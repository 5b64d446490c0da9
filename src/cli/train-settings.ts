/**
 * The settings of `vpps train`: the command line's for a new run; for `--resume`, the saved run's, with what an
 * explicitly given flag may change (docs/CLI.md, "Runs, checkpoints and resuming"):
 *
 * - refused when different: the data (`--data`, `--max-sentences`: a run never mixes training or dev sets) and the
 *   model's shape (the options the checkpoint's weights were built with: `--hidden`, `--embed`, `--cell`);
 * - overridden with a printed line ("--lr 0.01 overrides the run's 0.001"): `--optimizer`, `--lr`, `--seed`,
 *   `--batch`, `--shuffle`, `--clip`, `--engine`, `--batching`, `--device` and the other model options (`--dropout`);
 * - `--epochs` is the run's target total (default: the one it was started with).
 *
 * A flag's value counts as given only when commander's getOptionValueSource says it came from the command line,
 * so a default never overrides what the run recorded.
 */
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { type AnyTask, checkModelOption, type ModelOptions } from "../models/task.js";
import type { OptimizerName } from "../optim/trainers.js";
import type { ShuffleMode } from "../train/loop.js";
import { pickModelOptions } from "./commands.js";
import { CliError } from "./errors.js";
import type { SavedRun } from "./run-state.js";

/** `vpps train <model>`'s options: the training loop's, and the model's own (`task.options`) by key. */
export interface TrainCommandOptions {
  data?: string;
  epochs: number;
  batch: number;
  lr?: number;
  optimizer?: OptimizerName;
  seed: number;
  /** How epochs order the examples (the training loop's ShuffleMode). */
  shuffle: ShuffleMode;
  engine: string;
  batching: "depth" | "agenda";
  device: string;
  maxSentences?: number;
  json: boolean;
  out?: string;
  clip: number;
  resume?: string;
  force: boolean;
  /** Resume although the data's content differs from the run's fingerprint. */
  acceptDataChange?: boolean;
  /** Ranks (processes) of a data-parallel run started here (1: a plain run). */
  gpus: number;
  /** The eager engine's stream pool: auto or 1 … 128 (not recorded by a run: it changes no result). */
  streams?: string;
  /** Print GLP4NN's choice of streams and why (with --streams auto). */
  explain?: boolean;
  /**
   * VPPS: matrices forced off chip (`--off-chip`). Like the stream pool, this invocation's and not the run's: it
   * changes where weights live and the order of fp32 sums, not what is computed.
   */
  offChip?: readonly string[] | "all";
  [modelOption: string]: unknown;
}

/** Everything a run trains with, resolved. */
export interface RunSettingsResolved {
  /** The data directory (absolute), or null for the synthetic task. */
  data: string | null;
  /** The seed the synthetic task is generated from (the run's first seed). */
  dataSeed: number;
  maxSentences: number | undefined;
  epochs: number;
  batch: number;
  learningRate: number;
  optimizer: OptimizerName;
  seed: number;
  shuffle: ShuffleMode;
  clip: number;
  engine: string;
  batching: "depth" | "agenda";
  device: string;
  options: ModelOptions;
}

const defaultRate = (optimizer: OptimizerName): number => (optimizer === "adam" ? 0.001 : 0.1);

/** The settings for `opts`, continuing `saved` when resuming (see the module comment for what each flag may do). */
export function resolveRunSettings(
  task: AnyTask,
  opts: TrainCommandOptions,
  saved: SavedRun | null,
  source: (key: string) => string | undefined,
  note: (line: string) => void,
): RunSettingsResolved {
  const optimizer: OptimizerName = opts.optimizer ?? "adam";
  const fresh: RunSettingsResolved = {
    data: opts.data !== undefined ? resolve(opts.data) : null,
    dataSeed: opts.seed,
    maxSentences: opts.maxSentences,
    epochs: opts.epochs,
    batch: opts.batch,
    learningRate: opts.lr ?? defaultRate(optimizer),
    optimizer,
    seed: opts.seed,
    shuffle: opts.shuffle,
    clip: opts.clip,
    engine: opts.engine,
    batching: opts.batching,
    device: opts.device,
    options: pickModelOptions(task, opts),
  };
  if (saved === null) return fresh;

  const given = (key: string): boolean => {
    const s = source(key);
    return s !== undefined && s !== "default" && s !== "implied";
  };
  const t = saved.state.training;
  const where = `the run in ${saved.dir}`;
  const corrupt = (field: string, why: string): never => {
    throw new CliError(`--resume ${saved.dir}: state.json: training.${field} ${why}`);
  };
  /** The recorded value, or the given one overriding it with a line; not recorded (older runs): the command line's. */
  const continued = <T extends string | number>(flag: string, key: string, recorded: T | undefined, value: T): T => {
    if (recorded === undefined) return value;
    if (!given(key) || value === recorded) return recorded;
    note(`${flag} ${value} overrides the run's ${recorded}`);
    return value;
  };

  // the data: the run's, whatever the command line says (a different value is refused)
  let data: string | null;
  if (t.data !== undefined) {
    data = t.data;
    if (given("data") && fresh.data !== data) {
      if (data === null || t.dataFingerprint === undefined) {
        throw new CliError(
          `--data ${opts.data} differs from ${where}'s data, ${data ?? "the synthetic task"}: a resumed run keeps ` +
            "its training and dev sets (leave --data out, or start a new run with another --out)",
        );
      }
      // data moved: the content decides (the fingerprint is compared once the data are read)
      note(`--data ${opts.data}: the run's data were in ${data}; resuming if their content is the same`);
      data = fresh.data;
    } else if (data !== null && !existsSync(data)) {
      throw new CliError(
        `--resume ${saved.dir}: the run's data directory ${data} is gone; if the data moved, give their new place ` +
          "with --data (the run checks they are the same by content)",
      );
    }
  } else {
    data = fresh.data;
    note(
      `--resume ${saved.dir}: state.json does not record the run's data (an older vpps wrote it); training on ` +
        `${data ?? "the synthetic task"}, and the best accuracy counts only this run's epochs`,
    );
  }
  let maxSentences = opts.maxSentences;
  if (t.maxSentences !== undefined) {
    maxSentences = t.maxSentences ?? undefined;
    if (given("maxSentences") && opts.maxSentences !== maxSentences) {
      throw new CliError(
        `--max-sentences ${opts.maxSentences} differs from ${where}'s ${maxSentences ?? "(all)"}: a resumed run ` +
          "keeps its training set (leave --max-sentences out)",
      );
    }
  }

  // the optimiser and its rate: a switch starts the new optimiser afresh, at its default rate unless --lr is given
  const runOptimizer = t.optimizer;
  const newOptimizer = continued("--optimizer", "optimizer", runOptimizer, optimizer);
  let learningRate: number;
  if (newOptimizer !== runOptimizer) {
    learningRate = opts.lr ?? defaultRate(newOptimizer);
    if (opts.lr === undefined)
      note(`learning rate ${learningRate} (${newOptimizer}'s default; the run's was ${t.learningRate})`);
  } else {
    learningRate = continued("--lr", "lr", t.learningRate, opts.lr ?? t.learningRate);
  }

  // engine and batching were checked with the rest of the state (checkRunState)
  const engine = continued("--engine", "engine", t.engine, opts.engine);
  const batching = continued("--batching", "batching", t.batching, opts.batching);

  // the model: its shape is the checkpoint's (a different value is refused); its other options continue
  const options: Record<string, string | number> = { ...fresh.options };
  for (const spec of task.options) {
    const flag = spec.flag.split(" ")[0]!;
    if (spec.key in saved.state.options) {
      const value = saved.options[spec.key]!;
      if (given(spec.key) && fresh.options[spec.key] !== value) {
        throw new CliError(
          `${flag} ${fresh.options[spec.key]} differs from ${where}'s ${value}: the checkpoint's weights have the ` +
            `run's shape (leave ${flag} out)`,
        );
      }
      options[spec.key] = value;
    } else {
      const recorded = t.modelOptions?.[spec.key];
      if (recorded !== undefined) {
        const why = checkModelOption(spec, recorded);
        if (why !== null) corrupt(`modelOptions.${spec.key}`, why);
      }
      options[spec.key] = continued(flag, spec.key, recorded, fresh.options[spec.key]!);
    }
  }

  // --epochs is the total the run trains to: the one it was started with unless given
  const done = saved.state.epochs.length;
  const epochs = given("epochs") ? opts.epochs : (t.epochs ?? opts.epochs);
  if (epochs <= done) {
    throw new CliError(
      `--resume ${saved.dir}: the run has trained ${done} epoch(s)` +
        (given("epochs") ? "" : `, the ${epochs} it was asked for`) +
        `; --epochs is the total, so give --epochs ${done + 1} or more to train further`,
    );
  }

  const seed = continued("--seed", "seed", t.seed, opts.seed);
  return {
    data,
    dataSeed: t.dataSeed ?? t.seed,
    maxSentences,
    epochs,
    batch: continued("--batch", "batch", t.batch, opts.batch),
    learningRate,
    optimizer: newOptimizer,
    seed,
    shuffle: continued("--shuffle", "shuffle", t.shuffle, opts.shuffle) as ShuffleMode,
    clip: continued("--clip", "clip", t.clip, opts.clip),
    engine,
    batching: batching as "depth" | "agenda",
    device: continued("--device", "device", t.device, opts.device),
    options,
  };
}
