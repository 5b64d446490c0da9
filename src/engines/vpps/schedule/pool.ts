/**
 * Scheduling VPPS batches on worker threads while the main thread builds the next graph (the main side; the
 * worker's is worker.ts). A batch's schedule depends only on its graph and the fixed plan, so batches go to
 * whichever worker has the fewest in hand and are taken back in the order they were posted.
 *
 * Protocol, per worker: one MessageChannel. The main thread posts `ScheduleJob`s: the graph's nodes lent, not copied
 * (`ComputationGraph.lend`: its node arrays live in shared memory, and the graph builds the next batch in other
 * arrays while the loan is out), its input values copied into a buffer that is transferred, and a script buffer of an
 * earlier batch of that worker, returned for reuse. The worker answers each with a `ScheduleReply` (script and
 * layout arrays transferred, the input buffer returned), then bumps a shared Int32 counter and notifies it. The loan
 * ends when the batch is released. Buffers go round in circles: once warm, no batch allocates (and zeroes and
 * page-faults) megabytes of fresh memory on either side, nor leaves them to the garbage collector, and posting a
 * batch of 128 trees copies no node array (a snapshot copied 2 MB). The main thread's `fb` is
 * synchronous, so it never waits on the event loop: it reads replies with `receiveMessageOnPort` and, when it must
 * block, sleeps in `Atomics.wait` on the counter (reading the counter before polling the ports, so that no reply
 * slips between the poll and the wait).
 *
 * The worker runs from `worker.ts` under tsx (tests, the CLI in a checkout) or `worker.js` in a
 * built package, whichever matches this module's own file. A small CommonJS bootstrap (util/worker-module.ts) imports it and, when
 * the .ts file cannot be loaded because no TypeScript loader is active in the worker (tsx's `--import` hook is
 * registered in the main thread only on Node 20; `bin/vpps.js` registers tsx through its API), registers tsx's ESM
 * loader in the worker and imports it again. A worker that fails to start, or throws outside a job, reports a
 * fatal error through the same channel, so a blocked main thread wakes and throws it instead of hanging.
 */
import { availableParallelism } from "node:os";
import { MessageChannel, type MessagePort, receiveMessageOnPort, Worker } from "node:worker_threads";
import type { BuildRequest, GraphBuilderSpec } from "../../../graph/builder.js";
import type { ComputationGraph, Expression, GraphParameter, LentGraph } from "../../../graph/graph.js";
import { UserError } from "../../../util/errors.js";
import { MODULE_BOOTSTRAP, siblingModule, type WorkerFatal } from "../../../util/worker-module.js";
import type { VppsPlan } from "../plan/plan.js";
import type { ScheduledBatch } from "./batch.js";
import type { ScheduleOptions } from "./scheduler.js";

/** What a worker is started with (structured-cloned; `port` transferred). */
export interface ScheduleWorkerData {
  readonly port: MessagePort;
  /** One Int32: bumped (and notified) by every worker after every reply. */
  readonly counter: SharedArrayBuffer;
  readonly params: readonly GraphParameter[];
  /** One per kernel variant, in the engine's order (a job names its variant by index). */
  readonly plans: readonly VppsPlan[];
  readonly options: ScheduleOptions;
  /** URL of the worker module, and of tsx's ESM API when that module is TypeScript. */
  readonly entry: string;
  readonly tsx: string | undefined;
  /** Where the bootstrap reports a failure to start (util/worker-module.ts): this port and the counter. */
  readonly fatal: WorkerFatal;
}

/**
 * Main → worker: schedule the lent graph (ComputationGraph.lend) whose loss is node `loss`; or, with `build`, build
 * the batch's graph with the graph builder first (`graph` and `loss` unused; `inputs`, possibly empty, is a buffer to
 * reuse for the batch's input values, which go back with the reply).
 */
export interface ScheduleJob {
  readonly id: number;
  readonly variant: number;
  readonly loss: number;
  readonly graph: LentGraph | undefined;
  /** The graph's input values at [0, graph.inputSize) (transferred, returned with the reply). */
  readonly inputs: ArrayBuffer;
  /** A script buffer this worker sent earlier, back for reuse (transferred), or undefined. */
  readonly spare: ArrayBuffer | undefined;
  readonly build?: BuildRequest;
}

/** Main → worker: import this graph builder (answered with "builder-ready" or "builder-failed"). */
export interface BuilderMessage {
  readonly kind: "builder";
  readonly spec: GraphBuilderSpec;
}

