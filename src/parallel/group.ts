// The process group of a data-parallel job: the `GradientReducer` the engines sum their gradients through.
// Host arrays go over TCP through the rank's communication thread (comm-worker.ts; rank 0 sums in rank order, so
// every rank gets bit-identical sums); device arrays go through NCCL, whose unique id travels over the same
// connections. The main thread waits for a host collective in Atomics.wait: the engines' interface is synchronous.
// A gather may also be started without waiting (`startAllGatherHost`): the communication thread runs the
// collectives in the order the main thread asked for them and answers in that order, so the replies are matched to
// the requests by position (`outstanding`).

import { MessageChannel, type MessagePort, receiveMessageOnPort, Worker } from "node:worker_threads";
import {
  CudaEvent,
  type DevicePtr,
  getNccl,
  type Handle,
  type Nccl,
  type NcclComm,
  NcclDataType,
  NcclRedOp,
} from "../cuda/index.js";
import type { GradientReducer, PendingHostGather } from "../engines/data-parallel.js";
import { UserError } from "../util/errors.js";
import { moduleBootstrap, siblingModule } from "../util/worker-module.js";
import type { RankEnv } from "./env.js";
import { type CommReply, type CommRequest, type CommWorkerConfig, decodeGathered } from "./wire.js";

/** The rendezvous failed (timed out, refused, port in use): one line. */
export class RendezvousError extends UserError {}

/** How long the ranks wait for each other at the start, unless VPPS_RENDEZVOUS_TIMEOUT (seconds) says otherwise. */
export const DEFAULT_RENDEZVOUS_TIMEOUT_MS = 120_000;

export interface ProcessGroupOptions {
  /** The rendezvous's limit (default: VPPS_RENDEZVOUS_TIMEOUT seconds, else 120 s). */
  timeoutMs?: number;
  /**
   * Files of this process (the run directory's lock) that the communication thread removes when it stops the rank
   * (a peer or the launcher gone), since the main thread may be blocked where no JavaScript runs.
   */
  releaseOnDeath?: readonly string[];
}

/** The rendezvous limit from VPPS_RENDEZVOUS_TIMEOUT (seconds), or the default. */
export function rendezvousTimeoutMs(env: Readonly<Record<string, string | undefined>> = process.env): number {
  const v = env.VPPS_RENDEZVOUS_TIMEOUT;
  if (v === undefined || v.trim() === "") return DEFAULT_RENDEZVOUS_TIMEOUT_MS;
  const s = Number(v);
  if (!(Number.isFinite(s) && s > 0)) {
    throw new RendezvousError(`VPPS_RENDEZVOUS_TIMEOUT must be a positive number of seconds; got "${v}"`);
  }
  return s * 1000;
}

/**
 * The communication thread's bootstrap (util/worker-module.ts): a failure to start is one line on stderr and ends
 * the rank, since the main thread may be blocked in a CUDA or NCCL call.
 */
const BOOTSTRAP = moduleBootstrap(
  `(e) => {
  require("node:fs").writeSync(2, "vpps: the communication thread failed to start: " + ((e && e.stack) || e) + "\\n");
  process.kill(process.pid, "SIGTERM");
}`,
  { uncaught: false },
);

/** One rank's membership of the job. Made by `ProcessGroup.start`, which returns when every rank has joined. */
export class ProcessGroup implements GradientReducer {
  readonly rank: number;
  readonly worldSize: number;
  /** This rank's GPU on its host. */
  readonly localRank: number;
  private readonly worker: Worker;
  private readonly port: MessagePort;
  private readonly counter: Int32Array;
  /** Collectives asked for and not yet answered, oldest first; `reply` is set when the answer has been read. */
  private readonly outstanding: { reply: CommReply | undefined }[] = [];
  private nccl: Nccl | undefined;
  private comm: NcclComm | undefined;
  private closed = false;
  /** Events around each device all-reduce while timing (the benchmark's all-reduce share). */
  private timed: [CudaEvent, CudaEvent][] | undefined;

  private constructor(env: RankEnv, worker: Worker, port: MessagePort, counter: Int32Array) {
    this.rank = env.rank;
    this.worldSize = env.worldSize;
    this.localRank = env.localRank;
    this.worker = worker;
    this.port = port;
    this.counter = counter;
  }

