/**
 * The non-persistent path of a layer direction, for layers the registers cannot hold (or hidden sizes the persistent
 * kernels cannot take): per step one cuBLAS GEMM with W_hh and one element-wise kernel, on the same buffers and saved
 * layout as the persistent kernels, so the input projection and the weight-gradient GEMMs are shared
 * (RnnLayerBase). Slower — 2 launches per step each way, the weights read from memory every step — but any size
 * that fits in device memory runs.
 */
import { type CudaKernel, loadModule } from "../../cuda/index.js";
import {
  kernelArgs,
  STEPWISE_BACKWARD_PARAMS,
  STEPWISE_FORWARD_PARAMS,
  STEPWISE_KERNEL_NAMES,
  stepwiseKernelSource,
} from "../codegen/index.js";
import type { RnnCellName } from "../plan/index.js";
import { type BackwardArgs, type ForwardArgs, type RnnGpu, RnnLayerBase, type RnnWorkspace } from "./layer-base.js";

const BLOCK = 256;

export class StepwiseRnnLayer extends RnnLayerBase {
  readonly path = "stepwise" as const;
  private readonly fwd: CudaKernel;
  private readonly bwd: CudaKernel;

  constructor(gpu: RnnGpu, cell: RnnCellName, hidden: number) {
    super(gpu, cell, hidden);
    const c = this.compile(`rnn_step_${cell}_${hidden}`, stepwiseKernelSource(cell, hidden));
    const m = loadModule(c.cubin, "rnn stepwise");
    this.modules.push(m);
    this.fwd = m.getFunction(STEPWISE_KERNEL_NAMES.forward);
    this.bwd = m.getFunction(STEPWISE_KERNEL_NAMES.backward);
  }

  private grid(n: number) {
    return { grid: Math.max(1, Math.ceil(n / BLOCK)), block: BLOCK, stream: this.stream };
  }

  /** hw[0:rows] = A[rows, H] (row stride lda) · W_hhᵀ. */
  private recurrentGemm(a: ForwardArgs, A: number, lda: number, rows: number, into: number): void {
    if (rows <= 0) return;
    const GH = this.G * this.hidden;
    this.gpu.cublas.sgemmRowMajor(this.gpu.cublasHandle, {
      m: rows,
      n: GH,
      k: this.hidden,
      A,
      lda,
      B: a.weights.whh,
      transB: true,
      C: into,
    });
  }

  forwardRecurrent(a: ForwardArgs): void {
    const { batchSizes, offsets, total } = a.steps;
    const T = batchSizes.length;
    const H = this.hidden;
    const GH = this.G * H;
    for (let s = 0; s < T; s++) {
      const t = a.reverse ? T - 1 - s : s;
      const nb = batchSizes[t]!;
      const tp = a.reverse ? t + 1 : t - 1;
      const nprev = s === 0 ? 0 : batchSizes[tp]!;
      const offp = s === 0 ? 0 : offsets[tp]!;
      const last = a.reverse ? t === 0 : t === T - 1;
      const nnext = last ? 0 : batchSizes[a.reverse ? t - 1 : t + 1]!;
      // rows with a previous step read it from y; the others start from h0
      const fromY = Math.min(nb, nprev);
      this.recurrentGemm(a, a.y + 4 * offp * a.ldy, a.ldy, fromY, a.ws.stepHw);
      this.recurrentGemm(a, a.h0 + 4 * fromY * H, H, nb - fromY, a.ws.stepHw + 4 * fromY * GH);
      const args = kernelArgs(
        STEPWISE_FORWARD_PARAMS,
        {
          xw: a.ws.xw,
          hw0: a.ws.stepHw,
          bhn: a.weights.bhh + 4 * 2 * H,
          h0: a.h0,
          c0: a.c0,
          y: a.y,
          ldy: a.ldy,
          hn: a.hn,
          cn: a.cn,
          saved: a.ws.saved,
          total,
          nb,
          off: offsets[t]!,
          nprev,
          offp,
          nnext,
        },
        STEPWISE_KERNEL_NAMES.forward,
      );
      this.fwd.launch(this.grid(nb * H), args);
    }
  }

  backwardRecurrent(a: BackwardArgs): void {
    const { batchSizes, offsets, total } = a.steps;
    const T = batchSizes.length;
    const H = this.hidden;
    const GH = this.G * H;
    const B = batchSizes[0] ?? 0;
    for (let s = 0; s <= T; s++) {
      const t = s < T ? (a.reverse ? s : T - 1 - s) : -1;
      const tp = s > 0 ? (a.reverse ? s - 1 : T - s) : -1;
      const nb = t >= 0 ? batchSizes[t]! : 0;
      const np = tp >= 0 ? batchSizes[tp]! : 0;
      if (np > 0) {
        // rec[0:np] = dpre_h(tp) · W_hh: what step tp hands back to its previous states
        this.gpu.cublas.sgemmRowMajor(this.gpu.cublasHandle, {
          m: np,
          n: H,
          k: GH,
          A: a.ws.dpreH + 4 * offsets[tp]! * GH,
          B: a.weights.whh,
          C: a.ws.stepRec,
        });
      }
      const nrows = Math.max(nb, np);
      if (nrows === 0) continue;
      const hasPrevAll = t >= 0 && !a.reverse && t > 0;
      const prevRows = t >= 0 && a.reverse && t + 1 < T ? batchSizes[t + 1]! : 0;
      const prevOff = t < 0 ? 0 : a.reverse ? (t + 1 < T ? offsets[t + 1]! : 0) : t > 0 ? offsets[t - 1]! : 0;
      const args = kernelArgs(
        STEPWISE_BACKWARD_PARAMS,
        {
          saved: a.ws.saved,
          y: a.y,
          ldy: a.ldy,
          c0: a.c0,
          dy: a.dy,
          lddy: a.lddy,
          dhn: a.dhn,
          dcn: a.dcn,
          rec: a.ws.stepRec,
          dpre_h: a.ws.dpreH,
          dpre_x: a.ws.dpreX,
          dh0: a.dh0,
          dc0: a.dc0,
          carry: a.ws.stepCarry,
          total,
          B,
          t,
          nb,
          off: t >= 0 ? offsets[t]! : 0,
          np,
          has_prev_all: hasPrevAll ? 1 : 0,
          prev_rows: prevRows,
          prev_off: prevOff,
        },
        STEPWISE_KERNEL_NAMES.backward,
      );
      this.bwd.launch(this.grid(nrows * H), args);
    }
  }

  checkStatus(_ws: RnnWorkspace): void {
    this.stream.synchronize();
  }
}