/** Worker → main. */
export type ScheduleReply =
  | { readonly kind: "ready" }
  | {
      readonly kind: "done";
      readonly id: number;
      readonly batch: ScheduledBatch;
      /** The worker's time for this job: rebuild, schedule and encode, detach. */
      readonly ms: number;
      /** The graph's input values at [0, inputSize). */
      readonly inputs: ArrayBuffer;
      readonly inputSize: number;
      /** The graph has dropout nodes (its script depends on the graph's dropout key). */
      readonly dropout: boolean;
    }
  | {
      readonly kind: "failed";
      readonly id: number;
      readonly name: string;
      readonly message: string;
      readonly stack: string;
      /** Whether the worker's error was a UserError (src/util/errors.ts): a refusal of the graph, not a bug. */
      readonly user: boolean;
      readonly inputs: ArrayBuffer;
    }
  | { readonly kind: "fatal"; readonly message: string; readonly stack: string }
  | { readonly kind: "builder-ready" }
  | { readonly kind: "builder-failed"; readonly message: string; readonly stack: string };

/** An error thrown by the scheduler in a worker (its message ends with "(in schedule worker)"), or a dead worker. */
/**
 * A schedule worker's refusal of the user's graph (a UserError there: an op VPPS cannot run, a shape it cannot
 * lower), raised again on the main thread as one line without a trace.
 */
export class ScheduleRefusal extends UserError {
  constructor(
    message: string,
    /** The original error's class name in the worker. */
    readonly workerErrorName: string,
  ) {
    super(message);
  }
}

export class ScheduleWorkerError extends Error {
  override readonly name = "ScheduleWorkerError";
  constructor(
    message: string,
    /** The original error's class name (e.g. "Error", "ShapeError", "RangeError"). */
    readonly workerErrorName: string,
    /** The original error's stack, in the worker. */
    readonly workerStack: string,
  ) {
    super(message);
  }
}

/**
 * Default worker count (VPPS_SCHEDULE_WORKERS overrides it): one per spare core, at most 6 (`os.availableParallelism() - 1`, 0 on one core). Where the
 * host limits large batches, 6 workers gained much over 4 and 8 little over 6, while 8 cost a few percent at batch
 * 1 (docs/journal/vpps.md, "Where the time goes").
 */
export function defaultScheduleWorkers(env: Readonly<Record<string, string | undefined>> = process.env): number {
  const v = env.VPPS_SCHEDULE_WORKERS;
  if (v !== undefined && v.trim() !== "") {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) {
      throw new UserError(
        `VPPS_SCHEDULE_WORKERS must be a whole number >= 0 (0: schedule on the main thread); got "${v}"`,
      );
    }
    return n;
  }
  return Math.max(0, Math.min(6, availableParallelism() - 1));
}

export interface SchedulePoolOptions {
  /** Worker threads, at least 1. */
  readonly workers: number;
  /** The model's parameters (only index, name, rows, cols and kind are sent). */
  readonly params: readonly GraphParameter[];
  /** The plan of each kernel variant. */
  readonly plans: readonly VppsPlan[];
  readonly schedule?: ScheduleOptions;
  /** How long a blocked `take` waits for one batch before it gives up (ms); default 120 000. */
  readonly stallMs?: number;
}

/** One scheduled batch, in posting order. */
export interface PooledBatch<T> {
  readonly id: number;
  readonly variant: number;
  /** What the caller posted with the batch (e.g. its learning rate). */
  readonly tag: T;
  readonly batch: ScheduledBatch;
  /** graph.inputData[0, inputSize) at posting time; valid until `release`. */
  readonly inputs: Float32Array;
  /** The worker's milliseconds for this batch. */
  readonly scheduleMs: number;
  /** The graph has dropout nodes (its script depends on the graph's dropout key). */
  readonly dropout: boolean;
  /** @internal the buffer `inputs` lives in, the end of the graph's loan, and the worker that scheduled the batch. */
  readonly inputBuffer: ArrayBuffer;
  readonly release: () => void;
  readonly slot: number;
}

/** Main-thread time of the pool (ms, summed). */
export interface SchedulePoolStats {
  /** Lending graphs (and copying their input values) and posting them. */
  snapshotMs: number;
  /** Blocked in `take`, waiting for a worker. */
  waitMs: number;
  /** The workers' own time (summed over threads), as they reported it. */
  scheduleMs: number;
}

interface Slot {
  readonly worker: Worker;
  readonly port: MessagePort;
  fatal: ScheduleWorkerError | undefined;
  /** Script buffers of this worker's released batches, to go back with its next jobs. */
  readonly spares: ArrayBuffer[];
  /** Its answer to the last graph builder posted: undefined while none has come. */
  builder: { ok: true } | { ok: false; message: string; stack: string } | undefined;
}

