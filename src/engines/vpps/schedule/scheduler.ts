/**
 * Per-batch scheduling for VPPS (paper §III-B1): the batch's super-graph is cut into depth levels; each level's
 * forward instructions, then each level's backward instructions in reverse order, are dealt to the virtual
 * processors, and the parameter update closes the script.
 *
 * - Products with a matrix go to every CTA holding rows of it; all products of one matrix in one step form one
 *   list instruction per holder (steps.ts). Any other instruction goes to the least-loaded CTA of the step
 *   (load ≈ floats touched, matrix work announced before anything is placed).
 * - Signals and waits only where data crosses processors (steps.ts).
 * - Steps: 0 seeds the loss gradient; per level a main step and a step for the sums of affine transforms with
 *   several products; one backward step per level; then the norm for clipping, a grid-wide barrier and the update
 *   (in the kernel when every matrix keeps its gradient in registers, otherwise left to the host).
 */
import type { ComputationGraph, Expression } from "../../../graph/graph.js";
import { Op } from "../../../graph/opcodes.js";
import { dumpBatch, dumpDirectory, type TraceEntry } from "../instrument/dump.js";
import { type BatchLayout, LayoutWorkspace, layoutBatch, type ModelLayout } from "../plan/layout.js";
import type { BatchSchedule } from "../script/batch-schedule.js";
import { floatBits, MAX_INSTRUCTION_WORDS, Opcode } from "../script/format.js";
import { countBackward, DeferredWbar, type Emitter } from "./backward.js";
import { affineSum } from "./forward.js";
import { EMITS_INSTRUCTIONS, firstRefusedOp, refusal, refusedOps, VPPS_KERNELS } from "./kernel-table.js";
import { StepTracker } from "./steps.js";
import { emitUpdate } from "./update.js";

export type { BatchSchedule };

export interface ScheduleOptions {
  /** Accumulate the global gradient norm so the kernel can clip (its `clip` argument decides); default true. */
  readonly clip?: boolean;
  /** Write register gradients to the gradient buffer (always done when the host updates); default false. */
  readonly exportGradients?: boolean;
  /**
   * The update the script ends with when the kernel updates: "sgd" (default) or "adam" (every dense parameter,
   * used in the batch or not, and the touched lookup rows, with moments in the kernel's `moments` buffer).
   */
  readonly optimizer?: "sgd" | "adam";
  /**
   * Lists of at least this many products of one matrix in one step run as tile instructions over the master copy,
   * spread over all processors, instead of on the matrix's holders (default DEFAULT_TILE_ENTRIES; 0: never).
   */
  readonly tileEntries?: number;
  /**
   * "host": the script ends after the backward pass with every register gradient exported, whatever the plan
   * (data-parallel mode: the ranks sum the gradients, then the update runs outside the kernel). Default: the
   * kernel updates when every matrix keeps its gradient in registers, else the host.
   */
  readonly update?: "host";
}

/**
 * Reusable scheduler of one model (its typed arrays keep their capacity across batches). A BatchSchedule's script
 * is its own; its layout's per-node arrays are reused two `schedule` calls later.
 */
