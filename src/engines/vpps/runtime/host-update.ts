/**
 * The host's end of a batch whose plan forms some matrix gradients by GEMM (DESIGN §6.7): one cuBLAS GEMM per such
 * matrix (W̄ = Ȳᵀ·X over the rows the kernel collected), then the clipped SGD or Adam step of every parameter by two
 * list kernels, over a list of update entries written behind the batch's script in its slot's region.
 */
import { type CudaKernel, type GpuContext, karg } from "../../../cuda/index.js";
import { adamArgs, type KernelVariant } from "../codegen/variant.js";
import type { ModelLayout } from "../plan/layout.js";
import { type AdamStep, momentLayout } from "../plan/moments.js";
import type { ScheduledBatch } from "../schedule/batch.js";
import type { DeviceRegions } from "./regions.js";

/** Elements per triple of the host-update lists: large matrices are split so that one block takes one piece. */
const UPDATE_PIECE = 4096;

export const HOST_UPDATE_PROGRAM = "vpps_host_update";
export const HOST_UPDATE_KERNELS = ["vpps_norm2_list", "vpps_sgd_list", "vpps_adam_list", "vpps_copy_list"] as const;
/** Words of one entry of the SGD list (parameter, gradient, length) and of the Adam list (parameter, gradient, m, v, length). */
export const SGD_ENTRY = 3;
export const ADAM_ENTRY = 5;
/** The absent-gradient word of an Adam list entry (script/format.ts NONE): a parameter without gradient this batch. */
const NO_GRADIENT = 0xffffffff;
/**
 * Clipped SGD over a list of (parameter, gradient, length) triples of float offsets from one base, and Adam over a
 * list of (parameter, gradient, m, v, length) entries (m and v: offsets from the moments base; gradient NONE:
 * none this batch, it counts as zero). The norm reads either list (`words` per entry, gradient second, length
 * last).
 *
 * The Adam element is written out here rather than taken from src/codegen/device-math.ts (DEVICE_ADAM's
 * adam_element): the same formula through that function compiles to a different FMA contraction (NVRTC/nvcc fuse
 * β1·m into the FMA there and (1 − β1)·g here), so the moments would differ in the last bit from what this kernel
 * has always computed.
 */
export const HOST_UPDATE_SOURCE = `
typedef unsigned int u32;
extern "C" __global__ void vpps_norm2_list(const float* base, const u32* list, int entries, int words, float* acc) {
  float s = 0.f;
  for (int e = blockIdx.x; e < entries; e += gridDim.x) {
    const u32 go = list[words * e + 1];
    if (go == 0xffffffffu) continue;
    const float* g = base + go;
    const u32 n = list[words * e + words - 1];
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) s += g[i] * g[i];
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0 && s != 0.f) atomicAdd(acc, s);
}
// The reference trainer's rule: scale = clip / ||g|| when the global norm exceeds clip (clip 0 disables).
extern "C" __global__ void vpps_sgd_list(float* base, const u32* list, int entries, float lr, const float* acc, float clip) {
  float scale = 1.f;
  if (clip > 0.f) {
    const float norm = sqrtf(*acc);
    if (norm > clip) scale = clip / norm;
  }
  const float step = lr * scale;
  for (int e = blockIdx.x; e < entries; e += gridDim.x) {
    float* p = base + list[3 * e];
    const float* g = base + list[3 * e + 1];
    const u32 n = list[3 * e + 2];
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) p[i] -= step * g[i];
  }
}
// Data-parallel mode (dp-update.ts): base[dst .. dst + n) = base[src .. src + n) over (dst, src, n) triples.
extern "C" __global__ void vpps_copy_list(float* base, const u32* list, int entries) {
  for (int e = blockIdx.x; e < entries; e += gridDim.x) {
    float* d = base + list[3 * e];
    const float* s = base + list[3 * e + 1];
    const u32 n = list[3 * e + 2];
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
  }
}
// The kernel's adam_element (kernel-static.ts), with the same arguments, over the list.
extern "C" __global__ void vpps_adam_list(float* base, float* moments, const u32* list, int entries, float lr,
                                          const float* acc, float clip, float beta1, float one_minus_beta1,
                                          float beta2, float one_minus_beta2, float eps, float inv_c1, float inv_c2) {
  float scale = 1.f;
  if (clip > 0.f) {
    const float norm = sqrtf(*acc);
    if (norm > clip) scale = clip / norm;
  }
  for (int e = blockIdx.x; e < entries; e += gridDim.x) {
    float* p = base + list[5 * e];
    const u32 go = list[5 * e + 1];
    const float* g = go == 0xffffffffu ? nullptr : base + go;
    float* m = moments + list[5 * e + 2];
    float* v = moments + list[5 * e + 3];
    const u32 n = list[5 * e + 4];
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) {
      const float gi = g ? g[i] * scale : 0.f;
      const float mi = beta1 * m[i] + one_minus_beta1 * gi;
      const float vi = beta2 * v[i] + one_minus_beta2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      float root;
      asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(root) : "f"(vi * inv_c2));
      p[i] -= __fdividef(lr * (mi * inv_c1), root + eps);
    }
  }
}
`;

