import { type DeviceModel, deviceModelFromProperties, H100_SXM, H200 } from "../cuda/hw/device-model.js";
import { CudaLibraryNotFoundError, openDevice } from "../cuda/index.js";
import { formatPlan, planVpps } from "../engines/vpps/index.js";
import { onChipMatrices } from "../model/parameters.js";
import type { AnyTask } from "../models/task.js";
import { pickModelOptions } from "./commands.js";
import { CliError } from "./errors.js";
import { writeOut } from "./output.js";

/** `vpps plan <model>`'s options: the plan's, and the model's sizes (`planLabel` options) by key. */
export interface PlanCommandOptions {
  gpu: "h100" | "h200" | "device";
  ctasPerSm?: 1 | 2;
  rpw?: number;
  gradients: "auto" | "registers" | "gemm";
  transposed: boolean;
  /** Matrices forced off chip: "all", or names (`--off-chip U_iou,U_f1`). */
  offChip?: readonly string[] | "all";
  json: boolean;
  [modelOption: string]: unknown;
}

function deviceModel(gpu: PlanCommandOptions["gpu"]): DeviceModel {
  if (gpu === "h100") return H100_SXM;
  if (gpu === "h200") return H200;
  try {
    const d = openDevice(0);
    const model = deviceModelFromProperties(d.props);
    d.close();
    return model;
  } catch (e) {
    const why = e instanceof CudaLibraryNotFoundError ? e.summary : (e as Error).message;
    throw new CliError(`--gpu device: no GPU can be opened here (${why}); use --gpu h100 or h200`);
  }
}

/**
 * `vpps plan <model>`: how the model's weights would be spread over the registers of persistent CTAs. Planned from
 * the parameters' shapes alone: nothing is allocated, so a size too large to train is refused at once.
 */
export function runPlan(task: AnyTask, opts: PlanCommandOptions): void {
  const options = pickModelOptions(task, opts);
  const device = deviceModel(opts.gpu);
  // the vocabulary's size does not matter: lookup tables stay off chip. A model that does not fit is refused by
  // planVpps (a VppsPlanError: one line, exit status 1) before anything is printed, with or without --json.
  const plan = planVpps(onChipMatrices(task.parameterShapes(options, 1)), device, {
    ...(opts.ctasPerSm ? { ctasPerSm: opts.ctasPerSm } : {}),
    ...(opts.rpw ? { rowsPerWarp: opts.rpw } : {}),
    gradients: opts.gradients,
    transposed: opts.transposed,
    ...(opts.offChip !== undefined ? { offChip: opts.offChip } : {}),
  });
  if (opts.json) {
    writeOut(`${JSON.stringify(plan)}\n`);
    return;
  }
  const sizes = task.options.flatMap((o) => (o.planLabel ? [`${o.planLabel} ${options[o.key]}`] : []));
  writeOut(`${[task.title, ...sizes].join(", ")}\n${formatPlan(plan)}\n`);
}
