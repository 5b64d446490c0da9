import type { AnyParameter, ParameterCollection } from "../model/parameters.js";
import { UserError } from "../util/errors.js";

/**
 * A trainer refused an update because a gradient holds NaN or ±∞ (a non-finite loss, input or overflow upstream):
 * applying it would make the weights non-finite. Names the parameter, the element and its value.
 */
export class NonFiniteUpdateError extends UserError {
  constructor(
    readonly parameter: string,
    readonly element: number,
    readonly value: number,
    /** The number of updates applied before the refused one. */
    readonly updatesBefore: number,
  ) {
    super(
      (Number.isFinite(value)
        ? // a device summing squares in fp32 can overflow on finite gradients this large
          `the gradient norm overflows (parameter '${parameter}' has ${value} at element ${element})`
        : `the gradient of parameter '${parameter}' holds ${value} at element ${element}`) +
        `; refusing to apply update ${updatesBefore + 1}`,
    );
    this.name = "NonFiniteUpdateError";
  }
}

/** The first parameter whose gradient (dense: all of it; lookup: its touched rows) holds NaN or ±∞, or null. */
export function findNonFiniteGradient(
  params: ParameterCollection,
): { parameter: string; element: number; value: number } | null {
  for (const p of params.all) {
    const g = p.grad;
    const check = (from: number, to: number) => {
      for (let k = from; k < to; k++) if (g[k]! - g[k]! !== 0) return k;
      return -1;
    };
    if (p.kind === "lookup") {
      for (const r of p.touchedRows) {
        const k = check(r * p.cols, (r + 1) * p.cols);
        if (k >= 0) return { parameter: p.name, element: k, value: g[k]! };
      }
    } else {
      const k = check(0, g.length);
      if (k >= 0) return { parameter: p.name, element: k, value: g[k]! };
    }
  }
  return null;
}

export interface TrainerOptions {
  learningRate: number;
  /** Rescale all gradients when their global L2 norm exceeds this (DyNet's default 5); 0 disables clipping. */
  clipThreshold?: number;
}

/**
 * A trainer applies one update to the parameters from their accumulated gradients, then zeroes the gradients.
 * Dense parameters are updated whole; lookup tables only in the rows the batch touched (sparse updates).
 * Engines whose parameters live on a device implement the same rule there (`kind` and the hyper-parameters say
 * which); this class is the reference.
 */
export abstract class Trainer {
  abstract readonly kind: "sgd" | "adam";
  readonly clipThreshold: number;
  /** Number of updates applied so far. */
  updates = 0;
  private rate = 0;

  constructor(opts: TrainerOptions) {
    if (typeof opts !== "object" || opts === null) {
      throw new TypeError(`trainer options must be an object with a learningRate; got ${String(opts)}`);
    }
    this.learningRate = opts.learningRate;
    const clip = opts.clipThreshold ?? 5;
    // NaN would compare false everywhere and switch clipping off without a word
    if (!(clip >= 0 && clip < Number.POSITIVE_INFINITY)) {
      throw new RangeError(`clip threshold must be a finite number ≥ 0 (0: no clipping); got ${String(clip)}`);
    }
    this.clipThreshold = clip;
  }

  /** The step size; a schedule may change it between updates (a NaN or infinite rate would poison the weights). */
  get learningRate(): number {
    return this.rate;
  }
  set learningRate(lr: number) {
    if (!(lr > 0 && lr < Number.POSITIVE_INFINITY)) {
      throw new RangeError(`learning rate must be positive and finite; got ${String(lr)}`);
    }
    this.rate = lr;
  }

  /** The factor gradients are scaled by before the update (1 unless clipping applies). */
  clipScale(params: ParameterCollection): number {
    if (this.clipThreshold <= 0) return 1;
    return this.scaleFor(Math.sqrt(gradientNormSquared(params)));
  }

  private scaleFor(norm: number): number {
    return this.clipThreshold > 0 && norm > this.clipThreshold ? this.clipThreshold / norm : 1;
  }

  /**
   * Applies one update and zeroes the gradients. Refuses (NonFiniteUpdateError, nothing changed) when a gradient
   * holds NaN or ±∞: the global norm, which clipping needs anyway, is then not finite.
   */
  update(params: ParameterCollection): void {
    const norm = Math.sqrt(gradientNormSquared(params));
    if (!Number.isFinite(norm)) {
      // in doubles, squares of fp32 values (≤ 1.2e77) cannot sum to ∞: some element is NaN or ±∞ itself
      const bad = findNonFiniteGradient(params)!;
      throw new NonFiniteUpdateError(bad.parameter, bad.element, bad.value, this.updates);
    }
    const scale = this.scaleFor(norm);
    this.updates++;
    for (const p of params.all) {
      if (p.kind === "lookup") {
        const d = p.cols;
        for (const r of p.touchedRows) this.updateRange(p, r * d, (r + 1) * d, scale);
      } else {
        this.updateRange(p, 0, p.value.length, scale);
      }
    }
    params.zeroGradients();
  }

