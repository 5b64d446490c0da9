/**
 * The bookkeeping under the VPPS scheduler: steps, processor loads, matrix operand lists, and the dependency
 * tracking that places signals and waits.
 *
 * - Buffers are storage roots (plan/layout.ts); writes.ts keeps each one's writes (step, writer), the writer a CTA
 *   or, as `-(m + 1)`, the holders of matrix m. loads.ts picks the least-loaded CTA, tiles.ts cuts long lists.
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
import { Opcode, TILE } from "../script/format.js";
import { ScriptWriter } from "../script/writer.js";
import { StepLists } from "./lists.js";
import { MATRIX_LOAD_WEIGHT, StepLoads } from "./loads.js";
import { MATVEC_BWD_ENTRY, MATVEC_ENTRY, TileList } from "./tiles.js";
import { MAX_STEPS, MAX_WRITER_CTAS, WriteLog, writeStep, writeWho } from "./writes.js";

export { MATRIX_LOAD_WEIGHT, TILE_LOAD_WEIGHT } from "./loads.js";

/**
 * Lists of at least this many entries become tile instructions (ScheduleOptions.tileEntries): shorter lists are
 * faster on the holders, whose weights are already in registers (bench/vpps-tiles.ts measures the threshold).
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
  /**
   * Per matrix: 1 when it stays off chip (plan/types.ts Placement): it has no holders, every list of it runs as
   * tiles, and a backward list makes x̄ tiles only — its W̄ tiles run in the step after the backward pass
   * (`wbarStep`), where backward.ts DeferredWbar puts its entries.
   */
  readonly offChip: Uint8Array;
  /** True while the step of the held-back W̄ entries is being emitted (backward.ts DeferredWbar.emit). */
  wbarStep = false;
  /** CTAs that zeroed the outputs of split forward lists in step 0 (splitsForward), and how many. */
  private zeroCtas: Int32Array = new Int32Array(0);
  private zeroCount = 0;
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
  /** tile.wbar instructions of register-gradient matrices in this batch (their holders import the buffer). */
  registerWbarTiles = 0;
  /** Bit m set when off-chip matrix m got W̄ tiles in this batch (its gradient region holds this batch's W̄). */
  offChipGradients = 0;
  /** The tiles of the list being flushed. */
  private readonly tileList: TileList;

  /** Who wrote which buffer in which step of this batch. */
  private readonly writes = new WriteLog();

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
  /** This step's loads and the least-loaded choice. */
  private readonly loads: StepLoads;

  /** This step's matrix lists. */
  private readonly lists: StepLists;
  /** Per barrier, while flushing one list: whether the list needs it (stamp) and the only CTA it waits for. */
  private barrierStamp = new Int32Array(0);
  private stamp = 0;
  private onlyWriter = new Int32Array(0);
  private needed: Int32Array = new Int32Array(64);
  private neededCount = 0;

  constructor(plan: VppsPlan, tileEntries = DEFAULT_TILE_ENTRIES) {
    // matrix numbers: the plan's matrices, then their transposed copies (plan/types.ts), each with its own barrier group
    const held = [...plan.matrices, ...plan.transposed];
    if (held.length > 32) {
      throw new Error(
        `VPPS: at most 32 matrices (transposed copies included) can be held in registers; the plan has ${held.length}`,
      );
    }
    const ctas = plan.ctas;
    if (ctas > MAX_WRITER_CTAS) {
      throw new Error(`VPPS scheduler: at most ${MAX_WRITER_CTAS} processors; the plan has ${ctas}`);
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
    this.offChip = Uint8Array.from(held, (m) => ("placement" in m && m.placement === "off-chip" ? 1 : 0));
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
    this.loads = new StepLoads(ctas);
    this.tileList = new TileList(ctas);
    this.lists = new StepLists(matrices);
  }

  /** Prepares for a batch of `nodes` nodes laid out as `L`, with at most `steps` steps. */
  begin(L: BatchLayout, nodes: number, steps: number): void {
    this.writer.reset();
    this.writes.begin(L, nodes);
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
    this.zeroCount = 0;
    this.registerWbarTiles = 0;
    this.offChipGradients = 0;
    this.wbarStep = false;
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
    this.loads.startStep();
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
    this.loads.announce(m, entries, backward);
  }

  private addLoad(m: number, entries: number): void {
    const hs = this.holders[m]!;
    const rows = this.heldRows[m]!;
    const load = this.loads.load;
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

  /** The CTA with the least work in this step; `work` is added to it, and it takes part in the step. */
  leastLoaded(work: number): number {
    const q = this.loads.take(work);
    this.touch(q);
    return q;
  }

  /** Buffer ids (writes.ts) of a node's value and gradient storage (-1: storage nobody writes in the batch). */
  valueBuffer(node: number): number {
    return this.writes.valueBuffer(node);
  }

  gradBuffer(node: number): number {
    return this.writes.gradBuffer(node);
  }

  /** Before CTA q reads the value (gradient, temporaries) of a node. */
  needValue(q: number, node: number): void {
    this.need(q, this.writes.valueBuffer(node));
  }

  needGrad(q: number, node: number): void {
    this.need(q, this.writes.gradBuffer(node));
  }

  needTemp(q: number, node: number): void {
    this.need(q, this.writes.tempBuffer(node));
  }

  /** `who` (a CTA, or -(m+1) for the holders of matrix m) wrote the value (gradient, temporaries) of a node. */
  wroteValue(node: number, who: number): void {
    this.writes.wrote(this.writes.valueBuffer(node), who, this.step);
  }

  wroteGrad(node: number, who: number): void {
    this.writes.wrote(this.writes.gradBuffer(node), who, this.step);
  }

  wroteTemp(node: number, who: number): void {
    this.writes.wrote(this.writes.tempBuffer(node), who, this.step);
  }

  /**
   * A write by CTA `who` in an earlier step `step` (its elementwise signal of that step covers it): a cell whose
   * instruction also stores h into its parent's concatenation, found when the concatenation is scheduled.
   */
  wroteValueAt(node: number, step: number, who: number): void {
    this.writes.wrote(this.writes.valueBuffer(node), who, step);
  }

  /** Records that `who` (a CTA, or -(m+1) for the holders of matrix m) wrote buffer `at` (writes.ts) in this step. */
  wrote(at: number, who: number): void {
    this.writes.wrote(at, who, this.step);
  }

  /** Before CTA q reads buffer `at` (an offset in `rec`): wait for every earlier step in which another CTA wrote it. */
  need(q: number, at: number): void {
    if (at < 0) return;
    const bw = this.writes.rec;
    const w = bw[at]!;
    if (w === 0) return; // nobody wrote it in this batch
    this.waitFor(q, writeStep(w), writeWho(w));
    const wr = this.writes.wr;
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

  /**
   * Whether the forward list of `entries` products of matrix m runs as tile.acc tiles over column slices (an off-chip
   * matrix's short list, whose full-width tiles would be long chains of latency-bound chunks): its outputs must be
   * zeroed in step 0 (zeroedInStepZero).
   */
  splitsForward(m: number, entries: number): boolean {
    return this.offChip[m] === 1 && entries < TILE.entries;
  }

  /** CTA q zeroed outputs of split forward lists in step 0: every CTA running split tiles waits for it. */
  zeroedInStepZero(q: number): void {
    for (let k = 0; k < this.zeroCount; k++) if (this.zeroCtas[k] === q) return;
    if (this.zeroCount === this.zeroCtas.length) {
      const grown = new Int32Array(Math.max(4, 2 * this.zeroCount));
      grown.set(this.zeroCtas);
      this.zeroCtas = grown;
    }
    this.zeroCtas[this.zeroCount++] = q;
  }

  /** Whether a list of `entries` products of matrix m with opcode op runs as tile instructions. */
  tiles(m: number, entries: number, op: Opcode): boolean {
    if (this.offChip[m] === 1) return true; // no holders: every product is a tile over the master copy
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
    this.lists.add(op, m, count, e0, e1, e2, e3, r0, r1);
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
    this.lists.listedCount = 0;
  }

  private flushListsOf(copies: boolean): void {
    const { writer, holders } = this;
    const { rec, wr } = this.writes;
    const lists = this.lists;
    for (let li = 0; li < lists.listedCount; li++) {
      const m = lists.listed[li]!;
      if (m >= this.planMatrices !== copies) continue;
      const op = lists.op[m]! as Opcode;
      const length = lists.length[m]!;
      const count = length / (op === Opcode.MatVecBwd ? MATVEC_BWD_ENTRY : MATVEC_ENTRY);
      const tiled = this.tiles(m, count, op);
      const hs = holders[m]!;
      const sole = hs.length === 1 && !tiled ? hs[0]! : -3;
      const stamp = ++this.stamp;
      this.neededCount = 0;
      const reads = lists.reads[m]!;
      const readCount = lists.readCount[m]!;
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
      // split forward tiles add into outputs zeroed in step 0: they wait for the processors that zeroed them
      if (tiled && op === Opcode.MatVec && this.splitsForward(m, count)) {
        for (let k = 0; k < this.zeroCount; k++) this.listDependency(0, this.zeroCtas[k]!, sole, stamp);
      }
      const at = writer.appendTable(lists.words[m]!, length);
      const bit = 1 << m;
      const group = this.step * this.barriersPerStep + 1 + m;
      if (tiled) {
        this.flushTiles(m, op, at, count, group);
        lists.clear(m);
        continue;
      }
      // the list and its signal on every holder, after its waits (none when the list reads nothing written by
      // another CTA, as often at small batches)
      const waits = this.neededCount > 0;
      for (let k = 0; k < hs.length; k++) {
        const q = hs[k]!;
        if (waits) this.waitNeeded(q);
        this.setMask(writer.ins2Signal(q, op, m, at, count, group), bit);
      }
      lists.clear(m);
    }
  }

  /**
   * A long list of matrix m (`count` entries at table offset `at`) as tile instructions over the master copy
   * (tiles.ts), each placed on the least-loaded CTA. Every CTA that got tiles waits for what the list reads (the
   * barriers flushLists collected in `needed`), runs its tiles and signals matrix m's barrier of the step, like a
   * holder after its list.
   */
  private flushTiles(m: number, op: Opcode, at: number, count: number, group: number): void {
    const tiles = this.tileList;
    const loads = this.loads;
    const offChip = this.offChip[m] === 1;
    const wbar = tiles.cut(
      op,
      at,
      count,
      this.rows[m]!,
      this.cols[m]!,
      this.lists.words[m]!,
      (load) => loads.take(load),
      !offChip || this.wbarStep,
      op === Opcode.MatVec && this.splitsForward(m, count),
    );
    this.wbarTiles += wbar;
    if (this.registerGrad[m] === 1) this.registerWbarTiles += wbar;
    if (offChip && wbar > 0) this.offChipGradients |= 1 << m;
    this.tiledMask[this.step]! |= 1 << m;
    tiles.emit(
      this.writer,
      m,
      (q) => this.waitNeeded(q),
      (q) => this.reserve(q, group, 1 << m),
    );
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
    return this.setMask(this.writer.reserveSignal(q, bar), mask);
  }

  /** Records which matrix signal `slot` counts for (0: elementwise); returns the slot. */
  private setMask(slot: number, mask: number): number {
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

function grow(a: Int32Array): Int32Array {
  const b = new Int32Array(a.length * 2);
  b.set(a);
  return b;
}
