/**
 * The JIT ahead of creation: every plan variant `Vpps.create` (or `createSync`) would compile, compiled into the
 * kernel cache with NVRTC on worker threads while the event loop stays free — `vpps train --engine vpps` prints each
 * variant as it finishes and can be stopped meanwhile (src/cli/stop-signals.ts). Loads nothing else: no pool, no
 * workers, no weights; the creation afterwards finds every kernel in the cache.
 */
import { deviceModelOfCuda } from "../../../cuda/hw/device-model.js";
import { KernelSpillError } from "../../../cuda/index.js";
import { GpuContext } from "../../../cuda/runtime/context.js";
import { onChipMatrices, type ParameterCollection } from "../../../model/parameters.js";
import { type ResolvedOptions, resolveOptions, type VppsOptions } from "../options.js";
import type { VppsPlan } from "../plan/plan.js";
import { type CompileProgress, compileVariantsAsync, plansFor, variantSource } from "./compile.js";
import { planAfterSpill } from "./spill-retry.js";

/**
 * Compiles the variants of `params` under `options` into the kernel cache (`onProgress` hears of each as it finishes).
 * When every variant spills, the re-plans the creation will make are compiled too.
 */
export async function compileVppsKernels(
  params: ParameterCollection,
  options: VppsOptions = {},
  onProgress?: (p: CompileProgress) => void,
): Promise<{ variants: number }> {
  const o = resolveOptions(options);
  const ctx = GpuContext.open({
    device: o.device,
    poolBytes: null,
    ...(o.cacheDir !== undefined ? { cacheDir: o.cacheDir } : {}),
  });
  try {
    const plans = plansFor(onChipMatrices(params), deviceModelOfCuda(ctx.device.props), o.variants);
    await compileVariantsAsync(ctx, plans, o, onProgress);
    await compileReplans(ctx, plans, o);
    return { variants: plans.length };
  } finally {
    ctx.dispose();
  }
}

/**
 * When every variant compileVariantsAsync compiled (and loaded into `ctx`) spills, what loadVariants will do next —
 * plan the first one again with registers kept free until its kernel does not spill (spill-retry.ts) — compiled here
 * too, on a worker thread, so that the synchronous creation finds those kernels in the cache as well. Stops quietly
 * where loadVariants would go on or give up: that creation reports it.
 */
async function compileReplans(ctx: GpuContext, plans: readonly VppsPlan[], o: ResolvedOptions): Promise<void> {
  const localBytes = async (plan: VppsPlan) => {
    const { name, source } = variantSource(plan, o);
    const set = await ctx.kernelsAsync(`${name}.cu`, source, [name]);
    return { name, attr: set.kernels[name].attributes() };
  };
  for (const plan of plans) if ((await localBytes(plan)).attr.localBytes === 0) return;
  let plan = plans[0]!;
  for (let replans = 0; ; replans++) {
    const { name, attr } = await localBytes(plan);
    if (attr.localBytes === 0) return;
    try {
      const spill = new KernelSpillError(`${name}: spilled`, name, attr.numRegs, attr.localBytes);
      plan = planAfterSpill(plan, replans, o.variants.gradients, spill, () => {});
    } catch {
      return;
    }
  }
}