  /** Updates elements [from, to) of p with gradients scaled by `scale`. */
  protected abstract updateRange(p: AnyParameter, from: number, to: number, scale: number): void;
}

/** The squared global L2 norm of the gradients: dense parameters whole, lookup tables in their touched rows. */
export function gradientNormSquared(params: ParameterCollection): number {
  let sq = 0;
  for (const p of params.all) {
    if (p.kind === "lookup") {
      const d = p.cols;
      for (const r of p.touchedRows) for (let k = r * d; k < (r + 1) * d; k++) sq += p.grad[k]! * p.grad[k]!;
    } else {
      for (let k = 0; k < p.grad.length; k++) sq += p.grad[k]! * p.grad[k]!;
    }
  }
  return sq;
}

/** w ← w − η·g */
export class SimpleSGDTrainer extends Trainer {
  readonly kind = "sgd" as const;
  protected updateRange(p: AnyParameter, from: number, to: number, scale: number): void {
    const lr = this.learningRate * scale;
    const w = p.value;
    const g = p.grad;
    for (let k = from; k < to; k++) w[k] = w[k]! - lr * g[k]!;
  }
}

export interface AdamOptions extends TrainerOptions {
  beta1?: number;
  beta2?: number;
  epsilon?: number;
}

/**
 * Adam (Kingma & Ba) with bias correction. Lookup rows keep their moments and are updated only when touched
 * (DyNet's behaviour), with the global step count used for the bias correction.
 */
export class AdamTrainer extends Trainer {
  readonly kind = "adam" as const;
  readonly beta1: number;
  readonly beta2: number;
  readonly epsilon: number;
  private readonly m = new Map<AnyParameter, Float32Array>();
  private readonly v = new Map<AnyParameter, Float32Array>();

  constructor(opts: AdamOptions) {
    super(opts);
    this.beta1 = opts.beta1 ?? 0.9;
    this.beta2 = opts.beta2 ?? 0.999;
    this.epsilon = opts.epsilon ?? 1e-8;
    for (const [name, b] of [
      ["beta1", this.beta1],
      ["beta2", this.beta2],
    ] as const) {
      if (!(b >= 0 && b < 1)) throw new RangeError(`Adam: ${name} must be in [0, 1); got ${String(b)}`);
    }
    if (!(this.epsilon > 0 && this.epsilon < Number.POSITIVE_INFINITY)) {
      throw new RangeError(`Adam: epsilon must be positive and finite; got ${String(this.epsilon)}`);
    }
  }

  /**
   * The first and second moments of `p` (live arrays, laid out like its values), or undefined before its first
   * update. An engine that keeps them on a device copies them here when asked (`Engine.syncTrainerToHost`).
   */
  moments(p: AnyParameter): { readonly m: Float32Array; readonly v: Float32Array } | undefined {
    const m = this.m.get(p);
    const v = this.v.get(p);
    return m && v ? { m, v } : undefined;
  }

  /** Sets the moments of `p` (copies; from a checkpoint, or a device's copy). */
  setMoments(p: AnyParameter, m: Float32Array, v: Float32Array): void {
    const n = p.value.length;
    if (m.length !== n || v.length !== n) {
      throw new RangeError(`Adam moments of '${p.name}': expected ${n} values each; got ${m.length} and ${v.length}`);
    }
    this.m.set(p, Float32Array.from(m));
    this.v.set(p, Float32Array.from(v));
  }

  /** Whether any parameter has moments (a trainer that has updated, or was restored). */
  get hasMoments(): boolean {
    return this.m.size > 0;
  }

  protected updateRange(p: AnyParameter, from: number, to: number, scale: number): void {
    let m = this.m.get(p);
    let v = this.v.get(p);
    if (!m || !v) {
      m = new Float32Array(p.value.length);
      v = new Float32Array(p.value.length);
      this.m.set(p, m);
      this.v.set(p, v);
    }
    const b1 = this.beta1;
    const b2 = this.beta2;
    const c1 = 1 - b1 ** this.updates;
    const c2 = 1 - b2 ** this.updates;
    const lr = this.learningRate;
    const w = p.value;
    const g = p.grad;
    for (let k = from; k < to; k++) {
      const gk = g[k]! * scale;
      const mk = b1 * m[k]! + (1 - b1) * gk;
      const vk = b2 * v[k]! + (1 - b2) * gk * gk;
      m[k] = mk;
      v[k] = vk;
      w[k] = w[k]! - (lr * (mk / c1)) / (Math.sqrt(vk / c2) + this.epsilon);
    }
  }
}

export type OptimizerName = "sgd" | "adam";

export function makeTrainer(name: string, opts: TrainerOptions): Trainer {
  switch (name) {
    case "sgd":
      return new SimpleSGDTrainer(opts);
    case "adam":
      return new AdamTrainer(opts);
    default:
      throw new Error(`unknown optimizer '${name}'; choose sgd or adam`);
  }
}
