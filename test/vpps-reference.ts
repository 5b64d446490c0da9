/**
 * The CPU references VPPS (emulator or GPU) is compared with, shared by test/vpps-emulator.test.ts and
 * test/gpu/vpps.test.ts: one SGD batch, and Adam batch by batch (loss, gradients, moments and each parameter's step).
 *
 * The two run separate trajectories from the same start (each carries its own weights and moments), so batch k
 * compares steps (new − old weight of each trajectory), not weights that earlier batches may have moved apart.
 */
import { CpuEngine } from "../src/engines/cpu.js";
import { ADAM_DEFAULTS, adamStep } from "../src/engines/vpps/plan/moments.js";
import type { Expression } from "../src/graph/graph.js";
import type { AnyParameter, ParameterCollection } from "../src/model/parameters.js";
import { type AdamTrainer, SimpleSGDTrainer } from "../src/optim/trainers.js";

export interface Moments {
  readonly m: Float32Array;
  readonly v: Float32Array;
}

/** One batch of one trajectory: the loss, per parameter the gradient (when readable), weights before and after, moments after. */
export interface AdamBatch {
  readonly loss: number;
  readonly gradients?: readonly Float32Array[];
  readonly before: readonly Float32Array[];
  readonly after: readonly Float32Array[];
  readonly moments: readonly Moments[];
}

/** The AdamTrainer's moments of `p` (its private state, read here only to compare; zeros before its first update). */
export function trainerMoments(trainer: AdamTrainer, p: AnyParameter): Moments {
  const state = trainer as unknown as { m: Map<AnyParameter, Float32Array>; v: Map<AnyParameter, Float32Array> };
  const zero = new Float32Array(p.value.length);
  return { m: state.m.get(p) ?? zero, v: state.v.get(p) ?? zero };
}

/** The CPU engine's forward and backward of `loss` over `pc` (gradients zeroed first): the loss and every gradient. */
function cpuLossAndGradients(pc: ParameterCollection, loss: Expression): { value: number; gradients: Float32Array[] } {
  pc.zeroGradients();
  const cpu = new CpuEngine(pc);
  const value = cpu.forwardScalar(loss);
  cpu.backward(loss);
  return { value, gradients: pc.all.map((p) => Float32Array.from(p.grad)) };
}

/** One SGD batch of the reference: the loss, every gradient and every parameter's new value. */
export interface SgdReference {
  loss: number;
  gradients: Float32Array[];
  values: Float32Array[];
}

/** The CPU engine's loss, gradients and clipped-SGD values; leaves the collection's values as it found them. */
export function referenceSgdBatch(pc: ParameterCollection, loss: Expression, lr: number, clip: number): SgdReference {
  const before = pc.all.map((p) => Float32Array.from(p.value));
  const { value, gradients } = cpuLossAndGradients(pc, loss);
  new SimpleSGDTrainer({ learningRate: lr, clipThreshold: clip }).update(pc);
  const values = pc.all.map((p) => Float32Array.from(p.value));
  for (const [i, p] of pc.all.entries()) p.value.set(before[i]!);
  pc.zeroGradients();
  return { loss: value, gradients, values };
}

/** The reference's batch: CPU engine forward and backward of `loss` over `pc`, then `trainer.update(pc)`. */
export function referenceAdamBatch(pc: ParameterCollection, trainer: AdamTrainer, loss: Expression): AdamBatch {
  const before = pc.all.map((p) => Float32Array.from(p.value));
  const { value, gradients } = cpuLossAndGradients(pc, loss);
  trainer.update(pc);
  const after = pc.all.map((p) => Float32Array.from(p.value));
  const moments = pc.all.map((p) => {
    const s = trainerMoments(trainer, p);
    return { m: Float32Array.from(s.m), v: Float32Array.from(s.v) };
  });
  return { loss: value, gradients, before, after, moments };
}

