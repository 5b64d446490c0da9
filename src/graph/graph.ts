import { UserError } from "../util/errors.js";
import { CollectionMismatchError, collectionLabel, NO_COLLECTION } from "./collection.js";
import { Op, opName } from "./opcodes.js";

export { CollectionMismatchError, collectionLabel, NO_COLLECTION } from "./collection.js";

/**
 * What the graph needs to know of a parameter (the model layer implements it; the graph does not import it).
 * `kind: "lookup"` tables are read one row at a time through `lookup` nodes. `index` is the parameter's position in
 * its collection and `collection` that collection's id (`ParameterCollection.id`, ≥ 1): nodes refer to parameters
 * by index alone, so a graph reads the parameters of one collection only, and an engine computes it only with the
 * collection it was made for (`ParameterCollection.checkGraph`).
 */
export interface GraphParameter {
  readonly index: number;
  readonly name: string;
  readonly rows: number;
  readonly cols: number;
  readonly kind: "dense" | "lookup";
  readonly collection: number;
}

/** Thrown when an expression is built with arguments whose shapes do not fit the op. */
export class ShapeError extends UserError {
  constructor(message: string) {
    super(message);
    this.name = "ShapeError";
  }
}

/**
 * A handle to one node of a graph. It holds no data of its own: the node lives in the graph's typed arrays.
 * A handle is only valid for the graph generation it was made in (`renew()` invalidates it).
 */
export class Expression {
  constructor(
    readonly graph: ComputationGraph,
    readonly id: number,
    readonly generation: number,
  ) {}
  get rows(): number {
    return this.graph.rows[this.id]!;
  }
  get cols(): number {
    return this.graph.cols[this.id]!;
  }
  /** Number of elements of the node's value. */
  get size(): number {
    return this.graph.rows[this.id]! * this.graph.cols[this.id]!;
  }
  get op(): Op {
    return this.graph.op[this.id] as Op;
  }
  shapeString(): string {
    const c = this.cols;
    return c === 1 ? `[${this.rows}]` : `[${this.rows},${c}]`;
  }
}

const INITIAL_NODES = 1024;

/**
 * The layout of `ComputationGraph.snapshot`: a header of HEADER_WORDS float64s (magic, version, nodes, argument
 * entries, parameters in use, input floats, value size, training, dropout key, generation, total bytes, collection),
 * then int32 rows, cols, argStart, argCount, aux, aux2, depth, valueOffset (one per node), float32 auxF, int32 args,
 * int32 indices of the parameters in use, float32 input values, and uint8 ops last (nothing after them needs
 * alignment).
 */
const SNAPSHOT_MAGIC = 0x56505347; // "VPSG"
const SNAPSHOT_VERSION = 2;
const HEADER_WORDS = 12;

function snapshotOffsets(n: number, argsSize: number, params: number, inputs: number) {
  let at = 8 * HEADER_WORDS;
  const i32: number[] = [];
  for (let k = 0; k < 8; k++, at += 4 * n) i32.push(at);
  const auxF = at;
  const args = (at += 4 * n);
  const paramsAt = (at += 4 * argsSize);
  const inputsAt = (at += 4 * params);
  const op = (at += 4 * inputs);
  return { i32, auxF, args, params: paramsAt, inputs: inputsAt, op, bytes: op + n };
}

/** The input values stored in a `ComputationGraph.snapshot` (a view of the buffer, no copy). */
export function snapshotInputs(buffer: ArrayBuffer): Float32Array {
  const h = new Float64Array(buffer, 0, HEADER_WORDS);
  if (h[0] !== SNAPSHOT_MAGIC) throw new Error("snapshotInputs: the buffer is not a graph snapshot");
  const at = snapshotOffsets(h[2]!, h[3]!, h[4]!, h[5]!);
  return new Float32Array(buffer, at.inputs, h[5]!);
}

function readOnlyError(what: string): Error {
  return new Error(`ComputationGraph: cannot ${what} a graph rebuilt from a snapshot (it is read-only)`);
}

/**
 * A define-by-run computation graph, renewed per batch. Every node is a row in typed arrays: op, shape, arguments
 * (a slice of `args`), two integer and one float attribute, depth from the leaves and the offset of its value in
 * the graph's value space (one contiguous float buffer per engine, `valueSize` floats long). Building a node costs a
 * few array stores, which is what keeps graph construction far below a microsecond per node.
 */
