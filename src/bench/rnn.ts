/**
 * `vpps bench rnn`: the persistent recurrent layers on the GPU. Per (cell, hidden, batch): the
 * recurrent part alone (what the paper times: the input projection is one GEMM done beforehand), the whole forward
 * layer call (projection included, what cuDNN's numbers are), and forward+backward (weight gradients included),
 * in milliseconds, medians of repeated runs timed with CUDA events after warm-up; TFLOP/s of the recurrent product.
 * Sizes that do not fit the registers are listed with the reason. All buffers live on the device: no host traffic is
 * timed. bench/pytorch/rnn.py measures cuDNN the same way, in the same device call.
 */

import { deviceModelOfCuda } from "../cuda/hw/device-model.js";
import { type CudaDriver, CudaEvent, type DevicePtr } from "../cuda/index.js";
import {
  type BackwardArgs,
  gatesOf,
  largestPersistentHidden,
  openRnnGpu,
  PersistentRnnLayer,
  type RnnCellName,
  RnnDoesNotFitError,
  type RnnLayerBase,
  RnnWorkspace,
  StepwiseRnnLayer,
  type WeightPrecision,
} from "../rnn/index.js";
import { median } from "./common.js";

export interface RnnBenchOptions {
  readonly cells: readonly RnnCellName[];
  readonly hiddens: readonly number[];
  readonly batches: readonly number[];
  readonly steps: number;
  readonly repeats: number;
  readonly precision: WeightPrecision;
  readonly device: number;
  /** Build instrumented kernels too and report each phase's cycles per step (RnnBenchRow.phases). */
  readonly phases?: boolean;
}

export interface RnnBenchRow {
  readonly cell: RnnCellName;
  readonly hidden: number;
  readonly batch: number;
  readonly steps: number;
  readonly precision: WeightPrecision;
  readonly fits: boolean;
  /** `persistent`, or `stepwise` for a layer that does not fit (the reason in `reason`). */
  readonly path: "persistent" | "stepwise";
  readonly reason?: string;
  /** Medians, ms. */
  readonly recurrentMs?: number;
  readonly forwardMs?: number;
  readonly forwardBackwardMs?: number;
  readonly backwardRecurrentMs?: number;
  /**
   * The recurrent part of forward+backward, timed as one sequence: the forward recurrent launch, the backward
   * recurrent launch and the recurrent weights' gradient GEMM (U_hh, b_hh) — everything but the input projection and
   * its backward counterparts (W_ih, b_ih and dx GEMMs), as the recurrent part of the forward leaves the projection out.
   */
  readonly recurrentForwardBackwardMs?: number;
  /** The input projection GEMM (+ bias) alone, and the backward's GEMMs (weight gradients, dx) alone. */
  readonly projectionMs?: number;
  readonly backwardGemmsMs?: number;
  /** Of the recurrent product in the forward recurrent part. */
  readonly recurrentTflops?: number;
  readonly perStepUs?: number;
  /**
   * The persistent path's layout at this batch: units per CTA, CTAs per replica, replicas side by side (each on its
   * own share of the sequences; `PersistentRnnLayer.launchFor`).
   */
  readonly layout?: { unitsPerCta: number; ctas: number; replicas: number; cluster?: readonly [number, number] };
  /** VPPS_RNN_PHASES=1: clock cycles per step of each kernel phase (thread 0 of a CTA, averaged over CTAs). */
  readonly phases?: { forward: Record<string, number>; backward: Record<string, number> };
}

/**
 * Allocates device buffers of `floats` small deterministic values (a sawtooth of amplitude `value`, which keeps
 * activations away from saturation), recording each in `ptrs` for the caller to free.
 */
export function sawtoothAllocator(
  d: Pick<CudaDriver, "memAlloc" | "memcpyHtoD">,
  ptrs: DevicePtr[],
): (floats: number, value?: number) => DevicePtr {
  return (floats, value = 0.01) => {
    const p = d.memAlloc(Math.max(1, floats) * 4);
    ptrs.push(p);
    const host = Float32Array.from(
      { length: Math.min(floats, 1 << 22) },
      (_, i) => (value * (((i * 37) % 17) - 8)) / 8,
    );
    for (let off = 0; off < floats; off += host.length) {
      const n = Math.min(host.length, floats - off);
      d.memcpyHtoD(p + 4 * off, host.subarray(0, n));
    }
    return p;
  };
}

