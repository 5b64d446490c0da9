import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { AnyTask, ModelOptions } from "../models/task.js";
import type { RunState } from "../train/loop.js";
import { CliError } from "./errors.js";

/** A run saved with `--out`: its state, its last checkpoint, and the model options and vocabulary to rebuild it. */
export interface SavedRun {
  state: RunState;
  checkpoint: string;
  /** `current` with the options the run's model was built with. */
  options: ModelOptions;
  vocab: unknown;
}

/**
 * Reads `<dir>/state.json` of a run of `task` (given as `flag dir` on the command line) and finds its last
 * checkpoint; names what is missing or malformed.
 */
export function readRun(task: AnyTask, dir: string, flag: string, current: ModelOptions): SavedRun {
  const path = join(resolve(dir), "state.json");
  if (!existsSync(path)) throw new CliError(`${flag} ${dir}: no state.json there (it is written by a run with --out)`);
  let state: RunState;
  try {
    state = JSON.parse(readFileSync(path, "utf8")) as RunState;
  } catch (e) {
    throw new CliError(`${flag} ${dir}: state.json is not valid JSON (${(e as Error).message})`);
  }
  const last = state.epochs?.[state.epochs.length - 1];
  if (!last || state.vocabulary === undefined || !state.options) {
    throw new CliError(`${flag} ${dir}: state.json has no finished epoch, options or vocabulary`);
  }
  if (typeof state.model === "string" && state.model !== task.name) {
    throw new CliError(`${flag} ${dir}: the run trained model '${state.model}', not '${task.name}'`);
  }
  const checkpoint = join(resolve(dir), `epoch-${last.epoch}.safetensors`);
  if (!existsSync(checkpoint)) throw new CliError(`${flag} ${dir}: the checkpoint ${checkpoint} is missing`);
  let options: ModelOptions;
  let vocab: unknown;
  try {
    options = task.restoreOptions(state.options, current);
  } catch (e) {
    throw new CliError(`${flag} ${dir}: state.json: ${(e as Error).message}`);
  }
  try {
    vocab = task.vocabulary.fromJSON(state.vocabulary);
  } catch (e) {
    throw new CliError(`${flag} ${dir}: state.json's vocabulary: ${(e as Error).message}`);
  }
  return { state, checkpoint, options, vocab };
}
