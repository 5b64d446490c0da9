/**
 * From `fb` to the GPU, in order: a batch is scheduled on the main thread or posted to the schedule workers
 * (schedule/pool.ts), and every batch whose script is ready is submitted (submit.ts), with what `fb` fixed for it
 * (learning rate, clip, Adam's step) and CUDA events where timing asks for them. Counts the host's and the
 * device's time in `stats`.
 *
 * Data-parallel mode with schedule workers: a scheduled batch's exchange of touched rows with the other ranks
 * (dp-update.ts) is started when the batch is taken from the workers, and the batch is held (in order) until the
 * exchange is in; later `fb` calls launch the held batches whose exchanges have completed, without waiting. The host
 * then goes on building and posting graphs instead of waiting for the other ranks at every launch, and the ranks'
 * hosts are tied to each other only `pipelineSlots` batches apart (more held batches than that: the oldest is
 * waited for).
 *
 * Recurring batches (`BuildRequest.recurring`, the training loop's fixed batches) keep their scripts (script-cache.ts):
 * the first time one is scheduled its script is kept, and later the kept copy takes its place in launch order instead
 * of a post to the workers. In data-parallel mode they keep the union of the ranks' touched rows too, where every
 * rank agrees to (dp-exchange.ts): a kept union launches without an exchange, so without waiting for the other
 * ranks' hosts.
 */
import type { BuildRequest } from "../../../graph/builder.js";
import type { ComputationGraph, Expression } from "../../../graph/graph.js";
import type { KernelVariant } from "../codegen/variant.js";
import type { HostTrace } from "../instrument/host-trace.js";
import type { VppsHooks } from "../options.js";
import type { AdamStep } from "../plan/moments.js";
import type { ScheduledBatch } from "../schedule/batch.js";
import type { PooledBatch, SchedulePool } from "../schedule/pool.js";
import type { VppsScheduler } from "../schedule/scheduler.js";
import { type DpExchange, type KeptUnions, keptExchange } from "./dp-exchange.js";
import { ScriptCache } from "./script-cache.js";
import type { VppsRuntime } from "./submit.js";

/**
 * Host and device time of the batches submitted so far (ms, summed). On the main thread, `fb` costs
 * `scheduleMs + submitMs` without schedule workers, and `snapshotMs + waitMs + submitMs` with them.
 */
export interface VppsStats {
  /** Batches submitted to the GPU. */
  batches: number;
  /** Scheduling and encoding: on the main thread, or (with schedule workers) the workers' own time, summed. */
  scheduleMs: number;
  /** Pinned copy, memsets, launch, and the wait for the previous batch. */
  submitMs: number;
  /** Schedule workers: snapshotting graphs and posting them (main thread). */
  snapshotMs: number;
  /** Schedule workers: the main thread blocked, waiting for a script. */
  waitMs: number;
  kernelMs: number;
  timedBatches: number;
  /**
   * Timed batches only: the kernel stream's time between one batch's kernel and the next one's (copies, memsets, and
   * any wait for the host: the GPU idles), summed over `gapBatches` consecutive pairs.
   */
  gapMs: number;
  gapBatches: number;
  nodes: number;
  /** Batches launched from a kept script (script-cache.ts): no graph built, nothing scheduled. */
  keptBatches: number;
}

/** What `fb` fixes for a batch that is submitted later (schedule workers). */
export interface BatchTag {
  readonly lr: number;
  readonly clip: number;
  /** Adam's step for this batch (undefined: SGD, or a learning rate of 0). */
  readonly adam: AdamStep | undefined;
  /** A profiling run of a batch that trains on another variant: learning rate 0, its loss not reported. */
  readonly quiet: boolean;
}

/** A variant the launcher can schedule on: its position in the workers' plan list and its own scheduler. */
export interface LaunchVariant extends KernelVariant {
  readonly index: number;
  readonly scheduler: VppsScheduler;
}

export interface LauncherOptions {
  /** Batches posted to the workers and not yet launched before `run` waits for the oldest. */
  readonly scheduleAhead: number;
  /** instrument.timing: events around every batch, or around two consecutive batches in every N. */
  readonly timing: boolean | number;
  /** Whether the variants are being profiled (every batch is timed then). */
  readonly profiling: () => boolean;
}

