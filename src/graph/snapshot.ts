/**
 * Handing a graph to another thread (the VPPS schedule workers, src/engines/vpps/schedule/pool.ts), two ways:
 *
 * - a snapshot (`ComputationGraph.snapshot` / `fromSnapshot`): every per-node array copied into one ArrayBuffer,
 *   which can be transferred or kept;
 * - a loan (`ComputationGraph.lend` / `fromLent`): the graph keeps its node arrays in one SharedArrayBuffer, so
 *   another thread can read them where they are, with no copy; the graph moves to other arrays at `renew` while a
 *   loan is out instead of overwriting them. At batch 128 a snapshot copies about 2 MB per batch on the main thread,
 *   which a loan saves.
 *
 * The graph's own class stays in graph.ts; this file knows the layouts and fills a graph's public fields.
 */
import { CollectionMismatchError, collectionLabel } from "./collection.js";
import type { ComputationGraph, GraphParameter } from "./graph.js";

/**
 * The layout of a snapshot: a header of HEADER_WORDS float64s (magic, version, nodes, argument entries, parameters
 * in use, input floats, value size, training, dropout key, generation, total bytes, collection), then int32 rows,
 * cols, argStart, argCount, aux, aux2, depth, valueOffset (one per node), float32 auxF, int32 args, int32 indices of
 * the parameters in use, float32 input values, and uint8 ops last (nothing after them needs alignment).
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

/** The indices of the dense parameters and lookup tables `g` reads. */
function parametersInUse(g: ComputationGraph): number[] {
  const params: number[] = [];
  for (let k = 0; k < g.parameters.length; k++) if (g.parameters[k] !== undefined) params.push(k);
  return params;
}

/** `ComputationGraph.snapshot` (see there). */
export function writeSnapshot(g: ComputationGraph, n: number, into: ArrayBuffer | undefined): ArrayBuffer {
  if (!Number.isInteger(n) || n < 0 || n > g.size) {
    throw new RangeError(`snapshot: node count ${n} is outside 0..${g.size}`);
  }
  const argsSize = n === g.size ? g.argsSize : n === 0 ? 0 : g.argStart[n - 1]! + g.argCount[n - 1]!;
  const valueSize = n === g.size ? g.valueSize : g.valueOffset[n]!;
  const params = parametersInUse(g);
  const at = snapshotOffsets(n, argsSize, params.length, g.inputSize);
  const buffer = into !== undefined && into.byteLength >= at.bytes ? into : new ArrayBuffer(at.bytes);
  const h = new Float64Array(buffer, 0, HEADER_WORDS);
  h[0] = SNAPSHOT_MAGIC;
  h[1] = SNAPSHOT_VERSION;
  h[2] = n;
  h[3] = argsSize;
  h[4] = params.length;
  h[5] = g.inputSize;
  h[6] = valueSize;
  h[7] = g.training ? 1 : 0;
  h[8] = g.dropoutKey;
  h[9] = g.generation;
  h[10] = at.bytes;
  h[11] = g.collection;
  const i32 = (k: number, a: Int32Array) => new Int32Array(buffer, at.i32[k]!, n).set(a.subarray(0, n));
  i32(0, g.rows);
  i32(1, g.cols);
  i32(2, g.argStart);
  i32(3, g.argCount);
  i32(4, g.aux);
  i32(5, g.aux2);
  i32(6, g.depth);
  i32(7, g.valueOffset);
  new Float32Array(buffer, at.auxF, n).set(g.auxF.subarray(0, n));
  new Int32Array(buffer, at.args, argsSize).set(g.args.subarray(0, argsSize));
  new Int32Array(buffer, at.params, params.length).set(params);
  new Float32Array(buffer, at.inputs, g.inputSize).set(g.inputData.subarray(0, g.inputSize));
  new Uint8Array(buffer, at.op, n).set(g.op.subarray(0, n));
  return buffer;
}

/** Fills `g` (new) from a snapshot: `ComputationGraph.fromSnapshot` (see there). */
export function readSnapshot(g: ComputationGraph, buffer: ArrayBuffer, params?: readonly GraphParameter[]): void {
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
  if (params !== undefined) useParameters(g, new Int32Array(buffer, at.params, paramCount), params, "fromSnapshot");
}