/** The host update of a runtime: its list kernels (compiled on first use) and the regions they address. */
export class HostUpdate {
  private kernels: Readonly<Record<(typeof HOST_UPDATE_KERNELS)[number], CudaKernel>> | undefined;

  constructor(
    private readonly ctx: GpuContext,
    private readonly regions: DeviceRegions,
  ) {}

  /**
   * The entries of a host update, as absolute pool offsets: SGD's (parameter, gradient, length) triples for the
   * parameters with a gradient, or Adam's (parameter, gradient or NONE, m, v, length) for every matrix and dense
   * parameter and the touched lookup rows (the AdamTrainer's rule: unused parameters still move by their moments).
   */
  list(model: ModelLayout, s: ScheduledBatch, into: Uint32Array, at: number, adam: boolean): number {
    if (adam) return this.adamList(model, s, into, at);
    const R = this.regions;
    const L = s.layout;
    let k = at;
    const push = (p: number, g: number, n: number) => {
      for (let o = 0; o < n; o += UPDATE_PIECE) {
        into[k++] = p + o;
        into[k++] = g + o;
        into[k++] = Math.min(UPDATE_PIECE, n - o);
      }
    };
    for (const m of model.plan.matrices) {
      if (m.gradients === "gemm" && L.collectCount[m.index] === 0) continue; // no product: zero gradient
      push(R.master + m.masterOffset, R.grads + m.masterOffset, m.rows * m.cols);
    }
    for (const p of model.params) {
      if (L.paramGrad[p.index]! >= 0) {
        push(R.pool + model.paramOffset[p.index]!, R.pool + L.paramGrad[p.index]!, p.rows * p.cols);
      }
    }
    const rows = L.lookupRows;
    for (let r = 0; r < rows.offset.length; r++) {
      const cols = model.params[rows.table[r]!]!.cols;
      push(R.pool + model.paramOffset[rows.table[r]!]! + rows.row[r]! * cols, R.pool + rows.offset[r]!, cols);
    }
    return (k - at) / SGD_ENTRY;
  }

  private adamList(model: ModelLayout, s: ScheduledBatch, into: Uint32Array, at: number): number {
    const R = this.regions;
    const L = s.layout;
    const mo = momentLayout(model);
    let k = at;
    const push = (p: number, g: number, m: number, v: number, n: number) => {
      for (let o = 0; o < n; o += UPDATE_PIECE) {
        into[k++] = p + o;
        into[k++] = g === NO_GRADIENT ? g : g + o;
        into[k++] = m + o;
        into[k++] = v + o;
        into[k++] = Math.min(UPDATE_PIECE, n - o);
      }
    };
    for (const m of model.plan.matrices) {
      const at = m.masterOffset;
      // a GEMM-strategy matrix without products has a zero gradient: its region holds an earlier batch's
      const g = m.gradients === "gemm" && L.collectCount[m.index] === 0 ? NO_GRADIENT : R.grads + at;
      push(R.master + at, g, mo.masterM + at, mo.masterV + at, m.rows * m.cols);
    }
    for (const p of model.params) {
      if (model.matrixOf[p.index]! >= 0 || p.kind !== "dense") continue;
      const at = model.paramOffset[p.index]!;
      const g = L.paramGrad[p.index]! >= 0 ? R.pool + L.paramGrad[p.index]! : NO_GRADIENT;
      push(R.pool + at, g, mo.modelM + at, mo.modelV + at, p.rows * p.cols);
    }
    const rows = L.lookupRows;
    for (let r = 0; r < rows.offset.length; r++) {
      const cols = model.params[rows.table[r]!]!.cols;
      const at = model.paramOffset[rows.table[r]!]! + rows.row[r]! * cols;
      push(R.pool + at, R.pool + rows.offset[r]!, mo.modelM + at, mo.modelV + at, cols);
    }
    return (k - at) / ADAM_ENTRY;
  }