export class ComputationGraph {
  /** Number of nodes. */
  size = 0;
  /** Floats in the value space (sum of all node sizes). */
  valueSize = 0;
  /** Incremented by `renew()`; expressions of older generations are rejected. */
  generation = 0;

  op = new Uint8Array(INITIAL_NODES);
  rows = new Int32Array(INITIAL_NODES);
  cols = new Int32Array(INITIAL_NODES);
  argStart = new Int32Array(INITIAL_NODES);
  argCount = new Int32Array(INITIAL_NODES);
  /** Op-specific integers: parameter index, input offset, label, range start, child count, dropout key. */
  aux = new Int32Array(INITIAL_NODES);
  /** Op-specific second integer: lookup row, range end, dropout counter base. */
  aux2 = new Int32Array(INITIAL_NODES);
  /** Op-specific float: the dropout probability. */
  auxF = new Float32Array(INITIAL_NODES);
  /** Longest path from a leaf (inputs, parameters and lookups have depth 0). */
  depth = new Int32Array(INITIAL_NODES);
  valueOffset = new Int32Array(INITIAL_NODES);

  args = new Int32Array(INITIAL_NODES * 2);
  argsSize = 0;

  /** Values of input nodes, concatenated (`aux` of an input node is its offset here). */
  inputData = new Float32Array(256);
  inputSize = 0;

  /** Parameters used in this graph, by parameter index (the node that reads each dense parameter). */
  readonly parameters: GraphParameter[] = [];
  /**
   * The id of the collection whose parameters this graph reads (set by the first parameter or lookup node of the
   * generation), NO_COLLECTION while it reads none.
   */
  collection = NO_COLLECTION;
  /** Node of each dense parameter in this generation, by parameter index (valid where paramGen matches). */
  private paramNode = new Int32Array(64);
  private paramGen = new Int32Array(64).fill(-1);

  /** True while training: dropout is active. */
  training = true;
  /** Key of the counter-based generator for dropout masks in this graph (set per batch by the trainer). */
  dropoutKey = 0;
  /** True for a graph rebuilt by `fromSnapshot`: its arrays are views of the snapshot and it cannot grow. */
  readonly readOnly: boolean = false;

  /**
   * Packs nodes [0, n) — every per-node array, their arguments, the input values, the parameter indices in use and
   * the graph-wide fields — into one ArrayBuffer (a 96-byte header, then one `set` per array), so that another
   * thread can rebuild the graph with `fromSnapshot` after a transfer. `into` is reused when it is large enough
   * (the result is then `into` itself). See SNAPSHOT_LAYOUT for the format.
   */
  snapshot(n: number = this.size, into?: ArrayBuffer): ArrayBuffer {
    if (!Number.isInteger(n) || n < 0 || n > this.size) {
      throw new RangeError(`snapshot: node count ${n} is outside 0..${this.size}`);
    }
    const argsSize = n === this.size ? this.argsSize : n === 0 ? 0 : this.argStart[n - 1]! + this.argCount[n - 1]!;
    const valueSize = n === this.size ? this.valueSize : this.valueOffset[n]!;
    const params: number[] = [];
    for (let k = 0; k < this.parameters.length; k++) if (this.parameters[k] !== undefined) params.push(k);
    const at = snapshotOffsets(n, argsSize, params.length, this.inputSize);
    const buffer = into !== undefined && into.byteLength >= at.bytes ? into : new ArrayBuffer(at.bytes);
    const h = new Float64Array(buffer, 0, HEADER_WORDS);
    h[0] = SNAPSHOT_MAGIC;
    h[1] = SNAPSHOT_VERSION;
    h[2] = n;
    h[3] = argsSize;
    h[4] = params.length;
    h[5] = this.inputSize;
    h[6] = valueSize;
    h[7] = this.training ? 1 : 0;
    h[8] = this.dropoutKey;
    h[9] = this.generation;
    h[10] = at.bytes;
    h[11] = this.collection;
    const i32 = (k: number, a: Int32Array) => new Int32Array(buffer, at.i32[k]!, n).set(a.subarray(0, n));
    i32(0, this.rows);
    i32(1, this.cols);
    i32(2, this.argStart);
    i32(3, this.argCount);
    i32(4, this.aux);
    i32(5, this.aux2);
    i32(6, this.depth);
    i32(7, this.valueOffset);
    new Float32Array(buffer, at.auxF, n).set(this.auxF.subarray(0, n));
    new Int32Array(buffer, at.args, argsSize).set(this.args.subarray(0, argsSize));
    new Int32Array(buffer, at.params, params.length).set(params);
    new Float32Array(buffer, at.inputs, this.inputSize).set(this.inputData.subarray(0, this.inputSize));
    new Uint8Array(buffer, at.op, n).set(this.op.subarray(0, n));
    return buffer;
  }