interface Job<T> {
  readonly id: number;
  readonly variant: number;
  readonly tag: T;
  readonly slot: number;
  /** Ends the graph's loan (nothing for a batch the worker builds). */
  readonly release: () => void;
  reply: ScheduleReply | undefined;
}

/** The loan of a batch the worker builds: none. */
const noLoan = (): void => {};

/**
 * Worker threads scheduling batches: `post` lends a graph to the next worker, `take` returns
 * scheduled batches in posting order (waiting for the next one when asked to), `release` hands a batch's input
 * buffer back for reuse. Workers are unref'd (they never keep the process alive) and terminated by `dispose`.
 */
export class SchedulePool<T = undefined> {
  readonly size: number;
  readonly stats: SchedulePoolStats = { snapshotMs: 0, waitMs: 0, scheduleMs: 0 };
  private readonly slots: Slot[] = [];
  private readonly counter: Int32Array;
  private readonly queue: Job<T>[] = [];
  private readonly byId = new Map<number, Job<T>>();
  private readonly free: ArrayBuffer[] = [];
  /** Per worker: batches posted to it whose reply has not been read. */
  private readonly inHand: Int32Array;
  private readonly stallMs: number;
  private nextId = 0;
  /** The graph builder's module, once one was started. */
  private builderModule: string | undefined;
  private disposed = false;

  constructor(o: SchedulePoolOptions) {
    if (!Number.isInteger(o.workers) || o.workers < 1) {
      throw new RangeError(`SchedulePool: workers must be an integer >= 1; got ${o.workers}`);
    }
    if (o.plans.length === 0) throw new RangeError("SchedulePool: no plan variant given");
    this.size = o.workers;
    this.inHand = new Int32Array(o.workers);
    this.stallMs = o.stallMs ?? 120_000;
    const shared = new SharedArrayBuffer(4);
    this.counter = new Int32Array(shared);
    const params: GraphParameter[] = o.params.map((p) => ({
      index: p.index,
      name: p.name,
      rows: p.rows,
      cols: p.cols,
      kind: p.kind,
      collection: p.collection,
    }));
    const { entry, tsx } = siblingModule(import.meta.url, "worker");
    try {
      for (let k = 0; k < o.workers; k++) {
        const { port1, port2 } = new MessageChannel();
        const data: ScheduleWorkerData = {
          port: port2,
          counter: shared,
          params,
          plans: o.plans,
          options: o.schedule ?? {},
          entry,
          tsx,
          fatal: { port: port2, counter: shared, index: 0 },
        };
        const worker = new Worker(MODULE_BOOTSTRAP, { eval: true, workerData: data, transferList: [port2] });
        const slot: Slot = { worker, port: port1, fatal: undefined, spares: [], builder: undefined };
        worker.on("error", (e: Error) => {
          slot.fatal ??= new ScheduleWorkerError(
            `VPPS: schedule worker ${k} failed: ${e.message}`,
            e.name,
            e.stack ?? "",
          );
        });
        worker.on("exit", (code: number) => {
          if (!this.disposed) {
            slot.fatal ??= new ScheduleWorkerError(`VPPS: schedule worker ${k} exited (code ${code})`, "Error", "");
          }
        });
        worker.unref();
        port1.unref();
        this.slots.push(slot);
      }
    } catch (e) {
      this.dispose();
      throw e;
    }
  }

  /** Batches posted and not yet taken. */
  get pending(): number {
    return this.queue.length;
  }

  /**
   * Lends `graph` (nodes up to the loss), copies its input values, and posts them to the worker with the fewest
   * batches in hand (the first such), to be scheduled on plan variant `variant`. The graph may be renewed as soon as
   * this returns (it then builds in other arrays until the loan ends, at `release` of the batch).
   */
  post(graph: ComputationGraph, loss: Expression, variant: number, tag: T): void {
    if (this.disposed) throw new Error("SchedulePool.post: the pool was disposed");
    const t0 = performance.now();
    const lossId = graph.check(loss, "vpps", "loss");
    const { id, slot } = this.claim();
    const loan = graph.lend(lossId + 1);
    const inputs = this.inputBuffer(graph.inputSize);
    new Float32Array(inputs, 0, graph.inputSize).set(graph.inputData.subarray(0, graph.inputSize));
    this.dispatch(
      { id, variant, tag, slot, release: loan.release, reply: undefined },
      { loss: lossId, graph: loan.graph, inputs },
      [inputs],
    );
    this.stats.snapshotMs += performance.now() - t0;
  }

