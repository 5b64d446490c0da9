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
/** The plain selection's CTAs at most, and the entries a chunk has at least (below: fewer CTAs). */
const PLAIN_MAX_CTAS = 256;
const PLAIN_CHUNK = 4096;

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

// Of w[lo, hi) in index order, keeps every key above 'threshold' and each key equal to it while fewer than 'need' of
// those came before ('base' of them before lo): writes mask (1.0 / 0.0) and masked (w where kept, else 0), and stores
// the mask in 'last' (bytes), setting *changed where it differs from what 'last' held. Every thread of the CTA calls
// it (ballots and barriers); warp_eq: shared, a word per warp.
__device__ void keep_range(const float* w, size_t lo, size_t hi, u32 threshold, u32 need, u32 base, float* mask,
    float* masked, unsigned char* last, int* changed, int* warp_eq) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  for (size_t j0 = lo; j0 < hi; j0 += blockDim.x) {
    const size_t j = j0 + threadIdx.x;
    const float v = j < hi ? w[j] : 0.f;
    const u32 k = j < hi ? magnitude_key(v) : 0u;
    const bool eq = j < hi && k == threshold;
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
    if (j < hi) {
      const bool kept = k > threshold || (eq && before < need);
      mask[j] = kept ? 1.f : 0.f;
      masked[j] = kept ? v : 0.f;
      const unsigned char m = kept ? 1 : 0;
      if (last[j] != m) {
        last[j] = m;
        *changed = 1;
      }
    }
  }
}

// Row-balanced magnitude pruning of W [rows, cols] (src/ops/prune.ts): row r keeps its 'keep' largest |w| (1 ≤ keep ≤
// cols), ties to the lower column. Writes mask (1.0 / 0.0) and masked (w where kept, else 0), and stores the mask in
// 'last' (bytes), setting *changed where it differs from what 'last' held. One CTA of ${PRUNE_THREADS} threads per row.
extern "C" __global__ void __launch_bounds__(${PRUNE_THREADS}) rnn_prune_rows(const float* w, int rows, int cols, int keep,
    float* mask, float* masked, unsigned char* last, int* changed) {
  __shared__ u32 hist[256];
  __shared__ u32 pick[2];
  __shared__ int warp_eq[${PRUNE_THREADS / 32}];
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
    keep_range(w, (size_t)r * cols, (size_t)r * cols + cols, prefix, need, 0u, mask, masked, last, changed, warp_eq);
  }
}

// Plain magnitude pruning of n weights (src/ops/prune.ts 'plain': the 'keep' largest |w| of the whole matrix, ties to
// the lower index) over many CTAs: four radix passes of 8 bits (rnn_plain_hist over every CTA, then rnn_plain_pick on
// one thread), each CTA's count of the entries equal to the threshold in its chunk of 'chunk' consecutive entries
// (rnn_plain_count), and the selection (rnn_plain_select, the same chunks in index order). state: [prefix, high,
// need] (host: 0, 0, keep), hist [256] (host: zeros; each pick zeroes it again), cnt [gridDim.x].
extern "C" __global__ void rnn_plain_hist(const float* w, int n, int shift, const u32* state, u32* hist) {
  __shared__ u32 h[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) h[i] = 0u;
  __syncthreads();
  const u32 prefix = state[0], high = state[1];
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const u32 k = magnitude_key(w[i]);
    if ((k & high) == prefix) atomicAdd(&h[(k >> shift) & 255u], 1u);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    if (h[i] != 0u) atomicAdd(&hist[i], h[i]);
  }
}

extern "C" __global__ void rnn_plain_pick(int shift, u32* state, u32* hist) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const u32 need = state[2];
  u32 above = 0u;
  int d = 255;
  for (; d > 0 && above + hist[d] < need; d--) above += hist[d];
  state[0] |= (u32)d << shift;
  state[1] |= 255u << shift;
  state[2] = need - above;
  for (int i = 0; i < 256; i++) hist[i] = 0u;
}

extern "C" __global__ void rnn_plain_count(const float* w, int n, int chunk, const u32* state, u32* cnt) {
  __shared__ u32 total;
  if (threadIdx.x == 0) total = 0u;
  __syncthreads();
  const u32 threshold = state[0];
  const int lo = blockIdx.x * chunk, hi = min(n, lo + chunk);
  u32 c = 0u;
  for (int i = lo + (int)threadIdx.x; i < hi; i += blockDim.x) c += magnitude_key(w[i]) == threshold ? 1u : 0u;
  for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
  if ((threadIdx.x & 31) == 0 && c != 0u) atomicAdd(&total, c);
  __syncthreads();
  if (threadIdx.x == 0) cnt[blockIdx.x] = total;
}