/**
 * A batch in launch order: posted to the workers (taken from the pool in turn; `keep`: keep its script), or kept.
 * `rows`: a recurring batch's name for its kept union of touched rows (ScriptCache.batchName).
 */
type Queued =
  | {
      readonly kind: "posted";
      readonly keep?: { readonly key: string; readonly dropoutKey: number };
      readonly rows?: string;
    }
  | { readonly kind: "kept"; readonly b: PooledBatch<BatchTag>; readonly rows?: string };

/** A scheduled batch waiting for its exchange of touched rows (data-parallel mode). */
interface Held {
  readonly b: PooledBatch<BatchTag>;
  readonly exchange: DpExchange | undefined;
  readonly rows: string | undefined;
  /** When it was taken from the workers (trace only). */
  readonly at: number;
}

export class BatchLauncher<V extends LaunchVariant> {
  readonly stats: VppsStats = {
    batches: 0,
    scheduleMs: 0,
    submitMs: 0,
    snapshotMs: 0,
    waitMs: 0,
    kernelMs: 0,
    timedBatches: 0,
    gapMs: 0,
    gapBatches: 0,
    nodes: 0,
    keptBatches: 0,
  };
  /** The newest loss the GPU has finished, as `fb` returns it. */
  latest = Number.NaN;
  /** The last batch submitted, and its variant. */
  last: { variant: V; schedule: ScheduledBatch } | undefined;
  /** Pipeline batch numbers of quiet profiling runs not yet retired (their losses are not reported). */
  private readonly quietBatches = new Set<number>();
  /** Data-parallel mode: batches taken from the workers, in order, not launched until their exchange is in. */
  private readonly held: Held[] = [];
  /** The host timeline (host-trace.ts), or undefined. */
  trace: HostTrace | undefined;
  /** Scripts of recurring batches (undefined: none kept). Emptied by the owner when the schedulers change. */
  scripts: ScriptCache | undefined;
  /**
   * Data-parallel mode: unions of touched rows of recurring batches (undefined: none kept). Emptied by the owner at
   * the same step on every rank (the reducer or the optimizer changes), never otherwise.
   */
  unions: KeptUnions | undefined;
  /** Batches posted or kept, not yet taken, in launch order. */
  private readonly queue: Queued[] = [];
  /** Kept batches being submitted (their buffers are the cache's, never handed back to the pool). */
  private readonly kept = new WeakSet<PooledBatch<BatchTag>>();

  constructor(
    private readonly runtime: VppsRuntime,
    /** The schedule workers (undefined: schedule in `run`); replaced when the schedulers' options change. */
    public pool: SchedulePool<BatchTag> | undefined,
    /** The variant of a plan position (the workers report batches by it). */
    private readonly variantAt: (index: number) => V,
    private readonly o: LauncherOptions,
    private readonly hooks: VppsHooks,
  ) {}

  /** Whether a retired batch was a quiet profiling run (whose loss is not reported); forgets it. */
  retiredQuiet(batch: number): boolean {
    return this.quietBatches.size > 0 && this.quietBatches.delete(batch);
  }

  /**
   * Schedules (here or on a worker) and launches one batch on variant v. `recurring`: the batch's name where it recurs
   * (fixed batches): with schedule workers its script is kept under it, as `runBuilt` keeps those the workers build.
   */
  run(v: V, graph: ComputationGraph, loss: Expression, tag: BatchTag, recurring?: BuildRequest): void {
    const pool = this.pool;
    if (pool === undefined) {
      this.launchHeld(true); // batches of an earlier pool first, in order
      const t0 = performance.now();
      const s = v.scheduler.schedule(graph, loss);
      this.hooks.editScript?.(s.script, v.plan.ctas);
      const ms = performance.now() - t0;
      this.stats.scheduleMs += ms;
      this.trace?.sample("schedule", ms);
      this.latest = this.submit(v, s, graph.inputData.subarray(0, graph.inputSize), tag);
      return;
    }
    const trace = this.trace;
    const t0 = trace ? performance.now() : 0;
    pool.post(graph, loss, v.index, tag);
    const { key, rows } = this.keysOf(v, recurring);
    this.queue.push({
      kind: "posted",
      ...(key !== undefined ? { keep: { key, dropoutKey: recurring!.dropoutKey } } : {}),
      ...(rows !== undefined ? { rows } : {}),
    });
    if (trace) trace.add("post", performance.now() - t0);
    this.submitScheduled(false);
  }

