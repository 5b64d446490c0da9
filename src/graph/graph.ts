import { UserError } from "../util/errors.js";
import { CollectionMismatchError, collectionLabel, NO_COLLECTION } from "./collection.js";
import { Expression } from "./expression.js";
import { Op, opName } from "./opcodes.js";
import {
  describeLoan,
  type LentGraph,
  newSharedNodes,
  readLent,
  readSnapshot,
  type SharedNodes,
  sharedViews,
  writeSnapshot,
} from "./snapshot.js";

export { CollectionMismatchError, collectionLabel, NO_COLLECTION } from "./collection.js";
export { Expression } from "./expression.js";
export { type LentGraph, snapshotInputs } from "./snapshot.js";

/** A graph's node arrays in shared memory, and how many loans of them are out (see `lend`). */
interface NodeStore {
  readonly nodes: SharedNodes;
  lent: number;
}

/** What `lend` returns: the loan's description for the other thread, and the call that ends the loan. */
export interface GraphLoan {
  readonly graph: LentGraph;
  /** Ends the loan (once the other thread is done with the arrays); further calls do nothing. */
  readonly release: () => void;
}

/** Shared node stores a graph keeps for its next loans (in flight at once: the schedule-ahead depth, about 2W). */
const SPARE_STORES = 16;

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

const INITIAL_NODES = 1024;
/**
 * The node capacity a new graph starts with: 0 while `fromSnapshot` and `fromLent` construct one, since they replace
 * every array at once (a schedule worker rebuilds a graph per batch; 50 kB of arrays each time is garbage).
 */
let initialNodes = INITIAL_NODES;

