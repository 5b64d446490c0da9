/**
 * The bookkeeping under the VPPS scheduler: steps, processor loads, matrix operand lists, and the dependency
 * tracking that places signals and waits.
 *
 * - Buffers are storage roots (layout.ts): value `2i`, gradient `2i + 1`, affine temporaries `2n + i` (n nodes). Each
 *   keeps a list of (step, writer) where the writer is a CTA or, as `-(m + 1)`, the holders of matrix m.
 * - Each step has `1 + matrices` barriers (`barriersPerStep`): barrier `K·s` counts the signals of the CTAs that
 *   ran elementwise (non-matrix) instructions in step s, given right after those instructions and before the CTA's
 *   matrix lists of the step; barrier `K·s + 1 + m` counts the holders of matrix m after its list. A reader waits
 *   only for the class of producer it reads from, so a cell waiting for a copy does not also wait for an unrelated
 *   matrix list of the same step (which, at batch 1, added a barrier hop per tree level).
 * - A CTA reading a buffer written by another CTA in an earlier step waits once on that barrier, and the writer's
 *   signal is kept; signals nobody needs are dropped when the script is finished.
 * - Matrix products of one step are collected per matrix and flushed at the end of the step as one list
 *   instruction per holder, whose entries live once in the script's shared table.
 */
import type { BatchLayout } from "../plan/layout.js";
import type { VppsPlan } from "../plan/plan.js";
import { LIST_ENTRIES, NONE, Opcode, TILE } from "../script/format.js";
import { ScriptWriter } from "../script/writer.js";

/** Load of one weight element of a matrix product relative to one float of an elementwise instruction. */
export const MATRIX_LOAD_WEIGHT = 0.25;
/**
 * Load of one multiply-add of a tile instruction relative to one float of an elementwise instruction: tiles read
 * the master copy through shared memory in 64×64 blocks, far denser work than a list's per-entry rounds.
 */
export const TILE_LOAD_WEIGHT = MATRIX_LOAD_WEIGHT / 16;
/**
 * Lists of at least this many entries become tile instructions (ScheduleOptions.tileEntries): measured on the
 * H100 (bench/vpps-tiles.ts) — shorter lists are faster on the holders, whose weights are already in registers.
 */
export const DEFAULT_TILE_ENTRIES = 48;

/**
 * Steps, loads and dependencies of one scheduler; every array is kept across batches (grow-only), so that a batch
 * allocates nothing once warm. Per-cell tables (step × CTA) are not cleared per batch: `waited` holds a stamp of
 * the batch that set it, and a CTA's signal slot of a step is only read after that CTA worked in the step.
 */
export class StepTracker {
  readonly ctas: number;
  readonly writer: ScriptWriter;
  /** CTAs holding rows of each matrix, and how many rows each holds. */
  readonly holders: Int32Array[];
  private readonly heldRows: Int32Array[];
  private readonly cols: Int32Array;
  /** Per matrix: its holder when it has exactly one, else -1. */
  private readonly soleHolder: Int32Array;
  private readonly rows: Int32Array;
  /** Per matrix: 1 when its gradient lives in registers (its backward lists may become tiles). */
  private readonly registerGrad: Uint8Array;
  /** Plan matrices (numbers below this); the transposed copies come after them. */
  private readonly planMatrices: number;
  /** Per plan matrix: the matrix number of its transposed copy, or -1. */
  private readonly transposedOf: Int32Array;
  /** Per plan matrix: the products announced for it in this step (preloadMatrix). */
  private readonly stepEntries: Int32Array;
  /** Lists of at least this many entries become tile instructions (0: never). */
  readonly tileEntries: number;
  /** Per step: bit m set when matrix m's list of that step was run as tiles (by any CTA, not only its holders). */
  private tiledMask = new Uint32Array(0);
  /** tile.wbar instructions of this batch: the gradient buffer must be zeroed and imported by the holders. */
  wbarTiles = 0;
  /** Scratch of one tiled list: per tile its CTA and its instruction words (5 each), and how many tiles. */
  private tileCta: Int32Array = new Int32Array(256);
  private tileWords: Uint32Array = new Uint32Array(5 * 256);
  private tileCount = 0;
  /**
   * flushTiles' grouping by CTA: tiles per CTA (zero between lists), where each CTA's run starts, tile indices in
   * CTA order, and the CTAs in the order they first got a tile.
   */
  private tileOrder: Int32Array = new Int32Array(256);
  private readonly tilesOf: Int32Array;
  private readonly tileStart: Int32Array;
  private readonly ctaOrder: Int32Array;

