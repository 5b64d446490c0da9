/**
 * The errors a training run reports to its user, in one place: each is a refusal with a one-line message (the file,
 * parameter or setting, and what to do), printed by the command line without a stack trace. The classes live in
 * the layer that throws them; this module re-exports them all (`RUN_ERRORS`) so that a handler can recognise them.
 */

import { CheckpointError } from "../model/safetensors.js";
import { NonFiniteUpdateError } from "../optim/trainers.js";
import { UserError } from "../util/errors.js";
import { RunDirError } from "./run-dir.js";

export { CheckpointError, NonFiniteUpdateError, RunDirError };

/**
 * Training stopped on a NaN or ±∞: a non-finite input, loss, gradient or weight. The message says where (epoch,
 * batch, updates so far) and what is at fault: the learning rate only when the run had already trained; before any
 * update, the starting weights (a checkpoint) or the input.
 */
export class TrainingDivergedError extends UserError {
  constructor(message: string) {
    super(message);
    this.name = "TrainingDivergedError";
  }
}

/** Every error class of a training run that is a user-facing refusal (printed as one line). */
export const RUN_ERRORS = [CheckpointError, NonFiniteUpdateError, RunDirError, TrainingDivergedError] as const;

/** Whether `e` is one of `RUN_ERRORS`. */
export function isRunError(e: unknown): e is Error {
  return RUN_ERRORS.some((c) => e instanceof c);
}

/** Where in the run a non-finite value appeared, for the message. */
export interface DivergencePlace {
  epoch: number;
  /** 0-based batch index within the epoch, and the epoch's batch count. */
  batch: number;
  batches: number;
  /** Updates applied by this run (since it started or resumed) before the value appeared. */
  updatesThisRun: number;
  learningRate: number;
  /** The checkpoint the run resumed from, if it did. */
  resumedFrom: string | undefined;
}

/**
 * The error for a non-finite `what` ("the loss is NaN", "the gradient of parameter 'W' holds NaN at element 3") at
 * `at`: blames the learning rate only when updates had been applied; before any, the starting weights.
 */
export function divergence(what: string, at: DivergencePlace): TrainingDivergedError {
  const where = `epoch ${at.epoch}, batch ${at.batch + 1} of ${at.batches}`;
  if (at.updatesThisRun === 0) {
    const start = at.resumedFrom
      ? `the weights and optimiser state loaded from ${at.resumedFrom} (a corrupt checkpoint?)`
      : "the initial weights";
    return new TrainingDivergedError(
      `training stopped in ${where}, before any update: ${what}; the cause is ${start}, not the learning rate`,
    );
  }
  return new TrainingDivergedError(
    `training diverged in ${where}, after ${at.updatesThisRun} updates: ${what}; lower the learning rate ` +
      `(--lr, now ${at.learningRate})`,
  );
}
