/**
 * What a run saved with an output directory records (`state.json`, and the same object in every checkpoint's
 * metadata): with a checkpoint, enough to rebuild, evaluate or continue the run — the model's shape and vocabulary,
 * and every setting the training used, so that `--resume` continues the run that was saved rather than the command
 * line's defaults. `checkRunState` refuses a malformed one naming the field, so that a corrupt file is reported as
 * such instead of training with a bogus rate or data path.
 */
import { ENGINE_NAMES, ENGINE_OPTIONS } from "../engines/registry.js";
import type { OptimizerName } from "../optim/trainers.js";

/** One epoch's results, as the loop reports them and state.json records them. */
export interface EpochResult {
  epoch: number;
  trainLoss: number;
  /** The task's first metric on the dev split (root accuracy for a sentence model). */
  devAccuracy: number;
  /** Every metric of the task on the dev split, by key. */
  devMetrics: Record<string, number>;
  /**
   * Which dev set the metrics are on (the data directory, or the synthetic task and its seed); the best accuracy
   * compares only epochs on the same one. Absent in runs saved before it was recorded.
   */
  devSet?: string;
  seconds: number;
  sentencesPerSecond: number;
  checkpoint: string | null;
}

/**
 * The settings of a run that the training loop does not use itself but records for `--resume` (the command line's
 * data and engine); each is optional, absent in runs saved before it was recorded.
 */
export interface RunSettings {
  /** The data directory (absolute), or null for the synthetic task. */
  data?: string | null;
  /** The seed the synthetic task was generated with (the run's first seed; a later `--seed` does not change it). */
  dataSeed?: number;
  /** `--max-sentences`, or null for all. */
  maxSentences?: number | null;
  /** The number of epochs the run was asked for (its target total). */
  epochs?: number;
  engine?: string;
  batching?: string;
  device?: string;
  /** Every model option as the command line gave it (the shape ones are also in `RunState.options`). */
  modelOptions?: Record<string, string | number>;
}

/** The training settings of a run. */
export interface RunTraining extends RunSettings {
  optimizer: OptimizerName;
  learningRate: number;
  batch: number;
  seed: number;
  /** Gradient clipping threshold (0: off). Absent in runs saved before it was recorded. */
  clip?: number;
  /** How epochs order the examples ("examples" or "batches", the training loop's ShuffleMode); absent: "examples". */
  shuffle?: string;
}

/** What `<outDir>/state.json` holds: with the last checkpoint, enough to rebuild, resume or evaluate the run. */
export interface RunState {
  /** The task's name. */
  model: string;
  /** `task.savedOptions`: the model's shape. */
  options: Record<string, unknown>;
  training: RunTraining;
  epochs: EpochResult[];
  /** `task.vocabulary.toJSON`. */
  vocabulary: unknown;
}

const isObject = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x);

/**
 * `raw` (parsed JSON) as a RunState, checked field by field; throws an Error whose message names the first
 * malformed field, the expected and the actual (`training.learningRate must be a positive number; got -1`).
 * Settings recorded only by later versions may be absent; present ones must be valid.
 */
export function checkRunState(raw: unknown): RunState {
  if (!isObject(raw)) throw new Error(`the state must be a JSON object; got ${JSON.stringify(raw)?.slice(0, 40)}`);
  const fail = (field: string, expected: string, got: unknown): never => {
    const shown = JSON.stringify(got);
    throw new Error(`${field} must be ${expected}; got ${shown === undefined ? "nothing" : shown.slice(0, 60)}`);
  };
  if (typeof raw.model !== "string") fail("model", "a model name", raw.model);
  if (!isObject(raw.options)) fail("options", "an object", raw.options);
  if (raw.vocabulary === undefined) fail("vocabulary", "present", raw.vocabulary);
  const t = raw.training;
  if (!isObject(t)) return fail("training", "an object", t);
  if (t.optimizer !== "sgd" && t.optimizer !== "adam") fail("training.optimizer", '"sgd" or "adam"', t.optimizer);
  const positive = (k: string) => {
    const x = t[k];
    if (!(typeof x === "number" && Number.isFinite(x) && x > 0)) fail(`training.${k}`, "a positive number", x);
  };
  const positiveInt = (k: string, optional: boolean) => {
    const x = t[k];
    if (optional && (x === undefined || x === null)) return;
    if (!(typeof x === "number" && Number.isInteger(x) && x > 0)) fail(`training.${k}`, "a positive integer", x);
  };
  const integer = (k: string, optional: boolean) => {
    const x = t[k];
    if (optional && x === undefined) return;
    if (!(typeof x === "number" && Number.isSafeInteger(x))) fail(`training.${k}`, "an integer", x);
  };
  const string = (k: string) => {
    const x = t[k];
    if (x !== undefined && (typeof x !== "string" || x === "")) fail(`training.${k}`, "a non-empty string", x);
  };
  positive("learningRate");
  positiveInt("batch", false);
  integer("seed", false);
  integer("dataSeed", true);
  positiveInt("maxSentences", true);
  positiveInt("epochs", true);
  if (t.clip !== undefined && !(typeof t.clip === "number" && Number.isFinite(t.clip) && t.clip >= 0)) {
    fail("training.clip", "a number ≥ 0", t.clip);
  }
  if (t.data !== undefined && t.data !== null && (typeof t.data !== "string" || t.data === "")) {
    fail("training.data", "a directory or null (the synthetic task)", t.data);
  }
  const oneOf = (k: string, choices: readonly string[]) => {
    const x = t[k];
    if (x !== undefined && !choices.includes(x as string)) fail(`training.${k}`, `one of ${choices.join(", ")}`, x);
  };
  oneOf("engine", ENGINE_NAMES);
  oneOf("batching", ENGINE_OPTIONS.find((o) => o.key === "batching")?.choices ?? []);
  oneOf("shuffle", ["examples", "batches"]);
  string("device");
  if (t.modelOptions !== undefined) {
    if (!isObject(t.modelOptions)) fail("training.modelOptions", "an object", t.modelOptions);
    for (const [k, v] of Object.entries(t.modelOptions as object)) {
      if (typeof v !== "string" && typeof v !== "number") fail(`training.modelOptions.${k}`, "a string or number", v);
    }
  }
  if (!Array.isArray(raw.epochs)) return fail("epochs", "a list", raw.epochs);
  (raw.epochs as unknown[]).forEach((e, i) => {
    if (!isObject(e)) {
      fail(`epochs[${i}]`, "an object", e);
      return;
    }
    if (e.epoch !== i + 1) fail(`epochs[${i}].epoch`, String(i + 1), e.epoch);
    for (const k of ["trainLoss", "devAccuracy"]) {
      if (typeof e[k] !== "number") fail(`epochs[${i}].${k}`, "a number", e[k]);
    }
    if (!isObject(e.devMetrics)) fail(`epochs[${i}].devMetrics`, "an object", e.devMetrics);
  });
  return raw as unknown as RunState;
}

/** The best first-metric result among `epochs` on dev set `devSet` (every epoch when it is undefined); 0 if none. */
export function bestDevAccuracy(epochs: readonly EpochResult[], devSet: string | undefined): number {
  let best = 0;
  for (const e of epochs) if (devSet === undefined || e.devSet === devSet) best = Math.max(best, e.devAccuracy);
  return best;
}
