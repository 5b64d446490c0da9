/**
 * The bookkeeping under the VPPS scheduler: steps, processor loads, matrix operand lists, and the dependency
 * tracking that places signals and waits.
 *
 * - Buffers are storage roots (layout.ts): value `3i`, gradient `3i + 1`, affine temporaries `3i + 2`. Each keeps a
 *   list of (step, writer) where the writer is a CTA or, as `-(m + 1)`, the holders of matrix m.
 * - A CTA reading a buffer written by another CTA in an earlier step waits once on that step's barrier, and the
 *   writer's end-of-step signal is kept; signals nobody needs are dropped when the script is finished.
 * - Matrix products of one step are collected per matrix and flushed at the end of the step as one list
 *   instruction per holder, whose entries live once in the script's shared table.
 */
import type { BatchLayout } from "./layout.js";
import type { VppsPlan } from "./plan.js";
import { LIST_ENTRIES, type Opcode, ScriptWriter } from "./script.js";

/** Buffer ids of a node's value and gradient storage (-1: storage nobody writes during the batch). */
export function valueBuffer(L: BatchLayout, node: number): number {
  const r = L.valueRoot[node]!;
  return r < 0 ? -1 : 3 * r;
}

export function gradBuffer(L: BatchLayout, node: number): number {
  const r = L.gradRoot[node]!;
  return r < 0 ? -1 : 3 * r + 1;
}

/** The temporaries of an affine transform with several products. */
export function tempBuffer(node: number): number {
  return 3 * node + 2;
}

/** Load of one weight element of a matrix product relative to one float of an elementwise instruction. */
export const MATRIX_LOAD_WEIGHT = 0.25;

interface MatrixList {
  op: Opcode;
  words: Uint32Array;
  length: number;
  reads: Int32Array;
  readCount: number;
}

export class StepTracker {
  readonly ctas: number;
  readonly writer: ScriptWriter;
  /** CTAs holding rows of each matrix, and how many rows each holds. */
  readonly holders: Int32Array[];
  private readonly heldRows: Int32Array[];
  private readonly cols: Int32Array;

  private head = new Int32Array(0);
  private wStep: Int32Array = new Int32Array(1024);
  private wWho: Int32Array = new Int32Array(1024);
  private wNext: Int32Array = new Int32Array(1024);
  private writes = 0;

  step = 0;
  private waited = new Uint8Array(0);
  private slotOf = new Int32Array(0);
  private slotMask = new Uint32Array(1024);
  private usedGroups = new Uint32Array(0);
  private steps = 0;

  private readonly active: Int32Array;
  private readonly activeList: Int32Array;
  private activeCount = 0;
  private readonly stepMask: Uint32Array;
  private readonly load: Float64Array;
  private readonly heap: Int32Array;
  private heapReady = false;

  private readonly lists: MatrixList[];
  private readonly listed: number[] = [];
  private stepStamp = new Int32Array(0);
  private stamp = 0;
  private onlyWriter = new Int32Array(0);
  private readonly needed: number[] = [];

  constructor(plan: VppsPlan) {
    if (plan.matrices.length > 32) {
      throw new Error(`VPPS: at most 32 matrices can be held in registers; the plan has ${plan.matrices.length}`);
    }
    const ctas = plan.ctas;
    this.ctas = ctas;
    this.writer = new ScriptWriter(ctas);
    this.holders = plan.matrices.map((m) => Int32Array.from(new Set(m.partitions.map((p) => p.cta))).sort());
    this.heldRows = plan.matrices.map((m, i) => {
      const rows = new Int32Array(ctas);
      for (const p of m.partitions) rows[p.cta]! += p.rowCount;
      return Int32Array.from(this.holders[i]!, (c) => rows[c]!);
    });
    this.cols = Int32Array.from(plan.matrices, (m) => m.cols);
    this.active = new Int32Array(ctas);
    this.activeList = new Int32Array(ctas);
    this.stepMask = new Uint32Array(ctas);
    this.load = new Float64Array(ctas);
    this.heap = new Int32Array(ctas);
    this.lists = plan.matrices.map(() => ({
      op: 0 as Opcode,
      words: new Uint32Array(1024),
      length: 0,
      reads: new Int32Array(512),
      readCount: 0,
    }));
  }

