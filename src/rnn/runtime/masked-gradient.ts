/**
 * What a pruned layer needs on the device while there is no sparse kernel (docs/RNN.md, "Sparse (pruned) recurrent
 * layers"): it runs the dense kernels on W_hh ⊙ mask (the pruned weights stored as zeros, prepared by the caller),
 * and its W_hh gradient — computed dense into a buffer of its own — is added at the kept weights only:
 * dW_hh += dW ⊙ mask. One element-wise kernel, on the layer's stream.
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
import type { RnnGpu } from "./layer-base.js";

const SOURCE = `
// dst[i] += src[i] * mask[i] (mask holds 0 or 1): a pruned W_hh's gradient at its kept weights
extern "C" __global__ void rnn_masked_add(float* dst, const float* src, const float* mask, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] += src[i] * mask[i];
}
`;

/** The masked gradient kernel of one device (compiled once per object). */
export class RnnMaskKernel {
  private readonly kernel: CudaKernel;
  private readonly module: CudaModule;

  constructor(gpu: RnnGpu) {
    const compiled = compileCuda({
      name: "rnn_masked_gradient",
      source: SOURCE,
      arch: gpu.device.props.arch,
      options: ["-std=c++17"],
      ...(gpu.cacheDir !== undefined ? { cacheDir: gpu.cacheDir } : {}),
    });
    this.module = loadModule(compiled.cubin, "rnn masked gradient");
    this.kernel = this.module.getFunction("rnn_masked_add");
  }

  /** dst += src ⊙ mask over n floats (mask: 0.0 or 1.0 per element), queued on `stream`. */
  addMasked(dst: DevicePtr, src: DevicePtr, mask: DevicePtr, n: number, stream: CudaStream): void {
    if (n === 0) return;
    this.kernel.launch({ grid: Math.min(1024, Math.ceil(n / 256)), block: 256, stream }, [
      karg.ptr(dst),
      karg.ptr(src),
      karg.ptr(mask),
      karg.i32(n),
    ]);
  }

  dispose(): void {
    this.module.unload();
  }
}