export class VppsScheduler implements Emitter {
  readonly t: StepTracker;
  readonly update: "kernel" | "host";
  readonly registerGradCtas: Int32Array;
  /** CTAs holding a partition of a transposed copy (they run load.t). */
  private readonly transposedCtas: Int32Array;
  readonly operands = new Uint32Array(MAX_INSTRUCTION_WORDS);
  /** VPPS_DUMP: where batches are dumped, how many so far, and the trace of the batch being scheduled. */
  private readonly dumpTo = dumpDirectory();
  private dumped = 0;
  private trace: TraceEntry[] | undefined;
  /** Two, so that a batch's layout stays valid while the next one is scheduled (the runtime overlaps them). */
  private readonly workspaces = [new LayoutWorkspace(), new LayoutWorkspace()];
  private scheduled = 0;
  readonly deferred = new DeferredWbar();
  /**
   * Per node of the batch: for a cell, the CTA, step and script word of its lstm instruction's h2 operand (CTA -1:
   * not scheduled yet), and the concatenation (and offset) its h goes into when concatForward took it (-1: none).
   */
  cellCta = new Int32Array(0);
  cellStep = new Int32Array(0);
  cellWord = new Int32Array(0);
  fusedConcat = new Int32Array(0);
  fusedOffset = new Int32Array(0);
  readonly registerGrad: Uint8Array;
  readonly offChip: Uint8Array;
  /**
   * Products per (level, matrix), forward and backward (index level · matrices + m), counted in the first pass over
   * the nodes and announced per step (see announce). Counting them there, in graph order, rather than in an extra
   * visit of each level's nodes saves a round of cache misses per product node at large batches.
   */
  private forwardProducts: Int32Array;
  private backwardProducts: Int32Array;
  /** Per-batch scratch kept across batches: nodes sorted by level, where each level starts, GEMM rows collected. */
  private levelStart = new Int32Array(64);
  private byLevel = new Int32Array(1024);
  private sums = new Int32Array(1024);
  private readonly collected: Int32Array;
  /** Per op: 1 when VPPS refuses it (kernel-table.ts): a graph using it is refused before anything is emitted. */
  private readonly refused = refusedOps();

  constructor(
    readonly model: ModelLayout,
    readonly options: ScheduleOptions = {},
  ) {
    const plan = model.plan;
    this.t = new StepTracker(plan, options.tileEntries);
    this.forwardProducts = new Int32Array(64 * plan.matrices.length);
    this.backwardProducts = new Int32Array(64 * plan.matrices.length);
    this.collected = new Int32Array(plan.matrices.length);
    this.registerGrad = Uint8Array.from(plan.matrices, (m) => (m.gradients === "registers" ? 1 : 0));
    this.offChip = Uint8Array.from(plan.matrices, (m) => (m.placement === "off-chip" ? 1 : 0));
    // the kernel updates unless a gradient is formed by GEMM after it (off-chip gradients are in device memory)
    const inKernel = options.update !== "host" && plan.matrices.every((m) => m.gradients !== "gemm");
    this.update = inKernel ? "kernel" : "host";
    const withGrad = new Set<number>();
    for (const m of plan.matrices) if (m.gradients === "registers") for (const p of m.partitions) withGrad.add(p.cta);
    this.registerGradCtas = Int32Array.from(withGrad).sort();
    const copies = new Set<number>();
    for (const c of plan.transposed) for (const p of c.partitions) copies.add(p.cta);
    this.transposedCtas = Int32Array.from(copies).sort();
  }