  /** Prepares for a batch with `buffers` buffer ids and at most `steps` steps. */
  begin(buffers: number, steps: number): void {
    this.writer.reset();
    if (this.head.length < buffers) this.head = new Int32Array(buffers * 2);
    this.head.fill(-1, 0, buffers);
    this.writes = 0;
    this.steps = steps;
    const cells = steps * this.ctas;
    if (this.waited.length < cells) {
      this.waited = new Uint8Array(cells * 2);
      this.slotOf = new Int32Array(cells * 2);
    }
    this.waited.fill(0, 0, cells);
    this.slotOf.fill(-1, 0, cells);
    if (this.usedGroups.length < steps) {
      this.usedGroups = new Uint32Array(steps * 2);
      this.stepStamp = new Int32Array(steps * 2);
      this.onlyWriter = new Int32Array(steps * 2);
    }
    this.usedGroups.fill(0, 0, steps);
    this.active.fill(0);
  }

  startStep(s: number): void {
    this.step = s;
    this.activeCount = 0;
    this.load.fill(0);
    this.heapReady = false;
  }

  touch(q: number): void {
    if (this.active[q] !== this.step + 1) {
      this.active[q] = this.step + 1;
      this.activeList[this.activeCount++] = q;
      this.stepMask[q] = 0;
    }
  }

  /** Announces `entries` products of matrix m in this step, so that loads are known before anything is placed. */
  preloadMatrix(m: number, entries: number): void {
    const hs = this.holders[m]!;
    const rows = this.heldRows[m]!;
    const work = this.cols[m]! * MATRIX_LOAD_WEIGHT * entries;
    for (let k = 0; k < hs.length; k++) this.load[hs[k]!]! += rows[k]! * work;
    this.heapReady = false;
  }

  /** The CTA with the least work in this step (a binary heap over the loads). */
  leastLoaded(work: number): number {
    const { heap, load } = this;
    const n = this.ctas;
    if (!this.heapReady) {
      for (let k = 0; k < n; k++) heap[k] = k;
      for (let k = (n >> 1) - 1; k >= 0; k--) this.siftDown(k);
      this.heapReady = true;
    }
    const q = heap[0]!;
    this.touch(q);
    load[q]! += work;
    this.siftDown(0);
    return q;
  }

  private siftDown(k: number): void {
    const { heap, load } = this;
    const n = this.ctas;
    const q = heap[k]!;
    const l = load[q]!;
    for (;;) {
      let c = 2 * k + 1;
      if (c >= n) break;
      if (c + 1 < n && load[heap[c + 1]!]! < load[heap[c]!]!) c++;
      if (load[heap[c]!]! >= l) break;
      heap[k] = heap[c]!;
      k = c;
    }
    heap[k] = q;
  }

  /** Records that `who` (a CTA, or -(m+1) for the holders of matrix m) wrote buffer b in this step. */
  wrote(b: number, who: number): void {
    if (b < 0) return;
    const h = this.head[b]!;
    if (h >= 0 && this.wStep[h] === this.step && this.wWho[h] === who) return;
    const e = this.writes++;
    if (e === this.wStep.length) {
      this.wStep = grow(this.wStep);
      this.wWho = grow(this.wWho);
      this.wNext = grow(this.wNext);
    }
    this.wStep[e] = this.step;
    this.wWho[e] = who;
    this.wNext[e] = h;
    this.head[b] = e;
  }

  /** Before CTA q reads buffer b: wait for every earlier step in which another CTA wrote it. */
  need(q: number, b: number): void {
    if (b < 0) return;
    for (let e = this.head[b]!; e >= 0; e = this.wNext[e]!) {
      const who = this.wWho[e]!;
      if (who === q) continue;
      const st = this.wStep[e]!;
      if (who < 0) {
        const hs = this.holders[-who - 1]!;
        if (hs.length === 1 && hs[0] === q) continue;
        this.usedGroups[st]! |= 1 << (-who - 1);
      } else {
        this.writer.keep(this.slotOf[st * this.ctas + who]!);
      }
      this.sameStepCheck(st);
      const w = st * this.ctas + q;
      if (this.waited[w] === 0) {
        this.waited[w] = 1;
        this.writer.wait(q, st);
      }
    }
  }

  private sameStepCheck(st: number): void {
    if (st === this.step) {
      throw new Error(`vpps scheduler: step ${st} reads data written in the same step by another processor`);
    }
  }