  /**
   * Per node of the batch, NODE_WORDS words of `rec` at NODE_WORDS·node: the buffer ids of its value and gradient
   * storage (-1: storage nobody writes in the batch), then the writes of its own value and gradient buffers when it
   * is a storage root (layout.ts). A buffer id is the offset in `rec` of the buffer's newest write:
   * `NODE_WORDS·root + R_VALUE_WRITE` (or R_GRAD_WRITE), and `NODE_WORDS·n + 2·node` for an affine node's
   * temporaries.
   *
   * A write record is 2 words: the write packed as by `packWrite` (0 when nobody wrote the buffer in this batch),
   * and the offset in `wr` of the next older write or -1. Older writes are 2 words each in `wr` (packed write, next
   * older or -1).
   *
   * Why per node: the scheduler visits nodes level by level, which at batch 64-128 jumps across megabytes, so
   * that "who wrote what this node reads" cost two dependent cache misses (the node's storage root, then a table of
   * writes indexed by root, then 16 bytes per buffer with an epoch). Here most nodes are their own root and one line
   * answers it; the table is rebuilt by one sequential pass per batch. (Copying more of the node's facts into the
   * record, op, arguments, offsets, cost as much in that pass as it saved in misses: measured, not kept.)
   */
  private rec = new Int32Array(0);
  private tempBase = 0;
  private wr: Int32Array = new Int32Array(2 * 1024);
  private wrLength = 0;

  step = 0;
  /** Barriers of one step: the elementwise writers', then one per matrix (see the file comment). */
  readonly barriersPerStep: number;
  private batch = 0;
  /** Per (barrier, CTA): `batch` when that CTA already waits on that barrier in this batch (a byte: cache footprint). */
  private waited = new Uint8Array(0);
  private slotOf = new Int32Array(0);
  private slotMask = new Uint32Array(1024);
  private usedGroups = new Uint32Array(0);
  /** Per step: slots of the elementwise signals (slotOf) and, per matrix group, of all signals (slotStart..slotEnd). */
  private slotStart = new Int32Array(0);
  private slotEnd = new Int32Array(0);
  private steps = 0;

  private readonly active: Int32Array;
  private readonly activeList: Int32Array;
  private activeCount = 0;
  private readonly load: Float64Array;
  private readonly heap: Int32Array;
  private readonly heapLoad: Float64Array;
  private readonly identity: Int32Array;
  private heapReady = false;
  /**
   * Heaps already built, by the step's announcement (see leastLoaded): `announced` spells this step's
   * preloadMatrix calls, or is undefined once loads depend on anything else (a placement before an announcement).
   */
  private readonly heapMemo = new Map<string, { heap: Int32Array; heapLoad: Float64Array }>();
  private announced: string | undefined = "";

  /** Per matrix: this step's list entries, the buffers they read, and the list's opcode. */
  private readonly listWords: Uint32Array[];
  private readonly listLength: Int32Array;
  private readonly listReads: Int32Array[];
  private readonly listReadCount: Int32Array;
  private readonly listOp: Int32Array;
  private readonly listed: Int32Array;
  private listedCount = 0;
  /** Per barrier, while flushing one list: whether the list needs it (stamp) and the only CTA it waits for. */
  private barrierStamp = new Int32Array(0);
  private stamp = 0;
  private onlyWriter = new Int32Array(0);
  private needed: Int32Array = new Int32Array(64);
  private neededCount = 0;

