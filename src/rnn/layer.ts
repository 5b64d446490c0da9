/**
 * PersistentRnn: the recurrent layer as users know it from PyTorch/cuDNN — a stack of `layers` layers of one cell,
 * optionally bidirectional, over a packed batch (or a list of variable-length sequences), with parameters and
 * gradients under PyTorch's names. The layer stitches (layer, direction) calls of an RnnBackend together; the
 * backend (CPU reference or persistent GPU kernels) does the math of each.
 *
 * A pruned layer (`density` or `mask`) keeps the dense parameters as the master copy and one W_hh mask per
 * (layer, direction); every call passes the mask through the seam, so the math uses W_hh ⊙ mask and dW_hh exists at
 * the kept weights only. With `reprune: { every: n }` the layer counts its backward() calls (one per optimizer step
 * in the usual loop) and re-prunes from the dense weights at the forward after every n-th — after the optimizer's
 * step, which the layer does not see; `prune()` does it on demand (docs/RNN.md, "Sparse (pruned) recurrent layers").
 */
import { firstNonFinite } from "../model/safetensors.js";
import { deriveKey, RandomStream } from "../util/random.js";
import type { RnnBackend, RnnLayerWeights, RnnSavedState } from "./backend.js";
import { openRnnBackend } from "./open-backend.js";
import { checkPacked, type PackedSequence, packSequences, permuteStates, unpackSequences } from "./packed.js";
import {
  pruneRecurrent,
  type RnnPruning,
  recurrentMaskCounts,
  validateRnnDensity,
  validateRnnMasks,
  validateRnnPruning,
  validateRnnReprune,
  type WeightMask,
} from "./prune.js";
import {
  directionsOf,
  hasCellState,
  layerInputSize,
  RnnArgumentError,
  type RnnParameterInfo,
  type RnnPrecision,
  type RnnSpec,
  type RnnSpecInput,
  rnnParameterCount,
  rnnParameterLayout,
  rnnParameterName,
  validateRnnPrecision,
  validateRnnSpec,
} from "./spec.js";

export interface PersistentRnnOptions extends RnnSpecInput {
  /** 'cpu' (default) or 'cuda:N'. */
  readonly device?: string;
  /** Seed of the initial weights, uniform in ±1/√H as PyTorch's (default 0). */
  readonly seed?: number;
  /**
   * How the persistent GPU kernels store the recurrent weights W_hh: `fp32` (default) or `fp16` (two per register,
   * so about twice the hidden size fits: on an H100 LSTM 1568, GRU 1792, RNN 3168 instead of 1152, 1312, 2304). The
   * arithmetic is fp32 either way; W_ih, the biases and the gradients stay fp32. On `device: "cpu"`, `fp16` computes
   * the same numbers: the reference rounds W_hh to fp16 (nearest, ties to even) as the GPU does.
   */
  readonly precision?: RnnPrecision;
  /** A backend to use instead of the one `device` names (tests, custom devices); `precision` must then be its own. */
  readonly backend?: RnnBackend;
  /**
   * Prunes W_hh by magnitude to this fraction of its weights, 0 < d ≤ 1 (1, the default: dense): each (layer,
   * direction) keeps its largest |w| as `pruning` says, the recurrent product uses W_hh ⊙ mask and dW_hh is zero at
   * the pruned weights. parameters() stay the dense master copy. Not together with `mask`.
   */
  readonly density?: number;
  /**
   * W_hh's masks given instead of `density`: one Uint8Array [G·H·H] (1 = kept) for every (layer, direction), or one
   * per (layer, direction) (index l·D + d). Under row-balanced pruning every row must keep the same count.
   */
  readonly mask?: Uint8Array | readonly Uint8Array[];
  /**
   * `row-balanced` (default): every row of W_hh keeps k = max(1, round(d·H)) weights (the sparse kernel's load
   * balance); `plain`: the k·G·H largest of the whole matrix.
   */
  readonly pruning?: RnnPruning;
  /**
   * Pruning during training: re-prunes from the dense weights every `every` optimizer steps, counted as backward()
   * calls (with gradient accumulation, multiply `every` by the backward calls per step, or call prune() yourself).
   * The mask changes only then; between re-prunings the kept weights train and the pruned ones keep their values but
   * take no part. Needs `density`.
   */
  readonly reprune?: { readonly every: number };
}

