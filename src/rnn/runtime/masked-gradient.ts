/**
 * What a pruned layer needs on the device (docs/RNN.md, "Sparse (pruned) recurrent layers"), one module:
 * - its W_hh gradient — computed dense into a buffer of its own — added at the kept weights only: dW_hh += dW ⊙ mask
 *   (where it runs the dense kernels on W_hh ⊙ mask, and on the sparse kernels' path alike);
 * - the mask derived on the device from W_hh as src/ops/prune.ts derives it (row-balanced: each row's `keep` largest
 *   |w|, NaN the largest, ties to the lower column; plain: the keep·rows largest of the matrix, ties in row-major
 *   order), with W_hh ⊙ mask, and whether it differs from the last mask of the same weights — so that a training step
 *   whose mask did not move never reads W_hh back to the host;
 * - the pairs' values of a sparse layer gathered from W_hh on the device (SparsePersistentRnnLayer.refreshValues).
 */
import {
  type CudaKernel,
  type CudaModule,
  type CudaStream,
  compileCuda,
  type DevicePtr,
  karg,
  loadModule,
} from "../../cuda/index.js";
import type { PruningMode } from "../../ops/prune.js";
import type { RnnGpu } from "./layer-base.js";

/** Threads of a CTA of rnn_prune_rows (one row at a time; a multiple of 32). */
const PRUNE_THREADS = 256;

export const PRUNED_LAYER_SOURCE = `
typedef unsigned int u32;

// dst[i] += src[i] * mask[i] (mask holds 0 or 1): a pruned W_hh's gradient at its kept weights
extern "C" __global__ void rnn_masked_add(float* dst, const float* src, const float* mask, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] += src[i] * mask[i];
}

// |w| as the order of pruning sees it, as a key whose unsigned order is that order: NaN counts as +inf
__device__ __forceinline__ u32 magnitude_key(float w) {
  const u32 b = __float_as_uint(w) & 0x7fffffffu;
  return b > 0x7f800000u ? 0x7f800000u : b;
}

// Row-balanced magnitude pruning of W [rows, cols] (src/ops/prune.ts): row r keeps its 'keep' largest |w| (1 ≤ keep ≤
// cols), ties to the lower column. Writes mask (1.0 / 0.0) and masked (w where kept, else 0), and stores the mask in
// 'last' (bytes), setting *changed where it differs from what 'last' held. One CTA of ${PRUNE_THREADS} threads per row.
extern "C" __global__ void __launch_bounds__(${PRUNE_THREADS}) rnn_prune_rows(const float* w, int rows, int cols, int keep,
    float* mask, float* masked, unsigned char* last, int* changed) {
  __shared__ u32 hist[256];
  __shared__ u32 pick[2];
  __shared__ int warp_eq[${PRUNE_THREADS / 32}];
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* wr = w + (size_t)r * cols;
    // the keep-th largest key, 8 bits a pass from the top: 'need' counts down the entries above the prefix's bin
    u32 prefix = 0u, high = 0u, need = (u32)keep;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0u;
      __syncthreads();
      for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        const u32 k = magnitude_key(wr[j]);
        if ((k & high) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        u32 above = 0u;
        int d = 255;
        for (; d > 0 && above + hist[d] < need; d--) above += hist[d];
        pick[0] = prefix | ((u32)d << shift);
        pick[1] = need - above;
      }
      __syncthreads();
      prefix = pick[0];
      need = pick[1];
      high |= 255u << shift;
      __syncthreads();
    }
    // prefix is the threshold; every key above it is kept, and the first 'need' equal to it in column order
    u32 base = 0u; // entries equal to the threshold in the chunks before
    for (int j0 = 0; j0 < cols; j0 += blockDim.x) {
      const int j = j0 + threadIdx.x;
      const float v = j < cols ? wr[j] : 0.f;
      const u32 k = j < cols ? magnitude_key(v) : 0u;
      const bool eq = j < cols && k == prefix;
      const u32 ball = __ballot_sync(0xffffffffu, eq);
      if (lane == 0) warp_eq[wid] = __popc(ball);
      __syncthreads();
      u32 before = base + __popc(ball & ((1u << lane) - 1u)), total = 0u;
      for (int q = 0; q < (int)(blockDim.x >> 5); q++) {
        if (q < wid) before += warp_eq[q];
        total += warp_eq[q];
      }
      __syncthreads();
      base += total;
      if (j < cols) {
        const bool kept = k > prefix || (eq && before < need);
        const size_t o = (size_t)r * cols + j;
        mask[o] = kept ? 1.f : 0.f;
        masked[o] = kept ? v : 0.f;
        const unsigned char m = kept ? 1 : 0;
        if (last[o] != m) {
          last[o] = m;
          *changed = 1;
        }
      }
    }
  }
}

// values[slots[e]] = w[from[e]]: a sparse layer's pairs from W_hh (or its transpose's entries) on the device
extern "C" __global__ void rnn_gather_pairs(float* values, const int* slots, const u32* from, const float* w, int n) {
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < n; e += gridDim.x * blockDim.x) values[slots[e]] = w[from[e]];
}
`;

