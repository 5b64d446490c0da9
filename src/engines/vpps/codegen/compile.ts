/**
 * The compile stage: from the model's matrices and the device to loaded kernel variants. Which plans are worth
 * compiling (the variant options), the source and name of each (template.ts), the JIT through the GpuContext's
 * on-disk cache (all variants at once, NVRTC on worker threads), and the checks a loaded kernel must pass before
 * it runs: its persistent grid fits on the device, and nothing spilled to local memory.
 */
import type { DeviceModel } from "../../../cuda/hw/device-model.js";
import { checkNoSpills, type GpuContext, type KernelSet, KernelSpillError } from "../../../cuda/index.js";
import type { ParameterCollection } from "../../../model/parameters.js";
import type { ResolvedOptions, ResolvedVariants } from "../options.js";
import { createModelLayout } from "../plan/layout.js";
import { enumeratePlans, type MatrixSpec, planVpps, type VppsPlan } from "../plan/plan.js";
import { planUntilNoSpill } from "./spill-retry.js";
import { generateKernelSource, kernelName } from "./template.js";
import type { KernelVariant } from "./variant.js";

/** What compiling one variant cost, and (after profiling, tune/profiler.ts) what it costs per batch. */
export interface VariantInfo {
  readonly name: string;
  readonly ctasPerSm: 1 | 2;
  readonly rowsPerWarp: number;
  readonly jitMs: number;
  readonly cacheHit: boolean;
  readonly registers: number;
  readonly localBytes: number;
  /** Mean kernel ms over the profiled batches but the first (undefined until profiled). */
  profileMs?: number;
}

/** A loaded, checked kernel variant. */
export interface CompiledVariant extends KernelVariant {
  /** Position of its plan in the list plansFor returned (and the schedule workers were given). */
  readonly index: number;
  readonly info: VariantInfo;
}

/** What to do when a variant spills even after it was planned again (the advice of the last refusal). */
const SPILL_ADVICE =
  'choose a plan with fewer registers per thread (variants.rowsPerWarp 1, variants.gradients "gemm") or a smaller model';

/**
 * The plans to compile: the one of a fixed rpw, or every valid one (of the CTAs per SM asked for); with
 * `transposed: "profile"`, those without copies and then those with some (a plan with no room for one is not
 * repeated); at most MAX_PROFILED_VARIANTS of them, spread over the list. Throws the planner's refusal when none fits.
 */
export function plansFor(matrices: MatrixSpec[], device: DeviceModel, v: ResolvedVariants): VppsPlan[] {
  const { gradients, transposed: mode } = v;
  const offChip = v.offChip !== undefined ? { offChip: v.offChip } : {};
  const pick = v.ctasPerSm !== undefined ? { ctasPerSm: v.ctasPerSm } : {};
  const kinds = mode === "profile" ? [false, true] : [mode];
  const plans: VppsPlan[] = [];
  for (const transposed of kinds) {
    const found =
      typeof v.rowsPerWarp === "number"
        ? [planVpps(matrices, device, { rowsPerWarp: v.rowsPerWarp, gradients, transposed, ...pick, ...offChip })]
        : enumeratePlans(matrices, device, gradients, transposed, v.offChip).filter(
            (p) => v.ctasPerSm === undefined || p.ctasPerSm === v.ctasPerSm,
          );
    plans.push(...found.filter((p) => !(mode === "profile" && transposed && p.transposed.length === 0)));
  }
  if (plans.length === 0) return [planVpps(matrices, device, { gradients, ...pick, ...offChip })]; // throws the refusal
  const allOff = everyMatrixOffChip(matrices, device, v, plans);
  return [...spread(plans, MAX_PROFILED_VARIANTS - allOff.length), ...allOff];
}

/**
 * Where the planner keeps some matrices off chip (and the user forced none), the plans with every matrix off chip
 * too — one per CTAs per SM — so that the profile can choose them: keeping the rest in registers need not pay. Measured
 * on an H100 (bench/results/h100/treelstm-large.md): the Tree-LSTM at hidden 1024 and 1536 ran 1.6–2.3× faster with
 * every matrix off chip (two CTAs per SM, fast tiles, in-kernel updates) than with the planner's placement.
 */