/** Input and outputs: a packed batch, or a list of sequences ([len_i, width] each) in the caller's order. */
export type RnnSequences = PackedSequence<Float32Array> | readonly Float32Array[];

export interface RnnForwardResult<X extends RnnSequences> {
  /** [N, D·H] packed like x, or one [len_i, D·H] array per sequence of x, in x's order. */
  readonly y: X extends PackedSequence<Float32Array> ? PackedSequence<Float32Array> : Float32Array[];
  /** [L·D, B, H] (index l·D + d), batch in x's order. */
  readonly hn: Float32Array;
  /** [L·D, B, H] for LSTM; null otherwise. */
  readonly cn: Float32Array | null;
}

export interface RnnBackwardResult<X extends RnnSequences> {
  /** Gradient of x, in x's form. */
  readonly dx: X extends PackedSequence<Float32Array> ? PackedSequence<Float32Array> : Float32Array[];
  /** [L·D, B, H]. */
  readonly dh0: Float32Array;
  /** [L·D, B, H] for LSTM; null otherwise. */
  readonly dc0: Float32Array | null;
}

/** What the last training forward left for backward. */
interface Tape {
  readonly batchSizes: Int32Array;
  /** Set when the forward took a list: the order it sorted the sequences in. */
  readonly order: { readonly sortedIndices: Int32Array; readonly unsortedIndices: Int32Array } | null;
  readonly lengths: Int32Array | null;
  /** saved[l·D + d]. */
  readonly saved: RnnSavedState[];
  readonly version: number;
  /** The masks the forward used (its backward uses the same, whatever prune() did in between). */
  readonly masks: readonly WeightMask[] | null;
}

export class PersistentRnn {
  readonly spec: RnnSpec;
  readonly device: string;
  /** How the backend stores W_hh (`precision` of the options, or the given backend's). */
  readonly precision: RnnPrecision;
  private readonly backend: RnnBackend;
  private readonly layout: readonly RnnParameterInfo[];
  /** All parameters back to back in the layout's order (one buffer, as cuDNN's flat weights). */
  private readonly flat: Float32Array;
  private readonly flatGrad: Float32Array;
  private version = 0;
  private tape: Tape | null = null;
  /** W_hh's mask per (layer, direction), index l·D + d; null: dense. */
  private masksHh: WeightMask[] | null = null;
  /** The density the masks are pruned to from the weights; null: dense, or masks the user gave. */
  private target: number | null = null;
  private pruningMode: RnnPruning;
  private readonly repruneEvery: number | null;
  /** backward() calls since the last pruning, while `reprune` is set. */
  private backwardsSincePrune = 0;

  constructor(options: PersistentRnnOptions) {
    this.spec = validateRnnSpec(options);
    // the seed keys every initial weight (deriveKey reads it as a 32-bit word): NaN or 1.5 would key silently
    if (options.seed !== undefined && !Number.isSafeInteger(options.seed)) {
      throw new RnnArgumentError(`PersistentRnn: argument 'seed' must be an integer; got ${String(options.seed)}`);
    }
    this.pruningMode = validateRnnPruning(options.pruning);
    if (options.density !== undefined && options.mask !== undefined) {
      throw new RnnArgumentError(
        "PersistentRnn: arguments 'density' and 'mask' exclude each other: give a density to prune W_hh by " +
          "magnitude, or the masks themselves",
      );
    }
    const density = options.density === undefined ? null : validateRnnDensity(options.density);
    const masks = options.mask === undefined ? null : validateRnnMasks(options.mask, this.spec, this.pruningMode);
    this.repruneEvery = options.reprune === undefined ? null : validateRnnReprune(options.reprune).every;
    if (this.repruneEvery !== null && density === null) {
      throw new RnnArgumentError(
        "PersistentRnn: argument 'reprune' needs 'density': re-pruning derives the masks from the weights " +
          `(${masks ? "a given 'mask' stays as it is" : "this layer is dense"})`,
      );
    }
    const precision = validateRnnPrecision(options.precision);
    if (options.backend) {
      const own = options.backend.precision ?? "fp32";
      if (options.precision !== undefined && precision !== own) {
        throw new RnnArgumentError(
          `PersistentRnn: argument 'precision' is '${precision}' but the given backend stores W_hh as ${own}; ` +
            "give the precision to the backend instead, or leave 'precision' out",
        );
      }
      this.backend = options.backend;
      this.precision = own;
    } else {
      this.backend = openRnnBackend(options.device ?? "cpu", "PersistentRnn", { precision });
      this.precision = precision;
    }
    this.device = this.backend.device;
    this.layout = rnnParameterLayout(this.spec);
    this.flat = new Float32Array(rnnParameterCount(this.spec));
    this.flatGrad = new Float32Array(this.flat.length);
    const rng = new RandomStream(deriveKey(options.seed ?? 0, "rnn-init"));
    const k = 1 / Math.sqrt(this.spec.hidden);
    for (let i = 0; i < this.flat.length; i++) this.flat[i] = (rng.uniform() * 2 - 1) * k;
    this.masksHh = masks;
    this.target = density;
    if (density !== null) this.pruneNow();
  }

