// The communication thread of a rank (a worker_thread started by group.ts). It owns the TCP connections of the
// process group and runs on its own event loop, so that it keeps working while the rank's main thread is blocked:
// in Atomics.wait for a host collective, or inside a synchronous CUDA/NCCL call that waits for a dead peer. It
//  - makes the rendezvous (rank 0 listens on MASTER_ADDR:MASTER_PORT, the others connect with retries);
//  - runs the host collectives the main thread asks for: every rank sends its array to rank 0, which sums in rank
//    order (so every rank gets bit-identical sums) and sends the result back; several may be outstanding (the main
//    thread need not wait for one before asking for the next), and they finish in the order asked;
//  - watches the connections: a peer that closes without saying goodbye ends this process within a moment, with one
//    line naming the rank (rank 0 first tells the others why), because a main thread blocked in CUDA cannot;
//  - watches the launcher (`--gpus N`, VPPS_LAUNCHER_PID): when it is gone (SIGKILL leaves it no chance to stop the
//    ranks), this rank stops too, instead of training on as an orphan holding the run directory's lock;
//  - when it stops the rank, removes the files the rank holds (the lock: `releaseOnDeath`), if they are still its.

import { readFileSync, rmSync, writeSync } from "node:fs";
import { connect, createServer, type Socket } from "node:net";
import { type MessagePort, workerData } from "node:worker_threads";
import {
  type CommReply,
  type CommRequest,
  type CommWorkerConfig,
  encodeGathered,
  type Frame,
  FrameKind,
  FrameReader,
  frame,
} from "./wire.js";

interface Data extends CommWorkerConfig {
  port: MessagePort;
  counter: SharedArrayBuffer;
}

const data = workerData as Data;
const { rank, worldSize, port } = data;
const counter = new Int32Array(data.counter);

interface Peer {
  rank: number;
  socket: Socket;
  frames: Frame[];
  /** It said goodbye: its connection closing is no failure. */
  bye: boolean;
}

/** Rank 0: peers by rank (index 0 unused); other ranks: [undefined, rank 0's connection] at index 0. */
const peers: (Peer | undefined)[] = new Array(worldSize).fill(undefined);
let ready = false;
let closing = false;
let dying = false;
/** The sequence number of the oldest collective not finished; `sent`: of the next one this rank sends to rank 0. */
let seq = 0;
let sent = 0;
type Op = Exclude<CommRequest, { kind: "close" }>;
/**
 * The collectives the main thread asked for and that have not finished, oldest first: it may start several without
 * waiting (`ProcessGroup.startAllGatherHost`); they run, and are answered, in the order asked, which is the same on
 * every rank. `closing`: the closing collective.
 */
const queue: { op: Op; closing: boolean }[] = [];
let current: Op | undefined;

function reply(message: CommReply, transfer: ArrayBuffer[] = []): void {
  port.postMessage(message, transfer);
  Atomics.add(counter, 0, 1);
  Atomics.notify(counter, 0);
}

/**
 * Ends the process: the main thread may be blocked where no JavaScript runs, so the line is written from here and the
 * process signalled (SIGTERM, whose default action needs no JavaScript; SIGKILL if that did not end it).
 */
function die(message: string): void {
  if (dying) return;
  dying = true;
  if (!ready) {
    reply({ kind: "error", message });
    return;
  }
  if (rank === 0) {
    for (const p of peers) {
      if (p && !p.bye && !p.socket.destroyed) p.socket.write(frame(FrameKind.abort, seq, Buffer.from(message)));
    }
  }
  try {
    writeSync(2, `vpps: rank ${rank}: ${message}; stopping this rank\n`);
  } catch {
    // stderr closed: the exit status still tells
  }
  releaseFiles();
  setTimeout(() => process.kill(process.pid, "SIGTERM"), rank === 0 ? 100 : 0);
  setTimeout(() => process.kill(process.pid, "SIGKILL"), 3000).unref();
}