/** The launch of an element-wise kernel over n items (a grid-stride loop of 256-thread CTAs). */
const elementwise = (n: number, stream: CudaStream) => ({
  grid: Math.min(1024, Math.ceil(n / 256)),
  block: 256,
  stream,
});

/** The masked gradient kernel of one device (compiled once per object). */
export class RnnMaskKernel {
  private readonly kernel: CudaKernel;
  private readonly prune: CudaKernel;
  private readonly gather: CudaKernel;
  private readonly module: CudaModule;

  constructor(gpu: RnnGpu) {
    const compiled = compileCuda({
      name: "rnn_masked_gradient",
      source: PRUNED_LAYER_SOURCE,
      arch: gpu.device.props.arch,
      options: ["-std=c++17"],
      ...(gpu.cacheDir !== undefined ? { cacheDir: gpu.cacheDir } : {}),
    });
    this.module = loadModule(compiled.cubin, "rnn masked gradient");
    this.kernel = this.module.getFunction("rnn_masked_add");
    this.prune = this.module.getFunction("rnn_prune_rows");
    this.gather = this.module.getFunction("rnn_gather_pairs");
  }

  /**
   * The row-balanced mask of W [rows, cols] keeping `keep` per row (src/ops/prune.ts's order) into `mask` (floats
   * 0.0 / 1.0) and W ⊙ mask into `masked`, on `stream`; `last` (rows·cols bytes) holds the mask this one is compared
   * with and then this one; the int at `changed` is set to 1 where they differ (the caller zeroes it).
   */
  pruneRows(
    a: {
      w: DevicePtr;
      rows: number;
      cols: number;
      keep: number;
      mask: DevicePtr;
      masked: DevicePtr;
      last: DevicePtr;
      changed: DevicePtr;
    },
    stream: CudaStream,
  ): void {
    if (a.rows === 0 || a.cols === 0) return;
    this.prune.launch({ grid: Math.min(a.rows, 2048), block: PRUNE_THREADS, stream }, [
      karg.ptr(a.w),
      karg.i32(a.rows),
      karg.i32(a.cols),
      karg.i32(Math.min(a.cols, Math.max(1, a.keep))),
      karg.ptr(a.mask),
      karg.ptr(a.masked),
      karg.ptr(a.last),
      karg.ptr(a.changed),
    ]);
  }

  /**
   * The mask of `mode` (src/ops/prune.ts) keeping `keep` per row: row-balanced as pruneRows; plain, the keep·rows
   * largest |w| of the whole matrix, ties in row-major order — pruneRows over one row of rows·cols entries (one CTA).
   */
  pruneMatrix(a: Parameters<RnnMaskKernel["pruneRows"]>[0] & { mode: PruningMode }, stream: CudaStream): void {
    const { mode, ...rest } = a;
    if (mode === "row-balanced") {
      this.pruneRows(rest, stream);
      return;
    }
    const keep = Math.min(a.cols, Math.max(1, a.keep)) * a.rows;
    this.pruneRows({ ...rest, rows: 1, cols: a.rows * a.cols, keep }, stream);
  }

  /** values[slots[e]] = w[from[e]] for e < n (int32 slots, uint32 from), queued on `stream`. */
  gatherPairs(values: DevicePtr, slots: DevicePtr, from: DevicePtr, w: DevicePtr, n: number, stream: CudaStream): void {
    if (n === 0) return;
    this.gather.launch(elementwise(n, stream), [
      karg.ptr(values),
      karg.ptr(slots),
      karg.ptr(from),
      karg.ptr(w),
      karg.i32(n),
    ]);
  }

  /** dst += src ⊙ mask over n floats (mask: 0.0 or 1.0 per element), queued on `stream`. */
  addMasked(dst: DevicePtr, src: DevicePtr, mask: DevicePtr, n: number, stream: CudaStream): void {
    if (n === 0) return;
    this.kernel.launch(elementwise(n, stream), [karg.ptr(dst), karg.ptr(src), karg.ptr(mask), karg.i32(n)]);
  }

  dispose(): void {
    this.module.unload();
  }
}