  /**
   * A read-only graph over a `snapshot` (no copy: its arrays are views of `buffer`). `parameters` is filled from
   * `params` (by index) when given, else left empty. Adding nodes or renewing it throws.
   */
  static fromSnapshot(buffer: ArrayBuffer, params?: readonly GraphParameter[]): ComputationGraph {
    const bytes = buffer.byteLength;
    const h = bytes >= 8 * HEADER_WORDS ? new Float64Array(buffer, 0, HEADER_WORDS) : undefined;
    if (h === undefined || h[0] !== SNAPSHOT_MAGIC) throw new Error("fromSnapshot: the buffer is not a graph snapshot");
    if (h[1] !== SNAPSHOT_VERSION) {
      throw new Error(`fromSnapshot: snapshot format version ${h[1]}; this build reads version ${SNAPSHOT_VERSION}`);
    }
    const [n, argsSize, paramCount, inputSize] = [h[2]!, h[3]!, h[4]!, h[5]!];
    const at = snapshotOffsets(n, argsSize, paramCount, inputSize);
    if (at.bytes !== h[10] || at.bytes > bytes) {
      throw new Error(`fromSnapshot: the snapshot needs ${at.bytes} bytes; the buffer has ${bytes}`);
    }
    const g = new ComputationGraph();
    const i32 = (k: number) => new Int32Array(buffer, at.i32[k]!, n);
    g.rows = i32(0);
    g.cols = i32(1);
    g.argStart = i32(2);
    g.argCount = i32(3);
    g.aux = i32(4);
    g.aux2 = i32(5);
    g.depth = i32(6);
    g.valueOffset = i32(7);
    g.auxF = new Float32Array(buffer, at.auxF, n);
    g.args = new Int32Array(buffer, at.args, argsSize);
    g.argsSize = argsSize;
    g.inputData = new Float32Array(buffer, at.inputs, inputSize);
    g.inputSize = inputSize;
    g.op = new Uint8Array(buffer, at.op, n);
    g.size = n;
    g.valueSize = h[6]!;
    g.training = h[7] === 1;
    g.dropoutKey = h[8]!;
    g.generation = h[9]!;
    g.collection = h[11]!;
    if (params !== undefined) {
      for (const k of new Int32Array(buffer, at.params, paramCount)) {
        const p = params[k];
        if (p === undefined) throw new Error(`fromSnapshot: the graph uses parameter ${k}; none given with that index`);
        if (p.collection !== g.collection) {
          throw new CollectionMismatchError(
            `fromSnapshot: the graph reads ${collectionLabel(g.collection)}; parameter ${k} given, '${p.name}', is ` +
              `of ${collectionLabel(p.collection)}`,
          );
        }
        g.parameters[k] = p;
      }
    }
    (g as { readOnly: boolean }).readOnly = true;
    return g;
  }

  /** Forgets all nodes; the arrays keep their capacity. */
  renew(): void {
    if (this.readOnly) throw readOnlyError("renew");
    this.size = 0;
    this.valueSize = 0;
    this.argsSize = 0;
    this.inputSize = 0;
    this.generation++;
    this.parameters.length = 0;
    this.collection = NO_COLLECTION;
  }

  /** Validates that `e` belongs to this graph's current generation and returns its node id. */
  check(e: Expression, op: string, arg: string): number {
    if (e.graph !== this) throw new ShapeError(`${op}: argument '${arg}' belongs to a different graph`);
    if (e.generation !== this.generation) {
      throw new ShapeError(`${op}: argument '${arg}' is from a previous batch (the graph was renewed since)`);
    }
    return e.id;
  }

  expression(id: number): Expression {
    if (id < 0 || id >= this.size) throw new RangeError(`node ${id} does not exist (graph has ${this.size} nodes)`);
    return new Expression(this, id, this.generation);
  }