/** First element where `actual` differs from `expected` by more than 2e-4 of the tensor's largest magnitude, or "". */
export function tensorDifference(what: string, expected: Float32Array, actual: Float32Array): string {
  let scale = 0;
  for (const v of expected) scale = Math.max(scale, Math.abs(v));
  const tol = 1e-12 + 2e-4 * scale;
  for (let k = 0; k < expected.length; k++) {
    const d = Math.abs(expected[k]! - actual[k]!);
    if (!(d <= tol)) return `${what}[${k}]: CPU ${expected[k]}, VPPS ${actual[k]} (tolerance ${tol.toExponential(1)})`;
  }
  return "";
}

/** Elements compared, and those whose step tolerance exceeded 1% of the learning rate (a vacuous check shows here). */
export interface Looseness {
  count: number;
  total: number;
}

/**
 * First element where the steps differ by more than the moments' differences imply, or "". Adam divides by √v̂ per
 * element, so a gradient element that fp32 summation order moves by 1e-7 of the tensor's scale can change a tiny
 * element's step a lot; the tolerance is the step's first-order sensitivity to the measured differences of m and v
 * (which are themselves checked against the reference with the gradients' tolerance), plus fp32 rounding of the
 * weights and of the kernel's approximate division and square root.
 */
export function adamStepDifference(
  what: string,
  ref: { step: Float32Array; before: Float32Array } & Moments,
  got: { step: Float32Array; before: Float32Array } & Moments,
  lr: number,
  t: number,
  loose: Looseness,
): string {
  const { c1, c2, epsilon } = adamStep(ADAM_DEFAULTS, t);
  for (let k = 0; k < ref.step.length; k++) {
    const root = Math.sqrt(Math.min(ref.v[k]!, got.v[k]!) / c2);
    const mhat = Math.max(Math.abs(ref.m[k]!), Math.abs(got.m[k]!)) / c1;
    const dm = Math.abs(ref.m[k]! - got.m[k]!) / c1;
    const dv = Math.abs(ref.v[k]! - got.v[k]!) / c2;
    let sens = dm / (root + epsilon);
    if (dv > 0) sens += (mhat * dv) / (2 * Math.max(root, 1e-30) * (root + epsilon) ** 2);
    const rounding = 2.4e-7 * (Math.abs(ref.before[k]!) + Math.abs(got.before[k]!));
    const tol = 1e-9 + 1e-5 * lr + 2 * lr * Math.min(sens, 4) + rounding;
    loose.total++;
    if (tol - rounding > 0.01 * lr) loose.count++;
    const d = Math.abs(ref.step[k]! - got.step[k]!);
    if (!(d <= tol))
      return `${what}[${k}]: CPU step ${ref.step[k]}, VPPS ${got.step[k]} (tolerance ${tol.toExponential(1)})`;
  }
  return "";
}

/**
 * The first mismatch of batch `t` (1-based: Adam's step) between the reference and VPPS: loss (relative
 * `lossTolerance`), gradients (where VPPS's are given), m, v and steps of every parameter; "" when all agree.
 */
export function compareAdamBatch(
  params: readonly AnyParameter[],
  ref: AdamBatch,
  got: AdamBatch,
  lr: number,
  t: number,
  loose: Looseness,
  lossTolerance = 1e-5,
): string {
  if (!(Math.abs(ref.loss - got.loss) <= lossTolerance * Math.max(1, Math.abs(ref.loss)))) {
    return `loss: CPU ${ref.loss}, VPPS ${got.loss}`;
  }
  const step = (after: Float32Array, before: Float32Array) => Float32Array.from(after, (x, j) => x - before[j]!);
  for (const [i, p] of params.entries()) {
    const d =
      (got.gradients ? tensorDifference(`gradient of ${p.name}`, ref.gradients![i]!, got.gradients[i]!) : "") ||
      tensorDifference(`m of ${p.name}`, ref.moments[i]!.m, got.moments[i]!.m) ||
      tensorDifference(`v of ${p.name}`, ref.moments[i]!.v, got.moments[i]!.v) ||
      adamStepDifference(
        `step of ${p.name}`,
        { step: step(ref.after[i]!, ref.before[i]!), before: ref.before[i]!, ...ref.moments[i]! },
        { step: step(got.after[i]!, got.before[i]!), before: got.before[i]!, ...got.moments[i]! },
        lr,
        t,
        loose,
      );
    if (d) return d;
  }
  return "";
}
