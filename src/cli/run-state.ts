import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { readTextFile } from "../data/text-file.js";
import type { AnyTask, ModelOptions } from "../models/task.js";
import type { RunState } from "../train/loop.js";
import { cut, showValue } from "../util/text.js";
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
  // strict UTF-8: a damaged byte in a word of the vocabulary must not silently become U+FFFD (two such words merge)
  const text = readTextFile(path, `${flag} ${dir}: the run's state`);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new CliError(`${flag} ${dir}: state.json is not valid JSON (${cut((e as Error).message, 80)})`);
  }
  const state = checkRunState(json, `${flag} ${dir}: state.json`);
  if (typeof state.model === "string" && state.model !== task.name) {
    throw new CliError(`${flag} ${dir}: the run trained model '${state.model}', not '${task.name}'`);
  }
  const last = state.epochs[state.epochs.length - 1]!;
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

/**
 * `json` as a `RunState`, after checking the fields the commands read (a damaged file must fail here, naming the
 * field, not as a TypeError in the summary table). `where` starts each message ("--resume runs/a: state.json").
 * The model's options and vocabulary are the task's to check (`restoreOptions`, `vocabulary.fromJSON`).
 */
export function checkRunState(json: unknown, where: string): RunState {
  const fail = (field: string, expected: string, value: unknown): never => {
    throw new CliError(`${where} is damaged: ${field} must be ${expected}; got ${showValue(value)}`);
  };
  if (!isRecord(json)) fail("the file", "a JSON object", json);
  const state = json as Record<string, unknown>;
  if (state.model !== undefined && typeof state.model !== "string") fail('"model"', "a model name", state.model);
  if (!isRecord(state.options)) fail('"options"', "an object of the model's options", state.options);
  if (state.vocabulary === undefined) fail('"vocabulary"', "the run's vocabulary", state.vocabulary);
  if (state.training !== undefined) {
    if (!isRecord(state.training)) fail('"training"', "an object", state.training);
    const seed = (state.training as Record<string, unknown>).seed;
    if (seed !== undefined && !Number.isSafeInteger(seed)) fail("training.seed", "an integer", seed);
  }
  const epochs = state.epochs;
  if (!Array.isArray(epochs) || epochs.length === 0) {
    fail('"epochs"', "a list of the finished epochs (a run saves state.json after its first)", epochs);
  }
  (epochs as unknown[]).forEach((e, i) => {
    if (!isRecord(e)) fail(`epochs[${i}]`, "an object", e);
    const r = e as Record<string, unknown>;
    const before = i === 0 ? 0 : (epochs as { epoch: number }[])[i - 1]!.epoch;
    if (!Number.isSafeInteger(r.epoch) || (r.epoch as number) <= before) {
      fail(`epochs[${i}].epoch`, `an integer > ${before}`, r.epoch);
    }
    for (const key of ["trainLoss", "devAccuracy", "seconds", "sentencesPerSecond"]) {
      if (typeof r[key] !== "number") fail(`epochs[${i}].${key}`, "a number", r[key]);
    }
  });
  return json as RunState;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