  /** W_hh's masks per (layer, direction) (index l·D + d; 1 = kept), or null for a dense layer. Do not modify them. */
  get masks(): readonly WeightMask[] | null {
    return this.masksHh;
  }

  /** The fraction of the recurrent weights (every W_hh) that take part: 1 for a dense layer. */
  get density(): number {
    if (!this.masksHh) return 1;
    let kept = 0;
    for (const m of this.masksHh) kept += recurrentMaskCounts(m, this.spec.cell, this.spec.hidden).kept;
    return kept / (this.masksHh.length * this.masksHh[0]!.length);
  }

  /** How the layer prunes (or pruned): `row-balanced` or `plain`. */
  get pruning(): RnnPruning {
    return this.pruningMode;
  }

  /**
   * Prunes every W_hh from the current dense weights (the master copy) by magnitude: to `density` (0 < d ≤ 1; 1 makes
   * the layer dense) with `pruning`, or, without arguments, to the density it was pruned to before — a trained dense
   * layer becomes a sparse one with `prune(0.1)`. The pruned weights keep their values; they stop taking part.
   */
  prune(density?: number, pruning?: RnnPruning): void {
    const where = "PersistentRnn.prune";
    const mode = pruning === undefined ? this.pruningMode : validateRnnPruning(pruning, where);
    const d = density === undefined ? this.target : validateRnnDensity(density, where);
    if (d === null) {
      throw new RnnArgumentError(
        `${where}: argument 'density' is needed: this layer ${this.masksHh ? "has the masks it was given" : "is dense"}`,
      );
    }
    this.pruningMode = mode;
    this.target = d;
    this.pruneNow();
  }

  /** Masks from the current weights at the target density (none at density 1); the next forward sees them. */
  private pruneNow(): void {
    const d = this.target!;
    const { spec } = this;
    const D = directionsOf(spec);
    if (d === 1) this.masksHh = null;
    else {
      const masks: WeightMask[] = [];
      for (let l = 0; l < spec.layers; l++) {
        for (let dir = 0; dir < D; dir++) {
          const w = this.weights(this.flat, l, dir).weightHh;
          masks.push(pruneRecurrent(w, spec.cell, spec.hidden, d, this.pruningMode));
        }
      }
      this.masksHh = masks;
    }
    this.backwardsSincePrune = 0;
    this.version++;
  }

  /** The parameters by PyTorch name (`weight_ih_l0`, …, `bias_hh_l1_reverse`): live views, row-major. */
  parameters(): Record<string, Float32Array> {
    return this.named(this.flat);
  }

  /** The accumulated gradients, named and shaped as parameters(). */
  gradients(): Record<string, Float32Array> {
    return this.named(this.flatGrad);
  }

  /** The parameters' names and shapes, in PyTorch's order. */
  parameterLayout(): readonly RnnParameterInfo[] {
    return this.layout;
  }

