/**
 * A run's checkpoint: one safetensors file per epoch holding the weights, the optimiser's state (Adam's moments m
 * and v as tensors `adam.m/<parameter>`, `adam.v/<parameter>`; the step count in the metadata), and the run state
 * as of that epoch (the metadata's `run`: what state.json holds), so that a resumed Adam run equals an
 * uninterrupted one and a checkpoint alone can continue the run when state.json was lost.
 *
 * Integrity, checked on every read (resume, eval): the SHA-256 of every tensor (model/safetensors.ts: a changed bit
 * is refused, naming the tensor); every weight and first moment finite and of magnitude below 2^64 (`MAX_MAGNITUDE`:
 * beyond it its square, which Adam's second moment, the gradient norm and every dot product form, overflows float32
 * — no trained weight is near it, so such a value is damage or divergence); and the run identity (run-state.ts:
 * model, shape, optimiser, seed, data fingerprint) and epoch in its metadata equal to those of the run it is loaded
 * into. A checkpoint of an older vpps, without checksums or identity, is accepted with a one-line notice.
 */
import type { ParameterCollection } from "../model/parameters.js";
import {
  assignParameters,
  CheckpointError,
  readSafetensors,
  saveParameters,
  type Tensor,
} from "../model/safetensors.js";
import { AdamTrainer, type Trainer } from "../optim/trainers.js";
import { identityDifferences, type RunIdentity, type RunState, runIdentity } from "./run-state.js";

/**
 * The largest magnitude (exclusive) of a weight or first moment in a checkpoint: 2^64 ≈ 1.8e19, the square root of
 * float32's largest value, so that its square (Adam's second moment, the gradient norm, a dot product) stays finite.
 */
export const MAX_MAGNITUDE = 2 ** 64;

/** The index and value of the first element of `data` that is not finite or of magnitude ≥ MAX_MAGNITUDE. */
export function firstOutOfRange(data: Float32Array): { index: number; value: number } | null {
  for (let k = 0; k < data.length; k++) {
    const x = data[k]!;
    if (!(x < MAX_MAGNITUDE && x > -MAX_MAGNITUDE)) return { index: k, value: x };
  }
  return null;
}

/** "beyond ±1.8e19 (2^64 …)": the rule, for messages. */
export const RANGE_RULE = "beyond ±1.8e19 (2^64, where its square overflows float32)";

const ADAM_M = "adam.m/";
const ADAM_V = "adam.v/";

/** Writes the weights, `trainer`'s state and `run` (atomically: temporary file, then rename). */
export function saveCheckpoint(
  path: string,
  params: ParameterCollection,
  trainer: Trainer,
  run: RunState,
  epoch: number,
): void {
  const extra: [string, Tensor][] = [];
  if (trainer instanceof AdamTrainer) {
    for (const p of params.all) {
      // a parameter not yet updated has zero moments, as Adam starts them
      const mo = trainer.moments(p) ?? { m: new Float32Array(p.value.length), v: new Float32Array(p.value.length) };
      extra.push([`${ADAM_M}${p.name}`, { shape: p.shape, data: mo.m }]);
      extra.push([`${ADAM_V}${p.name}`, { shape: p.shape, data: mo.v }]);
    }
  }
  saveParameters(
    params,
    path,
    {
      model: run.model,
      epoch: String(epoch),
      optimizer: trainer.kind,
      updates: String(trainer.updates),
      identity: JSON.stringify(runIdentity(run)),
      run: JSON.stringify(run),
    },
    extra,
  );
}

/** A checkpoint read and checked (every value finite), its weights not yet assigned anywhere. */
export interface Checkpoint {
  readonly path: string;
  readonly tensors: ReadonlyMap<string, Tensor>;
  readonly metadata: Readonly<Record<string, string>>;
  /** The optimiser that wrote it and its step count; undefined in checkpoints written before they were saved. */
  readonly optimizer: { readonly kind: string; readonly updates: number } | undefined;
  /** The run state saved with it (unchecked JSON), or undefined in older checkpoints. */
  readonly run: unknown;
  /** The run identity it was written with, or undefined in older checkpoints. */
  readonly identity: RunIdentity | undefined;
  /** The epoch it was written after, or undefined in older checkpoints. */
  readonly epoch: number | undefined;
  /** Whether its tensors carried checksums (verified); false for a checkpoint of an older vpps. */
  readonly checksummed: boolean;
}

