/**
 * The timed grid barrier of a persistent kernel and its status block, for any kernel whose CTAs stay resident and
 * hand data to each other through global counters (VPPS today, the persistent RNNs next).
 *
 * Device side (GRID_BARRIER_CUDA, CUDA text to include after `typedef unsigned int u32;`): release/acquire counter
 * operations, the GPU-wide nanosecond timer, `report_error` (the first error of a launch wins the status block),
 * `vpps_signal` (thread 0 bumps a counter with release semantics) and `vpps_wait` (thread 0 spins with acquire loads,
 * backs off when the wait is long, and gives up after `kBarrierSpinLimit` spins with a barrier-timeout error instead
 * of hanging the GPU). The including source defines `constexpr u32 kBarrierSpinLimit` and
 * `constexpr int kErrBarrierTimeout` (= GRID_ERRORS.barrierTimeout). The text is VPPS's original, verbatim (the
 * names keep their `vpps_` prefix): the VPPS kernel must not change by a byte (test/vpps-golden.test.ts).
 *
 * Host side: the status block's layout (STATUS_WORDS ints, zero when the launch starts and without an error:
 * [code, cta, a, b, c, pc]), the barrier-timeout code, and the decoding of an error into a PersistentKernelError.
 * A kernel numbers its own error codes from FIRST_KERNEL_ERROR on.
 */
import { UserError } from "../util/errors.js";

/** Words of the status block a kernel writes on an error: [code, cta, a, b, c, pc]. */
export const STATUS_WORDS = 6;

/** Error codes the grid barrier itself reports (status word 0). */
export const GRID_ERRORS = {
  /** A wait did not see its count within the spin limit: status = [code, cta, barrier, seen, expected, pc]. */
  barrierTimeout: 1,
} as const;

/** The first error code free for a kernel's own errors. */
export const FIRST_KERNEL_ERROR = 2;

/** The CUDA text of the timed grid barrier and the error report (see the file comment for what it needs). */
export const GRID_BARRIER_CUDA = `
// ---- signal / wait on global counters --------------------------------------------------------------------------

__device__ __forceinline__ u32 ld_acquire(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void red_release_add(u32* p, u32 v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// The returning form, for traced kernels only: the old count says which signal completed a barrier.
__device__ __forceinline__ u32 atom_release_add(u32* p, u32 v) {
  u32 old;
  asm volatile("atom.release.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// The GPU-wide nanosecond timer (comparable across SMs, unlike clock64), for traced kernels.
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Records the first error of the launch; later ones (mostly processors timing out behind the first) are dropped.
__device__ void report_error(int* status, int code, int a, int b, int c, int pc) {
  if (atomicCAS(status, 0, code) == 0) {
    status[1] = (int)blockIdx.x;
    status[2] = a;
    status[3] = b;
    status[4] = c;
    status[5] = pc;
    __threadfence();
  }
}

// Called by thread 0 only, after the __syncthreads that ends the previous instruction: that barrier orders every
// thread's writes before this release, and a release is cumulative (PTX memory model), so consumers that acquire
// the counter see all of them. No separate __threadfence: it would be a second, stronger fence.sc on the critical
// path of every step (the release already waits for the CTA's writes).
__device__ __forceinline__ void vpps_signal(u32* counter) {
  red_release_add(counter, 1u);
}

// Called by thread 0 only; the __syncthreads after the instruction releases the other threads. Bounded: a barrier
// nobody signals (a scheduling bug) or a failed peer ends the launch with an error instead of a hang.
__device__ bool vpps_wait(const u32* counter, u32 expected, int* status, u32 barrier, int pc) {
  // The wait is on the critical path of every step (batch 1: ~85 waits of the busiest processor): spin without
  // sleeping for the first kSpinHot polls (each is an L2 round trip, ~0.5 us, one thread per CTA, so the L2 barely
  // notices), and back off only when a wait is long, i.e. off the critical path anyway.
  constexpr u32 kSpinHot = 2048u;
  u32 seen;
  u32 spins = 0;
  u32 sleep_ns = 32;
  while ((seen = ld_acquire(counter)) < expected) {
    if (++spins > kBarrierSpinLimit) {
      report_error(status, kErrBarrierTimeout, (int)barrier, (int)seen, (int)expected, pc);
      return false;
    }
    if ((spins & 1023u) == 0 && *(volatile int*)status != 0) return false; // another processor already failed
    if (spins > kSpinHot) {
      __nanosleep(sleep_ns);
      if (sleep_ns < 256) sleep_ns <<= 1;
    }
  }
  return true;
}
`;

/** A status block that reports an error: its code, the CTA that reported it, three code-specific words and a position. */
export interface StatusError {
  readonly code: number;
  readonly cta: number;
  readonly a: number;
  readonly b: number;
  readonly c: number;
  /** Where the CTA was (VPPS: the script word of the instruction). */
  readonly pc: number;
  /** The STATUS_WORDS words as read. */
  readonly words: readonly number[];
}

/** The error a status block reports, or undefined when word 0 is 0 (no error). */
export function readStatusError(status: ArrayLike<number>): StatusError | undefined {
  const words = Array.from({ length: STATUS_WORDS }, (_, i) => status[i] ?? 0);
  const [code, cta, a, b, c, pc] = words as [number, number, number, number, number, number];
  return code === 0 ? undefined : { code, cta, a, b, c, pc, words };
}

/** The reason of a barrier timeout, after "processor (CTA) N": which barrier, where, and what it saw. */
export function barrierTimeoutMessage(e: StatusError, where: string): string {
  return (
    `timed out waiting on barrier ${e.a} at ${where}: expected ${e.c} signals, saw ${e.b} ` +
    "(a processor failed earlier, the grid is not co-resident, or the schedule forgot a signal); run it with the GPU " +
    "to itself (no other process or MPS client on it), and if it happens again report it with VPPS_DUMP=<dir>"
  );
}

/**
 * A failure a persistent kernel reported through its status block: one line naming the processor, the barrier or
 * the instruction, and what to do (a UserError: the command line prints it without a trace; a barrier timeout is
 * most often a GPU shared with other work).
 */
export class PersistentKernelError extends UserError {
  override readonly name: string = "PersistentKernelError";
  constructor(
    message: string,
    readonly code: number,
    /** The CTA (virtual processor) that reported it. */
    readonly processor: number,
    /** Barrier id for a timeout, else -1. */
    readonly barrier: number,
    readonly status: readonly number[],
  ) {
    super(message);
  }
}