  /** Adds one product of matrix m to this step's list (entry words `e`, buffers read `r0`, `r1`). */
  listEntry(op: Opcode, m: number, e: ArrayLike<number>, count: number, r0: number, r1: number): void {
    const list = this.lists[m]!;
    if (list.length === 0 && list.readCount === 0) this.listed.push(m);
    list.op = op;
    if (list.length + count > list.words.length) {
      const w = new Uint32Array(list.words.length * 2);
      w.set(list.words);
      list.words = w;
    }
    for (let k = 0; k < count; k++) list.words[list.length++] = e[k]!;
    if (list.readCount + 2 > list.reads.length) list.reads = grow(list.reads);
    list.reads[list.readCount++] = r0;
    list.reads[list.readCount++] = r1;
  }

  /** One list instruction per holder for every matrix used in this step, after the waits its reads need. */
  private flushLists(): void {
    for (const m of this.listed) {
      const list = this.lists[m]!;
      const hs = this.holders[m]!;
      const stamp = ++this.stamp;
      const needed = this.needed;
      needed.length = 0;
      for (let k = 0; k < list.readCount; k++) {
        const b = list.reads[k]!;
        if (b < 0) continue;
        for (let e = this.head[b]!; e >= 0; e = this.wNext[e]!) {
          const who = this.wWho[e]!;
          const st = this.wStep[e]!;
          // the CTA that wrote: a single one, or the only holder of a one-holder matrix; -2 when several did
          let cta = who;
          if (who < 0) {
            const wh = this.holders[-who - 1]!;
            cta = wh.length === 1 ? wh[0]! : -2;
          }
          if (hs.length === 1 && cta === hs[0]) continue; // the only reader wrote it itself
          this.sameStepCheck(st);
          if (who >= 0) this.writer.keep(this.slotOf[st * this.ctas + who]!);
          else this.usedGroups[st]! |= 1 << (-who - 1);
          if (this.stepStamp[st] !== stamp) {
            this.stepStamp[st] = stamp;
            this.onlyWriter[st] = cta;
            needed.push(st);
          } else if (this.onlyWriter[st] !== cta) {
            this.onlyWriter[st] = -2;
          }
        }
      }
      const at = this.writer.appendTable(list.words, list.length);
      const count = list.length / LIST_ENTRIES[list.op]!.length;
      for (let k = 0; k < hs.length; k++) {
        const q = hs[k]!;
        this.touch(q);
        this.stepMask[q]! |= 1 << m;
        for (const st of needed) {
          if (this.onlyWriter[st] === q) continue;
          const w = st * this.ctas + q;
          if (this.waited[w] === 0) {
            this.waited[w] = 1;
            this.writer.wait(q, st);
          }
        }
        this.writer.ins2(q, list.op, m, at, count);
      }
      list.length = 0;
      list.readCount = 0;
    }
    this.listed.length = 0;
  }

  /** Flushes the step's lists and reserves the end-of-step signal of every CTA that worked in it. */
  endStep(): void {
    this.flushLists();
    for (let k = 0; k < this.activeCount; k++) {
      const q = this.activeList[k]!;
      const slot = this.writer.reserveSignal(q, this.step);
      this.slotOf[this.step * this.ctas + q] = slot;
      if (slot >= this.slotMask.length) {
        const m = new Uint32Array(slot * 2);
        m.set(this.slotMask);
        this.slotMask = m;
      }
      this.slotMask[slot] = this.stepMask[q]!;
    }
  }

  /** Every CTA signals and then waits for all: the grid-wide barrier before the update. */
  gridBarrier(s: number): void {
    this.startStep(s);
    for (let q = 0; q < this.ctas; q++) {
      this.touch(q);
      this.writer.keep(this.writer.reserveSignal(q, s));
    }
    for (let q = 0; q < this.ctas; q++) this.writer.wait(q, s);
  }

  /** The batch script, keeping the signals of holders whose matrix output somebody needed. */
  finish(steps: number): Uint32Array {
    for (let st = 0; st < this.steps; st++) {
      const used = this.usedGroups[st]!;
      if (used === 0) continue;
      for (let q = 0; q < this.ctas; q++) {
        const slot = this.slotOf[st * this.ctas + q]!;
        if (slot >= 0 && (this.slotMask[slot]! & used) !== 0) this.writer.keep(slot);
      }
    }
    return this.writer.finish(steps);
  }
}

function grow(a: Int32Array): Int32Array {
  const b = new Int32Array(a.length * 2);
  b.set(a);
  return b;
}
