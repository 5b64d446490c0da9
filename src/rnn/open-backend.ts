/**
 * The one place that maps a device string to an RnnBackend: `cpu` → the reference; `cuda:N` → the persistent GPU
 * backend (src/rnn/gpu/), which is wired in here once it exists.
 */
import type { RnnBackend } from "./backend.js";
import { CpuRnnBackend } from "./cpu-backend.js";
import { RnnArgumentError } from "./spec.js";

/** A backend for `device` ('cpu' or 'cuda:N'); throws one line naming the device when it cannot be had. */
export function openRnnBackend(device: string, where = "PersistentRnn"): RnnBackend {
  if (device === "cpu") return new CpuRnnBackend();
  if (/^cuda:\d+$/.test(device)) {
    throw new RnnArgumentError(
      `${where}: device '${device}' needs the persistent GPU backend (src/rnn/gpu/), which this build does not have yet; use device 'cpu'`,
    );
  }
  throw new RnnArgumentError(`${where}: argument 'device' must be 'cpu' or 'cuda:N'; got ${JSON.stringify(device)}`);
}