  /**
   * Schedules and encodes one batch. The script goes into `into(words)` when given (e.g. the pinned upload buffer;
   * the result is a view of its first `words` words), else into a new array.
   */
  schedule(g: ComputationGraph, loss: Expression, into?: (words: number) => Uint32Array): BatchSchedule {
    const lossId = g.check(loss, "vpps", "loss");
    if (loss.size !== 1) throw new Error(`vpps: the loss has shape ${loss.shapeString()}; expected a scalar`);
    let L: BatchLayout;
    try {
      L = layoutBatch(g, lossId, this.model, this.workspaces[this.scheduled++ % 2]!);
    } catch (e) {
      // a graph with an op VPPS refuses fails on that op, not on what the layout made of it (a matrix as an image op's
      // argument, say); the scan costs nothing on graphs that lay out
      const refused = firstRefusedOp(g, lossId + 1, this.refused);
      throw refused === undefined ? e : refusal(refused);
    }
    const n = lossId + 1;
    // The passes over the nodes are methods of their own: see layoutBatch (plan/layout.ts) on V8's on-stack
    // replacement of a long loop in a function called once per batch.
    const liveCount = this.countLevels(g, L, n);
    const maxLevel = this.maxLevel;
    this.sortByLevel(g, L, n, maxLevel, liveCount);

    const t = this.t;
    if (this.cellCta.length < n) {
      const size = 2 * n;
      this.cellCta = new Int32Array(size);
      this.cellStep = new Int32Array(size);
      this.cellWord = new Int32Array(size);
      this.fusedConcat = new Int32Array(size);
      this.fusedOffset = new Int32Array(size);
    }
    this.cellCta.fill(-1, 0, n);
    this.fusedConcat.fill(-1, 0, n);
    t.begin(L, n, 1 + 3 * maxLevel + 5);
    this.trace = this.dumpTo === undefined ? undefined : [];
    // step 0 seeds the loss gradient with 1, before the forward pass, so no backward instruction stalls on it
    t.startStep(0);
    if (L.needGrad[lossId] === 1) {
      const q = t.leastLoaded(1);
      t.writer.ins2(q, Opcode.Set, 1, L.grad[lossId]!, ONE_BITS);
      t.wroteGrad(lossId, q);
    }
    if (this.model.plan.offChip.length > 0) this.zeroSplitOutputs(g, L, n);
    t.endStep();
    this.forwardPass(g, L, maxLevel);
    let s = this.backwardPass(g, L, maxLevel);
    s = this.deferred.emit(this, s);
    s = emitUpdate(this, L, s);
    const result: BatchSchedule = {
      layout: L,
      script: t.finish(s, into),
      barriers: s * t.barriersPerStep,
      update: this.update,
      lossOffset: L.value[lossId]!,
      liveNodes: liveCount,
      // an off-chip matrix the batch does not use has no W̄ tiles: the host or an export would read its region
      zeroGradients:
        t.wbarTiles > 0 ||
        (this.model.plan.offChip.length > 0 && (this.update === "host" || this.options.exportGradients === true)),
    };
    if (this.dumpTo !== undefined) dumpBatch(this.dumpTo, this.dumped++, g, result, t.ctas, this.trace!);
    return result;
  }

  /**
   * Step 0: zeroes the outputs of the products that split forward lists of off-chip matrices will add into
   * (steps.ts splitsForward: from the products per level and matrix that countLevels counted).
   */
  private zeroSplitOutputs(g: ComputationGraph, L: BatchLayout, n: number): void {
    const t = this.t;
    const matrices = this.registerGrad.length;
    const { op, depth, argCount } = g;
    const zero = (y: number, len: number): number => {
      const q = t.leastLoaded(len);
      t.writer.ins2(q, Opcode.Set, len, y, ZERO_BITS);
      t.zeroedInStepZero(q);
      return q;
    };
    for (let i = 0; i < n; i++) {
      const o = op[i]!;
      if (L.live[i] === 0 || (o !== Op.MatVec && o !== Op.Affine)) continue;
      const base = depth[i]! * matrices;
      const len = g.rows[i]! * g.cols[i]!;
      if (o === Op.MatVec || argCount[i] === 3) {
        const m = this.matrixOf(g, i, g.arg(i, o === Op.MatVec ? 0 : 1));
        if (t.splitsForward(m, this.forwardProducts[base + m]!)) t.wroteValue(i, zero(L.value[i]!, len));
        continue;
      }
      for (let k = 1; k < argCount[i]!; k += 2) {
        const m = this.matrixOf(g, i, g.arg(i, k));
        if (t.splitsForward(m, this.forwardProducts[base + m]!)) {
          t.wroteTemp(i, zero(L.temp[i]! + ((k - 1) >> 1) * len, len));
        }
      }
    }
  }

  /** The deepest level of the last countLevels. */
  private maxLevel = 0;