  constructor(plan: VppsPlan, tileEntries = DEFAULT_TILE_ENTRIES) {
    // matrix numbers: the plan's matrices, then their transposed copies (plan.ts), each with its own barrier group
    const held = [...plan.matrices, ...plan.transposed];
    if (held.length > 32) {
      throw new Error(
        `VPPS: at most 32 matrices (transposed copies included) can be held in registers; the plan has ${held.length}`,
      );
    }
    const ctas = plan.ctas;
    if (ctas + WHO_BIAS >= 1 << WHO_BITS) {
      throw new Error(`VPPS scheduler: at most ${(1 << WHO_BITS) - WHO_BIAS - 1} processors; the plan has ${ctas}`);
    }
    const matrices = held.length;
    this.ctas = ctas;
    this.barriersPerStep = 1 + matrices;
    this.writer = new ScriptWriter(ctas);
    this.holders = held.map((m) => Int32Array.from(new Set(m.partitions.map((p) => p.cta))).sort());
    this.heldRows = held.map((m, i) => {
      const rows = new Int32Array(ctas);
      for (const p of m.partitions) rows[p.cta]! += p.rowCount;
      return Int32Array.from(this.holders[i]!, (c) => rows[c]!);
    });
    this.soleHolder = Int32Array.from(this.holders, (hs) => (hs.length === 1 ? hs[0]! : -1));
    this.cols = Int32Array.from(held, (m) => m.cols);
    this.rows = Int32Array.from(held, (m) => m.rows);
    this.registerGrad = Uint8Array.from(held, (m) => ("gradients" in m && m.gradients === "registers" ? 1 : 0));
    this.planMatrices = plan.matrices.length;
    this.transposedOf = new Int32Array(plan.matrices.length).fill(-1);
    for (const t of plan.transposed) this.transposedOf[t.source] = t.index;
    this.stepEntries = new Int32Array(plan.matrices.length);
    if (!Number.isInteger(tileEntries) || tileEntries < 0) {
      throw new Error(`vpps scheduler: tileEntries must be a whole number >= 0 (0: no tiles); got ${tileEntries}`);
    }
    this.tileEntries = tileEntries;
    this.active = new Int32Array(ctas);
    this.activeList = new Int32Array(ctas);
    this.load = new Float64Array(ctas);
    this.heap = new Int32Array(ctas);
    this.heapLoad = new Float64Array(ctas);
    this.identity = Int32Array.from({ length: ctas }, (_, k) => k);
    this.tilesOf = new Int32Array(ctas);
    this.tileStart = new Int32Array(ctas);
    this.ctaOrder = new Int32Array(ctas);
    this.listWords = held.map(() => new Uint32Array(1024));
    this.listLength = new Int32Array(matrices);
    this.listReads = held.map(() => new Int32Array(512));
    this.listReadCount = new Int32Array(matrices);
    this.listOp = new Int32Array(matrices);
    this.listed = new Int32Array(matrices);
  }

  /** Prepares for a batch of `nodes` nodes laid out as `L`, with at most `steps` steps. */
  begin(L: BatchLayout, nodes: number, steps: number): void {
    this.writer.reset();
    const words = NODE_WORDS * nodes + 2 * nodes;
    if (this.rec.length < words) this.rec = new Int32Array(2 * words);
    const rec = this.rec;
    const { valueRoot, gradRoot } = L;
    for (let i = 0, at = 0; i < nodes; i++, at += NODE_WORDS) {
      const v = valueRoot[i]!;
      const gr = gradRoot[i]!;
      rec[at + R_VALUE_BUFFER] = v < 0 ? -1 : NODE_WORDS * v + R_VALUE_WRITE;
      rec[at + R_GRAD_BUFFER] = gr < 0 ? -1 : NODE_WORDS * gr + R_GRAD_WRITE;
      rec[at + R_VALUE_WRITE] = 0; // nothing written yet
      rec[at + R_GRAD_WRITE] = 0;
    }
    this.tempBase = NODE_WORDS * nodes;
    rec.fill(0, this.tempBase, words);
    this.wrLength = 0;
    if (steps > MAX_STEPS) throw new Error(`vpps scheduler: a batch of ${steps} steps; at most ${MAX_STEPS}`);
    this.steps = steps;
    const cells = steps * this.ctas;
    const barriers = steps * this.barriersPerStep;
    if (this.waited.length < barriers * this.ctas) {
      this.waited = new Uint8Array(barriers * this.ctas * 2);
      this.batch = 0;
    }
    if (this.slotOf.length < cells) this.slotOf = new Int32Array(cells * 2);
    if (this.barrierStamp.length < barriers) {
      this.barrierStamp = new Int32Array(barriers * 2);
      this.onlyWriter = new Int32Array(barriers * 2);
    }
    // the stamp wraps after 255 batches; only then is the table cleared
    if (++this.batch === 256) {
      this.waited.fill(0);
      this.batch = 1;
    }
    this.wbarTiles = 0;
    if (this.tiledMask.length < steps) this.tiledMask = new Uint32Array(steps * 2);
    this.tiledMask.fill(0, 0, steps);
    if (this.usedGroups.length < steps) {
      this.usedGroups = new Uint32Array(steps * 2);
      this.slotStart = new Int32Array(steps * 2);
      this.slotEnd = new Int32Array(steps * 2);
    }
    this.usedGroups.fill(0, 0, steps);
    this.slotStart.fill(0, 0, steps);
    this.slotEnd.fill(0, 0, steps);
    this.active.fill(0);
  }

  startStep(s: number): void {
    this.step = s;
    this.activeCount = 0;
    this.load.fill(0);
    this.heapReady = false;
    this.announced = "";
  }

  touch(q: number): void {
    if (this.active[q] !== this.step + 1) {
      this.active[q] = this.step + 1;
      this.activeList[this.activeCount++] = q;
    }
  }