extern "C" __global__ void __launch_bounds__(${PRUNE_THREADS}) rnn_plain_select(const float* w, int n, int chunk,
    const u32* state, const u32* cnt, float* mask, float* masked, unsigned char* last, int* changed) {
  __shared__ int warp_eq[${PRUNE_THREADS / 32}];
  __shared__ u32 start;
  if (threadIdx.x == 0) {
    u32 before = 0u; // entries equal to the threshold in the chunks before this one
    for (int c = 0; c < (int)blockIdx.x; c++) before += cnt[c];
    start = before;
  }
  __syncthreads();
  const size_t lo = (size_t)blockIdx.x * chunk, hi = min((size_t)n, lo + chunk);
  if (lo < hi) keep_range(w, lo, hi, state[0], state[2], start, mask, masked, last, changed, warp_eq);
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
  private readonly plain: { hist: CudaKernel; pick: CudaKernel; count: CudaKernel; select: CudaKernel };
  /** The plain selection's scratch: state [3] (prefix, high, need), hist [256], cnt [PLAIN_MAX_CTAS]. */
  private readonly scratch: DevicePtr;
  private readonly driver: RnnGpu["device"]["driver"];
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
    this.plain = {
      hist: this.module.getFunction("rnn_plain_hist"),
      pick: this.module.getFunction("rnn_plain_pick"),
      count: this.module.getFunction("rnn_plain_count"),
      select: this.module.getFunction("rnn_plain_select"),
    };
    this.driver = gpu.device.driver;
    this.scratch = this.driver.memAlloc(4 * (3 + 256 + PLAIN_MAX_CTAS));
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
   * largest |w| of the whole matrix, ties in row-major order (the rnn_plain_* kernels: four radix passes over every
   * CTA, then each CTA's chunk in index order), with the same outputs.
   */
  pruneMatrix(a: Parameters<RnnMaskKernel["pruneRows"]>[0] & { mode: PruningMode }, stream: CudaStream): void {
    const { mode, ...rest } = a;
    if (mode === "row-balanced") {
      this.pruneRows(rest, stream);
      return;
    }
    const n = a.rows * a.cols;
    if (n === 0) return;
    const keep = Math.min(a.cols, Math.max(1, a.keep)) * a.rows;
    const state = this.scratch;
    const hist = state + 4 * 3;
    const cnt = hist + 4 * 256;
    this.driver.memsetD32Async(state, 0, 3 + 256, stream.handle);
    this.driver.memsetD32Async(state + 8, keep, 1, stream.handle);
    for (const shift of [24, 16, 8, 0]) {
      this.plain.hist.launch(elementwise(n, stream), [
        karg.ptr(a.w),
        karg.i32(n),
        karg.i32(shift),
        karg.ptr(state),
        karg.ptr(hist),
      ]);
      this.plain.pick.launch({ grid: 1, block: 32, stream }, [karg.i32(shift), karg.ptr(state), karg.ptr(hist)]);
    }
    // chunks of whole CTA widths, at most PLAIN_MAX_CTAS of them
    const ctas = Math.max(1, Math.min(PLAIN_MAX_CTAS, Math.ceil(n / PLAIN_CHUNK)));
    const chunk = Math.ceil(n / ctas / PRUNE_THREADS) * PRUNE_THREADS;
    const grid = Math.ceil(n / chunk);
    this.plain.count.launch({ grid, block: PRUNE_THREADS, stream }, [
      karg.ptr(a.w),
      karg.i32(n),
      karg.i32(chunk),
      karg.ptr(state),
      karg.ptr(cnt),
    ]);
    this.plain.select.launch({ grid, block: PRUNE_THREADS, stream }, [
      karg.ptr(a.w),
      karg.i32(n),
      karg.i32(chunk),
      karg.ptr(state),
      karg.ptr(cnt),
      karg.ptr(a.mask),
      karg.ptr(a.masked),
      karg.ptr(a.last),
      karg.ptr(a.changed),
    ]);
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
    this.driver.memFree(this.scratch);
    this.module.unload();
  }
}