  /**
   * One pass over the nodes: the live nodes (returned), the listed nodes per level (levelStart[d + 1]), the deepest
   * level (this.maxLevel) and the matrix products per level and matrix, forward and backward. Only nodes that emit
   * instructions are listed (inputs, parameters, lookups and pickRanges have none), unless dumping, whose trace shows
   * every node; the deepest live node of any kind still sets the number of levels (and so the barrier numbering).
   */
  private countLevels(g: ComputationGraph, L: BatchLayout, n: number): number {
    const depth = g.depth;
    const live = L.live;
    const op = g.op;
    const everyNode = this.dumpTo !== undefined;
    let levelStart = this.levelStart;
    levelStart.fill(0);
    const matrices = this.registerGrad.length;
    let forwardProducts: Int32Array = this.forwardProducts.fill(0);
    let backwardProducts: Int32Array = this.backwardProducts.fill(0);
    const needGrad = L.needGrad;
    let maxLevel = 0;
    let liveCount = 0;
    for (let i = 0; i < n; i++) {
      if (live[i] === 0) continue;
      liveCount++;
      const d = depth[i]!;
      if (d > maxLevel) {
        maxLevel = d;
        if (levelStart.length < d + 2) {
          const grown = new Int32Array(2 * (d + 2));
          grown.set(levelStart);
          this.levelStart = levelStart = grown;
          this.forwardProducts = forwardProducts = growTo(forwardProducts, grown.length * matrices);
          this.backwardProducts = backwardProducts = growTo(backwardProducts, grown.length * matrices);
        }
      }
      const o = op[i]!;
      if (this.refused[o] === 1) throw refusal(o);
      if (everyNode || EMITS_INSTRUCTIONS[o] === 1) {
        levelStart[d + 1]!++;
        if (o === Op.MatVec || o === Op.Affine) {
          this.countForward(g, i, forwardProducts, d * matrices);
          if (needGrad[i] === 1) countBackward(this, g, L, i, backwardProducts, d * matrices);
        }
      }
    }
    this.maxLevel = maxLevel;
    return liveCount;
  }

  /** The listed nodes of each depth level, in graph order, into byLevel from levelStart[d] (a counting sort). */
  private sortByLevel(g: ComputationGraph, L: BatchLayout, n: number, maxLevel: number, liveCount: number): void {
    const depth = g.depth;
    const live = L.live;
    const op = g.op;
    const everyNode = this.dumpTo !== undefined;
    const levelStart = this.levelStart;
    if (this.byLevel.length < liveCount) {
      this.byLevel = new Int32Array(2 * liveCount);
      this.sums = new Int32Array(2 * liveCount);
    }
    const byLevel = this.byLevel;
    for (let l = 1; l <= maxLevel + 1; l++) levelStart[l]! += levelStart[l - 1]!;
    // levelStart[d] becomes the end of level d while filling; shift it back afterwards
    for (let i = 0; i < n; i++) {
      if (live[i] === 1 && (everyNode || EMITS_INSTRUCTIONS[op[i]!] === 1)) byLevel[levelStart[depth[i]!]!++] = i;
    }
    for (let l = maxLevel + 1; l > 0; l--) levelStart[l] = levelStart[l - 1]!;
    levelStart[0] = 0;
  }

  /** Forward: per level a main step, then a step for the sums of affine transforms with several products. */
  private forwardPass(g: ComputationGraph, L: BatchLayout, maxLevel: number): void {
    const t = this.t;
    const op = g.op;
    const argCount = g.argCount;
    const { levelStart, byLevel, forwardProducts } = this;
    const matrices = this.registerGrad.length;
    for (let l = 1; l <= maxLevel; l++) {
      const begin = levelStart[l]!;
      const end = levelStart[l + 1]!;
      t.startStep(2 * l - 1);
      this.announce(forwardProducts, l * matrices);
      // affine transforms with several products, summed in the next step
      let sums = 0;
      for (let k = begin; k < end; k++) {
        const i = byLevel[k]!;
        const kernel = VPPS_KERNELS[op[i]!]!;
        if (this.trace === undefined) kernel.forward(this, g, L, i);
        else this.traced("forward", i, () => kernel.forward(this, g, L, i));
        if (op[i] === Op.Affine && argCount[i]! > 3) this.sums[sums++] = i;
      }
      t.endStep();
      t.startStep(2 * l);
      for (let k = 0; k < sums; k++) affineSum(this, g, L, this.sums[k]!);
      t.endStep();
    }
  }