  /**
   * Copies parameters in by PyTorch name (a prefix such as `rnn.` or `lstm.` before the names is accepted, as a
   * state_dict from a module has). Every parameter must be given, with its exact number of values.
   */
  loadParameters(values: Readonly<Record<string, ArrayLike<number>>>): void {
    const byName = new Map<string, ArrayLike<number>>();
    for (const [key, v] of Object.entries(values)) byName.set(key.slice(key.lastIndexOf(".") + 1), v);
    for (const p of this.layout) {
      const v = byName.get(p.name);
      if (!v) throw new RnnArgumentError(`PersistentRnn.loadParameters: parameter '${p.name}' [${p.shape}] is missing`);
      if (v.length !== p.length) {
        throw new RnnArgumentError(
          `PersistentRnn.loadParameters: parameter '${p.name}' has ${v.length} values; expected [${p.shape.join(", ")}] = ${p.length}`,
        );
      }
      this.flat.set(v, p.offset);
      byName.delete(p.name);
    }
    // a layer pruned by density prunes the loaded weights (given masks stay as they are)
    const pruneLoaded = this.target !== null && this.target < 1;
    const extra = [...byName.keys()];
    if (extra.length > 0) {
      throw new RnnArgumentError(
        `PersistentRnn.loadParameters: unknown parameter '${extra[0]}' for this ${this.spec.layers}-layer` +
          `${this.spec.bidirectional ? " bidirectional" : ""} ${this.spec.cell}`,
      );
    }
    this.version++;
    if (pruneLoaded) this.pruneNow();
  }

  zeroGradients(): void {
    this.flatGrad.fill(0);
  }

  /**
   * Runs the stack over x (a packed batch, or a list of [len_i, inputSize] sequences in any order). h0/c0 are
   * [L·D, B, H] in x's batch order (zeros when left out; c0 for LSTM only). With `training` (default true) it keeps
   * what backward() needs.
   */
  forward<X extends RnnSequences>(
    x: X,
    h0?: Float32Array | null,
    c0?: Float32Array | null,
    training = true,
  ): RnnForwardResult<X> {
    const { spec } = this;
    const D = directionsOf(spec);
    const H = spec.hidden;
    const where = "PersistentRnn.forward";
    const listed = Array.isArray(x);
    const p = listed ? packSequences(x as readonly Float32Array[], spec.inputSize, where) : null;
    const packed = p ? p.packed : (x as PackedSequence<Float32Array>);
    if (!p) checkPacked(packed, where, "x", spec.inputSize);
    if (!(packed.data instanceof Float32Array))
      throw new RnnArgumentError(`${where}: argument 'x' must hold Float32Array data`);
    const B = packed.batchSizes[0]!;
    const N = packed.data.length / spec.inputSize;
    const sortStates = (s: Float32Array | null | undefined, name: string): Float32Array | null => {
      if (s === null || s === undefined) return null;
      this.checkStates(s, B, where, name);
      return p ? permuteStates(s, H, p.sortedIndices) : s;
    };
    if (listed) {
      const seqs = x as readonly Float32Array[];
      for (let i = 0; i < seqs.length; i++) checkFinite(seqs[i]!, where, `x[${i}]`);
    } else {
      checkFinite(packed.data, where, "x");
    }
    if (h0) checkFinite(h0, where, "h0");
    if (c0) checkFinite(c0, where, "c0");
    for (const t of this.layout) {
      const bad = firstNonFinite(this.flat.subarray(t.offset, t.offset + t.length));
      if (bad) {
        throw new RnnArgumentError(
          `${where}: parameter '${t.name}' holds ${bad.value} at element ${bad.index}; the weights diverged or were ` +
            "set so (lower the learning rate, or load finite weights)",
        );
      }
    }
    const h0s = sortStates(h0, "h0");
    if (c0 && !hasCellState(spec.cell))
      throw new RnnArgumentError(`${where}: argument 'c0' is for LSTM only; this is ${spec.cell}`);
    const c0s = sortStates(c0, "c0");
    // the optimizer step after the reprune.every-th backward has been taken by now: prune from its weights
    if (this.repruneEvery !== null && this.backwardsSincePrune >= this.repruneEvery) this.pruneNow();
    const masks = this.masksHh;
    // every forward may follow an in-place change of parameters() (an optimiser step), so it counts as a new version
    this.version++;
    this.disposeTape();
    const hn = new Float32Array(spec.layers * D * B * H);
    const cn = hasCellState(spec.cell) ? new Float32Array(hn.length) : null;
    const saved: RnnSavedState[] = [];
    let input = packed.data;
    for (let l = 0; l < spec.layers; l++) {
      const y = new Float32Array(N * D * H);
      for (let d = 0; d < D; d++) {
        const k = l * D + d;
        const r = this.backend.forwardLayer({
          ...this.call(l, d, packed.batchSizes),
          x: input,
          weights: this.weights(this.flat, l, d),
          weightsVersion: this.version,
          mask: masks ? masks[k]! : null,
          h0: h0s ? h0s.subarray(k * B * H, (k + 1) * B * H) : null,
          c0: c0s ? c0s.subarray(k * B * H, (k + 1) * B * H) : null,
          training,
        });
        interleave(r.y, y, N, H, D, d);
        hn.set(r.hn, k * B * H);
        if (cn && r.cn) cn.set(r.cn, k * B * H);
        if (r.saved) saved.push(r.saved);
      }
      input = y;
    }
    if (training) {
      this.tape = {
        batchSizes: packed.batchSizes,
        order: p ? { sortedIndices: p.sortedIndices, unsortedIndices: p.unsortedIndices } : null,
        lengths: p ? p.lengths : null,
        saved,
        version: this.version,
        masks,
      };
    } else for (const s of saved) s.dispose?.();
    const yOut = { data: input, batchSizes: packed.batchSizes, width: D * H };
    const unsort = (s: Float32Array | null): Float32Array | null =>
      s && p ? permuteStates(s, H, p.unsortedIndices) : s;
    return {
      y: (p ? unpackSequences(yOut, p.unsortedIndices) : yOut) as RnnForwardResult<X>["y"],
      hn: unsort(hn)!,
      cn: unsort(cn),
    };
  }

