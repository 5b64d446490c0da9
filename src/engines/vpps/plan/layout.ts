/**
 * Where everything lives in the one device pool VPPS addresses with 32-bit float offsets.
 *
 *   [ model region: vector parameters, lookup tables  | persistent across batches            ]
 *   [ inputs: graph.inputData verbatim                 | one host copy per batch              ]
 *   [ values: node values, affine temporaries, GEMM operand collections                       ]
 *   [ gradients: node gradients, parameter and lookup-row gradient slots, the clipping norm   ] zeroed per batch
 *
 * Many nodes need no storage of their own: a lookup's value is its table row, a parameter's its slot, a pickRange's
 * a slice of its argument; an argument used only by a concat is computed in place inside the concat (no copy),
 * and the gradient of an argument used only by a sum or add is the gradient of that sum (no accumulation). That is
 * how a Tree-LSTM node's [i; o; u; f₁; f₂] gates, built as concat(affine, affine, affine), cost no copy at all.
 */
import type { ComputationGraph, GraphParameter } from "../../../graph/graph.js";
import { Op } from "../../../graph/opcodes.js";
import type { VppsPlan } from "./plan.js";

/** Parameters of a model as VPPS places them, fixed once per model. */
export interface ModelLayout {
  readonly plan: VppsPlan;
  readonly params: readonly GraphParameter[];
  /** Per parameter index: index of the plan matrix held in registers, or -1. */
  readonly matrixOf: Int32Array;
  /** Per parameter index: float offset of the value in the pool (vectors, lookup tables), or -1 for matrices. */
  readonly paramOffset: Int32Array;
  /** Floats of the model region at the start of the pool. */
  readonly modelFloats: number;
}

/**
 * Places a model's parameters: every dense parameter whose name is a matrix of the plan stays in registers, all
 * others (vectors, lookup tables) get a slot in the model region.
 */
export function createModelLayout(params: readonly GraphParameter[], plan: VppsPlan): ModelLayout {
  const byName = new Map(plan.matrices.map((m) => [m.name, m]));
  const matrixOf = new Int32Array(params.length).fill(-1);
  const paramOffset = new Int32Array(params.length).fill(-1);
  let next = 0;
  for (const p of params) {
    const m = p.kind === "dense" ? byName.get(p.name) : undefined;
    if (m !== undefined) {
      if (m.rows !== p.rows || m.cols !== p.cols) {
        throw new Error(
          `VPPS: parameter '${p.name}' has shape [${p.rows},${p.cols}]; the plan holds [${m.rows},${m.cols}]`,
        );
      }
      matrixOf[p.index] = m.index;
    } else {
      paramOffset[p.index] = next;
      next += Math.ceil((p.rows * p.cols) / 32) * 32; // 128-byte aligned, for coalesced row reads
    }
  }
  for (const m of plan.matrices) {
    if (!params.some((p) => matrixOf[p.index] === m.index)) {
      throw new Error(`VPPS: the plan holds matrix '${m.name}' but the model has no dense parameter of that name`);
    }
  }
  return { plan, params, matrixOf, paramOffset, modelFloats: next };
}

