import { openDevice } from "../cuda/device.js";
import { type DeviceModel, deviceModelFromProperties, H100_SXM, H200 } from "../cuda/hw/device-model.js";
import { formatPlan } from "../engines/vpps/plan/format.js";
import { type MatrixSpec, planVpps } from "../engines/vpps/plan/plan.js";
import type { ParameterCollection } from "../model/parameters.js";
import { TreeLstmModel } from "../models/treelstm.js";
import { CliError } from "./train.js";

export interface PlanCommandOptions {
  hidden: number;
  embed: number;
  gpu: "h100" | "h200" | "device";
  ctasPerSm?: 1 | 2;
  rpw?: number;
  gradients: "auto" | "registers" | "gemm";
  transposed: boolean;
  json: boolean;
}

/** The matrices VPPS keeps on chip: every 2-D dense parameter (vectors and lookup tables stay in global memory). */
export function onChipMatrices(params: ParameterCollection): MatrixSpec[] {
  const out: MatrixSpec[] = [];
  for (const p of params.all)
    if (p.kind === "dense" && p.isMatrix) out.push({ name: p.name, rows: p.rows, cols: p.cols });
  return out;
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
    throw new CliError(`--gpu device: no GPU can be opened here (${(e as Error).message}); use --gpu h100 or h200`);
  }
}

/** `vpps plan treelstm`: how the model's weights would be spread over the registers of persistent CTAs. */
export function runPlanTreeLstm(opts: PlanCommandOptions): void {
  const model = new TreeLstmModel({ vocabSize: 1, embed: opts.embed, hidden: opts.hidden });
  const device = deviceModel(opts.gpu);
  let plan: ReturnType<typeof planVpps>;
  try {
    plan = planVpps(onChipMatrices(model.params), device, {
      ...(opts.ctasPerSm ? { ctasPerSm: opts.ctasPerSm } : {}),
      ...(opts.rpw ? { rowsPerWarp: opts.rpw } : {}),
      gradients: opts.gradients,
      transposed: opts.transposed,
    });
  } catch (e) {
    throw new CliError((e as Error).message);
  }
  if (opts.json) {
    process.stdout.write(`${JSON.stringify(plan)}\n`);
    return;
  }
  process.stdout.write(`Tree-LSTM, hidden ${opts.hidden}, embedding ${opts.embed}\n${formatPlan(plan)}\n`);
}