  shapeOf(id: number): string {
    const c = this.cols[id]!;
    return c === 1 ? `[${this.rows[id]}]` : `[${this.rows[id]},${c}]`;
  }

  /**
   * Appends a node whose arguments are the first `n` entries of `argIds` (node ids already validated by the
   * caller; `n` defaults to its length). Returns the new node id. Builders with a fixed arity use `addNode0` …
   * `addNode3` instead: no argument array to allocate, and one array type at every call site of the loop here.
   */
  addNode(
    op: Op,
    rows: number,
    cols: number,
    argIds: ArrayLike<number>,
    aux = 0,
    aux2 = 0,
    auxF = 0,
    n = argIds.length,
  ): number {
    const id = this.reserve(n);
    const start = this.argsSize;
    const args = this.args;
    const depth = this.depth;
    let d = -1;
    for (let k = 0; k < n; k++) {
      const a = argIds[k]!;
      args[start + k] = a;
      const da = depth[a]!;
      if (da > d) d = da;
    }
    return this.finish(id, op, rows, cols, n, d + 1, aux, aux2, auxF);
  }

  /** `addNode` for a node without arguments (depth 0). */
  addNode0(op: Op, rows: number, cols: number, aux = 0, aux2 = 0, auxF = 0): number {
    return this.finish(this.reserve(0), op, rows, cols, 0, 0, aux, aux2, auxF);
  }

  /** `addNode` for a node with one argument, `a` (a validated node id). */
  addNode1(op: Op, rows: number, cols: number, a: number, aux = 0, aux2 = 0, auxF = 0): number {
    const id = this.reserve(1);
    this.args[this.argsSize] = a;
    return this.finish(id, op, rows, cols, 1, this.depth[a]! + 1, aux, aux2, auxF);
  }

  /** `addNode` for a node with two arguments, `a` and `b` (validated node ids). */
  addNode2(op: Op, rows: number, cols: number, a: number, b: number, aux = 0, aux2 = 0, auxF = 0): number {
    const id = this.reserve(2);
    const args = this.args;
    const start = this.argsSize;
    args[start] = a;
    args[start + 1] = b;
    const depth = this.depth;
    const da = depth[a]!;
    const db = depth[b]!;
    return this.finish(id, op, rows, cols, 2, Math.max(da, db) + 1, aux, aux2, auxF);
  }

  /** `addNode` for a node with three arguments, `a`, `b` and `c` (validated node ids). */
  addNode3(op: Op, rows: number, cols: number, a: number, b: number, c: number, aux = 0, aux2 = 0, auxF = 0): number {
    const id = this.reserve(3);
    const args = this.args;
    const start = this.argsSize;
    args[start] = a;
    args[start + 1] = b;
    args[start + 2] = c;
    const depth = this.depth;
    let d = depth[a]!;
    const db = depth[b]!;
    const dc = depth[c]!;
    if (db > d) d = db;
    if (dc > d) d = dc;
    return this.finish(id, op, rows, cols, 3, d + 1, aux, aux2, auxF);
  }

  /** Makes room for one more node with `n` arguments (at `argsSize`) and returns the new node's id. */
  private reserve(n: number): number {
    const id = this.size;
    if (id === this.op.length) this.growNodes();
    if (this.argsSize + n > this.args.length) this.growArgs(this.argsSize + n);
    return id;
  }

  /** Writes node `id` (reserved, its `n` arguments already stored at `argsSize`) and counts it. */
  private finish(
    id: number,
    op: Op,
    rows: number,
    cols: number,
    n: number,
    depth: number,
    aux: number,
    aux2: number,
    auxF: number,
  ): number {
    const start = this.argsSize;
    this.argsSize = start + n;
    this.op[id] = op;
    this.rows[id] = rows;
    this.cols[id] = cols;
    this.argStart[id] = start;
    this.argCount[id] = n;
    this.aux[id] = aux;
    this.aux2[id] = aux2;
    this.auxF[id] = auxF;
    this.depth[id] = depth;
    this.valueOffset[id] = this.valueSize;
    this.valueSize += rows * cols;
    this.size = id + 1;
    return id;
  }

  /** The id of argument `k` of node `id`. */
  arg(id: number, k: number): number {
    return this.args[this.argStart[id]! + k]!;
  }

