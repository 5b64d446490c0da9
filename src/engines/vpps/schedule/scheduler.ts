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
import {
  LevelOrder,
  N_ARG_COUNT,
  N_ARG_START,
  N_AUX,
  N_FLAGS,
  N_GRAD,
  N_OP,
  NODE_WORDS,
  OP_CLASS,
} from "../plan/level-order.js";
import type { BatchSchedule } from "../script/batch-schedule.js";
import { floatBits, MAX_INSTRUCTION_WORDS, Opcode } from "../script/format.js";
import { DeferredWbar, type Emitter } from "./backward.js";
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
  /** The batch being scheduled: its level order (node records, view ids) and its layout (graph numbering). */
  V = new LevelOrder();
  L!: BatchLayout;
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
  /** Per-batch scratch kept across batches: the affine sums of a level, the GEMM rows collected. */
  private sums = new Int32Array(1024);
  /**
   * Per op, its class in the level order (plan/level-order.ts OP_CLASS): listed when its nodes emit instructions
   * (every node while dumping, whose trace shows all), refused when VPPS has no kernel for it, else storage.
   */
  private readonly opClass: Uint8Array;
  private readonly collected: Int32Array;
  /** Per op: 1 when VPPS refuses it (kernel-table.ts): a graph using it is refused before anything is emitted. */
  private readonly refused = refusedOps();

  constructor(
    readonly model: ModelLayout,
    readonly options: ScheduleOptions = {},
  ) {
    const plan = model.plan;
    this.t = new StepTracker(plan, options.tileEntries);
    this.collected = new Int32Array(plan.matrices.length);
    const everyNode = this.dumpTo !== undefined;
    this.opClass = EMITS_INSTRUCTIONS.map((emits, o) =>
      this.refused[o] === 1 ? OP_CLASS.refused : emits === 1 || everyNode ? OP_CLASS.listed : OP_CLASS.storage,
    );
    this.registerGrad = Uint8Array.from(plan.matrices, (m) => (m.gradients === "registers" ? 1 : 0));
    const inKernel = options.update !== "host" && plan.matrices.every((m) => m.gradients === "registers");
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
    const workspace = this.workspaces[this.scheduled++ % 2]!;
    try {
      L = layoutBatch(g, lossId, this.model, workspace, this.opClass);
    } catch (e) {
      // a graph with an op VPPS refuses fails on that op, not on what the layout made of it (a matrix as an image op's
      // argument, say); the scan costs nothing on graphs that lay out
      const refused = firstRefusedOp(g, lossId + 1, this.refused);
      throw refused === undefined ? e : refusal(refused);
    }
    // the live nodes in level order (plan/level-order.ts): from here on node ids are the view's
    const V = workspace.levels;
    this.V = V;
    this.L = L;
    if (V.refused) throw refusal(firstRefusedOp(g, lossId + 1, this.refused, L.live)!);
    if (V.badProduct >= 0) this.refuseProduct(V.pos[V.badProduct]!);
    const liveCount = V.live;
    const maxLevel = V.levels - 1;
    const root = V.pos[lossId]!;

    const t = this.t;
    if (this.cellCta.length < liveCount) {
      const size = 2 * liveCount;
      this.cellCta = new Int32Array(size);
      this.cellStep = new Int32Array(size);
      this.cellWord = new Int32Array(size);
      this.fusedConcat = new Int32Array(size);
      this.fusedOffset = new Int32Array(size);
    }
    if (this.sums.length < liveCount) this.sums = new Int32Array(2 * liveCount);
    this.cellCta.fill(-1, 0, liveCount);
    this.fusedConcat.fill(-1, 0, liveCount);
    t.begin(V, 1 + 3 * maxLevel + 5);
    this.trace = this.dumpTo === undefined ? undefined : [];
    // step 0 seeds the loss gradient with 1, before the forward pass, so no backward instruction stalls on it
    t.startStep(0);
    if ((V.R[NODE_WORDS * root + N_FLAGS]! & 1) === 1) {
      const q = t.leastLoaded(1);
      t.writer.ins2(q, Opcode.Set, 1, V.R[NODE_WORDS * root + N_GRAD]!, ONE_BITS);
      t.wroteGrad(root, q);
    }
    t.endStep();
    this.forwardPass(maxLevel);
    let s = this.backwardPass(maxLevel);
    s = this.deferred.emit(this, s);
    s = emitUpdate(this, L, s);
    const result: BatchSchedule = {
      layout: L,
      script: t.finish(s, into),
      barriers: s * t.barriersPerStep,
      update: this.update,
      lossOffset: L.value[lossId]!,
      liveNodes: liveCount,
      zeroGradients: t.wbarTiles > 0,
    };
    if (this.dumpTo !== undefined) dumpBatch(this.dumpTo, this.dumped++, g, result, t.ctas, this.trace!);
    return result;
  }

  /** Throws matrixOf's error for the first product of (view) node i whose W is not a matrix of the plan. */
  private refuseProduct(i: number): void {
    const { R, args } = this.V;
    const r = NODE_WORDS * i;
    const s = R[r + N_ARG_START]!;
    for (let k = R[r + N_OP] === Op.Affine ? 1 : 0; k < R[r + N_ARG_COUNT]!; k += 2) this.matrixOf(i, args[s + k]!);
  }

  /** Forward: per level a main step, then a step for the sums of affine transforms with several products. */
  private forwardPass(maxLevel: number): void {
    const t = this.t;
    const { R, start: levelStart, forwardProducts } = this.V;
    const matrices = this.registerGrad.length;
    for (let l = 1; l <= maxLevel; l++) {
      const begin = levelStart[l]!;
      const end = levelStart[l + 1]!;
      t.startStep(2 * l - 1);
      this.announce(forwardProducts, l * matrices);
      // affine transforms with several products, summed in the next step
      let sums = 0;
      for (let i = begin; i < end; i++) {
        const r = NODE_WORDS * i;
        const o = R[r + N_OP]!;
        const kernel = VPPS_KERNELS[o]!;
        if (this.trace === undefined) kernel.forward(this, i);
        else this.traced("forward", i, () => kernel.forward(this, i));
        if (o === Op.Affine && R[r + N_ARG_COUNT]! > 3) this.sums[sums++] = i;
      }
      t.endStep();
      t.startStep(2 * l);
      for (let k = 0; k < sums; k++) affineSum(this, this.sums[k]!);
      t.endStep();
    }
  }

  /** Backward: one step per level, deepest first; returns the next step. */
  private backwardPass(maxLevel: number): number {
    const t = this.t;
    const { R, start: levelStart, backwardProducts } = this.V;
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
      for (let i = begin; i < end; i++) {
        const r = NODE_WORDS * i;
        if ((R[r + N_FLAGS]! & 1) === 0) continue;
        const kernel = VPPS_KERNELS[R[r + N_OP]!]!;
        if (this.trace === undefined) kernel.backward(this, i, collected);
        else this.traced("backward", i, () => kernel.backward(this, i, collected));
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
    this.trace!.push({ step: this.t.step, phase, node: this.V.order[node]!, ctas });
  }

  matrixOf(i: number, w: number): number {
    const R = this.V.R;
    const isParameter = R[NODE_WORDS * w + N_OP] === Op.Parameter;
    const m = isParameter ? this.model.matrixOf[R[NODE_WORDS * w + N_AUX]!]! : -1;
    if (m < 0) {
      const V = this.V;
      const what = isParameter ? `parameter '${this.model.params[R[NODE_WORDS * w + N_AUX]!]!.name}'` : V.describe(w);
      throw new Error(
        `vpps: ${V.describe(i)} multiplies by ${what}, which is not a matrix held in registers by the plan`,
      );
    }
    return m;
  }

  /**
   * Adds the products of this step (counts[base + m], counted per level by the layout: plan/layout.ts placeNodes,
   * in graph order rather than in an extra visit of each level's nodes) to their holders' loads (once per matrix);
   * `backward`: they are backward products (their x̄ may run on transposed copies).
   */
  private announce(counts: Int32Array, base: number, backward = false): void {
    for (let m = 0; m < this.registerGrad.length; m++) {
      const c = counts[base + m]!;
      if (c !== 0) this.t.preloadMatrix(m, c, backward);
    }
  }
}

/** The bit pattern of 1.0f, the seed of the loss gradient. */
const ONE_BITS = floatBits(1);