/** Removes the files of `releaseOnDeath` that this process still owns (a lock file holding its pid first). */
function releaseFiles(): void {
  for (const path of data.releaseOnDeath ?? []) {
    try {
      if (readFileSync(path, "utf8").split(/\s+/)[0] === String(process.pid)) rmSync(path, { force: true });
    } catch {
      // gone, or not readable: nothing of ours to remove
    }
  }
}

/**
 * Watches the launcher: it started this process (directly or through a wrapper), so it is gone when this process's
 * parent changes (re-parented to init or a subreaper) or no process has its pid. Polled every 200 ms on this
 * thread's own event loop.
 */
function watchLauncher(pid: number): void {
  // the parent as this thread starts (the launcher, or a wrapper it ran the rank through)
  const parent = process.ppid;
  const timer = setInterval(() => {
    let alive = process.ppid === parent;
    if (alive) {
      try {
        process.kill(pid, 0);
      } catch (e) {
        alive = (e as NodeJS.ErrnoException).code === "EPERM";
      }
    }
    if (alive) return;
    clearInterval(timer);
    die(`the launcher (vpps train --gpus ${worldSize}, pid ${pid}) is gone: it was killed or exited`);
  }, 200);
  timer.unref();
}

if (data.launcherPid !== undefined) watchLauncher(data.launcherPid);

function lost(peer: Peer, why: string): void {
  if (peer.bye || closing || dying) return;
  die(
    peer.rank === 0 && rank !== 0
      ? `rank 0 stopped (${why}): it exited, was killed, or its host became unreachable`
      : `rank ${peer.rank} stopped (${why}): it exited, was killed, or its host became unreachable`,
  );
}

function watch(peer: Peer, reader: FrameReader, onFrame: (f: Frame) => void): void {
  peer.socket.on("data", (chunk: Buffer) => {
    for (const f of reader.push(chunk)) onFrame(f);
  });
  peer.socket.on("error", (e: NodeJS.ErrnoException) => lost(peer, `connection error ${e.code ?? e.message}`));
  peer.socket.on("close", () => lost(peer, "its connection closed without a goodbye"));
}

function onPeerFrame(peer: Peer, f: Frame): void {
  if (f.kind === FrameKind.bye) {
    peer.bye = true;
    if (queue.length > 0) die(`rank ${peer.rank} finished while this rank waited for it in a collective`);
    return;
  }
  if (f.kind === FrameKind.abort) {
    die(f.payload.toString("utf8"));
    return;
  }
  peer.frames.push(f);
  progress();
}

// --- collectives ---

function payloadOf(req: Exclude<CommRequest, { kind: "close" }>): Uint8Array {
  return new Uint8Array(req.data);
}

function kindOf(req: Exclude<CommRequest, { kind: "close" }>): number {
  if (req.kind === "gather") return FrameKind.gather;
  return req.dtype === "f32" ? FrameKind.reduceF32 : FrameKind.reduceF64;
}

function describe(kind: number, bytes: number): string {
  if (kind === FrameKind.reduceF32) return `an all-reduce of ${bytes / 4} float32 values`;
  if (kind === FrameKind.reduceF64) return `an all-reduce of ${bytes / 8} float64 values`;
  if (kind === FrameKind.gather) return `an all-gather`;
  return `frame kind ${kind}`;
}

/** Runs the current collective as far as the frames that arrived allow. */
function progress(): void {
  if (current === undefined || dying) return;
  if (rank !== 0) {
    const hub = peers[0]!;
    const f = hub.frames.shift();
    if (f === undefined) return;
    if (f.kind !== FrameKind.result || f.seq !== seq) {
      die(`protocol error: expected the result of collective ${seq} from rank 0, got kind ${f.kind} seq ${f.seq}`);
      return;
    }
    finish(f.payload);
    return;
  }
  for (let r = 1; r < worldSize; r++) if (peers[r]!.frames.length === 0) return;
  const own = payloadOf(current);
  const kind = kindOf(current);
  const parts: Uint8Array[] = [own];
  for (let r = 1; r < worldSize; r++) {
    const f = peers[r]!.frames.shift()!;
    if (f.kind !== kind || f.seq !== seq || (kind !== FrameKind.gather && f.payload.byteLength !== own.byteLength)) {
      die(
        `rank ${r} is in ${describe(f.kind, f.payload.byteLength)} (collective ${f.seq}) while rank 0 is in ` +
          `${describe(kind, own.byteLength)} (collective ${seq}): the ranks do not train the same model or batches`,
      );
      return;
    }
    parts.push(f.payload);
  }
  let result: Uint8Array;
  if (kind === FrameKind.gather) result = encodeGathered(parts);
  else result = sum(kind, parts);
  const out = frame(FrameKind.result, seq, result);
  for (let r = 1; r < worldSize; r++) peers[r]!.socket.write(out);
  finish(result);
}