  /**
   * Has every worker import `spec` and make its graph builder, in the background: `graphBuilderReady` says when all
   * have. Later `postBuilt` batches are built by it.
   */
  startGraphBuilder(spec: GraphBuilderSpec): void {
    if (this.disposed) throw new Error("SchedulePool.startGraphBuilder: the pool was disposed");
    const message: BuilderMessage = { kind: "builder", spec };
    this.builderModule = spec.module;
    for (const slot of this.slots) {
      slot.builder = undefined;
      slot.port.postMessage(message);
    }
  }

  /**
   * Whether every worker has loaded the graph builder (`startGraphBuilder`), without waiting; a worker that could
   * not load it, or died, is thrown here as one error naming the module and the reason.
   */
  graphBuilderReady(): boolean {
    if (this.builderModule === undefined) return false;
    this.poll();
    const dead = this.slots.find((s) => s.fatal !== undefined);
    if (dead) throw dead.fatal;
    const failed = this.slots.find((s) => s.builder?.ok === false);
    if (failed?.builder?.ok === false) {
      throw new ScheduleWorkerError(
        `VPPS: a schedule worker could not load the graph builder ${this.builderModule}: ${failed.builder.message}`,
        "Error",
        failed.builder.stack,
      );
    }
    return this.slots.every((s) => s.builder?.ok === true);
  }

  /** `startGraphBuilder`, then waits (up to `stallMs`) until every worker has loaded it. */
  setGraphBuilder(spec: GraphBuilderSpec): void {
    this.startGraphBuilder(spec);
    const t0 = performance.now();
    for (;;) {
      const seen = Atomics.load(this.counter, 0);
      if (this.graphBuilderReady()) return;
      if (Atomics.wait(this.counter, 0, seen, 1000) === "timed-out" && performance.now() - t0 > this.stallMs) {
        throw new ScheduleWorkerError(
          `VPPS: the schedule workers have not loaded the graph builder ${spec.module} in ` +
            `${(this.stallMs / 1000).toFixed(0)} s`,
          "Error",
          "",
        );
      }
    }
  }

  /**
   * Posts a batch for the graph builder (`setGraphBuilder`) to build on a worker, then schedule on plan variant
   * `variant`: the main thread neither builds nor lends it.
   */
  postBuilt(request: BuildRequest, variant: number, tag: T): void {
    if (this.disposed) throw new Error("SchedulePool.postBuilt: the pool was disposed");
    const t0 = performance.now();
    const { id, slot } = this.claim();
    const inputs = this.free.pop() ?? new ArrayBuffer(0);
    // a copy: the caller's array stays usable (the copy is transferred)
    const examples = request.examples.slice();
    const build = { examples, training: request.training, dropoutKey: request.dropoutKey };
    this.dispatch(
      { id, variant, tag, slot, release: noLoan, reply: undefined },
      { loss: -1, graph: undefined, inputs, build },
      [inputs, examples.buffer as ArrayBuffer],
    );
    this.stats.snapshotMs += performance.now() - t0;
  }

  /** The next job's id and the worker to take it (the least busy, now counted as holding it); a dead worker throws. */
  private claim(): { id: number; slot: number } {
    const id = this.nextId++;
    const slot = this.leastBusy();
    this.inHand[slot]!++;
    const dead = this.slots[slot]!.fatal;
    if (dead) throw dead;
    return { id, slot };
  }

  /** Queues `job` and posts its message to its worker, with a spare script buffer of that worker's when there is one. */
  private dispatch(
    job: Job<T>,
    fields: Pick<ScheduleJob, "loss" | "graph" | "inputs" | "build">,
    transfer: ArrayBuffer[],
  ): void {
    this.queue.push(job);
    this.byId.set(job.id, job);
    const spare = this.slots[job.slot]!.spares.pop();
    if (spare !== undefined) transfer.push(spare);
    const message: ScheduleJob = { id: job.id, variant: job.variant, spare, ...fields };
    this.slots[job.slot]!.port.postMessage(message, transfer);
  }