function everyMatrixOffChip(
  matrices: MatrixSpec[],
  device: DeviceModel,
  v: ResolvedVariants,
  plans: readonly VppsPlan[],
): VppsPlan[] {
  const some = plans.some((p) => p.offChip.length > 0);
  const all = plans.every((p) => p.offChip.length === p.matrices.length);
  if (v.offChip !== undefined || !some || all || typeof v.rowsPerWarp === "number") return [];
  const found = enumeratePlans(matrices, device, v.gradients, false, "all").filter(
    (p) => v.ctasPerSm === undefined || p.ctasPerSm === v.ctasPerSm,
  );
  // the finest of each CTAs per SM (rows per warp do not matter: no matrix has partitions)
  return [1, 2].flatMap((c) => found.filter((p) => p.ctasPerSm === c).slice(0, 1));
}

/**
 * The most plan variants `create` compiles and profiles. Each is one NVRTC compile of seconds; TD-LSTM's 19 valid
 * variants took 42.6 s to compile on an H100 host (8 test files at once), the paper's bound is 7–75 s and ours 30 s.
 */
export const MAX_PROFILED_VARIANTS = 8;

/**
 * At most `most` of `plans`, evenly spread over the list in its order (CTAs per SM, then rows per warp, without and
 * then with transposed copies), always keeping the first (one CTA per SM, one row per warp: the most registers per row)
 * and the last.
 */
export function spread<T>(plans: readonly T[], most: number): T[] {
  if (plans.length <= most) return plans.slice();
  const kept = new Set<number>();
  for (let i = 0; i < most; i++) kept.add(Math.round((i * (plans.length - 1)) / (most - 1)));
  return [...kept].sort((a, b) => a - b).map((i) => plans[i]!);
}

/** The kernel name and generated CUDA source of one plan variant. */
export function variantSource(plan: VppsPlan, o: ResolvedOptions): { name: string; source: string } {
  const spec = {
    model: o.name,
    ...(o.barrierSpinLimit !== undefined ? { barrierSpinLimit: o.barrierSpinLimit } : {}),
    ...(o.instrument.profileKernel ? { profile: true } : {}),
    ...(o.instrument.traceKernel ? { trace: true } : {}),
  };
  return { name: kernelName(plan, spec), source: generateKernelSource(plan, spec) };
}

/**
 * One variant compiled (or found in the kernel cache) by compileVariantsAsync: `done` of `total` so far. The first
 * report, before any variant is done, has `done` 0 and an empty `name`.
 */
export interface CompileProgress {
  readonly done: number;
  readonly total: number;
  readonly name: string;
  /** This variant's NVRTC milliseconds (the cache read when `cached`). */
  readonly ms: number;
  readonly cached: boolean;
  /** Milliseconds since the compile of all variants started. */
  readonly elapsedMs: number;
}

/**
 * Compiles every variant at once (NVRTC on worker threads, or the kernel cache), so that loadVariants finds them
 * loaded; `onProgress` hears of each as it finishes. All settle before the first failure is thrown: a failed variant
 * must not leave others compiling into a context that the caller then closes.
 */
export async function compileVariantsAsync(
  ctx: GpuContext,
  plans: readonly VppsPlan[],
  o: ResolvedOptions,
  onProgress?: (p: CompileProgress) => void,
) {
  const started = performance.now();
  let done = 0;
  onProgress?.({ done, total: plans.length, name: "", ms: 0, cached: false, elapsedMs: 0 });
  const settled = await Promise.allSettled(
    plans.map(async (plan) => {
      const k = variantSource(plan, o);
      const set = await ctx.kernelsAsync(`${k.name}.cu`, k.source, [k.name]);
      done++;
      onProgress?.({
        done,
        total: plans.length,
        name: k.name,
        ms: set.compile.ms,
        cached: set.compile.fromCache,
        elapsedMs: performance.now() - started,
      });
      return set;
    }),
  );
  const failed = settled.find((r) => r.status === "rejected");
  if (failed) throw failed.reason;
  const sets = settled.map((r) => (r as PromiseFulfilledResult<KernelSet<string>>).value);
  if (sets.length > 1 && sets.some((k) => !k.compile.fromCache)) {
    const ms = performance.now() - started;
    o.log(`vpps: ${sets.length} variants compiled in parallel in ${ms.toFixed(0)} ms`);
  }
}

