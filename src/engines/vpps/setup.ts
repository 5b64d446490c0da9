/**
 * What `Vpps.create` does before the API object exists: check the options, open the context, plan the variants
 * with the device's numbers, start the schedule workers (first: they load while the kernels compile); then load
 * and check every compiled variant and upload the weights.
 */

import { type DeviceModel, deviceModelOfCuda } from "../../cuda/hw/device-model.js";
import { GpuContext } from "../../cuda/runtime/context.js";
import { onChipMatrices, type ParameterCollection } from "../../model/parameters.js";
import { requireCollection } from "../engine.js";
import { type CompiledVariant, loadVariants, plansFor } from "./codegen/compile.js";
import { type ResolvedOptions, resolveOptions, scheduleOptions, type VppsOptions } from "./options.js";
import type { VppsPlan } from "./plan/plan.js";
import type { BatchTag } from "./runtime/launcher.js";
import { VppsRuntime } from "./runtime/submit.js";
import { SchedulePool } from "./schedule/pool.js";
import { VppsScheduler } from "./schedule/scheduler.js";

/**
 * Words of each pipeline slot's device script region (16 MB): a Tree-LSTM batch of 128 SST trees takes ~350k words,
 * so one region holds batches of ~1,500 trees.
 */
const SCRIPT_WORDS = 4 << 20;

/** A compiled variant with its scheduler. */
export interface Variant extends CompiledVariant {
  /** Replaced by setOptimizer (the script's update depends on the optimizer). */
  scheduler: VppsScheduler;
}

/** What `openVpps` makes before the kernels are loaded. */
export interface VppsSetup {
  readonly ctx: GpuContext;
  readonly device: DeviceModel;
  /** Replaced by assembleVpps when a variant was planned again after a spill. */
  plans: VppsPlan[];
  pool: SchedulePool<BatchTag> | undefined;
  readonly o: ResolvedOptions;
}

/** Checks the options, opens the context, plans the variants and starts the schedule workers. */
export function openVpps(params: ParameterCollection, options: VppsOptions): VppsSetup {
  requireCollection(params, "vpps");
  const o = resolveOptions(options);
  const ctx = GpuContext.open({
    device: o.device,
    ...(o.cacheDir !== undefined ? { cacheDir: o.cacheDir } : {}),
    ...(o.poolBytes !== undefined ? { poolBytes: o.poolBytes } : {}),
  });
  try {
    const device = deviceModelOfCuda(ctx.device.props);
    const plans = plansFor(onChipMatrices(params), device, o.variants);
    return { ctx, device, plans, pool: startPool(params, plans, o), o };
  } catch (e) {
    ctx.dispose();
    throw e;
  }
}

/** The schedule workers of `plans` (none when `host.scheduleWorkers` is 0). */
function startPool(
  params: ParameterCollection,
  plans: readonly VppsPlan[],
  o: ResolvedOptions,
): SchedulePool<BatchTag> | undefined {
  const workers = o.host.scheduleWorkers;
  if (workers === 0) return undefined;
  return new SchedulePool<BatchTag>({
    workers,
    params: params.all,
    plans,
    schedule: scheduleOptions(o, o.training.optimizer),
  });
}

/** Releases what `openVpps` made, when creating the engine failed after it. */
export function closeVpps(setup: VppsSetup): void {
  setup.pool?.dispose();
  setup.ctx.dispose();
}

/**
 * Loads and checks every variant (compile.ts), uploads the weights (and zeroes Adam's moments). When a variant was
 * planned again after a spill, the plans change and the schedule workers are started again with them (`setup` is
 * updated: closeVpps then releases the new pool).
 */
export function assembleVpps(
  setup: VppsSetup,
  params: ParameterCollection,
): { variants: Variant[]; runtime: VppsRuntime } {
  const { ctx, o } = setup;
  const schedule = scheduleOptions(o, o.training.optimizer);
  const variants: Variant[] = loadVariants(ctx, params, setup.plans, o).map((v) => ({
    ...v,
    scheduler: new VppsScheduler(v.model, schedule),
  }));
  if (variants.some((v) => v.plan !== setup.plans[v.index])) {
    const plans = setup.plans.slice();
    for (const v of variants) plans[v.index] = v.plan;
    setup.pool?.dispose();
    setup.pool = undefined;
    setup.plans = plans;
    setup.pool = startPool(params, plans, o);
  }
  const plans = setup.plans;
  const first = variants[0]!;
  const runtime = new VppsRuntime(ctx, {
    masterFloats: first.plan.masterFloats,
    modelFloats: first.model.modelFloats,
    scriptWords: SCRIPT_WORDS,
    slots: o.host.pipelineSlots,
    traceCtas: o.instrument.traceKernel ? Math.max(...plans.map((p) => p.ctas)) : 0,
  });
  runtime.uploadWeights(
    first.model,
    params.all.map((p) => p.value),
  );
  if (o.training.optimizer === "adam") runtime.resetMoments(first.model);
  return { variants, runtime };
}
