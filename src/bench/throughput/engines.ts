/**
 * The engines of the throughput suite, in the order they run: the GPU engines that wait for each batch (eager,
 * autobatch depth and agenda, agenda with cuBLAS), VPPS in each of the model's formulations (compared with them),
 * then the CPU engines (the reference and the autobatch engine's CPU backend), last so that their heap and CPU time
 * stay out of the GPU engines' numbers.
 */
import type { ParameterCollection } from "../../model/parameters.js";
import { type BaselineKind, CPU_BASELINES, GPU_BASELINES, type OpenedEngine } from "../engine-timing.js";
import type { BenchModel } from "../model.js";

export interface EngineSpec {
  id: string;
  /** On the plot and in tables (the plot's legend has about 20 characters' room). */
  label: string;
  /** VPPS (pipelined, timed by vpps-timing.ts) or an engine that waits for each batch (engine-timing.ts). */
  kind: "baseline" | "vpps";
  onGpu: boolean;
  /** The model formulation it trains. */
  variant: string;
  /** Opens a baseline engine; the engine named `id` when absent (a test plants a wrong engine through this). */
  open?: (params: ParameterCollection) => OpenedEngine;
  /** VPPS: matrices forced off chip (the Vpps option `variants.offChip`); the planner's placement when absent. */
  offChip?: "all";
  /** Runs only when `--engines` names it (not part of the default suite). */
  optIn?: boolean;
}

const BASELINE_LABELS: Readonly<Record<BaselineKind, string>> = {
  eager: "eager",
  "autobatch-depth": "autobatch depth",
  "autobatch-agenda": "agenda, tiled GEMM",
  "autobatch-agenda-cublas": "agenda, cuBLAS",
  cpu: "cpu",
  "autobatch-depth-cpu": "autobatch depth, CPU",
  "autobatch-agenda-cpu": "agenda, CPU",
};

/** The agenda engines VPPS's speedup is taken over (the better of the two at each point). */
export const AGENDA_ENGINES: readonly string[] = ["autobatch-agenda", "autobatch-agenda-cublas"];

/**
 * The VPPS engine with every matrix forced off chip (products as tiles over the master copy in global memory), in
 * the model's first formulation: what registers gain over it (`--engines vpps-offchip`; not run by default).
 */
export const VPPS_OFF_CHIP_ID = "vpps-offchip";

/** `vpps-fused`, `vpps-ops` for a model of two formulations; `vpps` for a model of one. */
export function vppsEngineIds(model: BenchModel<unknown>): string[] {
  return model.variants.length > 1 ? model.variants.map((v) => `vpps-${v.name}`) : ["vpps"];
}

/** Every engine the suite can run on `model`, in run order. */
export function engineSpecs(model: BenchModel<unknown>): EngineSpec[] {
  const main = model.variants[0]!.name;
  const baseline = (id: BaselineKind, onGpu: boolean): EngineSpec => ({
    id,
    label: BASELINE_LABELS[id],
    kind: "baseline",
    onGpu,
    variant: main,
  });
  const vpps = vppsEngineIds(model).map(
    (id, i): EngineSpec => ({
      id,
      label: model.variants.length > 1 ? `vpps (${model.variants[i]!.label})` : "vpps",
      kind: "vpps",
      onGpu: true,
      variant: model.variants[i]!.name,
    }),
  );
  const offChip: EngineSpec = {
    id: VPPS_OFF_CHIP_ID,
    label: "vpps, all off chip",
    kind: "vpps",
    onGpu: true,
    variant: main,
    offChip: "all",
    optIn: true,
  };
  return [
    ...GPU_BASELINES.map((id) => baseline(id, true)),
    ...vpps,
    offChip,
    ...CPU_BASELINES.map((id) => baseline(id, false)),
  ];
}

/** The engines run at the sweep's other sizes: the agenda engine with cuBLAS and VPPS in its first formulation. */
export function sweepEngineIds(model: BenchModel<unknown>): string[] {
  return ["autobatch-agenda-cublas", vppsEngineIds(model)[0]!];
}
