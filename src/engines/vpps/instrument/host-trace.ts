/**
 * A per-step timeline of VPPS's host (option `instrument.hostTrace`, or VPPS_DP_TRACE=1): where the main thread's
 * time goes in each `fb` (one training step) and what each batch waited for, so that one run tells whether a step
 * is bound by building graphs, by the schedule workers, by the ranks' host exchange (data-parallel mode), by the GPU,
 * or by the GPU waiting for the host. Off (undefined), nothing is measured: every caller checks for the trace first.
 *
 * Phases of a step (main thread, ms): `build` the caller's time between two `fb` calls (its graph); inside `fb`:
 * `post` snapshotting and posting the graph to a schedule worker, `workers` blocked waiting for a worker's script,
 * `exchange` blocked waiting for the other ranks' touched rows, `slot` blocked waiting for a pipeline slot (the GPU
 * is `pipelineSlots` batches behind), `launch` copies, memsets and the kernel launch, `allreduce` enqueuing the NCCL
 * all-reduces, `update` enqueuing the gradient copy and update kernels, `other` the rest. Per batch: the worker's
 * `schedule` time, how long the batch was held from its exchange's start to its launch (the exchange's round trip
 * plus the wait for the main thread to come by), and (CUDA events) the GPU's busy time per batch (the kernel, then
 * the all-reduces and update, which include any wait for the slowest rank's GPU) and its idle time between batches.
 */

export const HOST_PHASES = ["post", "workers", "exchange", "slot", "launch", "allreduce", "update"] as const;
export type HostPhase = (typeof HOST_PHASES)[number];

export const BATCH_SAMPLES = ["schedule", "held", "gpuBusy", "gpuAfter", "gpuIdle"] as const;
export type BatchSample = (typeof BATCH_SAMPLES)[number];

const P = HOST_PHASES.length;
const phaseIndex = Object.fromEntries(HOST_PHASES.map((p, i) => [p, i])) as Record<HostPhase, number>;

/** The trace's setting from VPPS_DP_TRACE: "1" (or any positive number) turns it on; unset, "" or "0": off. */
export function hostTraceFromEnv(env: Readonly<Record<string, string | undefined>> = process.env): boolean {
  const v = env.VPPS_DP_TRACE;
  return v !== undefined && v.trim() !== "" && v.trim() !== "0";
}

function median(xs: readonly number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

function sum(xs: readonly number[]): number {
  let t = 0;
  for (const x of xs) t += x;
  return t;
}

export class HostTrace {
  /** The current step's phase times. */
  private readonly cur = new Float64Array(P);
  /** Per finished step: the phase times, then build, fb and the whole step (fb entry to fb entry). */
  private steps: Float64Array[] = [];
  private samples: Record<BatchSample, number[]> = { schedule: [], held: [], gpuBusy: [], gpuAfter: [], gpuIdle: [] };
  private lastExit: number | undefined;
  private lastEnter: number | undefined;
  private enter = 0;
  private depth = 0;

  add(phase: HostPhase, ms: number): void {
    this.cur[phaseIndex[phase]]! += ms;
  }

  /** The current step's phase times so far, summed (a caller subtracts what was counted during its own call). */
  counted(): number {
    let t = 0;
    for (let i = 0; i < P; i++) t += this.cur[i]!;
    return t;
  }

  sample(kind: BatchSample, ms: number): void {
    this.samples[kind].push(ms);
  }

  /** `fb` starts (nested calls, e.g. a profiled batch's runs on each variant, count once). */
  enterStep(now: number): void {
    if (this.depth++ > 0) return;
    this.enter = now;
  }

  /** `fb` returns: the step's record is complete. */
  exitStep(now: number): void {
    if (--this.depth > 0) return;
    const rec = new Float64Array(P + 3);
    rec.set(this.cur);
    rec[P] = this.lastExit === undefined ? Number.NaN : this.enter - this.lastExit;
    rec[P + 1] = now - this.enter;
    rec[P + 2] = this.lastEnter === undefined ? Number.NaN : this.enter - this.lastEnter;
    this.steps.push(rec);
    this.cur.fill(0);
    this.lastExit = now;
    this.lastEnter = this.enter;
  }

  /** Steps recorded since the last report. */
  get stepCount(): number {
    return this.steps.length;
  }

  /**
   * One line of medians over the steps and batches since the last report (which it forgets), e.g.
   * `vpps host trace rank 1/2: 64 steps; median ms per step: step 7.9 = build 2.1 + fb 5.8 (…); per batch: …`.
   */
  report(who: string): string | undefined {
    const steps = this.steps.filter((r) => Number.isFinite(r[P + 2]!));
    if (steps.length === 0) return undefined;
    const col = (i: number) => median(steps.map((r) => r[i]!));
    const f = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : "-");
    const phases = HOST_PHASES.map((p, i) => `${p} ${f(col(i))}`);
    let inside = 0;
    for (const r of steps) {
      let named = 0;
      for (let i = 0; i < P; i++) named += r[i]!;
      inside += r[P + 1]! - named;
    }
    phases.push(`other ${f(inside / steps.length)} (mean)`);
    const s = this.samples;
    const line =
      `vpps host trace ${who}: ${steps.length} steps; median ms per step: step ${f(col(P + 2))} = build ` +
      `${f(col(P))} + fb ${f(col(P + 1))} (${phases.join(", ")}); per batch (median): schedule ${f(median(s.schedule))} ` +
      `on a worker, held ${f(median(s.held))} from its exchange's start to its launch; GPU ` +
      `busy ${f(median(s.gpuBusy))}${s.gpuAfter.length > 0 ? ` (all-reduces and update ${f(median(s.gpuAfter))})` : ""}, ` +
      `idle ${f(median(s.gpuIdle))} before the batch (${s.gpuBusy.length} timed); summed: busy ${f(sum(s.gpuBusy))}` +
      `${s.gpuAfter.length > 0 ? ` (all-reduces and update ${f(sum(s.gpuAfter))})` : ""}, idle ${f(sum(s.gpuIdle.slice(1)))} ` +
      `after the first batch (longest ${f(s.gpuIdle.length > 1 ? Math.max(...s.gpuIdle.slice(1)) : Number.NaN)}; before the first ` +
      `${f(s.gpuIdle[0] ?? Number.NaN)})`;
    this.steps = [];
    this.samples = { schedule: [], held: [], gpuBusy: [], gpuAfter: [], gpuIdle: [] };
    return line;
  }
}