/**
 * Compiles (or loads what compileVariantsAsync compiled) and checks every plan's kernel. A variant whose kernel
 * spills is dropped with a log line when others load; when none is left, the spilled plans are planned again with
 * registers kept free and recompiled (spill-retry.ts), in order, until one loads without spilling — a spilling kernel
 * would run, slowly (the point of VPPS is weights in registers), and a refusal would leave the user nothing to do.
 * A variant planned again has another plan than `plans[index]`: the caller gives the schedule workers the new one.
 */
export function loadVariants(
  ctx: GpuContext,
  params: ParameterCollection,
  plans: readonly VppsPlan[],
  o: ResolvedOptions,
): CompiledVariant[] {
  const variants: CompiledVariant[] = [];
  const spilled: number[] = [];
  for (const [index, plan] of plans.entries()) {
    try {
      variants.push(loadVariant(ctx, params, plan, index, o));
    } catch (e) {
      if (!(e instanceof KernelSpillError)) throw e;
      spilled.push(index);
      if (plans.length > 1) o.log(`vpps: ${e.kernel}: dropped from the profile: ${e.message}`);
    }
  }
  if (variants.length > 0) return variants;
  let last: unknown;
  for (const index of spilled) {
    try {
      const { result } = planUntilNoSpill(
        plans[index]!,
        o.variants.gradients,
        (plan) => loadVariant(ctx, params, plan, index, o),
        o.log,
      );
      return [result];
    } catch (e) {
      if (!(e instanceof KernelSpillError)) throw e;
      last = e;
    }
  }
  throw last;
}

/** Compiles (or finds compiled) and checks one plan's kernel: its grid fits, nothing spilled (KernelSpillError). */
function loadVariant(
  ctx: GpuContext,
  params: ParameterCollection,
  plan: VppsPlan,
  index: number,
  o: ResolvedOptions,
): CompiledVariant {
  const { name, source } = variantSource(plan, o);
  const set = ctx.kernels(`${name}.cu`, source, [name]);
  const kernel = set.kernels[name];
  const attr = kernel.attributes();
  const resident = kernel.maxActiveBlocksPerSm(plan.threadsPerCta, 0);
  if (resident < plan.ctasPerSm) {
    throw new Error(
      `VPPS: kernel ${name} needs ${plan.ctasPerSm} resident CTA(s) per SM for its persistent grid, but the ` +
        `device fits ${resident} (${attr.numRegs} registers/thread, ${attr.sharedBytes} B shared)`,
    );
  }
  const info: VariantInfo = {
    name,
    ctasPerSm: plan.ctasPerSm,
    rowsPerWarp: plan.rowsPerWarp,
    jitMs: set.compile.ms,
    cacheHit: set.compile.fromCache,
    registers: attr.numRegs,
    localBytes: attr.localBytes,
  };
  o.log(
    `vpps: ${name}: ${info.cacheHit ? "kernel cache hit" : "JIT"} ${info.jitMs.toFixed(0)} ms, ` +
      `${attr.numRegs} registers, ${attr.localBytes} B local`,
  );
  checkNoSpills(name, attr, SPILL_ADVICE);
  const model = createModelLayout(params.all, plan);
  return {
    plan,
    model,
    kernel,
    name,
    index,
    info,
    profiled: o.instrument.profileKernel,
    traced: o.instrument.traceKernel,
  };
}