  /**
   * Announces `entries` products of matrix m in this step, so that loads are known before anything is placed;
   * `backward`: they are backward products, whose x̄ the holders of m's transposed copy form (see transposedFor).
   */
  preloadMatrix(m: number, entries: number, backward = false): void {
    this.stepEntries[m] = entries;
    if (this.tiles(m, entries, Opcode.MatVec)) return; // placed as tiles at the end of the step
    this.addLoad(m, entries);
    const copy = backward ? this.transposedFor(m) : -1;
    if (copy >= 0) this.addLoad(copy, entries);
    this.heapReady = false;
    if (this.announced !== undefined) this.announced += backward ? `${m}:${entries}b,` : `${m}:${entries},`;
  }

  private addLoad(m: number, entries: number): void {
    const hs = this.holders[m]!;
    const rows = this.heldRows[m]!;
    const load = this.load;
    const work = this.cols[m]! * MATRIX_LOAD_WEIGHT * entries;
    for (let k = 0; k < hs.length; k++) load[hs[k]!]! += rows[k]! * work;
  }

  /**
   * The matrix number of plan matrix m's transposed copy when this step's backward list of m is short enough to
   * stay on the holders (not tiles), else -1: its x̄ = Wᵀȳ then runs on the copy's holders as matvec.acc.
   */
  transposedFor(m: number): number {
    const copy = this.transposedOf[m]!;
    return copy >= 0 && !this.tiles(m, this.stepEntries[m]!, Opcode.MatVecBwd) ? copy : -1;
  }

  /** The CTA with the least work in this step (a binary heap over the loads). */
  leastLoaded(work: number): number {
    if (!this.heapReady) this.buildHeap();
    const q = this.heap[0]!;
    this.touch(q);
    const l = this.heapLoad[0]! + work;
    this.load[q] = l;
    this.heapLoad[0] = l;
    this.siftDown(0);
    return q;
  }

  /**
   * Heapifies the loads. Before the first placement of a step the loads are a function of the step's announcement
   * alone (the same matrices with the same product counts give the same floats), and so is the heap: a step
   * announcing what an earlier one did (every level of a small batch does) copies that heap instead of building it.
   */
  private buildHeap(): void {
    const key = this.announced;
    this.announced = undefined; // from now on loads include placements
    this.heapReady = true;
    const { heap, heapLoad, load } = this;
    const memo = key === undefined ? undefined : this.heapMemo.get(key);
    if (memo !== undefined) {
      heap.set(memo.heap);
      heapLoad.set(memo.heapLoad);
      return;
    }
    // Bottom-up heapify of the identity order. While position k is processed it still holds CTA k, and sifting
    // down a zero load moves nothing (loads are never negative), so only loaded positions need the call.
    heap.set(this.identity);
    heapLoad.set(load);
    for (let k = (this.ctas >> 1) - 1; k >= 0; k--) if (heapLoad[k]! > 0) this.siftDown(k);
    if (key !== undefined) {
      if (this.heapMemo.size >= HEAP_MEMO_LIMIT) this.heapMemo.clear(); // large batches rarely repeat a step
      this.heapMemo.set(key, { heap: heap.slice(), heapLoad: heapLoad.slice() });
    }
  }

  /** Restores the heap order below position k (`heapLoad` mirrors the loads in heap order: one load per level). */
  private siftDown(k: number): void {
    const { heap, heapLoad } = this;
    const n = this.ctas;
    const q = heap[k]!;
    const l = heapLoad[k]!;
    for (;;) {
      let c = 2 * k + 1;
      if (c >= n) break;
      let lc = heapLoad[c]!;
      if (c + 1 < n) {
        const l2 = heapLoad[c + 1]!;
        if (l2 < lc) {
          c++;
          lc = l2;
        }
      }
      if (lc >= l) break;
      heap[k] = heap[c]!;
      heapLoad[k] = lc;
      k = c;
    }
    heap[k] = q;
    heapLoad[k] = l;
  }

  /** Buffer ids (see `rec`) of a node's value and gradient storage (-1: storage nobody writes in the batch). */
  valueBuffer(node: number): number {
    return this.rec[NODE_WORDS * node + R_VALUE_BUFFER]!;
  }

  gradBuffer(node: number): number {
    return this.rec[NODE_WORDS * node + R_GRAD_BUFFER]!;
  }

  /** Before CTA q reads the value (gradient, temporaries) of a node. */
  needValue(q: number, node: number): void {
    this.need(q, this.rec[NODE_WORDS * node + R_VALUE_BUFFER]!);
  }

  needGrad(q: number, node: number): void {
    this.need(q, this.rec[NODE_WORDS * node + R_GRAD_BUFFER]!);
  }