/** Offsets of one batch's graph in the pool (-1: the node has no value or gradient there). */
export interface BatchLayout {
  readonly value: Int32Array;
  readonly grad: Int32Array;
  /** For affine nodes with several products: the first of k consecutive temporaries of the node's length. */
  readonly temp: Int32Array;
  /** Per parameter index: the gradient slot of a vector parameter used in this batch, or -1; and its node. */
  readonly paramGrad: Int32Array;
  readonly paramNode: Int32Array;
  /** Lookup-table rows with a gradient: table (parameter index), row, gradient slot, first lookup node of the row. */
  readonly lookupRows: {
    readonly table: number[];
    readonly row: number[];
    readonly offset: number[];
    readonly node: number[];
  };
  /** GEMM-strategy matrices: where the ȳ rows and x rows of each product are collected (-1 when unused). */
  readonly collectY: Int32Array;
  readonly collectX: Int32Array;
  readonly collectCount: Int32Array;
  /** Where graph.inputData goes (graph.inputSize floats). */
  readonly inputStart: number;
  /** [gradStart, poolFloats) must be zero at launch. */
  readonly gradStart: number;
  readonly poolFloats: number;
  /** One float: the squared gradient norm for clipping (in the zeroed region). */
  readonly normOffset: number;
  /** Nodes that take part in this batch (ancestors of the loss) and nodes whose gradient is needed. */
  readonly live: Uint8Array;
  readonly needGrad: Uint8Array;
  /** Per node: number of uses by live nodes (an argument used twice counts twice). */
  readonly uses: Int32Array;
  /**
   * Per node: 1 when the node is computed inside its consumer concat (value and gradient), 2 when its gradient is
   * that of its consumer sum/add, 0 otherwise.
   */
  readonly placed: Uint8Array;
  /**
   * Per node: the node owning the storage its value (gradient) lives in, for dependency tracking; -1 for storage
   * nobody writes during the batch's forward/backward (inputs, parameters, lookup rows).
   */
  readonly valueRoot: Int32Array;
  readonly gradRoot: Int32Array;
}

const NO_ROWS = new Int32Array(0);
const PLACED_IN_CONCAT = 1;
const GRAD_OF_SUM = 2;
export const PLACEMENT = { inConcat: PLACED_IN_CONCAT, gradOfSum: GRAD_OF_SUM } as const;

/** Whether argument k of an op is the W of a product (where a register-held matrix may appear). */
function isMatrixSlot(o: number, k: number): boolean {
  return (o === Op.MatVec && k === 0) || (o === Op.Affine && k % 2 === 1);
}

function refuseMatrixUse(g: ComputationGraph, model: ModelLayout, i: number, k: number): never {
  const name = model.params[g.aux[g.arg(i, k)]!]!.name;
  throw new Error(
    `vpps: ${g.describe(i)} uses matrix '${name}' as argument ${k}; VPPS holds '${name}' in registers, so it can only ` +
      "be the W of matVec or affine (keep it off the plan to use it otherwise)",
  );
}

/** Ops whose value is an alias of storage that exists anyway (no allocation, nothing to place). */
function aliasesValue(op: number): boolean {
  return op === Op.Input || op === Op.Parameter || op === Op.Lookup || op === Op.PickRange;
}

/**
 * The arrays of a layout, kept between batches so that laying out a batch allocates nothing once warm. A layout
 * made from a workspace is valid until the workspace lays out the next batch.
 */
export class LayoutWorkspace {
  private capacity = 0;
  private i32: Int32Array[] = [];
  private u8: Uint8Array[] = [];
  /** Per lookup table (parameter index): the batch that last used each row, and that row's first lookup node. */
  private readonly rowBatch = new Map<number, Int32Array>();
  private readonly rowFirst = new Map<number, Int32Array>();
  batch = 0;
  /** Where the last layout's relative gradient slots end (placeNodes' second result). */
  gradNext = 0;
  readonly lookupRows = { table: [] as number[], row: [] as number[], offset: [] as number[], node: [] as number[] };
  perModel: { paramGrad: Int32Array; paramNode: Int32Array; collect: Int32Array[]; gemm: Uint8Array } | undefined;

  /** The views of the last take(), reused while n stays the same. */
  private views: { i32: Int32Array[]; u8: Uint8Array[] } = { i32: [], u8: [] };
  private viewLength = -1;

  /**
   * Views of length n: Int32Arrays 0-4 filled with -1, 6 with 0, 5 and 7 left as they are (scratch written before
   * it is read); Uint8Arrays 0-2 filled with 0.
   */
  take(n: number): { i32: readonly Int32Array[]; u8: readonly Uint8Array[] } {
    if (n > this.capacity) {
      this.capacity = Math.max(n, this.capacity * 2, 1024);
      this.i32 = Array.from({ length: 8 }, () => new Int32Array(this.capacity));
      this.u8 = Array.from({ length: 3 }, () => new Uint8Array(this.capacity));
      this.viewLength = -1;
    }
    if (n !== this.viewLength) {
      this.views = { i32: this.i32.map((a) => a.subarray(0, n)), u8: this.u8.map((a) => a.subarray(0, n)) };
      this.viewLength = n;
    }
    const { i32, u8 } = this.views;
    for (let k = 0; k < 5; k++) i32[k]!.fill(-1);
    i32[6]!.fill(0);
    for (let k = 0; k < 3; k++) u8[k]!.fill(0);
    return this.views;
  }

