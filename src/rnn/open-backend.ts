/**
 * The one place that maps a device string to an RnnBackend: `cpu` → the reference; `cuda:N` → the persistent GPU
 * backend (src/rnn/runtime/). `precision` (fp32 by default) is how W_hh is stored: the GPU kernels' registers hold it as
 * fp16 with `fp16`, and the CPU reference then computes with the same rounded W_hh.
 */
import { cudaAvailable } from "../cuda/index.js";
import type { RnnBackend } from "./backend.js";
import { CpuRnnBackend } from "./reference/cpu-backend.js";
import { GpuRnnBackend } from "./runtime/gpu-backend.js";
import { RnnArgumentError, type RnnPrecision, validateRnnPrecision } from "./spec.js";

export interface OpenRnnBackendOptions {
  /** How W_hh is stored (default fp32); anything but fp32/fp16 is refused in one line. */
  readonly precision?: RnnPrecision;
}

/** A backend for `device` ('cpu' or 'cuda:N'); throws one line naming the device when it cannot be had. */
export function openRnnBackend(
  device: string,
  where = "PersistentRnn",
  options: OpenRnnBackendOptions = {},
): RnnBackend {
  const precision = validateRnnPrecision(options.precision, where);
  if (device === "cpu") return new CpuRnnBackend({ precision });
  const cuda = /^cuda:(\d+)$/.exec(device);
  if (cuda) {
    // without a usable GPU the driver's own error spans several lines: say it in one, with what to do
    const gpu = cudaAvailable();
    if (!gpu.ok) {
      throw new RnnArgumentError(
        `${where}: device '${device}' cannot be used: ${gpu.reason.split("\n")[0]}; use device 'cpu'`,
      );
    }
    return new GpuRnnBackend(Number(cuda[1]), { precision });
  }
  throw new RnnArgumentError(`${where}: argument 'device' must be 'cpu' or 'cuda:N'; got ${JSON.stringify(device)}`);
}