  needTemp(q: number, node: number): void {
    this.need(q, this.tempBase + 2 * node);
  }

  /** `who` (a CTA, or -(m+1) for the holders of matrix m) wrote the value (gradient, temporaries) of a node. */
  wroteValue(node: number, who: number): void {
    this.wrote(this.rec[NODE_WORDS * node + R_VALUE_BUFFER]!, who);
  }

  wroteGrad(node: number, who: number): void {
    this.wrote(this.rec[NODE_WORDS * node + R_GRAD_BUFFER]!, who);
  }

  wroteTemp(node: number, who: number): void {
    this.wrote(this.tempBase + 2 * node, who);
  }

  /**
   * A write by CTA `who` in an earlier step `step` (its elementwise signal of that step covers it): a cell whose
   * instruction also stores h into its parent's concatenation, found when the concatenation is scheduled.
   */
  wroteValueAt(node: number, step: number, who: number): void {
    this.wrote(this.rec[NODE_WORDS * node + R_VALUE_BUFFER]!, who, step);
  }

  /** Records that `who` (a CTA, or -(m+1) for the holders of matrix m) wrote buffer `at` (an offset in `rec`). */
  wrote(at: number, who: number, step = this.step): void {
    if (at < 0) return;
    const bw = this.rec;
    const w = packWrite(step, who);
    const newest = bw[at]!;
    if (newest === w) return; // already recorded
    if (newest !== 0) {
      // the newest write so far moves to the list of older ones
      let wr = this.wr;
      const e = this.wrLength;
      if (e === wr.length) this.wr = wr = grow(wr);
      wr[e] = newest;
      wr[e + 1] = bw[at + 1]!;
      this.wrLength = e + 2;
      bw[at + 1] = e;
    } else {
      bw[at + 1] = -1;
    }
    bw[at] = w;
  }

  /** Before CTA q reads buffer `at` (an offset in `rec`): wait for every earlier step in which another CTA wrote it. */
  need(q: number, at: number): void {
    if (at < 0) return;
    const bw = this.rec;
    const w = bw[at]!;
    if (w === 0) return; // nobody wrote it in this batch
    this.waitFor(q, writeStep(w), writeWho(w));
    const wr = this.wr;
    for (let e = bw[at + 1]!; e >= 0; e = wr[e + 1]!) this.waitFor(q, writeStep(wr[e]!), writeWho(wr[e]!));
  }

  /** CTA q reads what `who` wrote in step st: unless q wrote it itself, keep the writer's signal and wait once. */
  private waitFor(q: number, st: number, who: number): void {
    if (who === q) return;
    let bar = st * this.barriersPerStep;
    if (who < 0) {
      if (this.soleWriter(st, -who - 1) === q) return;
      this.sameStepCheck(st);
      this.usedGroups[st]! |= 1 << (-who - 1);
      bar += -who;
    } else {
      this.sameStepCheck(st);
      this.writer.keep(this.slotOf[st * this.ctas + who]!);
    }
    const w = bar * this.ctas + q;
    if (this.waited[w] !== this.batch) {
      this.waited[w] = this.batch;
      this.writer.wait(q, bar);
    }
  }

  /** The one CTA that wrote matrix m's outputs of step st (its sole holder, unless tiles did), else -1. */
  private soleWriter(st: number, m: number): number {
    return (this.tiledMask[st]! >>> m) & 1 ? -1 : this.soleHolder[m]!;
  }

  /** Whether a list of `entries` products of matrix m with opcode op runs as tile instructions. */
  tiles(m: number, entries: number, op: Opcode): boolean {
    return this.tileEntries > 0 && entries >= this.tileEntries && (op === Opcode.MatVec || this.registerGrad[m] === 1);
  }

  private sameStepCheck(st: number): void {
    if (st === this.step) {
      throw new Error(`vpps scheduler: step ${st} reads data written in the same step by another processor`);
    }
  }

  /** Adds one product of matrix m to this step's list (entry words e0..e3, `count` of them; buffers read r0, r1). */
  listEntry(
    op: Opcode,
    m: number,
    count: number,
    e0: number,
    e1: number,
    e2: number,
    e3: number,
    r0: number,
    r1: number,
  ): void {
    const len = this.listLength[m]!;
    let reads = this.listReadCount[m]!;
    if (len === 0 && reads === 0) this.listed[this.listedCount++] = m;
    this.listOp[m] = op;
    let words = this.listWords[m]!;
    if (len + count > words.length) {
      const w = new Uint32Array(words.length * 2);
      w.set(words);
      this.listWords[m] = words = w;
    }
    words[len] = e0;
    words[len + 1] = e1;
    words[len + 2] = e2;
    if (count > 3) words[len + 3] = e3;
    this.listLength[m] = len + count;
    let r = this.listReads[m]!;
    if (reads + 2 > r.length) this.listReads[m] = r = grow(r);
    r[reads++] = r0;
    r[reads++] = r1;
    this.listReadCount[m] = reads;
  }

