import { existsSync, statSync } from "node:fs";
import { resolve } from "node:path";
import { type SplitPart, splitBySeed } from "../data/tagged-split.js";
import { checkEngineOptions, createEvaluationEngine } from "../engines/registry.js";
import { assignParameters } from "../model/safetensors.js";
import type { AnyTask } from "../models/task.js";
import { checkCheckpointOf, readCheckpoint } from "../train/checkpoint.js";
import { evaluate } from "../train/evaluate.js";
import { checkModelFits } from "./commands.js";
import { CliError } from "./errors.js";
import { writeOut } from "./output.js";
import { readRun } from "./run-state.js";

export interface EvalCommandOptions {
  run: string;
  data: string;
  engine: string;
  batching: "depth" | "agenda";
  device: string;
  batch: number;
  /** Only this part of the file, split by the run's split seed (as train splits a single file). */
  split?: SplitPart;
  json: boolean;
}

/**
 * `vpps eval <model> --run <dir> --data <file>`: rebuilds the model of a run saved with `--out` (its state.json and
 * last checkpoint) and reports the task's metrics on every example of one file. Forward only: an engine that cannot
 * run forward passes (VPPS) is replaced by the engine the registry evaluates it on.
 */
export function runEval(task: AnyTask, opts: EvalCommandOptions): void {
  const noun = task.data.noun;
  checkEngineOptions(opts.engine, { batching: opts.batching, device: opts.device });
  if (!existsSync(opts.data)) throw new CliError(`--data ${opts.data}: no such file`);
  if (statSync(opts.data).isDirectory()) {
    throw new CliError(`--data ${opts.data}: is a directory; give one file of ${noun} (such as its dev.txt)`);
  }
  const run = readRun(task, opts.run, "--run", task.defaults);
  const last = run.state.epochs[run.state.epochs.length - 1]!;
  checkModelFits(task, run.options, task.vocabulary.size(run.vocab), {
    advice: `the sizes come from ${opts.run}/state.json`,
  });
  const model = task.create(run.options, run.vocab, run.state.training?.seed ?? 1);
  // the checkpoint, checked (checksums, range, identity: train/checkpoint.ts); a CheckpointError names the file
  const ckpt = readCheckpoint(run.checkpoint);
  const unverified = checkCheckpointOf(ckpt, run.state, last.epoch);
  if (unverified !== null) process.stderr.write(`vpps: ${unverified}\n`);
  assignParameters(model.params, ckpt.tensors, ckpt.path);
  const all = task.data.fromFile(opts.data);
  const splitSeed = (run.options as { splitSeed?: unknown }).splitSeed;
  if (opts.split !== undefined && typeof splitSeed !== "number") {
    throw new CliError(
      `--split ${opts.split}: ${task.name} does not split a single file (it reads separate train, dev and test ` +
        "files); give the file of that part to --data",
    );
  }
  const examples = opts.split === undefined ? all : splitBySeed(all, splitSeed as number)[opts.split];
  const engine = createEvaluationEngine(opts.engine, model.params, { batching: opts.batching, device: opts.device });
  let metrics: Record<string, number>;
  try {
    metrics = evaluate(model, task.metrics, run.vocab, engine, examples, opts.batch);
  } finally {
    engine.dispose();
  }
  if (opts.json) {
    const result = {
      model: task.name,
      run: resolve(opts.run),
      epoch: last.epoch,
      checkpoint: run.checkpoint,
      data: resolve(opts.data),
      ...(opts.split === undefined ? {} : { split: opts.split, splitSeed }),
      examples: examples.length,
      engine: engine.name,
      metrics,
    };
    writeOut(`${JSON.stringify(result)}\n`);
    return;
  }
  writeOut(
    `run: ${resolve(opts.run)}, epoch ${last.epoch} (${run.checkpoint})\n` +
      `data: ${resolve(opts.data)}${opts.split === undefined ? "" : ` (its ${opts.split} part, --split-seed ${splitSeed})`}: ` +
      `${examples.length} ${noun}; engine ${engine.name}\n` +
      `${task.metrics.map((m) => `${m.name} ${(100 * metrics[m.key]!).toFixed(2)}%`).join("  ")}\n`,
  );
}
