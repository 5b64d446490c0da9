/** What the runtime launches: one compiled kernel variant, and the Adam arguments every launch passes. */
import { type CudaKernel, karg } from "../../../cuda/index.js";
import type { ModelLayout } from "../plan/layout.js";
import { type AdamStep, adamKernelArgs } from "../plan/moments.js";
import type { VppsPlan } from "../plan/plan.js";

/** One compiled kernel variant (a plan: ctasPerSm, rpw, gradient placement). */
export interface KernelVariant {
  readonly plan: VppsPlan;
  readonly model: ModelLayout;
  readonly kernel: CudaKernel;
  readonly name: string;
  /** Rendered with `profile: true`: the launch passes the profile counters (codegen/template.ts PROFILE_WORDS). */
  readonly profiled?: boolean;
  /** Rendered with `trace: true`: the launch passes the trace buffer (codegen/template.ts TRACE_SLOTS per CTA). */
  readonly traced?: boolean;
}

/** The kernels' Adam arguments after the learning rate (zeros for SGD, whose scripts never read them). */
export function adamArgs(adam: AdamStep | undefined) {
  return (adam === undefined ? new Array<number>(7).fill(0) : adamKernelArgs(adam)).map((x) => karg.f32(x));
}