  /** Backward: one step per level, deepest first; returns the next step. */
  private backwardPass(g: ComputationGraph, L: BatchLayout, maxLevel: number): number {
    const t = this.t;
    const op = g.op;
    const needGrad = L.needGrad;
    const { levelStart, byLevel, backwardProducts } = this;
    const matrices = this.registerGrad.length;
    const collected = this.collected.fill(0);
    let s = 2 * maxLevel + 1;
    for (let l = maxLevel; l >= 1; l--) {
      const begin = levelStart[l]!;
      const end = levelStart[l + 1]!;
      t.startStep(s++);
      // the transposed copies, loaded where each holder's backward work begins (script/format.ts LoadTransposed)
      if (l === maxLevel) for (const q of this.transposedCtas) t.writer.insN(q, Opcode.LoadTransposed, 0, [], 0);
      this.announce(backwardProducts, l * matrices, true);
      for (let k = begin; k < end; k++) {
        const i = byLevel[k]!;
        if (needGrad[i] === 0) continue;
        const kernel = VPPS_KERNELS[op[i]!]!;
        if (this.trace === undefined) kernel.backward(this, g, L, i, collected);
        else this.traced("backward", i, () => kernel.backward(this, g, L, i, collected));
      }
      t.endStep();
    }
    return s;
  }

  /** Runs `emit` for one node, recording which processors got instructions (only when dumping). */
  private traced(phase: "forward" | "backward", node: number, emit: () => void): void {
    const w = this.t.writer;
    const before = Int32Array.from({ length: this.t.ctas }, (_, c) => w.length(c));
    emit();
    const ctas: number[] = [];
    for (let c = 0; c < this.t.ctas; c++) if (w.length(c) !== before[c]) ctas.push(c);
    this.trace!.push({ step: this.t.step, phase, node, ctas });
  }

  matrixOf(g: ComputationGraph, i: number, w: number): number {
    const m = g.op[w] === Op.Parameter ? this.model.matrixOf[g.aux[w]!]! : -1;
    if (m < 0) {
      const what = g.op[w] === Op.Parameter ? `parameter '${this.model.params[g.aux[w]!]!.name}'` : g.describe(w);
      throw new Error(
        `vpps: ${g.describe(i)} multiplies by ${what}, which is not a matrix held in registers by the plan`,
      );
    }
    return m;
  }

  /**
   * Counts the forward matrix products of node i (a matVec or affine) into counts[base + m], so that placing its
   * level's other instructions sees them.
   */
  private countForward(g: ComputationGraph, i: number, counts: Int32Array, base: number): void {
    if (g.op[i] === Op.MatVec) counts[base + this.matrixOf(g, i, g.arg(i, 0))]!++;
    else {
      for (let k = 1; k < g.argCount[i]!; k += 2) counts[base + this.matrixOf(g, i, g.arg(i, k))]!++;
    }
  }

  /**
   * Adds the products counted for this step (counts[base + m]) to their holders' loads (once per matrix);
   * `backward`: they are backward products (their x̄ may run on transposed copies).
   */
  private announce(counts: Int32Array, base: number, backward = false): void {
    for (let m = 0; m < this.registerGrad.length; m++) {
      const c = counts[base + m]!;
      if (c !== 0) this.t.preloadMatrix(m, c, backward);
    }
  }
}

/** A copy of `a` with room for `length` entries (the new ones zero). */
function growTo(a: Int32Array, length: number): Int32Array {
  const b = new Int32Array(length);
  b.set(a);
  return b;
}

/** The bit pattern of 1.0f, the seed of the loss gradient. */
const ONE_BITS = floatBits(1);
/** The bit pattern of 0.0f: the outputs split forward lists add into. */
const ZERO_BITS = floatBits(0);