  /** The row tables of lookup table `p` with `rows` rows (grown on first use of a row beyond them). */
  rowTables(p: number, rows: number): [Int32Array, Int32Array] {
    let b = this.rowBatch.get(p);
    if (b === undefined || b.length < rows) {
      b = new Int32Array(rows);
      this.rowBatch.set(p, b);
      this.rowFirst.set(p, new Int32Array(rows));
    }
    return [b, this.rowFirst.get(p)!];
  }
}

/**
 * Lays out the part of `g` the loss depends on. Rows of lookup tables are addressed inside the model region, so
 * they need no copy; their gradients get one slot per distinct (table, row).
 *
 * Three passes over the nodes: backwards for liveness, uses and each node's last consumer; forwards for needGrad,
 * placement, values and gradients (gradients relative to a region whose start is known only after all values);
 * backwards again for storage borrowed from the consumer and for the final gradient offsets.
 *
 * Each pass is its own function: a function called once per batch whose long loop V8 optimizes by on-stack
 * replacement keeps that OSR code, compiled on the first batch before the code after the loop had ever run, and
 * deoptimizes on that code in every later batch ("insufficient type feedback"); small functions per loop are
 * optimized whole instead.
 */
export function layoutBatch(
  g: ComputationGraph,
  lossId: number,
  model: ModelLayout,
  workspace = new LayoutWorkspace(),
): BatchLayout {
  const n = lossId + 1;
  const { i32, u8 } = workspace.take(n);
  const [value, grad, temp, valueRoot, gradRoot, parent, uses, offsetInParent] = i32 as [
    Int32Array,
    Int32Array,
    Int32Array,
    Int32Array,
    Int32Array,
    Int32Array,
    Int32Array,
    Int32Array,
  ];
  const [live, needGrad, placed] = u8 as [Uint8Array, Uint8Array, Uint8Array];
  const a: PassArrays = {
    value,
    grad,
    temp,
    valueRoot,
    gradRoot,
    parent,
    uses,
    offsetInParent,
    live,
    needGrad,
    placed,
  };
  markLive(g, lossId, model, a);

  const plan = model.plan;
  const matrices = plan.matrices.length;
  const params = model.params.length;
  if (workspace.perModel === undefined || workspace.perModel.paramGrad.length !== params) {
    workspace.perModel = {
      paramGrad: new Int32Array(params),
      paramNode: new Int32Array(params),
      collect: [new Int32Array(matrices), new Int32Array(matrices), new Int32Array(matrices)],
      gemm: Uint8Array.from(plan.matrices, (m) => (m.gradients === "gemm" ? 1 : 0)),
    };
  }
  const { paramGrad, paramNode } = workspace.perModel;
  const [collectY, collectX, collectCount] = workspace.perModel.collect as [Int32Array, Int32Array, Int32Array];
  paramGrad.fill(-1);
  paramNode.fill(-1);
  collectY.fill(-1);
  collectX.fill(-1);
  collectCount.fill(0);
  const lookupRows = workspace.lookupRows;
  lookupRows.table.length = 0;
  lookupRows.row.length = 0;
  lookupRows.offset.length = 0;
  lookupRows.node.length = 0;

  const inputStart = model.modelFloats;
  let next = placeNodes(g, n, model, workspace, a, inputStart + Math.ceil(g.inputSize / 32) * 32);
  const gradNext = workspace.gradNext;
  for (const m of plan.matrices) {
    const c = collectCount[m.index]!;
    if (c === 0) continue;
    collectY[m.index] = next;
    next += c * m.rows;
    collectX[m.index] = next;
    next += c * m.cols;
  }

  // Gradients: everything from here on is zeroed before the launch; the norm comes first, then the slots above.
  next = Math.ceil(next / 32) * 32;
  const gradStart = next;
  const normOffset = gradStart;
  const gradBase = gradStart + 1;
  resolveBorrowed(n, a, gradBase);
  for (let p = 0; p < params; p++) if (paramGrad[p]! >= 0) paramGrad[p]! += gradBase;
  for (let r = 0; r < lookupRows.offset.length; r++) lookupRows.offset[r]! += gradBase;
  return {
    value,
    grad,
    temp,
    paramGrad,
    paramNode,
    lookupRows,
    collectY,
    collectX,
    collectCount,
    inputStart,
    gradStart,
    poolFloats: gradBase + gradNext,
    normOffset,
    live,
    needGrad,
    uses,
    placed,
    valueRoot,
    gradRoot,
  };
}

