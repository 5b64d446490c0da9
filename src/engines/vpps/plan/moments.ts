/**
 * Adam's moments in VPPS: where the first and second moments (m, v) of every parameter live, and the per-launch
 * hyper-parameters the kernel, the host update and the emulator share.
 *
 * The moments are one device allocation of `momentFloats` floats (the runtime's `moments` base, zeroed when Adam
 * starts), laid out like the two regions the kernel updates, so that one float offset finds a weight's moments:
 *   [0, M)              m of the master copy (M = plan.masterFloats; a matrix's m at its `masterOffset`)
 *   [M, 2M)             v of the master copy
 *   [2M, 2M + P)        m of the model region of the pool (P = model.modelFloats; a vector's m at its pool offset)
 *   [2M + P, 2M + 2P)   v of the model region
 * The scheduler writes these offsets into the `adam` (model region) and `adam.master` (register-held matrices)
 * instructions; the host update (GEMM strategy) and the emulator use the same layout.
 */
import type { ModelLayout } from "./layout.js";

/** Where each part of the moments starts (float offsets from the moments base), and the total. */
export interface MomentLayout {
  readonly masterM: number;
  readonly masterV: number;
  readonly modelM: number;
  readonly modelV: number;
  readonly floats: number;
}

export function momentLayout(model: Pick<ModelLayout, "plan" | "modelFloats">): MomentLayout {
  const M = model.plan.masterFloats;
  const P = model.modelFloats;
  return { masterM: 0, masterV: M, modelM: 2 * M, modelV: 2 * M + P, floats: 2 * (M + P) };
}

/**
 * What one launch's Adam instructions need besides the learning rate and clip: β1, β2, ε and the bias corrections
 * c1 = 1 − β1ᵗ, c2 = 1 − β2ᵗ of step t (as kernel arguments, fp32).
 */
export interface AdamStep {
  readonly beta1: number;
  readonly beta2: number;
  readonly epsilon: number;
  readonly c1: number;
  readonly c2: number;
}

/** Adam's hyper-parameters (the AdamTrainer's defaults: 0.9, 0.999, 1e-8). */
export interface AdamHyperParameters {
  readonly beta1: number;
  readonly beta2: number;
  readonly epsilon: number;
}

export const ADAM_DEFAULTS: AdamHyperParameters = { beta1: 0.9, beta2: 0.999, epsilon: 1e-8 };

/** The arguments of step `t` (1 for the first update): bias corrections in double precision, as the trainer does. */
export function adamStep(h: AdamHyperParameters, t: number): AdamStep {
  if (!Number.isInteger(t) || t < 1) throw new RangeError(`Adam: the step count must be an integer >= 1; got ${t}`);
  return { beta1: h.beta1, beta2: h.beta2, epsilon: h.epsilon, c1: 1 - h.beta1 ** t, c2: 1 - h.beta2 ** t };
}

/** Checks Adam's hyper-parameters, naming the one out of range. */
export function checkAdamHyperParameters(h: AdamHyperParameters): void {
  for (const [name, x] of [
    ["beta1", h.beta1],
    ["beta2", h.beta2],
  ] as const) {
    if (!(x >= 0 && x < 1)) throw new RangeError(`Adam: ${name} must be in [0, 1); got ${x}`);
  }
  if (!(h.epsilon > 0)) throw new RangeError(`Adam: epsilon must be positive; got ${h.epsilon}`);
}

/**
 * The kernel's Adam arguments after the learning rate (codegen/template.ts), fp32 when passed: the host derives
 * 1 − β and the reciprocal bias corrections in double precision (see AdamArgs in src/codegen/device-math.ts for why).
 */
export function adamKernelArgs(a: AdamStep): readonly number[] {
  return [a.beta1, 1 - a.beta1, a.beta2, 1 - a.beta2, a.epsilon, 1 / a.c1, 1 / a.c2];
}

/**
 * Adam on n elements with the kernel's arithmetic (`adam_element` in src/codegen/device-math.ts, fp32 throughout; the
 * AdamTrainer's doubles agree with it up to fp32 noise): w[wAt + i] steps with gradient g[gAt + i]·scale (0 when g
 * is undefined), m at moments[mAt + i], v at moments[vAt + i].
 */
export function adamRange(
  w: Float32Array,
  wAt: number,
  g: Float32Array | undefined,
  gAt: number,
  scale: number,
  moments: Float32Array,
  mAt: number,
  vAt: number,
  n: number,
  a: AdamStep,
  lr: number,
): void {
  const f = Math.fround;
  const [b1, omb1, b2, omb2, eps, ic1, ic2] = adamKernelArgs(a).map(f) as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const step = f(lr);
  for (let i = 0; i < n; i++) {
    const gi = g === undefined ? 0 : f(g[gAt + i]! * scale);
    const m = f(f(b1 * moments[mAt + i]!) + f(omb1 * gi));
    const v = f(f(b2 * moments[vAt + i]!) + f(f(omb2 * gi) * gi));
    moments[mAt + i] = m;
    moments[vAt + i] = v;
    const root = f(Math.sqrt(f(v * ic2)));
    w[wAt + i] = f(w[wAt + i]! - f(f(step * f(m * ic1)) / f(root + eps)));
  }
}

/**
 * Per parameter, its m and v (copies) out of a moments buffer laid out by `momentLayout` (the device's, read back,
 * or the emulator's).
 */
export function momentsOfParameters(
  model: ModelLayout,
  moments: Float32Array,
): { readonly m: Float32Array; readonly v: Float32Array }[] {
  const L = momentLayout(model);
  if (moments.length < L.floats) {
    throw new RangeError(`VPPS moments: the buffer holds ${moments.length} floats; the layout needs ${L.floats}`);
  }
  return model.params.map((p) => {
    const size = p.rows * p.cols;
    const mi = model.matrixOf[p.index]!;
    const [mAt, vAt] =
      mi >= 0
        ? [L.masterM + model.plan.matrices[mi]!.masterOffset, L.masterV + model.plan.matrices[mi]!.masterOffset]
        : [L.modelM + model.paramOffset[p.index]!, L.modelV + model.paramOffset[p.index]!];
    return { m: moments.slice(mAt, mAt + size), v: moments.slice(vAt, vAt + size) };
  });
}

/**
 * The inverse of `momentsOfParameters`: a moments buffer laid out by `momentLayout` holding each parameter's m and v
 * (by parameter index; a missing entry leaves zeros), to upload when Adam continues from saved moments.
 */
export function momentsBufferOf(
  model: ModelLayout,
  perParameter: readonly ({ readonly m: Float32Array; readonly v: Float32Array } | undefined)[],
): Float32Array {
  const L = momentLayout(model);
  const out = new Float32Array(L.floats);
  for (const p of model.params) {
    const given = perParameter[p.index];
    if (given === undefined) continue;
    const size = p.rows * p.cols;
    if (given.m.length !== size || given.v.length !== size) {
      throw new RangeError(
        `VPPS moments of parameter #${p.index}: expected ${size} values each; got ${given.m.length} and ${given.v.length}`,
      );
    }
    const mi = model.matrixOf[p.index]!;
    const [mAt, vAt] =
      mi >= 0
        ? [L.masterM + model.plan.matrices[mi]!.masterOffset, L.masterV + model.plan.matrices[mi]!.masterOffset]
        : [L.modelM + model.paramOffset[p.index]!, L.modelV + model.paramOffset[p.index]!];
    out.set(given.m, mAt);
    out.set(given.v, vAt);
  }
  return out;
}