  /** Joins the job (the rendezvous): returns when all ranks are in; a timeout or refusal is a RendezvousError. */
  static start(env: RankEnv, options: ProcessGroupOptions = {}): ProcessGroup {
    const timeoutMs = options.timeoutMs ?? rendezvousTimeoutMs();
    const shared = new SharedArrayBuffer(4);
    const counter = new Int32Array(shared);
    const { port1, port2 } = new MessageChannel();
    const config: CommWorkerConfig = {
      rank: env.rank,
      worldSize: env.worldSize,
      masterAddr: env.masterAddr,
      masterPort: env.masterPort,
      timeoutMs,
      ...(env.launcherPid !== undefined ? { launcherPid: env.launcherPid } : {}),
      ...(options.releaseOnDeath ? { releaseOnDeath: [...options.releaseOnDeath] } : {}),
    };
    const { entry, tsx } = siblingModule(import.meta.url, "comm-worker");
    const worker = new Worker(BOOTSTRAP, {
      eval: true,
      workerData: { ...config, port: port2, counter: shared, entry, tsx },
      transferList: [port2],
    });
    worker.unref();
    port1.unref();
    const group = new ProcessGroup(env, worker, port1, counter);
    const r = group.wait(0, timeoutMs + 30_000);
    if (r.kind === "error") throw new RendezvousError(`rank ${env.rank}: ${r.message}`);
    if (r.kind !== "ready") throw new Error(`process group: unexpected first reply ${r.kind}`);
    return group;
  }

  /** Waits for the communication thread's next reply (the counter moves past `seen`). */
  private wait(seen: number, limitMs = Number.POSITIVE_INFINITY): CommReply {
    const t0 = Date.now();
    for (;;) {
      const m = receiveMessageOnPort(this.port);
      if (m) return m.message as CommReply;
      if (Date.now() - t0 > limitMs) {
        throw new RendezvousError(`rank ${this.rank}: the communication thread did not answer in ${limitMs / 1000} s`);
      }
      Atomics.wait(this.counter, 0, seen, 1000);
      seen = Atomics.load(this.counter, 0);
    }
  }

  /** Asks the communication thread for a collective; the returned entry's `reply` is set when it is answered. */
  private post(req: CommRequest, transfer: ArrayBuffer[] = []): { reply: CommReply | undefined } {
    if (this.closed) throw new Error(`process group of rank ${this.rank}: used after close()`);
    const entry = { reply: undefined as CommReply | undefined };
    this.outstanding.push(entry);
    this.port.postMessage(req, transfer);
    return entry;
  }

  /** Reads the answers that have arrived, without waiting; they go to the oldest requests in order. */
  private pump(): void {
    for (;;) {
      const m = receiveMessageOnPort(this.port);
      if (!m) return;
      const entry = this.outstanding.shift();
      if (entry === undefined) throw new Error(`process group of rank ${this.rank}: an answer nobody asked for`);
      entry.reply = m.message as CommReply;
    }
  }

  /** Waits until `entry` is answered (answers to earlier requests are read on the way). */
  private settle(entry: { reply: CommReply | undefined }): CommReply {
    for (;;) {
      // the counter is read before the port is polled, so an answer between the two ends the wait at once
      const seen = Atomics.load(this.counter, 0);
      this.pump();
      const r = entry.reply;
      if (r !== undefined) {
        if (r.kind === "error") throw new Error(`process group of rank ${this.rank}: ${r.message}`);
        return r;
      }
      Atomics.wait(this.counter, 0, seen, 1000);
    }
  }

  private request(req: CommRequest, transfer: ArrayBuffer[] = []): CommReply {
    return this.settle(this.post(req, transfer));
  }

  allReduceHost(data: Float32Array | Float64Array): void {
    const copy = data.slice().buffer as ArrayBuffer;
    const r = this.request({ kind: "reduce", dtype: data instanceof Float32Array ? "f32" : "f64", data: copy }, [copy]);
    if (r.kind !== "result") throw new Error(`process group: all-reduce got ${r.kind}`);
    data.set(data instanceof Float32Array ? new Float32Array(r.data) : new Float64Array(r.data));
  }

  /** Every rank's bytes, in rank order. */
  allGatherBytes(data: Uint8Array): Uint8Array[] {
    const copy = data.slice().buffer as ArrayBuffer;
    const r = this.request({ kind: "gather", data: copy }, [copy]);
    if (r.kind !== "result") throw new Error(`process group: all-gather got ${r.kind}`);
    return decodeGathered(new Uint8Array(r.data));
  }

