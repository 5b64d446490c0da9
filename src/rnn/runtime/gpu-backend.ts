/**
 * The GPU implementation of the RnnBackend seam (src/rnn/backend.ts): one (layer, direction) through the persistent
 * kernels (persistent.ts), or the stepwise path (stepwise.ts). Host arrays cross the seam, so each call uploads its inputs and downloads its
 * results; what the backward needs (the input, the weights, the forward's saved activations) stays on the device in
 * the saved state between the two. A layer too large for the registers is refused by PersistentRnnLayer.create with
 * the largest size that fits.
 *
 * A pruned layer (a call with a `mask`) runs on the sparse persistent kernels (sparse.ts) where the mask's layer fits
 * them; otherwise (too large, fp16 storage, the stepwise path, or `sparse: false`) on the dense kernels with
 * W_hh ⊙ mask uploaded (the pruned weights stored as zeros), which the backend says once per layer size and density
 * through `notice`, with the reason. Either way its downloaded dW_hh is added at the kept weights only.
 */
import type { CudaDevice, DevicePtr } from "../../cuda/index.js";
import { addMasked, applyMask, maskCounts, type WeightMask } from "../../ops/prune.js";
import { roundToFp16Array } from "../../util/fp16.js";
import type {
  RnnLayerWeights as HostWeights,
  RnnBackend,
  RnnBackwardLayerArgs,
  RnnBackwardLayerResult,
  RnnForwardLayerArgs,
  RnnForwardLayerResult,
  RnnSavedState,
} from "../backend.js";
import { rnnPipelineSetting, type WeightPrecision } from "../plan/index.js";
import { validateRnnPrecision } from "../spec.js";
import {
  type OwnedRnnGpu,
  openRnnGpu,
  type PackedSteps,
  type RnnDeviceWeights,
  RnnDoesNotFitError,
  type RnnLayerBase,
  RnnWorkspace,
} from "./layer-base.js";
import { PersistentRnnLayer } from "./persistent.js";
import { SparsePersistentRnnLayer, type SparseRnnLayerOptions } from "./sparse.js";
import { StepwiseRnnLayer } from "./stepwise.js";

/**
 * Which path runs a layer: `auto` the persistent kernels where the layer fits the registers, else the stepwise path
 * (saying so once per size through `notice`); `persistent` refuses a layer that does not fit; `stepwise` always.
 */
export type RnnPath = "auto" | "persistent" | "stepwise";

export interface GpuRnnBackendOptions {
  /**
   * How the persistent kernels' registers hold W_hh (PersistentRnnOptions.precision): fp32 (default) or fp16 (two
   * per register; fp32 arithmetic). A layer on the stepwise path then gets W_hh rounded to fp16 too.
   */
  readonly precision?: WeightPrecision;
  readonly path?: RnnPath;
  /** Where the one-line notices go — a layer on the stepwise path, a pruned layer on the dense kernel (default: stderr). */
  readonly notice?: (line: string) => void;
  /** Replicas per persistent launch (PersistentRnnOptions.replicas); unset: chosen per batch. */
  readonly replicas?: number;
  /** The pipelined tile loops for batches of several tiles (PersistentRnnOptions.pipeline); unset: on. */
  readonly pipeline?: boolean;
  /**
   * A pruned layer (a call with a mask) on the persistent path: the sparse kernels (runtime/sparse.ts) with these
   * options (default: Lamport synchronisation, wide loads, the bank-aware order) where the mask's layer fits, else
   * the dense kernel on W_hh ⊙ mask (said once); false: always the dense kernel.
   */
  readonly sparse?: SparseRnnLayerOptions | false;
}

