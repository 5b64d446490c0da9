/**
 * A run's checkpoint: one safetensors file per epoch holding the weights, the optimiser's state (Adam's moments m
 * and v as tensors `adam.m/<parameter>`, `adam.v/<parameter>`; the step count in the metadata), and the run state
 * as of that epoch (the metadata's `run`: what state.json holds), so that a resumed Adam run equals an
 * uninterrupted one and a checkpoint alone can continue the run when state.json was lost.
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
import type { RunState } from "./run-state.js";

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
}

/** Reads and checks a checkpoint (CheckpointError naming the file and what is wrong). */
export function readCheckpoint(path: string): Checkpoint {
  const { tensors, metadata } = readSafetensors(path);
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
  return { path, tensors, metadata, optimizer, run };
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