  /**
   * CTA q's waits before a list or its tiles: every barrier the list needs (flushLists collected them in `needed`)
   * that q does not already wait on in this batch, unless q is that barrier's only writer.
   */
  private waitNeeded(q: number): void {
    const { waited, writer, needed, onlyWriter, ctas, batch } = this;
    for (let j = 0; j < this.neededCount; j++) {
      const bar = needed[j]!;
      if (onlyWriter[bar] === q) continue;
      const w = bar * ctas + q;
      if (waited[w] !== batch) {
        waited[w] = batch;
        writer.wait(q, bar);
      }
    }
  }

  /** One list instruction per holder for every matrix used in this step, after the waits its reads need. */
  private flushLists(): void {
    // the transposed copies' x̄ lists first: a CTA holding a copy and a plan matrix runs them before the W̄ work
    this.flushListsOf(true);
    this.flushListsOf(false);
    this.listedCount = 0;
  }

  private flushListsOf(copies: boolean): void {
    const { writer, holders, rec, wr } = this;
    for (let li = 0; li < this.listedCount; li++) {
      const m = this.listed[li]!;
      if (m >= this.planMatrices !== copies) continue;
      const op = this.listOp[m]! as Opcode;
      const length = this.listLength[m]!;
      const count = length / (op === Opcode.MatVecBwd ? MATVEC_BWD_ENTRY : MATVEC_ENTRY);
      const tiled = this.tiles(m, count, op);
      const hs = holders[m]!;
      const sole = hs.length === 1 && !tiled ? hs[0]! : -3;
      const stamp = ++this.stamp;
      this.neededCount = 0;
      const reads = this.listReads[m]!;
      const readCount = this.listReadCount[m]!;
      for (let k = 0; k < readCount; k++) {
        const at = reads[k]!;
        if (at < 0) continue;
        const w = rec[at]!;
        if (w === 0) continue; // nobody wrote it in this batch
        this.listDependency(writeStep(w), writeWho(w), sole, stamp);
        for (let e = rec[at + 1]!; e >= 0; e = wr[e + 1]!) {
          this.listDependency(writeStep(wr[e]!), writeWho(wr[e]!), sole, stamp);
        }
      }
      const at = writer.appendTable(this.listWords[m]!, length);
      const bit = 1 << m;
      const group = this.step * this.barriersPerStep + 1 + m;
      if (tiled) {
        this.flushTiles(m, op, at, count, group);
        this.listLength[m] = 0;
        this.listReadCount[m] = 0;
        continue;
      }
      for (let k = 0; k < hs.length; k++) {
        const q = hs[k]!;
        this.waitNeeded(q);
        writer.ins2(q, op, m, at, count);
        this.reserve(q, group, bit);
      }
      this.listLength[m] = 0;
      this.listReadCount[m] = 0;
    }
  }