/** Reads and checks a checkpoint (CheckpointError naming the file and what is wrong). */
export function readCheckpoint(path: string): Checkpoint {
  const { tensors, metadata, checksummed } = readSafetensors(path);
  for (const [name, t] of tensors) {
    if (name.startsWith(ADAM_V)) continue; // second moments are squares: finite and ≥ 0 (restoreCheckpoint)
    const bad = firstOutOfRange(t.data);
    if (bad) {
      throw new CheckpointError(
        `${path}: tensor '${name}' holds ${bad.value} at element ${bad.index}, ${RANGE_RULE}: the checkpoint is ` +
          "corrupt or its run had diverged; use an earlier checkpoint, or start the run afresh (--out with --force)",
      );
    }
  }
  let optimizer: Checkpoint["optimizer"];
  if (metadata.optimizer !== undefined) {
    const updates = Number(metadata.updates);
    if (!Number.isSafeInteger(updates) || updates < 0) {
      throw new CheckpointError(`${path}: metadata 'updates' must be a count ≥ 0; got '${metadata.updates}'`);
    }
    optimizer = { kind: metadata.optimizer, updates };
  }
  let run: unknown;
  if (metadata.run !== undefined) {
    try {
      run = JSON.parse(metadata.run);
    } catch (e) {
      throw new CheckpointError(`${path}: metadata 'run' is not valid JSON (${(e as Error).message})`);
    }
  }
  let identity: RunIdentity | undefined;
  if (metadata.identity !== undefined) {
    try {
      identity = JSON.parse(metadata.identity) as RunIdentity;
    } catch (e) {
      throw new CheckpointError(`${path}: metadata 'identity' is not valid JSON (${(e as Error).message})`);
    }
    const i = identity as Partial<RunIdentity> | null;
    if (
      typeof i !== "object" ||
      i === null ||
      typeof i.model !== "string" ||
      typeof i.options !== "object" ||
      i.options === null ||
      typeof i.optimizer !== "string" ||
      typeof i.seed !== "number"
    ) {
      throw new CheckpointError(`${path}: metadata 'identity' is not a run identity (model, options, optimizer, seed)`);
    }
  }
  let epoch: number | undefined;
  if (metadata.epoch !== undefined) {
    epoch = Number(metadata.epoch);
    if (!Number.isSafeInteger(epoch) || epoch < 1) {
      throw new CheckpointError(`${path}: metadata 'epoch' must be an epoch ≥ 1; got '${metadata.epoch}'`);
    }
  }
  return { path, tensors, metadata, optimizer, run, identity, epoch, checksummed };
}

/**
 * The first field in which `state` (state.json) differs from `saved` (the run state the checkpoint was written
 * with, at the same moment): "training.learningRate is 0.003, the checkpoint's 0.001"; null when they agree or the
 * checkpoint has none (older vpps). The target number of epochs (`training.epochs`) and the derived identity are not
 * compared: the first is the user's to change, the second is checked on its own.
 */
export function stateDifference(state: RunState, saved: unknown): string | null {
  if (typeof saved !== "object" || saved === null) return null;
  const show = (x: unknown) => (x === undefined ? "absent" : (JSON.stringify(x) ?? String(x)).slice(0, 60));
  const walk = (a: unknown, b: unknown, path: string): string | null => {
    if (JSON.stringify(a) === JSON.stringify(b)) return null;
    const bothObjects =
      typeof a === "object" &&
      a !== null &&
      typeof b === "object" &&
      b !== null &&
      Array.isArray(a) === Array.isArray(b);
    if (bothObjects) {
      const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])];
      for (const k of keys) {
        if (path === "training" && k === "epochs") continue;
        if (path === "" && k === "identity") continue;
        const at = Array.isArray(a) ? `${path}[${k}]` : path === "" ? k : `${path}.${k}`;
        const d = walk((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], at);
        if (d !== null) return d;
      }
      return null;
    }
    return `${path} is ${show(a)}, the checkpoint's ${show(b)}`;
  };
  return walk(state, saved, "");
}