function useParameters(
  g: ComputationGraph,
  indices: ArrayLike<number>,
  params: readonly GraphParameter[],
  where: string,
): void {
  for (let i = 0; i < indices.length; i++) {
    const k = indices[i]!;
    const p = params[k];
    if (p === undefined) throw new Error(`${where}: the graph uses parameter ${k}; none given with that index`);
    if (p.collection !== g.collection) {
      throw new CollectionMismatchError(
        `${where}: the graph reads ${collectionLabel(g.collection)}; parameter ${k} given, '${p.name}', is ` +
          `of ${collectionLabel(p.collection)}`,
      );
    }
    g.parameters[k] = p;
  }
}

/**
 * The node arrays of a graph in one SharedArrayBuffer, each `nodes` (args: `args`) long: int32 rows, cols,
 * argStart, argCount, aux, aux2, depth, valueOffset, float32 auxF, int32 args, and uint8 op last.
 */
export interface SharedNodes {
  readonly buffer: SharedArrayBuffer;
  readonly nodes: number;
  readonly args: number;
}

/** Typed arrays over `s` (each `n` long, args `argsSize`; the whole capacity when omitted). */
export function sharedViews(s: SharedNodes, n = s.nodes, argsSize = s.args) {
  const b = s.buffer;
  const i32 = (k: number) => new Int32Array(b, 4 * k * s.nodes, n);
  return {
    rows: i32(0),
    cols: i32(1),
    argStart: i32(2),
    argCount: i32(3),
    aux: i32(4),
    aux2: i32(5),
    depth: i32(6),
    valueOffset: i32(7),
    auxF: new Float32Array(b, 4 * 8 * s.nodes, n),
    args: new Int32Array(b, 4 * 9 * s.nodes, argsSize),
    op: new Uint8Array(b, 4 * (9 * s.nodes + s.args), n),
  };
}

/** New shared node arrays for `nodes` nodes and `args` argument entries (zeroed). */
export function newSharedNodes(nodes: number, args: number): SharedNodes {
  return { buffer: new SharedArrayBuffer(4 * (9 * nodes + args) + nodes), nodes, args };
}

/**
 * What a loan hands to the other thread (structured-cloneable: the shared buffer is shared, not copied): nodes
 * [0, size) of the arrays in `nodes` and the graph-wide fields. The input values travel separately.
 */
export interface LentGraph {
  readonly nodes: SharedNodes;
  readonly size: number;
  readonly argsSize: number;
  readonly valueSize: number;
  readonly inputSize: number;
  readonly training: boolean;
  readonly dropoutKey: number;
  readonly generation: number;
  readonly collection: number;
  /** Indices of the parameters the graph reads. */
  readonly params: readonly number[];
}

/** The loan's description of nodes [0, n) of `g`, whose node arrays are in `nodes`. */
export function describeLoan(g: ComputationGraph, nodes: SharedNodes, n: number): LentGraph {
  if (!Number.isInteger(n) || n < 0 || n > g.size)
    throw new RangeError(`lend: node count ${n} is outside 0..${g.size}`);
  return {
    nodes,
    size: n,
    argsSize: n === g.size ? g.argsSize : n === 0 ? 0 : g.argStart[n - 1]! + g.argCount[n - 1]!,
    valueSize: n === g.size ? g.valueSize : g.valueOffset[n]!,
    inputSize: g.inputSize,
    training: g.training,
    dropoutKey: g.dropoutKey,
    generation: g.generation,
    collection: g.collection,
    params: parametersInUse(g),
  };
}

/** Fills `g` (new) from a loan: `ComputationGraph.fromLent` (see there). */
export function readLent(
  g: ComputationGraph,
  lent: LentGraph,
  inputs: Float32Array,
  params?: readonly GraphParameter[],
): void {
  if (inputs.length !== lent.inputSize) {
    throw new RangeError(`fromLent: the graph has ${lent.inputSize} input values; ${inputs.length} given`);
  }
  Object.assign(g, sharedViews(lent.nodes, lent.size, lent.argsSize));
  g.size = lent.size;
  g.argsSize = lent.argsSize;
  g.valueSize = lent.valueSize;
  g.inputData = inputs;
  g.inputSize = lent.inputSize;
  g.training = lent.training;
  g.dropoutKey = lent.dropoutKey;
  g.generation = lent.generation;
  g.collection = lent.collection;
  if (params !== undefined) useParameters(g, lent.params, params, "fromLent");
}