  /**
   * The oldest posted batch once it is scheduled: undefined when none is pending, or (with `block` false) when it
   * is not ready yet; with `block` it waits for it. A scheduling error of that batch is thrown here (the batch is
   * dropped, so the next call goes on with the following one).
   */
  take(block: boolean): PooledBatch<T> | undefined {
    const job = this.queue[0];
    if (job === undefined) return undefined;
    if (job.reply === undefined) this.poll();
    if (job.reply === undefined) {
      if (!block && this.slots[job.slot]!.fatal === undefined) return undefined;
      this.waitFor(job);
    }
    this.queue.shift();
    const r = job.reply!;
    if (r.kind === "done") {
      this.stats.scheduleMs += r.ms;
      return {
        id: job.id,
        variant: job.variant,
        tag: job.tag,
        batch: r.batch,
        inputs: new Float32Array(r.inputs, 0, r.inputSize),
        scheduleMs: r.ms,
        dropout: r.dropout,
        inputBuffer: r.inputs,
        release: job.release,
        slot: job.slot,
      };
    }
    if (r.kind === "failed") {
      job.release();
      this.recycle(r.inputs);
      if (r.user) throw new ScheduleRefusal(r.message, r.name);
      throw new ScheduleWorkerError(`${r.message} (in schedule worker)`, r.name, r.stack);
    }
    throw new Error(`VPPS: unexpected reply '${r.kind}' for batch ${job.id}`);
  }

  /**
   * Hands a taken batch's buffers back for reuse: its graph's node arrays (the loan ends), its input buffer
   * (`inputs`) and its script (to the worker that wrote it, with that worker's next job). `inputs` and the script
   * are invalid afterwards; the layout arrays stay valid.
   */
  release(b: PooledBatch<T>): void {
    b.release();
    this.recycle(b.inputBuffer);
    const script = b.batch.script.buffer;
    const spares = this.slots[b.slot]!.spares;
    if (script instanceof ArrayBuffer && script.byteLength > 0 && spares.length < 2) spares.push(script);
  }

  /** Terminates the workers and forgets pending batches. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const s of this.slots) {
      s.port.close();
      void s.worker.terminate();
    }
    this.queue.length = 0;
    this.byId.clear();
    this.free.length = 0;
    for (const s of this.slots) s.spares.length = 0;
  }

  private recycle(buffer: ArrayBuffer): void {
    if (this.free.length < this.size + 2 && buffer.byteLength > 0) this.free.push(buffer);
  }

  /** A buffer for `floats` input values: a recycled one when large enough. */
  private inputBuffer(floats: number): ArrayBuffer {
    const b = this.free.pop();
    return b !== undefined && b.byteLength >= 4 * floats ? b : new ArrayBuffer(Math.max(4 * floats, 1024));
  }

  /** Reads every reply that has arrived, without blocking. */
  private poll(): void {
    for (let k = 0; k < this.slots.length; k++) {
      const port = this.slots[k]!.port;
      for (;;) {
        const m = receiveMessageOnPort(port);
        if (m === undefined) break;
        this.handle(k, m.message as ScheduleReply);
      }
    }
  }

  private handle(k: number, r: ScheduleReply): void {
    if (r.kind === "ready") return;
    if (r.kind === "builder-ready") {
      this.slots[k]!.builder = { ok: true };
      return;
    }
    if (r.kind === "builder-failed") {
      this.slots[k]!.builder = { ok: false, message: r.message, stack: r.stack };
      return;
    }
    if (r.kind === "fatal") {
      const slot = this.slots[k]!;
      slot.fatal ??= new ScheduleWorkerError(`VPPS: schedule worker ${k} failed: ${r.message}`, "Error", r.stack);
      return;
    }
    const job = this.byId.get(r.id);
    if (job === undefined) return;
    this.byId.delete(r.id);
    this.inHand[job.slot]!--;
    job.reply = r;
  }

  /**
   * The worker to post to: the first with the fewest batches in hand (replies read first). Small batches then go to
   * the first few workers only, which V8 optimises sooner and whose caches stay warm; large batches keep every
   * worker busy. At batch 1 this beat round-robin on the first pass over the data and tied on the second
   * (docs/journal/vpps.md, "Where the time goes").
   */
  private leastBusy(): number {
    this.poll();
    let best = 0;
    for (let k = 1; k < this.size; k++) if (this.inHand[k]! < this.inHand[best]!) best = k;
    return best;
  }

  private waitFor(job: Job<T>): void {
    const t0 = performance.now();
    const slot = this.slots[job.slot]!;
    try {
      for (;;) {
        const seen = Atomics.load(this.counter, 0);
        this.poll();
        if (job.reply !== undefined) return;
        if (slot.fatal !== undefined) {
          this.queue.shift();
          this.byId.delete(job.id);
          throw slot.fatal;
        }
        const r = Atomics.wait(this.counter, 0, seen, 1000);
        if (r === "timed-out" && performance.now() - t0 > this.stallMs) {
          throw new ScheduleWorkerError(
            `VPPS: schedule worker ${job.slot} has not answered batch ${job.id} in ${(this.stallMs / 1000).toFixed(0)} s`,
            "Error",
            "",
          );
        }
      }
    } finally {
      this.stats.waitMs += performance.now() - t0;
    }
  }
}