/** Device buffers of one call, freed together. */
class Buffers {
  private readonly ptrs: DevicePtr[] = [];
  constructor(private readonly device: CudaDevice) {}
  alloc(floats: number): DevicePtr {
    const p = this.device.driver.memAlloc(Math.max(1, floats) * 4);
    this.ptrs.push(p);
    return p;
  }
  upload(data: Float32Array | Int32Array): DevicePtr {
    const p = this.alloc(data.length);
    if (data.length > 0) this.device.driver.memcpyHtoD(p, data);
    return p;
  }
  zeros(floats: number): DevicePtr {
    return this.upload(new Float32Array(floats));
  }
  free(): void {
    for (const p of this.ptrs.splice(0)) this.device.driver.memFree(p);
  }
}

interface GpuSaved extends RnnSavedState {
  readonly buffers: Buffers;
  readonly ws: RnnWorkspace;
  readonly weights: RnnDeviceWeights;
  readonly steps: PackedSteps;
  readonly x: DevicePtr;
  readonly y: DevicePtr;
  readonly h0: DevicePtr;
  readonly c0: DevicePtr;
  /** The layer that ran the forward (the sparse one for a pruned layer that fits it): the backward runs on it too. */
  readonly layer: RnnLayerBase;
}

function stepsOf(b: Buffers, batchSizes: Int32Array): PackedSteps {
  const offsets = new Int32Array(batchSizes.length);
  let total = 0;
  for (let t = 0; t < batchSizes.length; t++) {
    offsets[t] = total;
    total += batchSizes[t]!;
  }
  return { batchSizes, offsets, total, dBatchSizes: b.upload(batchSizes), dOffsets: b.upload(offsets) };
}

export class GpuRnnBackend implements RnnBackend {
  readonly device: string;
  private readonly gpu: OwnedRnnGpu;
  private readonly layers = new Map<string, RnnLayerBase>();
  readonly precision: WeightPrecision;
  readonly path: RnnPath;
  private readonly notice: (line: string) => void;
  private readonly replicas: number | undefined;
  private readonly pipeline: boolean | undefined;
  /** The pruned layers (cell/H/density) already announced as running on the dense kernels. */
  private readonly announced = new Set<string>();
  private readonly sparse: SparseRnnLayerOptions | false;
  /** The sparse layers by cell/H/layer/direction. */
  private readonly sparseLayers = new Map<string, SparsePersistentRnnLayer>();

  constructor(index: number, options: GpuRnnBackendOptions = {}) {
    this.precision = validateRnnPrecision(options.precision, "GpuRnnBackend");
    this.replicas = options.replicas;
    // checked here, before the device is opened: a bad value is refused in one line on any machine
    this.pipeline = options.pipeline === undefined ? undefined : rnnPipelineSetting(options.pipeline, undefined);
    this.path = options.path ?? "auto";
    this.sparse = options.sparse ?? {};
    this.notice = options.notice ?? ((line) => process.stderr.write(`${line}\n`));
    this.device = `cuda:${index}`;
    this.gpu = openRnnGpu(index);
  }

  private layer(a: RnnForwardLayerArgs | RnnBackwardLayerArgs): RnnLayerBase {
    const key = `${a.cell}/${a.hidden}`;
    let l = this.layers.get(key);
    if (!l) {
      if (this.path === "stepwise") l = new StepwiseRnnLayer(this.gpu, a.cell, a.hidden);
      else {
        try {
          l = PersistentRnnLayer.create(this.gpu, a.cell, a.hidden, this.precision, {
            notice: this.notice,
            ...(this.replicas === undefined ? {} : { replicas: this.replicas }),
            ...(this.pipeline === undefined ? {} : { pipeline: this.pipeline }),
          });
        } catch (e) {
          if (!(e instanceof RnnDoesNotFitError) || this.path === "persistent") throw e;
          this.notice(`vpps: ${e.message}; running it on the non-persistent path (a GEMM per step), much slower`);
          l = new StepwiseRnnLayer(this.gpu, a.cell, a.hidden);
        }
      }
      this.layers.set(key, l);
    }
    return l;
  }