  /**
   * Backpropagates the last training forward: dy in the form of its y (null = zeros), dhn/dcn [L·D, B, H] in x's
   * order (null = zeros). Accumulates (+=) the weight gradients; returns dx (in x's form), dh0, dc0.
   */
  backward<X extends RnnSequences>(
    dy: X | null,
    dhn?: Float32Array | null,
    dcn?: Float32Array | null,
  ): RnnBackwardResult<X> {
    const where = "PersistentRnn.backward";
    const tape = this.tape;
    if (!tape) throw new RnnArgumentError(`${where}: no training forward() to backpropagate; call forward(x) first`);
    const { spec } = this;
    const D = directionsOf(spec);
    const H = spec.hidden;
    const B = tape.batchSizes[0]!;
    const N = tape.batchSizes.reduce((a, b) => a + b, 0);
    let dyData: Float32Array | null = null;
    if (dy !== null && dy !== undefined) {
      if (tape.order) {
        if (!Array.isArray(dy))
          throw new RnnArgumentError(`${where}: argument 'dy' must be a list of sequences, as x was`);
        const q = packSequences(dy as readonly Float32Array[], D * H, where);
        if (q.lengths.length !== tape.lengths!.length || q.lengths.some((n, i) => n !== tape.lengths![i])) {
          throw new RnnArgumentError(
            `${where}: argument 'dy' must have x's sequence lengths ${[...tape.lengths!].join(", ")}`,
          );
        }
        dyData = q.packed.data;
      } else {
        const pk = dy as PackedSequence<Float32Array>;
        checkPacked(pk, where, "dy", D * H);
        const same =
          pk.batchSizes.length === tape.batchSizes.length && pk.batchSizes.every((b, t) => b === tape.batchSizes[t]);
        if (!same) {
          throw new RnnArgumentError(
            `${where}: argument 'dy' has batchSizes [${pk.batchSizes.join(", ")}]; x had [${tape.batchSizes.join(", ")}]`,
          );
        }
        dyData = pk.data;
      }
    }
    const sortStates = (s: Float32Array | null | undefined, name: string): Float32Array | null => {
      if (s === null || s === undefined) return null;
      this.checkStates(s, B, where, name);
      return tape.order ? permuteStates(s, H, tape.order.sortedIndices) : s;
    };
    const dhns = sortStates(dhn, "dhn");
    const dcns = sortStates(dcn, "dcn");
    const dh0 = new Float32Array(spec.layers * D * B * H);
    const dc0 = hasCellState(spec.cell) ? new Float32Array(dh0.length) : null;
    let dOut = dyData;
    for (let l = spec.layers - 1; l >= 0; l--) {
      const dx = new Float32Array(N * layerInputSize(spec, l));
      for (let d = 0; d < D; d++) {
        const k = l * D + d;
        const r = this.backend.backwardLayer({
          ...this.call(l, d, tape.batchSizes),
          weights: this.weights(this.flat, l, d),
          weightsVersion: tape.version,
          mask: tape.masks ? tape.masks[k]! : null,
          saved: tape.saved[k]!,
          dy: dOut ? deinterleave(dOut, N, H, D, d) : null,
          dhn: dhns ? dhns.subarray(k * B * H, (k + 1) * B * H) : null,
          dcn: dcns ? dcns.subarray(k * B * H, (k + 1) * B * H) : null,
          gradients: this.weights(this.flatGrad, l, d),
          needInputGradient: true,
        });
        if (r.dx) for (let i = 0; i < dx.length; i++) dx[i] = dx[i]! + r.dx[i]!;
        dh0.set(r.dh0, k * B * H);
        if (dc0 && r.dc0) dc0.set(r.dc0, k * B * H);
      }
      dOut = dx;
    }
    this.disposeTape();
    if (this.repruneEvery !== null) this.backwardsSincePrune++;
    const dxOut = { data: dOut!, batchSizes: tape.batchSizes, width: spec.inputSize };
    const unsort = (s: Float32Array | null): Float32Array | null =>
      s && tape.order ? permuteStates(s, H, tape.order.unsortedIndices) : s;
    return {
      dx: (tape.order ? unpackSequences(dxOut, tape.order.unsortedIndices) : dxOut) as RnnBackwardResult<X>["dx"],
      dh0: unsort(dh0)!,
      dc0: unsort(dc0),
    };
  }

