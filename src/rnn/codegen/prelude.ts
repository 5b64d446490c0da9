/**
 * The CUDA every generated persistent RNN module starts with: types, limits, the status block and its grid barrier,
 * activations, polled loads and the publish of a value others poll, fp16 packing, the replicas' column rule, the
 * cluster / mbarrier / TMA bulk-copy primitives of the pair multicast.
 */
import { DEVICE_ACTIVATIONS } from "../../codegen/device-math.js";
import { GRID_BARRIER_CUDA, GRID_ERRORS } from "../../codegen/grid-barrier.js";
import { POLL_SPIN_LIMIT, RNN_ERRORS } from "./kernel-options.js";

/**
 * Shared-memory addresses, the CTA's cluster rank and barrier, mbarriers, and TMA bulk copies (alone or multicast to
 * a cluster): CUDA that every RNN kernel module starts with (in COMMON) and that bench/lab/rnn/broadcast-probe.ts builds
 * its probe from. Needs `typedef unsigned int u32;` before it.
 */
export const TMA_CUDA = `__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ u32 cluster_rank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\\n\\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void mbar_init(unsigned long long* m) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(m)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect(unsigned long long* m, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(m)), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(unsigned long long* m, u32 parity) {
  u32 ok;
  asm volatile("{\\n\\t.reg .pred p;\\n\\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\n\\tselp.u32 %0, 1, 0, p;\\n\\t}"
               : "=r"(ok) : "r"(smem_u32(m)), "r"(parity) : "memory");
  return ok != 0;
}
// bytes (a multiple of 16) from global to this CTA's shared memory, counted on its barrier
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, u32 bytes, unsigned long long* m) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(m)) : "memory");
}
// bytes (a multiple of 16) from global to the same offset of the shared memory of every CTA in 'mask' (the cluster);
// each CTA's barrier counts them
__device__ __forceinline__ void bulk_multicast(void* dst, const void* src, u32 bytes, unsigned long long* m,
                                               unsigned short mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;"
      ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(m)), "h"(mask) : "memory");
}`;

/** What every generated RNN kernel module starts with: types, limits, the status block, activations, polled loads. */
export const COMMON = `
typedef unsigned int u32;
constexpr u32 kBarrierSpinLimit = ${POLL_SPIN_LIMIT}u;
constexpr int kErrBarrierTimeout = ${GRID_ERRORS.barrierTimeout};
constexpr int kErrPollTimeout = ${RNN_ERRORS.pollTimeout};
${GRID_BARRIER_CUDA}
${DEVICE_ACTIVATIONS}

// A value other CTAs write: read at the coherence point (L2), never from this SM's L1.
__device__ __forceinline__ float4 ld_poll4(const float* p) {
  float4 v;
  asm volatile("ld.relaxed.gpu.global.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ bool pending1(float x) { return __float_as_uint(x) == 0x80000000u; }
__device__ __forceinline__ bool pending4(float4 v) {
  return pending1(v.x) | pending1(v.y) | pending1(v.z) | pending1(v.w);
}
// fp16 weight storage without cuda_fp16.h (NVRTC has no include path): pack two floats, and unpack in a volatile
// asm so that the compiler cannot hoist the conversions out of the step loop (which would keep every weight as fp32
// and spill).
__device__ __forceinline__ u32 pack_half2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ float2 unpack_half2(u32 h) {
  float2 f;
  asm volatile("{ .reg .f16 l, u; mov.b32 {l, u}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, u; }"
               : "=f"(f.x), "=f"(f.y) : "r"(h));
  return f;
}
// Publishes a value others poll: −0.0 would read as "not yet", so it becomes +0.0 (x + 0 would be folded away).
__device__ __forceinline__ void st_publish(float* p, float x) {
  x = (x == 0.f) ? 0.f : x;
  asm volatile("st.relaxed.gpu.global.f32 [%0], %1;" ::"l"(p), "f"(x) : "memory");
}
// The pending mark (−0.0) back into a published value's place, once nobody reads it (the sparse forward's reset)
__device__ __forceinline__ void st_pending(float* p) {
  asm volatile("st.relaxed.gpu.global.f32 [%0], %1;" ::"l"(p), "f"(__uint_as_float(0x80000000u)) : "memory");
}

// Replicas: a launch runs 'nrep' copies of the layer side by side, replica r on the batch's sequences r, r + nrep,
// r + 2·nrep, … (local column j is sequence r + j·nrep). How many of the first n sequences are replica r's:
__device__ __forceinline__ int local_count(int n, int r, int nrep) { return n > r ? (n - r + nrep - 1) / nrep : 0; }

// Thread-block clusters of two CTAs (on the two SMs of a TPC): the vector every CTA polls each step is copied from L2
// once per pair by TMA bulk copies multicast to both CTAs' shared memory, halving the L2 reads (kept where it measured
// faster: MULTICAST_MIN_WEIGHT_REGISTERS; the poll is not L2-bandwidth-bound).
${TMA_CUDA}
// No proxy fence between a step's reads of a buffer and the partner's multicast into it two steps later: the reads
// have completed (their values are in what this CTA published, which the partner waited for), and a fence is only
// needed to make generic-proxy writes visible to the async proxy.
`;
