// The messages of the process group: between the ranks' communication threads over TCP (frames), and between a
// rank's main thread and its communication thread (comm-worker.ts). Shared by both sides, so it imports nothing.

/** Frame kinds on the TCP connections (rank 0 is the hub; every other rank has one connection, to rank 0). */
export const FrameKind = {
  /** rank → 0: u32 rank, u32 worldSize. */
  hello: 1,
  /** 0 → rank: everybody is in. */
  welcome: 2,
  /** rank → 0: float32 values to sum. */
  reduceF32: 3,
  /** rank → 0: float64 values to sum. */
  reduceF64: 4,
  /** rank → 0: bytes to gather. */
  gather: 5,
  /** 0 → rank: the sum, or the gathered bytes (`encodeGathered`). */
  result: 6,
  /** Either way: this side is done and will close its connection; a close without it is a failure. */
  bye: 7,
  /** 0 → rank: the job is stopping; UTF-8 reason. */
  abort: 8,
} as const;

export const FRAME_HEADER_BYTES = 12;

/** Header: u32 kind, u32 sequence number of the collective, u32 payload bytes (little-endian). */
export function frame(kind: number, seq: number, payload: Uint8Array = new Uint8Array(0)): Buffer {
  const b = Buffer.allocUnsafe(FRAME_HEADER_BYTES + payload.byteLength);
  b.writeUInt32LE(kind, 0);
  b.writeUInt32LE(seq, 4);
  b.writeUInt32LE(payload.byteLength, 8);
  b.set(payload, FRAME_HEADER_BYTES);
  return b;
}

export interface Frame {
  kind: number;
  seq: number;
  payload: Buffer;
}

/** Cuts a byte stream into frames; bytes of an incomplete frame wait for the next chunk. */
export class FrameReader {
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  push(chunk: Buffer): Frame[] {
    this.pending.push(chunk);
    this.pendingBytes += chunk.byteLength;
    const out: Frame[] = [];
    if (this.pendingBytes < FRAME_HEADER_BYTES) return out;
    let buf = this.pending.length === 1 ? this.pending[0]! : Buffer.concat(this.pending, this.pendingBytes);
    let at = 0;
    while (buf.byteLength - at >= FRAME_HEADER_BYTES) {
      const length = buf.readUInt32LE(at + 8);
      if (buf.byteLength - at < FRAME_HEADER_BYTES + length) break;
      out.push({
        kind: buf.readUInt32LE(at),
        seq: buf.readUInt32LE(at + 4),
        // a copy: the payload outlives the chunk buffer, which Node may reuse
        payload: Buffer.from(buf.subarray(at + FRAME_HEADER_BYTES, at + FRAME_HEADER_BYTES + length)),
      });
      at += FRAME_HEADER_BYTES + length;
    }
    buf = buf.subarray(at);
    this.pending = buf.byteLength > 0 ? [buf] : [];
    this.pendingBytes = buf.byteLength;
    return out;
  }
}

/** The gathered bytes of every rank, in rank order: u32 count, count × u32 lengths, then the bytes. */
export function encodeGathered(parts: readonly Uint8Array[]): Uint8Array {
  let total = 4 + 4 * parts.length;
  for (const p of parts) total += p.byteLength;
  const out = new Uint8Array(total);
  const view = new DataView(out.buffer);
  view.setUint32(0, parts.length, true);
  let at = 4 + 4 * parts.length;
  parts.forEach((p, i) => {
    view.setUint32(4 + 4 * i, p.byteLength, true);
    out.set(p, at);
    at += p.byteLength;
  });
  return out;
}

export function decodeGathered(bytes: Uint8Array): Uint8Array[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = view.getUint32(0, true);
  const out: Uint8Array[] = [];
  let at = 4 + 4 * n;
  for (let i = 0; i < n; i++) {
    const len = view.getUint32(4 + 4 * i, true);
    out.push(bytes.slice(at, at + len));
    at += len;
  }
  return out;
}

/** Main thread → communication thread. */
export type CommRequest =
  | { kind: "reduce"; dtype: "f32" | "f64"; data: ArrayBuffer }
  | { kind: "gather"; data: ArrayBuffer }
  | { kind: "close" };

/** Communication thread → main thread. */
export type CommReply =
  | { kind: "ready" }
  | { kind: "error"; message: string }
  | { kind: "result"; data: ArrayBuffer }
  | { kind: "closed" };

/** What the communication thread starts with. */
export interface CommWorkerConfig {
  rank: number;
  worldSize: number;
  masterAddr: string;
  masterPort: number;
  /** How long rank 0 waits for the others, and the others try to reach rank 0. */
  timeoutMs: number;
  /** The launcher's pid (`--gpus N`): when it is gone (killed), this rank stops too. */
  launcherPid?: number;
  /** Files this process owns (the run directory's lock) to remove when the rank is stopped from its thread. */
  releaseOnDeath?: string[];
}