/** The sum of the ranks' arrays, added in rank order ((a0 + a1) + a2) + …, in the arrays' own precision. */
function sum(kind: number, parts: readonly Uint8Array[]): Uint8Array {
  const bytes = parts[0]!.byteLength;
  const out = new ArrayBuffer(bytes);
  if (kind === FrameKind.reduceF32) {
    const acc = new Float32Array(out);
    acc.set(new Float32Array(parts[0]!.buffer.slice(parts[0]!.byteOffset, parts[0]!.byteOffset + bytes)));
    for (let r = 1; r < parts.length; r++) {
      const p = new Float32Array(parts[r]!.buffer.slice(parts[r]!.byteOffset, parts[r]!.byteOffset + bytes));
      for (let i = 0; i < acc.length; i++) acc[i] = acc[i]! + p[i]!;
    }
  } else {
    const acc = new Float64Array(out);
    acc.set(new Float64Array(parts[0]!.buffer.slice(parts[0]!.byteOffset, parts[0]!.byteOffset + bytes)));
    for (let r = 1; r < parts.length; r++) {
      const p = new Float64Array(parts[r]!.buffer.slice(parts[r]!.byteOffset, parts[r]!.byteOffset + bytes));
      for (let i = 0; i < acc.length; i++) acc[i] = acc[i]! + p[i]!;
    }
  }
  return new Uint8Array(out);
}

function finish(result: Uint8Array): void {
  const done = queue.shift()!;
  current = queue[0]?.op;
  seq++;
  if (done.closing) {
    closing = true;
    clearTimeout(timer);
    for (const p of peers) if (p && !p.socket.destroyed) p.socket.end();
    server?.close();
    reply({ kind: "closed" });
    return;
  }
  const copy = result.buffer.slice(result.byteOffset, result.byteOffset + result.byteLength) as ArrayBuffer;
  reply({ kind: "result", data: copy }, [copy]);
  // the next collective's frames may all be here already
  if (current !== undefined) progress();
}

port.on("message", (req: CommRequest) => {
  // closing is a collective too (an all-gather of nothing): when it completes, every rank has finished its last
  // collective, and a connection that closes after it is no failure
  const op: Op = req.kind === "close" ? { kind: "gather", data: new ArrayBuffer(0) } : req;
  queue.push({ op, closing: req.kind === "close" });
  if (worldSize === 1) {
    // nothing can be outstanding: each finishes as it comes
    current = op;
    const own = payloadOf(op);
    finish(op.kind === "gather" ? encodeGathered([own]) : own);
    return;
  }
  // sent at once, whether or not the collectives before it have finished: rank 0 takes the frames in order
  if (rank !== 0) peers[0]!.socket.write(frame(kindOf(op), sent++, payloadOf(op)));
  if (queue.length === 1) {
    current = op;
    progress();
  }
});

// --- rendezvous ---

const timer = setTimeout(() => {
  if (ready) return;
  if (rank === 0) {
    const missing: number[] = [];
    for (let r = 1; r < worldSize; r++) if (!peers[r]) missing.push(r);
    die(
      `rendezvous timed out after ${data.timeoutMs / 1000} s: rank 0 listens on ${data.masterAddr}:${data.masterPort} ` +
        `but rank(s) ${missing.join(", ")} of WORLD_SIZE ${worldSize} never connected; start every rank with the ` +
        "same WORLD_SIZE, MASTER_ADDR and MASTER_PORT (or raise VPPS_RENDEZVOUS_TIMEOUT, in seconds)",
    );
  } else {
    die(
      `rendezvous timed out after ${data.timeoutMs / 1000} s: rank ${rank} could not join rank 0 at ` +
        `${data.masterAddr}:${data.masterPort} (${lastError}); is rank 0 running, with the same MASTER_ADDR, ` +
        "MASTER_PORT and WORLD_SIZE? (VPPS_RENDEZVOUS_TIMEOUT sets the wait, in seconds)",
    );
  }
}, data.timeoutMs);
let lastError = "no answer";
let server: ReturnType<typeof createServer> | undefined;

