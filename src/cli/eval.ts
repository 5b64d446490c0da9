import { existsSync, statSync } from "node:fs";
import { resolve } from "node:path";
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
  const examples = task.data.fromFile(opts.data);
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
      examples: examples.length,
      engine: engine.name,
      metrics,
    };
    writeOut(`${JSON.stringify(result)}\n`);
    return;
  }
  writeOut(
    `run: ${resolve(opts.run)}, epoch ${last.epoch} (${run.checkpoint})\n` +
      `data: ${resolve(opts.data)}: ${examples.length} ${noun}; engine ${engine.name}\n` +
      `${task.metrics.map((m) => `${m.name} ${(100 * metrics[m.key]!).toFixed(2)}%`).join("  ")}\n`,
  );
}