/** The per-node arrays of one layout (LayoutWorkspace.take's views), as the passes share them. */
interface PassArrays {
  readonly value: Int32Array;
  readonly grad: Int32Array;
  readonly temp: Int32Array;
  readonly valueRoot: Int32Array;
  readonly gradRoot: Int32Array;
  readonly parent: Int32Array;
  readonly uses: Int32Array;
  readonly offsetInParent: Int32Array;
  readonly live: Uint8Array;
  readonly needGrad: Uint8Array;
  readonly placed: Uint8Array;
}

/**
 * First pass, backwards from the loss: liveness, uses, parent[a] (the last live consumer seen: the only one when
 * uses[a] is 1) and offsetInParent[a] (a's offset in a concat consumer, or its argument position in a sub: only
 * sub's first argument may share the gradient).
 */
function markLive(g: ComputationGraph, lossId: number, model: ModelLayout, a: PassArrays): void {
  const { op, argStart, argCount, args, rows, cols, aux } = g;
  const { live, uses, parent, offsetInParent } = a;
  const matrixOf = model.matrixOf;
  live[lossId] = 1;
  for (let i = lossId; i >= 0; i--) {
    if (live[i] === 0) continue;
    const s = argStart[i]!;
    const o = op[i]!;
    let off = 0;
    for (let k = 0, c = argCount[i]!; k < c; k++) {
      const x = args[s + k]!;
      live[x] = 1;
      uses[x]!++;
      parent[x] = i;
      offsetInParent[x] = o === Op.Concat ? off : k;
      if (o === Op.Concat) off += rows[x]! * cols[x]!;
      if (op[x] === Op.Parameter && matrixOf[aux[x]!]! >= 0 && !isMatrixSlot(o, k)) refuseMatrixUse(g, model, i, k);
    }
  }
}

/**
 * Second pass, forwards: needGrad, placement, values from `next` on (returns the end) and gradients relative to
 * the gradient region (their end goes to workspace.gradNext); counts the GEMM rows to collect and lists the
 * lookup rows with a gradient.
 */
