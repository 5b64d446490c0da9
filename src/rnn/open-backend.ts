/**
 * The one place that maps a device string to an RnnBackend: `cpu` → the reference; `cuda:N` → the persistent GPU
 * backend (src/rnn/gpu/), with fp32 weights.
 */
import { cudaAvailable } from "../cuda/index.js";
import type { RnnBackend } from "./backend.js";
import { CpuRnnBackend } from "./cpu-backend.js";
import { GpuRnnBackend } from "./gpu/backend.js";
import { RnnArgumentError } from "./spec.js";

/** A backend for `device` ('cpu' or 'cuda:N'); throws one line naming the device when it cannot be had. */
export function openRnnBackend(device: string, where = "PersistentRnn"): RnnBackend {
  if (device === "cpu") return new CpuRnnBackend();
  const cuda = /^cuda:(\d+)$/.exec(device);
  if (cuda) {
    // without a usable GPU the driver's own error spans several lines: say it in one, with what to do
    const gpu = cudaAvailable();
    if (!gpu.ok) {
      throw new RnnArgumentError(
        `${where}: device '${device}' cannot be used: ${gpu.reason.split("\n")[0]}; use device 'cpu'`,
      );
    }
    return new GpuRnnBackend(Number(cuda[1]));
  }
  throw new RnnArgumentError(`${where}: argument 'device' must be 'cpu' or 'cuda:N'; got ${JSON.stringify(device)}`);
}