  /**
   * A long list of matrix m (`count` entries at table offset `at`) as tile instructions over the master copy, each
   * placed on the least-loaded CTA: forward, TILE.entries × TILE.rows blocks; backward, x̄ in TILE.entries ×
   * TILE.cols blocks and W̄ (into the gradient buffer) in TILE.rows × TILE.cols blocks over TILE.wbarEntries
   * entries. Every CTA that got tiles waits for what the list reads (the barriers flushLists collected in
   * `needed`), runs its tiles and signals matrix m's barrier of the step, like a holder after its list.
   */
  private flushTiles(m: number, op: Opcode, at: number, count: number, group: number): void {
    const rows = this.rows[m]!;
    const cols = this.cols[m]!;
    this.tileCount = 0;
    if (op === Opcode.MatVec) {
      for (let e0 = 0; e0 < count; e0 += TILE.entries) {
        const k = Math.min(TILE.entries, count - e0);
        for (let r0 = 0; r0 < rows; r0 += TILE.rows) {
          this.addTile(Opcode.Tile, at + MATVEC_ENTRY * e0, k, r0, 0, k * Math.min(TILE.rows, rows - r0) * cols);
        }
      }
    } else {
      const words = this.listWords[m]!;
      for (let e0 = 0; e0 < count; e0 += TILE.entries) {
        const k = Math.min(TILE.entries, count - e0);
        // no x̄ tile for a chunk whose entries all have x̄ NONE (W̄-only lists: schedule-backward.ts DeferredWbar)
        let xbars = 0;
        for (let e = e0; e < e0 + k && xbars === 0; e++) if (words[MATVEC_BWD_ENTRY * e + 2] !== NONE) xbars++;
        if (xbars === 0) continue;
        for (let c0 = 0; c0 < cols; c0 += TILE.cols) {
          for (let r0 = 0; r0 < rows; r0 += TILE.xbarRows) {
            const work = k * Math.min(TILE.cols, cols - c0) * Math.min(TILE.xbarRows, rows - r0);
            this.addTile(Opcode.TileXbar, at + MATVEC_BWD_ENTRY * e0, k, c0, r0, work);
          }
        }
      }
      for (let e0 = 0; e0 < count; e0 += TILE.wbarEntries) {
        const k = Math.min(TILE.wbarEntries, count - e0);
        for (let r0 = 0; r0 < rows; r0 += TILE.rows) {
          for (let c0 = 0; c0 < cols; c0 += TILE.cols) {
            const work = k * Math.min(TILE.rows, rows - r0) * Math.min(TILE.cols, cols - c0);
            this.addTile(Opcode.TileWbar, at + MATVEC_BWD_ENTRY * e0, k, r0, c0, work);
            this.wbarTiles++;
          }
        }
      }
    }
    this.tiledMask[this.step]! |= 1 << m;
    const n = this.tileCount;
    const cta = this.tileCta;
    // Group the tiles by CTA, CTAs in the order they first got a tile and each CTA's tiles in placement order (a
    // counting sort: at batch 128 a list has hundreds of tiles, and rescanning them per CTA cost 10% of scheduling).
    const { tilesOf, tileStart, tileOrder, ctaOrder } = this;
    let order = 0;
    for (let i = 0; i < n; i++) {
      const q = cta[i]!;
      if (tilesOf[q]!++ === 0) ctaOrder[order++] = q;
    }
    for (let j = 0, next = 0; j < order; j++) {
      const q = ctaOrder[j]!;
      tileStart[q] = next;
      next += tilesOf[q]!;
    }
    for (let i = 0; i < n; i++) tileOrder[tileStart[cta[i]!]!++] = i;
    const writer = this.writer;
    const w = this.tileWords;
    // per CTA, in the order CTAs first got a tile: its waits, all its tiles, one signal
    for (let j = 0, next = 0; j < order; j++) {
      const q = ctaOrder[j]!;
      this.waitNeeded(q);
      for (const end = next + tilesOf[q]!; next < end; next++) {
        const t = 5 * tileOrder[next]!;
        const code = w[t]! as Opcode;
        if (code === Opcode.Tile) writer.ins3(q, code, m, w[t + 1]!, w[t + 2]!, w[t + 3]!);
        else writer.ins4(q, code, m, w[t + 1]!, w[t + 2]!, w[t + 3]!, w[t + 4]!);
      }
      tilesOf[q] = 0;
      this.reserve(q, group, 1 << m);
    }
  }

  /** Places one tile (see flushTiles) on the least-loaded CTA and records its instruction words. */
  private addTile(code: Opcode, list: number, entries: number, a: number, b: number, work: number): void {
    const n = this.tileCount;
    if (n === this.tileCta.length) {
      this.tileCta = grow(this.tileCta);
      this.tileOrder = grow(this.tileOrder);
      const w = new Uint32Array(this.tileWords.length * 2);
      w.set(this.tileWords);
      this.tileWords = w;
    }
    this.tileCta[n] = this.placeTile(work * TILE_LOAD_WEIGHT);
    const w = this.tileWords;
    w[5 * n] = code;
    w[5 * n + 1] = list;
    w[5 * n + 2] = entries;
    w[5 * n + 3] = a;
    w[5 * n + 4] = b;
    this.tileCount = n + 1;
  }

  /** The least-loaded CTA for a tile of `work` (not an elementwise writer of the step: no touch). */
  private placeTile(work: number): number {
    if (!this.heapReady) this.buildHeap();
    const q = this.heap[0]!;
    const l = this.heapLoad[0]! + work;
    this.load[q] = l;
    this.heapLoad[0] = l;
    this.siftDown(0);
    return q;
  }