  /** Posts a batch for the workers' graph builder to build and schedule on variant v, and launches what is ready. */
  runBuilt(v: V, request: BuildRequest, tag: BatchTag): void {
    const pool = this.pool;
    if (pool === undefined) throw new Error("VPPS: batches built on the workers need schedule workers");
    const trace = this.trace;
    const t0 = trace ? performance.now() : 0;
    const { key, rows } = this.keysOf(v, request);
    const hit = key !== undefined ? this.scripts!.get(key, request.dropoutKey) : undefined;
    if (hit !== undefined) {
      const b: PooledBatch<BatchTag> = {
        id: -1,
        variant: hit.variant,
        tag,
        batch: hit.batch,
        inputs: hit.inputs,
        scheduleMs: 0,
        dropout: hit.dropoutKey !== undefined,
        inputBuffer: hit.inputs.buffer as ArrayBuffer,
        release: () => {},
        slot: -1,
      };
      this.kept.add(b);
      this.queue.push({ kind: "kept", b, ...(rows !== undefined ? { rows } : {}) });
    } else {
      pool.postBuilt(request, v.index, tag);
      this.queue.push({
        kind: "posted",
        ...(key !== undefined ? { keep: { key, dropoutKey: request.dropoutKey } } : {}),
        ...(rows !== undefined ? { rows } : {}),
      });
    }
    if (trace) trace.add("post", performance.now() - t0);
    this.submitScheduled(false);
  }

  /**
   * What a recurring batch keeps on variant v (undefined: nothing): its script under `key`, and, in data-parallel
   * mode, its union of touched rows under `rows` (the batch's name, computed once).
   */
  private keysOf(v: V, request: BuildRequest | undefined): { key?: string; rows?: string } {
    const name = request === undefined ? undefined : ScriptCache.batchName(request);
    if (name === undefined) return {};
    // a test's script edits would apply again to a kept script: nothing is kept with that hook
    const key =
      this.scripts !== undefined && this.hooks.editScript === undefined
        ? ScriptCache.scriptKey(v.index, name)
        : undefined;
    const rows =
      this.unions !== undefined && this.runtime.dataParallel && request!.examples.length > 0 ? name : undefined;
    return { key, rows };
  }

  /** Waits for the schedule workers and launches every batch posted so far. */
  flush(): void {
    this.submitScheduled(true);
  }

  /** Launches scheduled batches in order: those ready, or (`all`) every one posted, waiting for the workers. */
  private submitScheduled(all: boolean): void {
    const pool = this.pool;
    if (pool === undefined) {
      this.launchHeld(all);
      return;
    }
    const trace = this.trace;
    const waited = trace ? pool.stats.waitMs : 0;
    try {
      for (;;) {
        const head = this.queue[0];
        if (head === undefined) break;
        let b: PooledBatch<BatchTag> | undefined;
        if (head.kind === "kept") b = head.b;
        else {
          try {
            b = pool.take(all || pool.pending > this.o.scheduleAhead);
          } catch (e) {
            this.queue.shift(); // the pool dropped the failed batch
            throw e;
          }
          if (b === undefined) break;
          if (trace) trace.sample("schedule", b.scheduleMs);
          if (head.keep !== undefined) {
            this.scripts?.put(head.keep.key, b.variant, b.batch, b.inputs, b.dropout, head.keep.dropoutKey);
          }
        }
        this.queue.shift();
        if (!this.runtime.dataParallel && this.held.length === 0) {
          this.submitPooled(b);
          continue;
        }
        this.hold(b, head.rows);
        this.launchHeld(false);
      }
      this.launchHeld(all);
    } finally {
      this.stats.snapshotMs = pool.stats.snapshotMs;
      this.stats.waitMs = pool.stats.waitMs;
      if (trace) trace.add("workers", pool.stats.waitMs - waited);
    }
  }