  /** Words the update list of a batch may take (an upper bound: every matrix and parameter that may get an entry). */
  listWords(model: ModelLayout, s: ScheduledBatch, adam: boolean): number {
    let n = 0;
    const pieces = (len: number) => Math.ceil(len / UPDATE_PIECE);
    for (const m of model.plan.matrices) n += pieces(m.rows * m.cols);
    for (const p of model.params) {
      const used = adam ? model.matrixOf[p.index]! < 0 && p.kind === "dense" : s.layout.paramGrad[p.index]! >= 0;
      if (used) n += pieces(p.rows * p.cols);
    }
    const tables = s.layout.lookupRows.table;
    for (let r = 0; r < tables.length; r++) n += pieces(model.params[tables[r]!]!.cols);
    return (adam ? ADAM_ENTRY : SGD_ENTRY) * n;
  }

  /**
   * GEMM-formed gradients (W̄ = Ȳᵀ·X over the collected rows), then the clipped SGD or Adam step of the list's
   * entries (Adam with learning rate 0: no step, as in the kernel).
   */
  launch(
    v: KernelVariant,
    s: ScheduledBatch,
    listAt: number,
    entries: number,
    lr: number,
    clip: number,
    adam: AdamStep | undefined,
  ) {
    this.gemm(v, s);
    this.step(listAt, entries, lr, clip, adam);
  }

  /** The GEMM-formed gradients of the batch (W̄ = Ȳᵀ·X over the collected rows) into the gradient buffer. */
  gemm(v: KernelVariant, s: ScheduledBatch): void {
    const ctx = this.ctx;
    const R = this.regions;
    const L = s.layout;
    for (const m of v.plan.matrices) {
      const count = L.collectCount[m.index]!;
      if (m.gradients !== "gemm" || count === 0) continue;
      ctx.cublas.sgemmRowMajor(ctx.cublasHandle, {
        transA: true,
        m: m.rows,
        n: m.cols,
        k: count,
        A: R.ptr(R.pool + L.collectY[m.index]!),
        B: R.ptr(R.pool + L.collectX[m.index]!),
        C: R.ptr(R.grads + m.masterOffset),
        beta: 0,
      });
    }
  }

  /** Copies over a list of (destination, source, length) triples of pool offsets (data-parallel mode). */
  copy(listAt: number, entries: number): void {
    if (entries === 0) return;
    const ctx = this.ctx;
    this.kernels ??= ctx.kernels(HOST_UPDATE_PROGRAM, HOST_UPDATE_SOURCE, HOST_UPDATE_KERNELS).kernels;
    this.kernels.vpps_copy_list.launch({ grid: Math.min(entries, 2048), block: 256, stream: ctx.stream }, [
      karg.ptr(ctx.pool.ptr(0)),
      karg.ptr(this.regions.ptr(listAt)),
      karg.i32(entries),
    ]);
  }

  /**
   * The clipped SGD or Adam step of the list's entries (Adam with learning rate 0: no step, as in the kernel).
   * `afterNorm` is queued between the norm and the step (data-parallel mode: every rank takes rank 0's norm).
   */
  step(
    listAt: number,
    entries: number,
    lr: number,
    clip: number,
    adam: AdamStep | undefined,
    afterNorm?: (normPtr: number) => void,
  ): void {
    const ctx = this.ctx;
    const R = this.regions;
    this.kernels ??= ctx.kernels(HOST_UPDATE_PROGRAM, HOST_UPDATE_SOURCE, HOST_UPDATE_KERNELS).kernels;
    if (entries === 0 || (adam !== undefined && lr === 0)) return;
    const base = karg.ptr(ctx.pool.ptr(0));
    const list = karg.ptr(R.ptr(listAt));
    const grid = Math.min(entries, 2048);
    const st = ctx.stream;
    if (clip > 0) {
      ctx.pool.fill(R.norm, 1, 0, st.handle);
      this.kernels.vpps_norm2_list.launch({ grid, block: 256, stream: st }, [
        base,
        list,
        karg.i32(entries),
        karg.i32(adam !== undefined ? ADAM_ENTRY : SGD_ENTRY),
        karg.ptr(R.ptr(R.norm)),
      ]);
      afterNorm?.(R.ptr(R.norm));
    }
    if (adam !== undefined) {
      this.kernels.vpps_adam_list.launch({ grid, block: 256, stream: st }, [
        base,
        karg.ptr(R.moments),
        list,
        karg.i32(entries),
        karg.f32(lr),
        karg.ptr(R.ptr(R.norm)),
        karg.f32(clip),
        ...adamArgs(adam),
      ]);
      return;
    }
    this.kernels.vpps_sgd_list.launch({ grid, block: 256, stream: st }, [
      base,
      list,
      karg.i32(entries),
      karg.f32(lr),
      karg.ptr(R.ptr(R.norm)),
      karg.f32(clip),
    ]);
  }
}