  /**
   * The sparse layer of a pruned layer's call, its pairs set from W_hh and the mask, or null: not pruned, not on the
   * persistent path, fp16 storage, sparse kernels off, or the mask's layer does not fit (said once, with the reason, as
   * the dense kernel then runs it).
   */
  private sparseLayer(a: RnnForwardLayerArgs, dense: RnnLayerBase): SparsePersistentRnnLayer | null {
    if (!a.mask || this.sparse === false || dense.path !== "persistent" || this.precision !== "fp32") return null;
    // one per (layer, direction): each holds its own pairs, which the backward of its forward uses
    const key = `${a.cell}/${a.hidden}/${a.layer}/${a.direction}`;
    let l = this.sparseLayers.get(key);
    if (!l) {
      l = new SparsePersistentRnnLayer(this.gpu, a.cell, a.hidden, this.sparse);
      this.sparseLayers.set(key, l);
    }
    const B = a.batchSizes[0] ?? 1;
    const why =
      l.setWeights(a.weights.weightHh, a.mask, B) ?? l.prepare(B, a.training ? ["forward", "backward"] : ["forward"]);
    if (why === null) return l;
    this.announceMask(a, a.mask, dense, why);
    return null;
  }

  /**
   * W_hh as the kernels get it: ⊙ the mask for a pruned layer (the pruned weights stored as zeros; said once per
   * layer size and density), rounded to fp16 on the stepwise path with fp16 storage.
   */
  private hostWeights(a: RnnForwardLayerArgs, layer: RnnLayerBase, sparse: boolean): HostWeights {
    let weightHh = a.weights.weightHh;
    if (a.mask) {
      weightHh = applyMask(weightHh, a.mask);
      if (!sparse) this.announceMask(a, a.mask, layer, null);
    }
    // the stepwise path multiplies by W_hh in fp32 GEMMs: with fp16 storage it gets W_hh rounded as the persistent
    // kernels' registers hold it, so that a layer computes the same numbers on either path (and as the CPU's fp16)
    if (this.precision === "fp16" && layer.path === "stepwise") weightHh = roundToFp16Array(weightHh);
    return weightHh === a.weights.weightHh ? a.weights : { ...a.weights, weightHh };
  }

  private announceMask(a: RnnForwardLayerArgs, mask: WeightMask, layer: RnnLayerBase, why: string | null): void {
    const density = Number(maskCounts(mask, layer.G * a.hidden, a.hidden).density.toPrecision(3));
    const key = `${a.cell}/${a.hidden}/${density}`;
    if (this.announced.has(key)) return;
    this.announced.add(key);
    const where = layer.path === "persistent" ? "the dense kernel" : "the dense stepwise path";
    const because =
      why ??
      (layer.path !== "persistent"
        ? "the layer is too large for the persistent kernels"
        : this.precision !== "fp32"
          ? "the sparse kernels hold fp32 values only"
          : "the sparse kernels are turned off");
    this.notice(
      `vpps: persistent ${a.cell} ${a.hidden}: density ${density} runs on ${where} with the pruned weights stored ` +
        `as zeros (${because})`,
    );
  }

  private download(p: DevicePtr, floats: number): Float32Array {
    const out = new Float32Array(floats);
    this.gpu.stream.synchronize();
    if (floats > 0) this.gpu.device.driver.memcpyDtoH(out, p);
    return out;
  }