function placeNodes(
  g: ComputationGraph,
  n: number,
  model: ModelLayout,
  workspace: LayoutWorkspace,
  a: PassArrays,
  next: number,
): number {
  const { op, argStart, argCount, args, rows, cols, aux, aux2 } = g;
  const { value, grad, temp, valueRoot, gradRoot, parent, uses, offsetInParent, live, needGrad, placed } = a;
  const matrixOf = model.matrixOf;
  const { paramGrad, paramNode, gemm } = workspace.perModel!;
  const collectCount = workspace.perModel!.collect[2]!;
  const lookupRows = workspace.lookupRows;
  const stamp = ++workspace.batch;
  const inputStart = model.modelFloats;
  let lastTable = -1;
  let rowBatch: Int32Array = NO_ROWS;
  let rowFirst: Int32Array = NO_ROWS;
  let gradNext = 0; // relative to the first gradient slot
  for (let i = 0; i < n; i++) {
    if (live[i] === 0) continue;
    const o = op[i]!;
    const s = argStart[i]!;
    const c = argCount[i]!;
    let d = o === Op.Parameter || o === Op.Lookup ? 1 : 0;
    for (let k = 0; d === 0 && k < c; k++) d = needGrad[args[s + k]!]!;
    needGrad[i] = d;
    // computed in place in its only consumer (concat), or sharing its gradient (sum, add, sub's first argument)
    if (uses[i] === 1 && !aliasesValue(o)) {
      const po = op[parent[i]!]!;
      if (po === Op.Concat) placed[i] = PLACED_IN_CONCAT;
      else if (d === 1 && (po === Op.Sum || po === Op.Add || (po === Op.Sub && offsetInParent[i] === 0))) {
        placed[i] = GRAD_OF_SUM;
      }
    }
    const size = rows[i]! * cols[i]!;
    if (o === Op.Input) value[i] = inputStart + aux[i]!;
    else if (o === Op.Parameter) value[i] = model.paramOffset[aux[i]!]!;
    else if (o === Op.Lookup) value[i] = model.paramOffset[aux[i]!]! + aux2[i]! * rows[i]!;
    else if (o === Op.PickRange) {
      value[i] = value[args[s]!]! + aux[i]!;
      valueRoot[i] = valueRoot[args[s]!]!;
    } else if (placed[i] !== PLACED_IN_CONCAT) {
      value[i] = next;
      next += size;
      valueRoot[i] = i;
    }
    if (o === Op.Affine && c > 3) {
      temp[i] = next;
      next += size * ((c - 1) / 2);
    }
    if (d === 0) continue;
    if (o === Op.MatVec || o === Op.Affine) {
      for (let k = o === Op.Affine ? 1 : 0; k < c; k += 2) {
        const m = matrixOf[aux[args[s + k]!]!]!;
        if (m >= 0 && gemm[m] === 1) collectCount[m]!++;
      }
    }
    // gradients, relative for now
    if (o === Op.Parameter) {
      const p = aux[i]!;
      if (matrixOf[p]! >= 0) continue; // in registers (or formed by GEMM)
      if (paramGrad[p] === -1) {
        paramGrad[p] = gradNext;
        gradNext += size;
      }
      paramNode[p] = i;
      grad[i] = paramGrad[p]!;
      gradRoot[i] = i; // one parameter node per parameter per graph
    } else if (o === Op.Lookup) {
      const table = aux[i]!;
      const row = aux2[i]!;
      if (table !== lastTable || row >= rowBatch.length) {
        // the row tables of this table (a batch usually reads one table: look it up once per change)
        [rowBatch, rowFirst] = workspace.rowTables(table, Math.max(model.params[table]!.rows, row + 1));
        lastTable = table;
      }
      let first = rowFirst[row]!;
      if (rowBatch[row] !== stamp) {
        rowBatch[row] = stamp;
        rowFirst[row] = first = i;
        grad[i] = gradNext;
        gradNext += size;
        lookupRows.table.push(table);
        lookupRows.row.push(row);
        lookupRows.offset.push(grad[i]!);
        lookupRows.node.push(i);
      }
      grad[i] = grad[first]!;
      gradRoot[i] = first;
    } else if (o === Op.PickRange) {
      grad[i] = grad[args[s]!]! + aux[i]!;
      gradRoot[i] = gradRoot[args[s]!]!;
    } else if (placed[i] === 0) {
      grad[i] = gradNext;
      gradNext += size;
      gradRoot[i] = i;
    }
  }
  workspace.gradNext = gradNext;
  return next;
}

/** Third pass, backwards: storage borrowed from the consumer, and gradient offsets made absolute (+ gradBase). */
function resolveBorrowed(n: number, a: PassArrays, gradBase: number): void {
  const { value, grad, valueRoot, gradRoot, parent, offsetInParent, needGrad, placed } = a;
  for (let i = n - 1; i >= 0; i--) {
    const pl = placed[i]!;
    if (pl === PLACED_IN_CONCAT) {
      const p = parent[i]!;
      value[i] = value[p]! + offsetInParent[i]!;
      valueRoot[i] = valueRoot[p]!;
      if (needGrad[i] === 1) {
        grad[i] = grad[p]! + offsetInParent[i]!;
        gradRoot[i] = gradRoot[p]!;
      }
    } else if (pl === GRAD_OF_SUM) {
      grad[i] = grad[parent[i]!]!;
      gradRoot[i] = gradRoot[parent[i]!]!;
    } else if (grad[i]! >= 0) {
      grad[i]! += gradBase;
    }
  }
}
