/**
 * What a persistent layer does when ptxas spills its planned kernels (the planner's register estimate is a model, and
 * ptxas versions differ): plan again with a few registers per thread kept free, then more, and give up only after
 * the last — never a refusal the planner could have avoided. Kept apart from the layer so that the policy is tested
 * without a GPU (test/rnn-kernels.test.ts).
 */
import { KernelSpillError } from "../../cuda/index.js";

/** The extra registers per thread a layer is planned again with, in turn, while its widest layout spills. */
export const SPILL_HEADROOM_STEPS = [8, 16, 24] as const;

/**
 * `attempt(headroom)` plans and compiles with `headroom` registers per thread kept free, throwing KernelSpillError
 * where a kernel spilled; it is tried with `base`, then base + each of SPILL_HEADROOM_STEPS, with a one-line notice
 * before each retry (`what` names the layer). After the last, `giveUp(headroom, error)` is thrown. Any other error
 * ends the tries at once.
 */
export function planUntilNoSpill<T>(o: {
  readonly base: number;
  readonly what: string;
  readonly attempt: (headroom: number) => T;
  readonly notice: (line: string) => void;
  readonly giveUp: (headroom: number, e: KernelSpillError) => Error;
}): T {
  for (let k = 0; ; k++) {
    const headroom = o.base + (k === 0 ? 0 : SPILL_HEADROOM_STEPS[k - 1]!);
    try {
      return o.attempt(headroom);
    } catch (e) {
      if (!(e instanceof KernelSpillError)) throw e;
      if (k === SPILL_HEADROOM_STEPS.length) throw o.giveUp(headroom, e);
      o.notice(
        `vpps: ${o.what}: the planned layout spills (${e.localBytes} bytes per thread); planned again with ` +
          `${o.base + SPILL_HEADROOM_STEPS[k]!} registers per thread kept free`,
      );
    }
  }
}