  forwardLayer(a: RnnForwardLayerArgs): RnnForwardLayerResult {
    const dense = this.layer(a);
    const sparse = this.sparseLayer(a, dense);
    const layer: RnnLayerBase = sparse ?? dense;
    const H = a.hidden;
    const B = a.batchSizes[0] ?? 0;
    const b = new Buffers(this.gpu.device);
    try {
      const steps = stepsOf(b, a.batchSizes);
      const N = steps.total;
      const weights = uploadWeights(b, this.hostWeights(a, dense, sparse !== null));
      const x = b.upload(a.x);
      const h0 = a.h0 ? b.upload(a.h0) : b.zeros(B * H);
      const c0 = a.c0 ? b.upload(a.c0) : b.zeros(B * H);
      const y = b.alloc(N * H);
      const hn = b.alloc(B * H);
      const cn = b.alloc(B * H);
      const ws = new RnnWorkspace(this.gpu, a.cell, H, N, B);
      const args = { weights, x, h0, c0, y, ldy: H, hn, cn, steps, reverse: a.direction === 1, train: true, ws };
      layer.forward(args, a.inputSize);
      layer.checkStatus(ws);
      const result = {
        y: this.download(y, N * H),
        hn: this.download(hn, B * H),
        cn: a.cell === "lstm" ? this.download(cn, B * H) : null,
      };
      if (!a.training) {
        ws.dispose();
        b.free();
        return { ...result, saved: null };
      }
      const saved: GpuSaved = {
        buffers: b,
        ws,
        weights,
        steps,
        x,
        y,
        h0,
        c0,
        layer,
        dispose() {
          ws.dispose();
          b.free();
        },
      };
      return { ...result, saved };
    } catch (e) {
      b.free();
      throw e;
    }
  }

  backwardLayer(a: RnnBackwardLayerArgs): RnnBackwardLayerResult {
    const s = a.saved as GpuSaved;
    const layer = s.layer;
    const H = a.hidden;
    const B = a.batchSizes[0] ?? 0;
    const N = s.steps.total;
    const GH = layer.G * H;
    const b = new Buffers(this.gpu.device);
    try {
      const grads: RnnDeviceWeights = {
        wih: b.zeros(GH * a.inputSize),
        whh: b.zeros(GH * H),
        bih: b.zeros(GH),
        bhh: b.zeros(GH),
      };
      const dy = a.dy ? b.upload(a.dy) : b.zeros(N * H);
      const dhn = a.dhn ? b.upload(a.dhn) : b.zeros(B * H);
      const dcn = a.dcn ? b.upload(a.dcn) : b.zeros(B * H);
      const dx = b.alloc(N * a.inputSize);
      const dh0 = b.alloc(B * H);
      const dc0 = b.zeros(B * H);
      const hn = b.alloc(B * H);
      layer.backward(
        {
          weights: s.weights,
          x: s.x,
          h0: s.h0,
          c0: s.c0,
          y: s.y,
          ldy: H,
          hn,
          cn: hn,
          steps: s.steps,
          reverse: a.direction === 1,
          train: true,
          ws: s.ws,
          grads,
          dy,
          lddy: H,
          dhn,
          dcn,
          dx,
          dxAccumulate: false,
          dh0,
          dc0,
        },
        a.inputSize,
      );
      layer.checkStatus(s.ws);
      addInto(a.gradients.weightIh, this.download(grads.wih, GH * a.inputSize));
      const dWhh = this.download(grads.whh, GH * H);
      // a pruned layer's W_hh gradient exists at its kept weights only
      if (a.mask) addMasked(a.gradients.weightHh, dWhh, a.mask);
      else addInto(a.gradients.weightHh, dWhh);
      addInto(a.gradients.biasIh, this.download(grads.bih, GH));
      addInto(a.gradients.biasHh, this.download(grads.bhh, GH));
      return {
        dx: a.needInputGradient ? this.download(dx, N * a.inputSize) : null,
        dh0: this.download(dh0, B * H),
        dc0: a.cell === "lstm" ? this.download(dc0, B * H) : null,
      };
    } finally {
      b.free();
    }
  }

  dispose(): void {
    for (const l of this.layers.values()) l.dispose();
    this.layers.clear();
    for (const l of this.sparseLayers.values()) l.dispose();
    this.sparseLayers.clear();
    this.gpu.dispose();
  }
}

function uploadWeights(b: Buffers, w: HostWeights): RnnDeviceWeights {
  return { wih: b.upload(w.weightIh), whh: b.upload(w.weightHh), bih: b.upload(w.biasIh), bhh: b.upload(w.biasHh) };
}

function addInto(into: Float32Array, add: Float32Array): void {
  for (let i = 0; i < into.length; i++) into[i] = into[i]! + add[i]!;
}
