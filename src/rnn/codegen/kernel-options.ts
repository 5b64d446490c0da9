/**
 * What the host and the generated persistent kernels agree on besides the parameters (params.ts): the build options,
 * the kernel names and status codes, the pending mark, the cluster rule (which plans are built as CTA pairs for the
 * multicast loads) and the instrumented build's phase counters.
 */
import { FIRST_KERNEL_ERROR } from "../../codegen/grid-barrier.js";

/** Status codes of the RNN kernels (status word 0). */
export const RNN_ERRORS = {
  /** A polled value did not arrive: [code, cta, step, row, column, -1]. */
  pollTimeout: FIRST_KERNEL_ERROR,
} as const;

/** Polls before a value that does not arrive is reported (each poll is an L2 round trip, ~0.5–1 µs). */
export const POLL_SPIN_LIMIT = 1 << 21;

/** Kernel names in a generated module. */
export const RNN_KERNEL_NAMES = { forward: "rnn_forward", backward: "rnn_backward" } as const;

/** The −0.0 bit pattern that marks a value not yet written. */
export const PENDING_BITS = 0x80000000;

/** Options of a generated kernel. */
export interface RnnKernelOptions {
  /**
   * Instrumented build: thread 0 of every CTA adds the clock cycles of each phase of a tile (PHASE_NAMES) into the
   * module's global `rnn_phase[cta][phase]` (for `vpps bench rnn` with VPPS_RNN_PHASES=1; not for production).
   */
  readonly phases?: boolean;
  /**
   * Launch as clusters of two CTAs, for the multicast loads (default: `multicastPays`; forced on or off here, as
   * VPPS_RNN_CLUSTER=1/0 does). The grid must be even either way.
   */
  readonly cluster?: boolean;
  /**
   * CTAs per cluster of a clustered build: 2 (the two SMs of a TPC; the default) or 4 (a quarter of the L2 reads,
   * where the grid divides and the GPCs hold every cluster at once — the host checks; VPPS_RNN_CLUSTER_SIZE=4).
   */
  readonly clusterSize?: 2 | 4;
  /**
   * The forward kernel includes the pipelined tile loop (each tile's cell deferred past the next tile's wait). A
   * build of its own, which the layer runs for launches whose replica holds more than two tiles (pipelinedForward).
   */
  readonly pipelinedForward?: boolean;
  /**
   * The backward kernel's pipelined tile loop defers each tile's cell past the next tile's wait, as the forward's
   * does (a build of its own, for the same launches; without it the loop runs each tile's cell after its product).
   */
  readonly deferredBackward?: boolean;
}

/**
 * Weight registers per thread from which the pair multicast pays. Measured on an H100 in one run against the same
 * kernels without clusters: layouts near the register limit (8 warps
 * per SM that cannot hide the load: RNN 2304, LSTM 1152 — 180 weight registers) gain 4–12% at batch 1–4 and up to 14%
 * at 16; layouts with many threads and few weights (RNN 512/1152, GRU 512/1152: 16–100) lose 4–11% at batch 1–4
 * (the barrier round adds latency to a poll that is not bandwidth-bound there) though they gain at 16. RNN 1792 (112
 * weight registers, measured clustered later than the others) gains 10–21% forward and 7–13% forward+backward at
 * batch 1–16: the bound is 112.
 */
export const MULTICAST_MIN_WEIGHT_REGISTERS = 112;

/** Whether the pair multicast is expected to pay for a kernel of this plan (see MULTICAST_MIN_WEIGHT_REGISTERS). */
export function multicastPays(plan: { readonly weightRegisters: number }): boolean {
  return plan.weightRegisters >= MULTICAST_MIN_WEIGHT_REGISTERS;
}

/** Whether a kernel of this plan is built as clusters of two CTAs. */
export function clustered(
  plan: { readonly ctas: number; readonly weightRegisters: number },
  opts: RnnKernelOptions = {},
): boolean {
  return plan.ctas % 2 === 0 && (opts.cluster ?? multicastPays(plan));
}

/** CTAs per cluster of a kernel of this plan: 0 (not clustered), 2 or 4 (`opts.clusterSize` where the grid divides). */
export function clusterSize(
  plan: { readonly ctas: number; readonly weightRegisters: number },
  opts: RnnKernelOptions = {},
): 0 | 2 | 4 {
  if (!clustered(plan, opts)) return 0;
  return opts.clusterSize === 4 && plan.ctas % 4 === 0 ? 4 : 2;
}

/** The phases an instrumented kernel times, in the order of `rnn_phase`'s columns. */
export const PHASE_NAMES = ["sync", "poll", "matvec", "cell"] as const;
/** The instrumented kernels' per-CTA counters (u64) and how many CTAs they hold. */
export const PHASE_GLOBAL = "rnn_phase";
export const PHASE_MAX_CTAS = 1024;

export function phaseMacros(on: boolean): string {
  if (!on) return "#define PHASE_START\n#define PHASE(i)\n";
  return `__device__ unsigned long long ${PHASE_GLOBAL}[${PHASE_MAX_CTAS}][${PHASE_NAMES.length}];
#define PHASE_START long long ph_t = clock64();
#define PHASE(i) if (threadIdx.x == 0) { const long long ph_n = clock64(); atomicAdd(&${PHASE_GLOBAL}[blockIdx.x][i], (unsigned long long)(ph_n - ph_t)); ph_t = ph_n; }
`;
}