  allGatherHost(data: Int32Array): Int32Array[] {
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    return this.allGatherBytes(bytes).map((b) => new Int32Array(b.buffer, b.byteOffset, b.byteLength / 4));
  }

  /**
   * `allGatherHost` without waiting: the gather goes to the other ranks at once, and the result is read when it has
   * arrived. Collectives finish in the order they were asked for, blocking ones included, so every rank must ask for
   * them in the same order.
   */
  startAllGatherHost(data: Int32Array): PendingHostGather {
    const copy = data.slice().buffer as ArrayBuffer;
    const entry = this.post({ kind: "gather", data: copy }, [copy]);
    let parts: Int32Array[] | undefined;
    const take = (r: CommReply): Int32Array[] => {
      if (r.kind !== "result") throw new Error(`process group: all-gather got ${r.kind}`);
      parts = decodeGathered(new Uint8Array(r.data)).map(
        (b) => new Int32Array(b.buffer, b.byteOffset, b.byteLength / 4),
      );
      return parts;
    };
    return {
      ready: () => {
        if (parts !== undefined) return true;
        if (entry.reply === undefined) this.pump();
        if (entry.reply === undefined) return false;
        if (entry.reply.kind === "error") return true; // wait() throws it
        take(entry.reply);
        return true;
      },
      wait: () => parts ?? take(this.settle(entry)),
    };
  }

  /** Rank 0's `data` on every rank (the others' argument is ignored). */
  broadcastBytes(data: Uint8Array): Uint8Array {
    return this.allGatherBytes(this.rank === 0 ? data : new Uint8Array(0))[0]!;
  }

  /** Returns when every rank has reached it. */
  barrier(): void {
    this.allGatherBytes(new Uint8Array(0));
  }

  /**
   * Makes the NCCL communicator now (collective: every rank calls it, with its CUDA context current); the first
   * `allReduceDevice` does it otherwise.
   */
  initDevice(): void {
    if (this.comm !== undefined || this.worldSize === 1) return;
    this.nccl = getNccl();
    const id = this.broadcastBytes(this.rank === 0 ? this.nccl.getUniqueId() : new Uint8Array(0));
    this.comm = this.nccl.commInitRank(this.worldSize, id, this.rank);
  }

  allReduceDevice(ptr: DevicePtr, count: number, stream: Handle): void {
    if (this.worldSize === 1 || count === 0) return;
    this.initDevice();
    let pair: [CudaEvent, CudaEvent] | undefined;
    if (this.timed) {
      pair = [CudaEvent.create(), CudaEvent.create()];
      this.timed.push(pair);
      pair[0].driver.eventRecord(pair[0].handle, stream);
    }
    this.nccl!.allReduce(ptr, ptr, count, NcclDataType.float32, NcclRedOp.sum, this.comm!, stream);
    if (pair) pair[1].driver.eventRecord(pair[1].handle, stream);
  }

  /** From now on, each device all-reduce is timed (CUDA events around it on its stream). */
  startTiming(): void {
    this.timed = [];
  }

  /** Milliseconds the device all-reduces took since `startTiming` (waits for them); timing goes on. */
  takeAllReduceMs(): number {
    let ms = 0;
    for (const [a, b] of this.timed ?? []) {
      b.synchronize();
      ms += b.elapsedMsSince(a);
      a.destroy();
      b.destroy();
    }
    if (this.timed) this.timed = [];
    return ms;
  }

  /** Frees the NCCL communicator (before the engine's CUDA context goes); a later device all-reduce makes another. */
  releaseDevice(): void {
    this.takeAllReduceMs();
    if (this.comm !== undefined) {
      this.nccl!.commDestroy(this.comm);
      this.comm = undefined;
    }
  }

  /**
   * Leaves the job: a last collective (every rank has finished), then the NCCL communicator is freed and the
   * connections closed. After it, a rank that exits is no failure for the others.
   */
  close(): void {
    if (this.closed) return;
    this.releaseDevice();
    this.timed = undefined;
    this.request({ kind: "close" });
    this.closed = true;
    void this.worker;
  }

  /** Frees the NCCL communicator at once (a failure elsewhere); the process is about to end. */
  abort(): void {
    if (this.comm !== undefined) {
      try {
        this.nccl!.commAbort(this.comm);
      } catch {
        // ending anyway
      }
      this.comm = undefined;
    }
  }
}