function isLoopback(addr: string): boolean {
  return addr === "localhost" || addr === "::1" || addr.startsWith("127.");
}

function becomeReady(): void {
  ready = true;
  clearTimeout(timer);
  reply({ kind: "ready" });
}

if (worldSize === 1) {
  becomeReady();
} else if (rank === 0) {
  server = createServer((socket) => {
    socket.setNoDelay(true);
    const reader = new FrameReader();
    let peer: Peer | undefined;
    socket.on("data", (chunk: Buffer) => {
      if (peer) return; // after the hello, the peer's own listener reads
      for (const f of reader.push(chunk)) {
        if (peer) {
          onPeerFrame(peer, f);
          continue;
        }
        const r = f.payload.byteLength >= 8 ? f.payload.readUInt32LE(0) : -1;
        const w = f.payload.byteLength >= 8 ? f.payload.readUInt32LE(4) : -1;
        if (f.kind !== FrameKind.hello || r < 1 || r >= worldSize || w !== worldSize || peers[r]) {
          const why =
            f.kind !== FrameKind.hello
              ? "not a vpps rank"
              : w !== worldSize
                ? `rank ${r} has WORLD_SIZE ${w}, rank 0 has ${worldSize}`
                : peers[r]
                  ? `two processes claim rank ${r}`
                  : `rank ${r} is out of range`;
          if (f.kind === FrameKind.hello) die(`rendezvous refused a connection: ${why}`);
          socket.destroy();
          return;
        }
        peer = { rank: r, socket, frames: [], bye: false };
        peers[r] = peer;
        const p = peer;
        socket.removeAllListeners("data");
        watch(p, reader, (g) => onPeerFrame(p, g));
        if (peers.slice(1).every((q) => q !== undefined)) {
          for (let k = 1; k < worldSize; k++) peers[k]!.socket.write(frame(FrameKind.welcome, 0));
          becomeReady();
        }
      }
    });
    socket.on("error", () => {});
  });
  server.on("error", (e: NodeJS.ErrnoException) => {
    die(
      e.code === "EADDRINUSE"
        ? `rendezvous: rank 0 cannot listen on port ${data.masterPort} (in use: another job or a leftover rank ` +
            "holds it); choose another MASTER_PORT"
        : `rendezvous: rank 0 cannot listen on ${data.masterAddr}:${data.masterPort}: ${e.message}`,
    );
  });
  server.listen(data.masterPort, isLoopback(data.masterAddr) ? data.masterAddr : undefined);
} else {
  const attempt = (): void => {
    if (ready || dying) return;
    const socket = connect({ host: data.masterAddr, port: data.masterPort });
    socket.setNoDelay(true);
    const reader = new FrameReader();
    let connected = false;
    socket.once("connect", () => {
      connected = true;
      const hello = Buffer.alloc(8);
      hello.writeUInt32LE(rank, 0);
      hello.writeUInt32LE(worldSize, 4);
      socket.write(frame(FrameKind.hello, 0, hello));
      const peer: Peer = { rank: 0, socket, frames: [], bye: false };
      peers[0] = peer;
      watch(peer, reader, (f) => {
        if (!ready) {
          if (f.kind === FrameKind.welcome) becomeReady();
          else if (f.kind === FrameKind.abort) die(f.payload.toString("utf8"));
          return;
        }
        onPeerFrame(peer, f);
      });
    });
    socket.once("error", (e: NodeJS.ErrnoException) => {
      if (connected) return;
      lastError = `last error: ${e.code ?? e.message}`;
      socket.destroy();
      setTimeout(attempt, 200);
    });
  };
  attempt();
}