/** A graph with zero-length arrays, to be pointed at a snapshot's or a loan's. */
function bareGraph(): ComputationGraph {
  initialNodes = 0;
  try {
    return new ComputationGraph();
  } finally {
    initialNodes = INITIAL_NODES;
  }
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

  op: Uint8Array = new Uint8Array(initialNodes);
  rows: Int32Array = new Int32Array(initialNodes);
  cols: Int32Array = new Int32Array(initialNodes);
  argStart: Int32Array = new Int32Array(initialNodes);
  argCount: Int32Array = new Int32Array(initialNodes);
  /** Op-specific integers: parameter index, input offset, label, range start, child count, dropout key. */
  aux: Int32Array = new Int32Array(initialNodes);
  /** Op-specific second integer: lookup row, range end, dropout counter base. */
  aux2: Int32Array = new Int32Array(initialNodes);
  /** Op-specific float: the dropout probability. */
  auxF: Float32Array = new Float32Array(initialNodes);
  /** Longest path from a leaf (inputs, parameters and lookups have depth 0). */
  depth: Int32Array = new Int32Array(initialNodes);
  valueOffset: Int32Array = new Int32Array(initialNodes);

  args: Int32Array = new Int32Array(initialNodes * 2);
  argsSize = 0;

  /** Values of input nodes, concatenated (`aux` of an input node is its offset here). */
  inputData: Float32Array = new Float32Array(initialNodes / 4);
  inputSize = 0;

  /** Parameters used in this graph, by parameter index (the node that reads each dense parameter). */
  readonly parameters: GraphParameter[] = [];
  /**
   * The id of the collection whose parameters this graph reads (set by the first parameter or lookup node of the
   * generation), NO_COLLECTION while it reads none.
   */
  collection = NO_COLLECTION;
  /** Node of each dense parameter in this generation, by parameter index (valid where paramGen matches). */
  private paramNode = new Int32Array(initialNodes === 0 ? 0 : 64);
  private paramGen = new Int32Array(initialNodes === 0 ? 0 : 64).fill(-1);

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
    return writeSnapshot(this, n, into);
  }

  /**
   * A read-only graph over a `snapshot` (no copy: its arrays are views of `buffer`). `parameters` is filled from
   * `params` (by index) when given, else left empty. Adding nodes or renewing it throws.
   */
  static fromSnapshot(buffer: ArrayBuffer, params?: readonly GraphParameter[]): ComputationGraph {
    const g = bareGraph();
    readSnapshot(g, buffer, params);
    (g as { readOnly: boolean }).readOnly = true;
    return g;
  }

  /**
   * Lends nodes [0, n) to another thread without a copy (the schedule workers): the first loan moves the node
   * arrays into shared memory, where they stay. `graph` is what to post (the shared buffer and the graph-wide
   * fields; input values are not in it); the other thread rebuilds the graph with `fromLent`. Until `release`,
   * `renew` moves this graph to other arrays instead of overwriting the lent ones (nodes added without a renew go
   * after node n, which the loan does not cover); released arrays are reused by later renewals.
   */
  lend(n: number = this.size): GraphLoan {
    if (this.readOnly) throw readOnlyError("lend");
    let store = this.store;
    if (store === undefined) {
      store = { nodes: newSharedNodes(this.op.length, this.args.length), lent: 0 };
      const views = sharedViews(store.nodes);
      for (const k of Object.keys(views) as (keyof typeof views)[]) views[k].set(this[k]);
      this.useStore(store);
    }
    const graph = describeLoan(this, store.nodes, n);
    store.lent++;
    let out = true;
    const release = () => {
      if (!out) return;
      out = false;
      this.returned(store);
    };
    return { graph, release };
  }

  /**
   * A read-only graph over a loan's arrays (no copy), with `inputs` as its input values; `parameters` is filled from
   * `params` (by index) when given. Valid while the loan is out.
   */
  static fromLent(lent: LentGraph, inputs: Float32Array, params?: readonly GraphParameter[]): ComputationGraph {
    const g = bareGraph();
    readLent(g, lent, inputs, params);
    (g as { readOnly: boolean }).readOnly = true;
    return g;
  }

  /** The shared node arrays in use (after a first `lend`), and released ones kept for reuse. */
  private store: NodeStore | undefined = undefined;
  private readonly spareStores: NodeStore[] = [];

  /** Points the node arrays at `store` (the first `size` nodes must already be there). */
  private useStore(store: NodeStore): void {
    this.store = store;
    const v = sharedViews(store.nodes);
    this.op = v.op;
    this.rows = v.rows;
    this.cols = v.cols;
    this.argStart = v.argStart;
    this.argCount = v.argCount;
    this.aux = v.aux;
    this.aux2 = v.aux2;
    this.auxF = v.auxF;
    this.depth = v.depth;
    this.valueOffset = v.valueOffset;
    this.args = v.args;
  }

  /** A loan of `store` ended: keep it for reuse once no loan of it is out and the graph has moved on from it. */
  private returned(store: NodeStore): void {
    store.lent--;
    if (store.lent > 0 || store === this.store || this.spareStores.length >= SPARE_STORES) return;
    const cur = this.store!.nodes;
    if (store.nodes.nodes === cur.nodes && store.nodes.args === cur.args) this.spareStores.push(store);
  }

  /** Forgets all nodes; the arrays keep their capacity. */
  renew(): void {
    if (this.readOnly) throw readOnlyError("renew");
    if (this.store !== undefined && this.store.lent > 0) {
      // a worker still reads these arrays: build the next graph in others
      const cur = this.store.nodes;
      this.useStore(this.spareStores.pop() ?? { nodes: newSharedNodes(cur.nodes, cur.args), lent: 0 });
    }
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

  /**
   * Makes room for `nodes` more nodes with `args` more arguments, for a builder that writes whole blocks of nodes
   * into the arrays itself (src/models/treelstm/blocks.ts): it must write every field `addNode` writes, and
   * advance `size`, `argsSize` and `valueSize`.
   */
  ensureRoom(nodes: number, args: number): void {
    while (this.size + nodes > this.op.length) this.growNodes();
    if (this.argsSize + args > this.args.length) this.growArgs(this.argsSize + args);
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

  /** The node reading dense parameter `p` in this generation, or -1 while there is none (adds nothing). */
  presentParameterNode(p: GraphParameter): number {
    const k = p.index;
    if (p.collection !== this.collection || k >= this.paramGen.length || this.paramGen[k] !== this.generation)
      return -1;
    return this.paramNode[k]!;
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
    const cap = Math.max(this.op.length * 2, 64);
    if (this.store !== undefined) {
      this.growShared(cap, this.args.length);
      return;
    }
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
    const cap = Math.max(this.args.length * 2, need);
    if (this.store !== undefined) {
      this.growShared(this.op.length, cap);
      return;
    }
    const b = new Int32Array(cap);
    b.set(this.args.subarray(0, this.argsSize));
    this.args = b;
  }

  /** Growing shared node arrays: new ones of the new capacity (a loan out keeps the old ones); spares are dropped. */
  private growShared(nodes: number, args: number): void {
    const old = sharedViews(this.store!.nodes, this.size, this.argsSize);
    this.spareStores.length = 0;
    this.useStore({ nodes: newSharedNodes(nodes, args), lent: 0 });
    for (const k of Object.keys(old) as (keyof typeof old)[]) this[k].set(old[k]);
  }
}