/**
 * Refuses checkpoint `ckpt` when it is not the one `state` (the run's state.json) names for `epoch`: another run's
 * (its identity differs: one line naming every field that does) or another epoch's. Returns a one-line notice when
 * it cannot be verified (an older vpps wrote it without checksums or identity), else null.
 */
export function checkCheckpointOf(ckpt: Checkpoint, state: RunState, epoch: number): string | null {
  const missing: string[] = [];
  if (ckpt.identity === undefined) missing.push("run identity");
  else {
    const diff = identityDifferences(ckpt.identity, runIdentity(state));
    if (diff.length > 0) {
      throw new CheckpointError(
        `${ckpt.path} belongs to another run than the state.json beside it: ${diff.join("; ")}; put back this run's ` +
          "checkpoint, or start a new run (--out with --force)",
      );
    }
  }
  if (ckpt.epoch !== undefined && ckpt.epoch !== epoch) {
    throw new CheckpointError(
      `${ckpt.path} holds epoch ${ckpt.epoch} of the run, but state.json names it as epoch ${epoch}; put back the ` +
        "epoch's own checkpoint, or start a new run (--out with --force)",
    );
  }
  const changed = stateDifference(state, ckpt.run);
  if (changed !== null) {
    throw new CheckpointError(
      `state.json beside ${ckpt.path} is not what the run wrote with it: its ${changed}; state.json was changed ` +
        "afterwards (a flipped bit, an edit): restore it, or remove it to continue from the checkpoint's own record",
    );
  }
  if (!ckpt.checksummed) missing.push("checksums");
  return missing.length === 0
    ? null
    : `${ckpt.path} has no ${missing.join(" and ")} (an older vpps wrote it): loaded with its values checked only ` +
        "for being finite";
}

/**
 * Loads `ckpt`'s weights into `params` and, when it was written by the same kind of trainer, its step count and
 * Adam's moments into `trainer` (before the trainer's first update). Returns a line for the user when the
 * trainer's state could not be continued (another optimiser, or a checkpoint without it), else null.
 */
export function restoreCheckpoint(ckpt: Checkpoint, params: ParameterCollection, trainer: Trainer): string | null {
  assignParameters(params, ckpt.tensors, ckpt.path);
  const saved = ckpt.optimizer;
  if (saved === undefined) {
    return trainer.kind === "adam"
      ? `${ckpt.path} holds no optimiser state (an older vpps wrote it): Adam's moments start from zero`
      : null;
  }
  if (saved.kind !== trainer.kind) {
    return (
      `${ckpt.path} was written by ${saved.kind}; ${trainer.kind} starts afresh` +
      (saved.kind === "adam" ? " (Adam's moments are dropped)" : "")
    );
  }
  if (trainer instanceof AdamTrainer) {
    const found: [Tensor, Tensor][] = [];
    for (const p of params.all) {
      const m = ckpt.tensors.get(`${ADAM_M}${p.name}`);
      const v = ckpt.tensors.get(`${ADAM_V}${p.name}`);
      if (!m || !v || m.data.length !== p.value.length || v.data.length !== p.value.length) {
        throw new CheckpointError(
          `${ckpt.path}: Adam's moments of parameter '${p.name}' are missing or not of its shape [${p.shape}]`,
        );
      }
      const negative = v.data.findIndex((x) => x < 0);
      if (negative >= 0) {
        throw new CheckpointError(
          `${ckpt.path}: tensor '${ADAM_V}${p.name}' holds ${v.data[negative]} at element ${negative}; Adam's second ` +
            "moments are never negative, so the checkpoint is corrupt",
        );
      }
      found.push([m, v]);
    }
    params.all.forEach((p, i) => {
      trainer.setMoments(p, found[i]![0].data, found[i]![1].data);
    });
  }
  trainer.updates = saved.updates;
  return null;
}
