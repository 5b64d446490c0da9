/**
 * What a run saved with an output directory records (`state.json`, and the same object in every checkpoint's
 * metadata): with a checkpoint, enough to rebuild, evaluate or continue the run — the model's shape and vocabulary,
 * and every setting the training used, so that `--resume` continues the run that was saved rather than the command
 * line's defaults. `checkRunState` refuses a malformed one naming the field, so that a corrupt file is reported as
 * such instead of training with a bogus rate or data path.
 */
import { createHash } from "node:crypto";
import { basename, relative } from "node:path";
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
 * The data a run trained on, known by content: a SHA-256 of each file read (by its name relative to the data
 * directory, so that the same data moved elsewhere have the same fingerprint) and one over all of them. The
 * synthetic task's is its name and seed.
 */
export interface DataFingerprint {
  /** `sha256:<hex>` over the files' names and checksums, or `synthetic seed <n>`. */
  digest: string;
  /** Each file read: its SHA-256, by name relative to the data directory. */
  files: Record<string, string>;
}

/**
 * The fingerprint of the data files `files` (path → SHA-256, as `recordDataReads` gives them) read from directory
 * `dir`: by names relative to `dir`, so the same data moved elsewhere have the same one.
 */
export function dataFingerprint(dir: string, files: ReadonlyMap<string, string>): DataFingerprint {
  const byName: Record<string, string> = {};
  for (const [path, sum] of files) byName[(relative(dir, path) || basename(path)).split("\\").join("/")] = sum;
  const names = Object.keys(byName).sort();
  const hash = createHash("sha256");
  for (const n of names) hash.update(`${n}\0${byName[n]}\n`);
  const sorted: Record<string, string> = {};
  for (const n of names) sorted[n] = byName[n]!;
  return { digest: `sha256:${hash.digest("hex")}`, files: sorted };
}

/** The fingerprint of the synthetic task generated with `seed`. */
export function syntheticFingerprint(seed: number): DataFingerprint {
  return { digest: `synthetic seed ${seed}`, files: {} };
}

/**
 * What a run is, as far as a checkpoint must match it: the model and its shape, the optimiser, the seed, and the
 * data by content. Recorded in state.json and in every checkpoint's metadata (`identity`); a checkpoint whose
 * identity differs from the run's state (one copied from another run) is refused on resume and eval.
 */
export interface RunIdentity {
  model: string;
  options: Record<string, unknown>;
  optimizer: string;
  seed: number;
  /** Null in runs saved before the data's fingerprint was recorded. */
  data: DataFingerprint | null;
}

/** The identity of the run `state` records (its model, shape, optimiser, seed and data fingerprint). */
export function runIdentity(state: RunState): RunIdentity {
  return {
    model: state.model,
    options: state.options,
    optimizer: state.training.optimizer,
    seed: state.training.seed,
    data: state.training.dataFingerprint ?? null,
  };
}

/**
 * The fields in which identity `a` (a checkpoint's) differs from `b` (the run's), each as "its seed is 2, the
 * run's 1"; empty when they are the same run. A data fingerprint missing on either side is not compared.
 */
export function identityDifferences(a: RunIdentity, b: RunIdentity): string[] {
  const out: string[] = [];
  const show = (x: unknown) => JSON.stringify(x);
  if (a.model !== b.model) out.push(`its model is '${a.model}', the run's '${b.model}'`);
  const keys = [...new Set([...Object.keys(a.options), ...Object.keys(b.options)])].sort();
  for (const k of keys) {
    if (show(a.options[k]) !== show(b.options[k])) {
      out.push(`its ${k} is ${show(a.options[k])?.slice(0, 40)}, the run's ${show(b.options[k])?.slice(0, 40)}`);
    }
  }
  if (a.optimizer !== b.optimizer) out.push(`its optimiser is ${a.optimizer}, the run's ${b.optimizer}`);
  if (a.seed !== b.seed) out.push(`its seed is ${a.seed}, the run's ${b.seed}`);
  if (a.data !== null && b.data !== null && a.data.digest !== b.data.digest) {
    out.push(`it was trained on other data (${dataDifference(a.data, b.data)})`);
  }
  return out;
}

/** How data fingerprint `now` differs from `was`: the files that changed, appeared or went, or the digests. */
export function dataDifference(now: DataFingerprint, was: DataFingerprint): string {
  const parts: string[] = [];
  for (const [name, sum] of Object.entries(now.files)) {
    const old = was.files[name];
    if (old === undefined) parts.push(`${name} is new`);
    else if (old !== sum) parts.push(`${name} differs`);
  }
  for (const name of Object.keys(was.files)) if (!(name in now.files)) parts.push(`${name} is gone`);
  if (parts.length === 0) parts.push(`${now.digest.slice(0, 19)} now, ${was.digest.slice(0, 19)} recorded`);
  return parts.join(", ");
}

/**
 * The settings of a run that the training loop does not use itself but records for `--resume` (the command line's
 * data and engine); each is optional, absent in runs saved before it was recorded.
 */
export interface RunSettings {
  /** The data directory (absolute), or null for the synthetic task. */
  data?: string | null;
  /** The data's content (DataFingerprint); absent in runs saved before it was recorded. */
  dataFingerprint?: DataFingerprint;
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
  /**
   * The run's identity (`runIdentity` of the fields above), written for people and tools reading state.json; the
   * checks derive it from the fields themselves. Absent in runs saved before it was written.
   */
  identity?: RunIdentity;
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
  if (t.dataFingerprint !== undefined) {
    const f = t.dataFingerprint;
    if (
      !isObject(f) ||
      typeof f.digest !== "string" ||
      !isObject(f.files) ||
      !Object.values(f.files).every((v) => typeof v === "string")
    ) {
      fail("training.dataFingerprint", "{ digest, files }", f);
    }
  }
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