  /**
   * A list of this step reads what `who` wrote in step st: unless the list's only holder `sole` wrote it, keep the
   * writer's signal and note its barrier in `needed` with the CTA that wrote it (-2 when several did).
   */
  private listDependency(st: number, who: number, sole: number, stamp: number): void {
    // the CTA that wrote: a single one, or the only holder of a one-holder matrix; -2 when several did
    let cta = who;
    if (who < 0) {
      const only = this.soleWriter(st, -who - 1);
      cta = only >= 0 ? only : -2;
    }
    if (cta === sole) return; // the only reader wrote it itself
    this.sameStepCheck(st);
    let bar = st * this.barriersPerStep;
    if (who >= 0) this.writer.keep(this.slotOf[st * this.ctas + who]!);
    else {
      this.usedGroups[st]! |= 1 << (-who - 1);
      bar += -who;
    }
    if (this.barrierStamp[bar] !== stamp) {
      this.barrierStamp[bar] = stamp;
      this.onlyWriter[bar] = cta;
      if (this.neededCount === this.needed.length) this.needed = grow(this.needed);
      this.needed[this.neededCount++] = bar;
    } else if (this.onlyWriter[bar] !== cta) {
      this.onlyWriter[bar] = -2;
    }
  }

  /**
   * Ends the step: the elementwise signal of every CTA that placed instructions in it (right after them), then the
   * matrix lists, each holder signalling its matrix's barrier right after its list.
   */
  endStep(): void {
    const first = this.writer.signalCount;
    const base = this.step * this.ctas;
    const bar = this.step * this.barriersPerStep;
    for (let k = 0; k < this.activeCount; k++) {
      const q = this.activeList[k]!;
      this.slotOf[base + q] = this.reserve(q, bar, 0);
    }
    this.flushLists();
    this.slotStart[this.step] = first;
    this.slotEnd[this.step] = this.writer.signalCount;
  }

  /** Reserves a signal of CTA q on barrier `bar`; `mask`: the matrix whose holders it counts (0: elementwise). */
  private reserve(q: number, bar: number, mask: number): number {
    const slot = this.writer.reserveSignal(q, bar);
    if (slot >= this.slotMask.length) {
      const m = new Uint32Array(Math.max(2 * this.slotMask.length, slot + 1));
      m.set(this.slotMask);
      this.slotMask = m;
    }
    this.slotMask[slot] = mask;
    return slot;
  }

  /** Every CTA signals and then waits for all: the grid-wide barrier before the update. */
  gridBarrier(s: number): void {
    this.startStep(s);
    const bar = s * this.barriersPerStep;
    for (let q = 0; q < this.ctas; q++) {
      this.touch(q);
      this.writer.keep(this.writer.reserveSignal(q, bar));
    }
    for (let q = 0; q < this.ctas; q++) this.writer.wait(q, bar);
  }

  /**
   * The batch script (into `into(words)` when given, see ScriptWriter.finish), keeping the signals of holders
   * whose matrix output somebody needed.
   */
  finish(steps: number, into?: (words: number) => Uint32Array): Uint32Array {
    for (let st = 0; st < this.steps; st++) {
      const used = this.usedGroups[st]!;
      if (used === 0) continue;
      for (let slot = this.slotStart[st]!; slot < this.slotEnd[st]!; slot++) {
        if ((this.slotMask[slot]! & used) !== 0) this.writer.keep(slot);
      }
    }
    return this.writer.finish(steps * this.barriersPerStep, into);
  }
}

/**
 * The node records of StepTracker.rec: NODE_WORDS words per node at these offsets, the buffer ids of its value and
 * gradient storage, then the (newest write, next older) pairs of its own value and gradient buffers.
 */
const NODE_WORDS = 6;
const R_VALUE_BUFFER = 0;
const R_GRAD_BUFFER = 1;
const R_VALUE_WRITE = 2;
const R_GRAD_WRITE = 4;

/**
 * A write (step, who) as one positive word for `bw`: who + WHO_BIAS in the low WHO_BITS bits (who is a CTA, or
 * -(m + 1) for the holders of matrix m, m < 32), step + 1 above (so that 0 means "no write").
 */
const WHO_BITS = 12;
const WHO_BIAS = 64;
const MAX_STEPS = (1 << (31 - WHO_BITS)) - 2;

function packWrite(step: number, who: number): number {
  return ((step + 1) << WHO_BITS) | (who + WHO_BIAS);
}

function writeStep(w: number): number {
  return (w >>> WHO_BITS) - 1;
}

function writeWho(w: number): number {
  return (w & ((1 << WHO_BITS) - 1)) - WHO_BIAS;
}

/** Heaps remembered per scheduler (each `ctas` words). */
const HEAP_MEMO_LIMIT = 512;

/** Words of a list entry (script.ts LIST_ENTRIES), as constants for the flush loop. */
const MATVEC_ENTRY = LIST_ENTRIES[Opcode.MatVec]!.length;
const MATVEC_BWD_ENTRY = LIST_ENTRIES[Opcode.MatVecBwd]!.length;

function grow(a: Int32Array): Int32Array {
  const b = new Int32Array(a.length * 2);
  b.set(a);
  return b;
}