  /**
   * Starts a taken batch's exchange and holds the batch until it is in; a recurring batch (`rows`) whose union every
   * rank kept launches with the kept union instead, and one whose union is not kept asks the others to keep it.
   */
  private hold(b: PooledBatch<BatchTag>, rows: string | undefined): void {
    let exchange: DpExchange | undefined;
    try {
      const unions = this.unions;
      if (rows !== undefined && unions !== undefined && this.runtime.dataParallel && b.tag.lr > 0) {
        // an earlier run of this batch still held: its gather decides first whether every rank keeps the union
        for (const h of this.held) if (h.rows === rows) this.keepUnion(h.rows, h.exchange);
        const union = unions.get(rows);
        if (union !== undefined) exchange = keptExchange(union);
        else exchange = this.runtime.startExchange(b.batch, b.tag.lr, unions.hasRoom());
      } else exchange = this.runtime.startExchange(b.batch, b.tag.lr);
    } catch (e) {
      this.releaseTaken(b);
      throw e;
    }
    this.held.push({ b, exchange, rows, at: this.trace ? performance.now() : 0 });
  }

  /** Keeps a recurring batch's union where every rank asked to (waits for its gather). */
  private keepUnion(rows: string | undefined, exchange: DpExchange | undefined): void {
    const unions = this.unions;
    if (rows === undefined || exchange === undefined || unions === undefined || unions.has(rows)) return;
    if (exchange.keptByAll()) unions.put(rows, exchange.union());
  }

  /**
   * Launches the held batches, oldest first, while their exchanges are in; `all` waits for every one, and more than
   * `pipelineSlots` held batches wait for the oldest.
   */
  private launchHeld(all: boolean): void {
    const limit = this.runtime.pipeline.slots;
    while (this.held.length > 0) {
      const h = this.held[0]!;
      const ready = h.exchange === undefined || h.exchange.ready();
      if (!ready && !all && this.held.length <= limit) return;
      this.held.shift();
      const trace = this.trace;
      if (trace && h.exchange !== undefined) trace.sample("held", performance.now() - h.at);
      this.submitPooled(h.b, h.exchange);
      this.keepUnion(h.rows, h.exchange); // its gather is in: submit waited for it
    }
  }

  private submitPooled(b: PooledBatch<BatchTag>, exchange?: DpExchange): void {
    try {
      const v = this.variantAt(b.variant);
      this.stats.scheduleMs += b.scheduleMs;
      if (this.kept.has(b)) this.stats.keptBatches++;
      this.hooks.editScript?.(b.batch.script, v.plan.ctas);
      this.latest = this.submit(v, b.batch, b.inputs, b.tag, exchange);
    } finally {
      this.releaseTaken(b);
    }
  }

  /**
   * Hands a taken batch's buffers back to the pool — held batches are launched before the pool is replaced (flush),
   * so this is the pool the batch came from — or, for a kept batch, leaves them with the cache.
   */
  private releaseTaken(b: PooledBatch<BatchTag>): void {
    if (this.kept.has(b)) {
      this.kept.delete(b);
      return;
    }
    this.pool?.release(b);
  }

  private submit(v: V, s: ScheduledBatch, inputs: Float32Array, tag: BatchTag, exchange?: DpExchange): number {
    const t1 = performance.now();
    const t = this.o.timing;
    // a sampled batch and the one after it, so that the time between their kernels is measured too
    const timed = this.o.profiling() || t === true || (typeof t === "number" && this.stats.batches % t < 2);
    const index = this.runtime.pipeline.batches;
    if (tag.quiet) this.quietBatches.add(index);
    let prev: number;
    try {
      prev = this.runtime.submit(v, s, inputs, tag.lr, tag.clip, timed, tag.adam, exchange);
    } catch (e) {
      this.quietBatches.delete(index); // not launched: the next batch gets this number
      throw e;
    }
    this.stats.submitMs += performance.now() - t1;
    this.last = { variant: v, schedule: s };
    this.stats.batches++;
    this.stats.nodes += s.liveNodes;
    return prev;
  }
}