export function runRnnBench(
  o: RnnBenchOptions,
  log: (line: string) => void = () => {},
): {
  device: string;
  rows: RnnBenchRow[];
  largest: Record<string, number>;
} {
  const gpu = openRnnGpu(o.device);
  const { device, stream } = gpu;
  const d = device.driver;
  const model = deviceModelOfCuda(device.props);
  const rows: RnnBenchRow[] = [];
  const largest: Record<string, number> = {};
  for (const cell of o.cells) largest[`${cell}/${o.precision}`] = largestPersistentHidden(cell, model, o.precision);
  const start = CudaEvent.create({ timing: true });
  const end = CudaEvent.create({ timing: true });
  const time = (f: () => void): number => {
    start.record(stream);
    f();
    end.record(stream);
    end.synchronize();
    return end.elapsedMsSince(start);
  };
  for (const cell of o.cells) {
    for (const hidden of o.hiddens) {
      let layer: RnnLayerBase;
      let reason: string | undefined;
      try {
        layer = PersistentRnnLayer.create(gpu, cell, hidden, o.precision);
      } catch (e) {
        if (!(e instanceof RnnDoesNotFitError)) throw e;
        reason = e.message;
        log(`${cell} hidden ${hidden}: does not fit, timing the stepwise path: ${e.message}`);
        layer = new StepwiseRnnLayer(gpu, cell, hidden);
      }
      // the instrumented build beside the timed one (its clock reads would skew the timings)
      const inst =
        o.phases && layer instanceof PersistentRnnLayer
          ? PersistentRnnLayer.create(gpu, cell, hidden, o.precision, { phases: true })
          : null;
      const G = gatesOf(cell);
      const H = hidden;
      for (const batch of o.batches) {
        const N = batch * o.steps;
        const ptrs: DevicePtr[] = [];
        const alloc = sawtoothAllocator(d, ptrs);
        const ws = new RnnWorkspace(gpu, cell, H, N, batch);
        try {
          const scale = 1 / Math.sqrt(H);
          const weights = {
            wih: alloc(G * H * H, scale),
            whh: alloc(G * H * H, scale),
            bih: alloc(G * H),
            bhh: alloc(G * H),
          };
          const grads = { wih: alloc(G * H * H), whh: alloc(G * H * H), bih: alloc(G * H), bhh: alloc(G * H) };
          const batchSizes = new Int32Array(o.steps).fill(batch);
          const offsets = Int32Array.from({ length: o.steps }, (_, t) => t * batch);
          const dB = alloc(o.steps);
          const dO = alloc(o.steps);
          d.memcpyHtoD(dB, batchSizes);
          d.memcpyHtoD(dO, offsets);
          const steps = { batchSizes, offsets, total: N, dBatchSizes: dB, dOffsets: dO };
          const x = alloc(N * H, 1);
          const a: BackwardArgs = {
            weights,
            x,
            h0: alloc(batch * H),
            c0: alloc(batch * H),
            y: alloc(N * H),
            ldy: H,
            hn: alloc(batch * H),
            cn: alloc(batch * H),
            steps,
            reverse: false,
            train: true,
            ws,
            grads,
            dy: alloc(N * H, 0.1),
            lddy: H,
            dhn: alloc(batch * H),
            dcn: alloc(batch * H),
            dx: alloc(N * H),
            dxAccumulate: false,
            dh0: alloc(batch * H),
            dc0: alloc(batch * H),
          };
          layer.inputProjection(a, H);
          const warm = () => {
            layer.forward(a, H);
            layer.backward(a, H);
          };
          for (let i = 0; i < 3; i++) warm();
          layer.checkStatus(ws);
          const rec: number[] = [];
          const fwd: number[] = [];
          const fb: number[] = [];
          const brec: number[] = [];
          const proj: number[] = [];
          const bg: number[] = [];
          const recfb: number[] = [];
          for (let r = 0; r < o.repeats; r++) {
            rec.push(time(() => layer.forwardRecurrent(a)));
            fwd.push(time(() => layer.forward(a, H)));
            brec.push(time(() => layer.backwardRecurrent(a)));
            proj.push(time(() => layer.inputProjection(a, H)));
            bg.push(time(() => layer.backwardGemms(a, H)));
            recfb.push(
              time(() => {
                layer.forwardRecurrent(a);
                layer.backwardRecurrent(a);
                layer.recurrentWeightGradients(a);
              }),
            );
            fb.push(
              time(() => {
                layer.forward(a, H);
                layer.backward(a, H);
              }),
            );
          }
          layer.checkStatus(ws);
          // an instrumented build: one more forward and backward launch, their per-step cycles by phase
          let phases: RnnBenchRow["phases"];
          if (inst) {
            inst.phases("forward", true);
            inst.phases("backward", true);
            inst.forwardRecurrent(a);
            inst.backwardRecurrent(a);
            inst.checkStatus(ws);
            const perStep = (p: Record<string, number> | null) =>
              Object.fromEntries(Object.entries(p ?? {}).map(([k, v]) => [k, Math.round(v / o.steps)]));
            phases = { forward: perStep(inst.phases("forward")), backward: perStep(inst.phases("backward")) };
          }
          const recurrentMs = median(rec);
          const flops = 2 * G * H * H * batch * o.steps;
          const row: RnnBenchRow = {
            cell,
            hidden,
            batch,
            steps: o.steps,
            precision: o.precision,
            fits: reason === undefined,
            path: layer.path,
            ...(reason ? { reason } : {}),
            recurrentMs,
            forwardMs: median(fwd),
            backwardRecurrentMs: median(brec),
            recurrentForwardBackwardMs: median(recfb),
            projectionMs: median(proj),
            backwardGemmsMs: median(bg),
            forwardBackwardMs: median(fb),
            recurrentTflops: flops / (recurrentMs * 1e-3) / 1e12,
            perStepUs: (recurrentMs * 1000) / o.steps,
            ...(layer instanceof PersistentRnnLayer ? { layout: layer.launchFor(batch) } : {}),
            ...(phases ? { phases } : {}),
          };
          rows.push(row);
          log(JSON.stringify(row));
        } finally {
          ws.dispose();
          for (const p of ptrs) d.memFree(p);
        }
      }
      layer.dispose();
      inst?.dispose();
    }
  }
  start.destroy();
  end.destroy();
  gpu.dispose();
  return { device: device.props.name, rows, largest };
}