  /** A node reading a dense parameter; one per parameter per graph. */
  parameterNode(p: GraphParameter): number {
    // before the cache: the cached node of index k may be another collection's parameter k
    if (p.collection !== this.collection) this.useCollection(p);
    const k = p.index;
    if (k < this.paramGen.length && this.paramGen[k] === this.generation) return this.paramNode[k]!;
    if (p.kind !== "dense") {
      throw new ShapeError(`parameter: '${p.name}' is a lookup table; read rows of it with lookup(table, row)`);
    }
    const id = this.addNode0(Op.Parameter, p.rows, p.cols, p.index);
    if (k >= this.paramGen.length) {
      const n = Math.max(k + 1, this.paramGen.length * 2);
      const node = new Int32Array(n);
      node.set(this.paramNode);
      const gen = new Int32Array(n).fill(-1);
      gen.set(this.paramGen);
      this.paramNode = node;
      this.paramGen = gen;
    }
    this.paramNode[k] = id;
    this.paramGen[k] = this.generation;
    this.parameters[k] = p;
    return id;
  }

  /** Registers a lookup table as used by this graph (lookup nodes refer to it by index). */
  useLookup(p: GraphParameter): void {
    if (p.collection !== this.collection) this.useCollection(p);
    this.parameters[p.index] = p;
  }

  /** The first parameter of a generation fixes the graph's collection; a parameter of another one is refused. */
  private useCollection(p: GraphParameter): void {
    const id = p.collection;
    if (!Number.isInteger(id) || id < 1) {
      throw new ShapeError(
        `parameter '${p.name}' has no collection id (got ${String(id)}); make parameters with ParameterCollection`,
      );
    }
    if (this.collection === NO_COLLECTION) {
      this.collection = id;
      return;
    }
    const mine = this.parameters.find((q) => q !== undefined);
    throw new CollectionMismatchError(
      `graph: parameter '${p.name}' is of ${collectionLabel(id)}, but this graph already reads ` +
        `${collectionLabel(this.collection)}${mine ? ` (parameter '${mine.name}')` : ""}; a graph reads the ` +
        "parameters of one collection, the one its engine was made for",
    );
  }

  /** Appends input values and returns their offset in `inputData`. */
  addInputData(values: ArrayLike<number>): number {
    const n = values.length;
    if (this.inputSize + n > this.inputData.length) {
      if (this.readOnly) throw readOnlyError("add input data to");
      const grown = new Float32Array(Math.max(this.inputData.length * 2, this.inputSize + n));
      grown.set(this.inputData.subarray(0, this.inputSize));
      this.inputData = grown;
    }
    const off = this.inputSize;
    for (let k = 0; k < n; k++) this.inputData[off + k] = values[k]!;
    this.inputSize += n;
    return off;
  }

  /** A one-line description of a node, for error messages and dumps. */
  describe(id: number): string {
    const n = this.argCount[id]!;
    const a: number[] = [];
    for (let k = 0; k < n; k++) a.push(this.arg(id, k));
    return `#${id} ${opName(this.op[id]!)}(${a.map((x) => `#${x}`).join(", ")}) ${this.shapeOf(id)}`;
  }

  private growNodes(): void {
    if (this.readOnly) throw readOnlyError("add a node to");
    const cap = this.op.length * 2;
    const grow = <T extends Uint8Array | Int32Array | Float32Array>(a: T, make: (n: number) => T): T => {
      const b = make(cap);
      b.set(a);
      return b;
    };
    this.op = grow(this.op, (n) => new Uint8Array(n));
    this.rows = grow(this.rows, (n) => new Int32Array(n));
    this.cols = grow(this.cols, (n) => new Int32Array(n));
    this.argStart = grow(this.argStart, (n) => new Int32Array(n));
    this.argCount = grow(this.argCount, (n) => new Int32Array(n));
    this.aux = grow(this.aux, (n) => new Int32Array(n));
    this.aux2 = grow(this.aux2, (n) => new Int32Array(n));
    this.auxF = grow(this.auxF, (n) => new Float32Array(n));
    this.depth = grow(this.depth, (n) => new Int32Array(n));
    this.valueOffset = grow(this.valueOffset, (n) => new Int32Array(n));
  }

  private growArgs(need: number): void {
    if (this.readOnly) throw readOnlyError("add a node to");
    const b = new Int32Array(Math.max(this.args.length * 2, need));
    b.set(this.args.subarray(0, this.argsSize));
    this.args = b;
  }
}
