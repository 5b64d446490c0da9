/** What the scheduler hands on for one batch: the encoded script, the pool layout it addresses, and what the launch needs. */
import type { BatchLayout } from "../plan/layout.js";

export interface BatchSchedule {
  readonly layout: BatchLayout;
  /** Prefix sums, all processors' scripts and the shared operand table (script/format.ts). */
  readonly script: Uint32Array;
  /** Barrier counters the script uses (zeroed before the launch). */
  readonly barriers: number;
  /** "kernel": the script ends with the update; "host": gradients are exported and the host updates. */
  readonly update: "kernel" | "host";
  readonly lossOffset: number;
  readonly liveNodes: number;
  /** The script's tile.wbar instructions add into the gradient buffer: it must be zero at launch. */
  readonly zeroGradients: boolean;
}