  /** Frees the backend's resources and what the last forward kept. */
  dispose(): void {
    this.disposeTape();
    this.backend.dispose?.();
  }

  private disposeTape(): void {
    if (this.tape) for (const s of this.tape.saved) s.dispose?.();
    this.tape = null;
  }

  private call(layer: number, direction: number, batchSizes: Int32Array) {
    const { cell, hidden } = this.spec;
    return {
      cell,
      hidden,
      inputSize: layerInputSize(this.spec, layer),
      layer,
      direction: direction as 0 | 1,
      batchSizes,
    };
  }

  private weights(flat: Float32Array, layer: number, direction: number): RnnLayerWeights {
    const view = (kind: "weight_ih" | "weight_hh" | "bias_ih" | "bias_hh"): Float32Array => {
      const name = rnnParameterName(kind, layer, direction);
      const p = this.layout.find((q) => q.name === name)!;
      return flat.subarray(p.offset, p.offset + p.length);
    };
    return {
      weightIh: view("weight_ih"),
      weightHh: view("weight_hh"),
      biasIh: view("bias_ih"),
      biasHh: view("bias_hh"),
    };
  }

  private named(flat: Float32Array): Record<string, Float32Array> {
    const out: Record<string, Float32Array> = {};
    for (const p of this.layout) out[p.name] = flat.subarray(p.offset, p.offset + p.length);
    return out;
  }

  private checkStates(s: Float32Array, B: number, where: string, name: string): void {
    const n = this.spec.layers * directionsOf(this.spec) * B * this.spec.hidden;
    if (!(s instanceof Float32Array) || s.length !== n) {
      throw new RnnArgumentError(
        `${where}: argument '${name}' must be a Float32Array [L·D, B, H] = [${this.spec.layers * directionsOf(this.spec)}, ${B}, ${this.spec.hidden}] (${n} values); got ${s instanceof Float32Array ? `${s.length} values` : String(s)}`,
      );
    }
  }
}

/** Refuses an input holding NaN or ±∞ in one line naming the argument and the element. */
function checkFinite(data: Float32Array, where: string, name: string): void {
  const bad = firstNonFinite(data);
  if (bad) throw new RnnArgumentError(`${where}: argument '${name}' holds ${bad.value} at element ${bad.index}`);
}

/** Writes a direction's [N, H] rows into columns d·H … of y [N, D·H]. */
function interleave(src: Float32Array, y: Float32Array, N: number, H: number, D: number, d: number): void {
  if (D === 1) {
    y.set(src);
    return;
  }
  for (let n = 0; n < N; n++) y.set(src.subarray(n * H, (n + 1) * H), n * D * H + d * H);
}

/** Columns d·H … of [N, D·H] as [N, H]. */
function deinterleave(src: Float32Array, N: number, H: number, D: number, d: number): Float32Array {
  if (D === 1) return src;
  const out = new Float32Array(N * H);
  for (let n = 0; n < N; n++) out.set(src.subarray(n * D * H + d * H, n * D * H + (d + 1) * H), n * H);
  return out;
}
