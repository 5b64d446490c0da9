import type { ComputationGraph } from "../../graph/graph.js";
import { Op } from "../../graph/opcodes.js";
import { OPS } from "../../ops/registry.js";

/*
 * Batching signatures interned to small integers, without building strings.
 *
 * Each op's definition (src/ops/) writes its node's signature as integers into a scratch key, op first: two nodes may
 * share a batched kernel iff their keys are equal. Building a string of it (`batchSignature` in src/ops/registry.ts)
 * and looking that up in a Map costs about three times as much per node (bench/autobatch-plan.ts reports it next to
 * whole plans), and 128 trees make 40 000 nodes; here the key is looked up in an open-addressing table over a flat
 * key pool. Equal ids ⇔ equal strings; test/autobatch.test.ts checks that on crafted near-miss nodes and on random
 * graphs.
 */

const EMPTY = 0;

/**
 * Interns node signatures of one graph. `reset()` before each plan: signature ids are only meaningful within one
 * graph (a key may name a node id). Buffers keep their capacity across resets.
 */
export class SignatureTable {
  /** Number of distinct signatures since the last reset; ids are 0 … count − 1, in order of first appearance. */
  count = 0;
  /** Per signature: the op of its nodes. */
  op = new Uint8Array(64);

  private slots = new Int32Array(256); // signature id + 1, or EMPTY
  private mask = 255;
  private keyPool = new Int32Array(1024);
  private keyPoolSize = 0;
  private keyStart = new Int32Array(64);
  private keyLen = new Int32Array(64);
  private keyHash = new Int32Array(64);
  private key = new Int32Array(64);

  reset(): void {
    if (this.count > 0) this.slots.fill(EMPTY);
    this.count = 0;
    this.keyPoolSize = 0;
  }

  /** The signature id of node `i` (not a parameter node: those are never batched). */
  intern(g: ComputationGraph, i: number): number {
    const len = this.writeKey(g, i);
    const key = this.key;
    let h = 0x811c9dc5;
    for (let k = 0; k < len; k++) h = Math.imul(h ^ key[k]!, 0x01000193);
    h ^= h >>> 15;
    h = Math.imul(h, 0x2c1b3c6d);
    h ^= h >>> 13;
    const slots = this.slots;
    const mask = this.mask;
    let s = h & mask;
    for (;;) {
      const e = slots[s]!;
      if (e === EMPTY) break;
      const id = e - 1;
      if (this.keyHash[id] === h && this.keyLen[id] === len && this.sameKey(id, len)) return id;
      s = (s + 1) & mask;
    }
    return this.insert(len, h, s, g.op[i]!);
  }

  private sameKey(id: number, len: number): boolean {
    const pool = this.keyPool;
    const key = this.key;
    const start = this.keyStart[id]!;
    for (let k = 0; k < len; k++) if (pool[start + k] !== key[k]) return false;
    return true;
  }

  private insert(len: number, h: number, slot: number, op: number): number {
    const id = this.count;
    if (id === this.keyStart.length) this.growSignatures();
    if (this.keyPoolSize + len > this.keyPool.length) {
      const grown = new Int32Array(Math.max(this.keyPool.length * 2, this.keyPoolSize + len));
      grown.set(this.keyPool.subarray(0, this.keyPoolSize));
      this.keyPool = grown;
    }
    this.keyPool.set(this.key.subarray(0, len), this.keyPoolSize);
    this.keyStart[id] = this.keyPoolSize;
    this.keyLen[id] = len;
    this.keyHash[id] = h;
    this.op[id] = op;
    this.keyPoolSize += len;
    this.slots[slot] = id + 1;
    this.count = id + 1;
    // keep the load factor at most 1/2 so probe chains stay short
    if (this.count * 2 > this.slots.length) this.rehash();
    return id;
  }

  private rehash(): void {
    const slots = new Int32Array(this.slots.length * 2);
    const mask = slots.length - 1;
    for (let id = 0; id < this.count; id++) {
      let s = this.keyHash[id]! & mask;
      while (slots[s] !== EMPTY) s = (s + 1) & mask;
      slots[s] = id + 1;
    }
    this.slots = slots;
    this.mask = mask;
  }

  private growSignatures(): void {
    const n = this.keyStart.length * 2;
    const grow = (a: Int32Array<ArrayBuffer>): Int32Array<ArrayBuffer> => {
      const b = new Int32Array(n);
      b.set(a);
      return b;
    };
    this.keyStart = grow(this.keyStart);
    this.keyLen = grow(this.keyLen);
    this.keyHash = grow(this.keyHash);
    const op = new Uint8Array(n);
    op.set(this.op);
    this.op = op;
  }

  /** Writes node i's key (the op, then its definition's signature fields) into `this.key`; returns its length. */
  private writeKey(g: ComputationGraph, i: number): number {
    const op = g.op[i]!;
    const room = 2 * g.argCount[i]! + 4;
    if (this.key.length < room) this.key = new Int32Array(room);
    this.key[0] = op;
    return OPS[op]!.signature(g, i, this.key);
  }
}

/** Whether nodes of this op run as a gathered matrix product (one GEMM per weight) rather than per node. */
export function isMatrixOp(op: number): boolean {
  return op === Op.MatVec || op === Op.Affine;
}
