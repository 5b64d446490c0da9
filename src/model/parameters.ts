import { constants } from "node:buffer";
import {
  CollectionMismatchError,
  type ComputationGraph,
  collectionLabel,
  type GraphParameter,
  NO_COLLECTION,
} from "../graph/graph.js";
import { UserError } from "../util/errors.js";
import { deriveKey, randomUniform } from "../util/random.js";

/** How a parameter's values start. Matrices default to Glorot, vectors to zero, lookup tables to uniform. */
export type Init =
  | { kind: "glorot" }
  | { kind: "uniform"; scale: number }
  | { kind: "zero" }
  | { kind: "const"; value: number };

/** A dense parameter: a matrix [rows, cols] (row-major) or a vector [rows] (cols = 1). */
export class Parameter implements GraphParameter {
  readonly kind = "dense" as const;
  readonly grad: Float32Array;
  constructor(
    readonly index: number,
    readonly name: string,
    readonly rows: number,
    readonly cols: number,
    readonly value: Float32Array,
    /** True for a matrix ([rows, cols] with cols > 1 or declared 2-D): VPPS caches these in registers. */
    readonly isMatrix: boolean,
    /** The id of the collection that made it (`ParameterCollection.id`). */
    readonly collection: number,
  ) {
    this.grad = new Float32Array(value.length);
  }
  get shape(): number[] {
    return this.isMatrix ? [this.rows, this.cols] : [this.rows];
  }
}

/**
 * A lookup table [vocab, dim]: rows are read one at a time, and only the rows a batch touched are updated
 * (sparse updates), which is what keeps a large vocabulary cheap.
 */
export class LookupParameter implements GraphParameter {
  readonly kind = "lookup" as const;
  readonly grad: Float32Array;
  /** 1 for rows with a gradient since the last update. */
  readonly touched: Uint8Array;
  /** The touched rows, in order of first touch. */
  touchedRows: number[] = [];
  constructor(
    readonly index: number,
    readonly name: string,
    readonly rows: number,
    readonly cols: number,
    readonly value: Float32Array,
    /** The id of the collection that made it (`ParameterCollection.id`). */
    readonly collection: number,
  ) {
    this.grad = new Float32Array(value.length);
    this.touched = new Uint8Array(rows);
  }
  get shape(): number[] {
    return [this.rows, this.cols];
  }
  touch(row: number): void {
    if (this.touched[row] === 0) {
      this.touched[row] = 1;
      this.touchedRows.push(row);
    }
  }
  /** Zeroes the gradient of the touched rows and forgets them. */
  clearTouched(): void {
    const d = this.cols;
    for (const r of this.touchedRows) {
      this.grad.fill(0, r * d, (r + 1) * d);
      this.touched[r] = 0;
    }
    this.touchedRows = [];
  }
}

export type AnyParameter = Parameter | LookupParameter;

function checkDim(what: string, n: number): void {
  if (!Number.isInteger(n) || n <= 0) throw new RangeError(`${what} must be a positive integer; got ${String(n)}`);
}

/** Floats one parameter may hold: graphs address node values with int32 offsets (ComputationGraph.valueOffset). */
export const MAX_PARAMETER_FLOATS = 2 ** 31 - 1;

function checkSize(what: string, rows: number, cols: number): void {
  if (rows * cols > MAX_PARAMETER_FLOATS) {
    throw new RangeError(
      `${what}: [${rows}, ${cols}] is ${rows * cols} floats; one parameter holds at most ${MAX_PARAMETER_FLOATS} ` +
        "(graph value offsets are 32-bit)",
    );
  }
}

/** Refuses an initialisation that would fill the values with NaN, or one of no known kind. */
function checkInit(what: string, init: Init): void {
  const bad = (why: string) => new RangeError(`${what}: init ${JSON.stringify(init)} ${why}`);
  if (typeof init !== "object" || init === null) throw bad("is not an Init object");
  switch (init.kind) {
    case "glorot":
    case "zero":
      return;
    case "const":
      if (!Number.isFinite(init.value)) throw bad("needs a finite value");
      return;
    case "uniform":
      if (!Number.isFinite(init.scale) || init.scale < 0) throw bad("needs a finite scale ≥ 0");
      return;
    default:
      throw bad('has no known kind (one of "glorot", "uniform", "zero", "const")');
  }
}

function checkName(what: string, name: string | undefined): void {
  if (name !== undefined && (typeof name !== "string" || name.length === 0)) {
    throw new TypeError(`${what}: name must be a non-empty string; got ${JSON.stringify(name) ?? String(name)}`);
  }
}

/** Ids of collections made so far in this process (ids start at 1, see NO_COLLECTION). */
let collectionsMade = 0;

/**
 * The most values one parameter can hold: the length limit of a JavaScript typed array (2^32 in Node 20). A larger
 * `new Float32Array` fails with "RangeError: Invalid typed array length", which names neither the parameter nor the
 * option that made it so large.
 */
export const MAX_PARAMETER_VALUES = constants.MAX_LENGTH;

/** A model too large to allocate: a parameter beyond the typed-array limit, or more memory than the machine has. */
export class ModelSizeError extends UserError {}

/** Refuses a parameter of `rows` × `cols` values beyond `MAX_PARAMETER_VALUES`, naming it. */
function checkValues(name: string, rows: number, cols: number): void {
  const n = rows * cols;
  if (n > MAX_PARAMETER_VALUES) {
    throw new ModelSizeError(
      `parameter '${name}' [${rows}x${cols}] would hold ${n.toLocaleString("en-US")} values; one parameter holds at ` +
        `most ${MAX_PARAMETER_VALUES.toLocaleString("en-US")} (the length limit of a JavaScript typed array)`,
    );
  }
}

/**
 * Checks, from shapes alone (before anything is allocated), that a model can be held here: no parameter beyond the
 * typed-array limit, and `bytesPerValue` bytes per parameter value (its value and gradient, 8; Adam's two moments
 * add 8) within `memoryBytes`. `advice` ends each message ("lower --hidden or --embed").
 */
export function checkModelSize(
  shapes: readonly ParameterShape[],
  opts: { bytesPerValue: number; memoryBytes: number; memorySource?: string; advice: string },
): void {
  let values = 0;
  for (const p of shapes) {
    try {
      checkValues(p.name, p.rows, p.cols);
    } catch (e) {
      throw new ModelSizeError(`the model is too large: ${(e as Error).message}; ${opts.advice}`);
    }
    values += p.rows * p.cols;
  }
  const bytes = values * opts.bytesPerValue;
  if (bytes > opts.memoryBytes) {
    const gb = (b: number) => `${(b / 1e9).toFixed(1)} GB`;
    throw new ModelSizeError(
      `the model is too large for this machine: its ${values.toLocaleString("en-US")} parameter values need ${gb(bytes)} ` +
        `(${opts.bytesPerValue} bytes each for values, gradients and optimiser state), more than its ` +
        `${gb(opts.memoryBytes)} of memory${opts.memorySource ? ` (${opts.memorySource})` : ""}; ${opts.advice}`,
    );
  }
}

/**
 * The model's parameters. Every initial value is drawn from the project's counter-based generator keyed by
 * (seed, parameter index), so a model built in the same order with the same seed is identical on any engine.
 */
export class ParameterCollection {
  readonly all: AnyParameter[] = [];
  private readonly names = new Set<string>();
  readonly seed: number;
  /** Unique in the process; each parameter carries it, and each graph the id of the collection it reads. */
  readonly id: number;

  constructor(opts: { seed?: number } = {}) {
    const seed = opts.seed ?? 1;
    // the seed keys every initial value (deriveKey reads it as a 32-bit word): NaN or 1.5 would key silently
    if (!Number.isSafeInteger(seed)) {
      throw new RangeError(`ParameterCollection: seed must be an integer; got ${String(seed)}`);
    }
    this.seed = seed;
    this.id = ++collectionsMade;
  }

  /**
   * Refuses graph `g` when it reads parameters of another collection: `engine` (its name, for the message) computes
   * with this collection's buffers, indexed by the graph's parameter indices, so it would read and update the wrong
   * weights. One comparison: engines call it at every entry point that takes a graph.
   */
  checkGraph(g: ComputationGraph, engine: string): void {
    if (g.collection !== this.id && g.collection !== NO_COLLECTION) throw this.foreignGraph(g, engine);
  }

  private foreignGraph(g: ComputationGraph, engine: string): CollectionMismatchError {
    const p = g.parameters.find((q) => q !== undefined);
    const names = this.all.slice(0, 3).map((q) => `'${q.name}'`);
    if (this.all.length > 3) names.push("…");
    const mine = names.length > 0 ? ` (${names.join(", ")})` : " (no parameters)";
    return new CollectionMismatchError(
      `${engine} engine: the graph reads ${p ? `parameter '${p.name}' of ` : ""}${collectionLabel(g.collection)}, ` +
        `but this engine was made for ${collectionLabel(this.id)}${mine}; build the graph from the parameters of ` +
        "the engine's collection, or make an engine for the graph's",
    );
  }

  /** A dense parameter: `n` or `[n]` is a vector, `[rows, cols]` a matrix. */
  addParameters(shape: number | readonly number[], init?: Init, name?: string): Parameter {
    if (typeof shape !== "number" && !Array.isArray(shape)) {
      throw new RangeError(`addParameters: shape must be n, [n] or [rows, cols]; got ${String(shape)}`);
    }
    const dims = typeof shape === "number" ? [shape] : [...shape];
    if (dims.length < 1 || dims.length > 2) {
      throw new RangeError(`addParameters: shape must be [n] or [rows, cols]; got [${dims.join(",")}]`);
    }
    const rows = dims[0]!;
    const cols = dims[1] ?? 1;
    checkDim("addParameters: rows", rows);
    checkDim("addParameters: cols", cols);
    checkValues(name ?? `p${this.all.length}`, rows, cols);
    checkSize("addParameters", rows, cols);
    if (init !== undefined) checkInit("addParameters", init);
    checkName("addParameters", name);
    const index = this.all.length;
    const nm = this.uniqueName(name ?? `p${index}`);
    const isMatrix = dims.length === 2;
    const value = new Float32Array(rows * cols);
    this.initialise(value, index, init ?? (isMatrix ? { kind: "glorot" } : { kind: "zero" }), rows, cols);
    const p = new Parameter(index, nm, rows, cols, value, isMatrix, this.id);
    this.all.push(p);
    return p;
  }

  /** A lookup table of `vocab` rows of length `dim`. */
  addLookupParameters(vocab: number, dim: number, init?: Init, name?: string): LookupParameter {
    checkDim("addLookupParameters: vocab", vocab);
    checkDim("addLookupParameters: dim", dim);
    checkValues(name ?? `lookup${this.all.length}`, vocab, dim);
    checkSize("addLookupParameters", vocab, dim);
    if (init !== undefined) checkInit("addLookupParameters", init);
    checkName("addLookupParameters", name);
    const index = this.all.length;
    const nm = this.uniqueName(name ?? `lookup${index}`);
    const value = new Float32Array(vocab * dim);
    this.initialise(value, index, init ?? { kind: "uniform", scale: Math.sqrt(3 / dim) }, vocab, dim);
    const p = new LookupParameter(index, nm, vocab, dim, value, this.id);
    this.all.push(p);
    return p;
  }

  get(name: string): AnyParameter {
    const p = this.all.find((q) => q.name === name);
    if (!p) throw new Error(`no parameter named '${name}' (have: ${this.all.map((q) => q.name).join(", ")})`);
    return p;
  }

  /** Total number of scalar parameters. */
  get count(): number {
    let n = 0;
    for (const p of this.all) n += p.value.length;
    return n;
  }

  zeroGradients(): void {
    for (const p of this.all) {
      if (p.kind === "lookup") p.clearTouched();
      else p.grad.fill(0);
    }
  }

  private uniqueName(name: string): string {
    if (this.names.has(name)) throw new Error(`a parameter named '${name}' already exists`);
    this.names.add(name);
    return name;
  }

  private initialise(value: Float32Array, index: number, init: Init, rows: number, cols: number): void {
    const key = deriveKey(this.seed, "init", index);
    switch (init.kind) {
      case "zero":
        return;
      case "const":
        value.fill(init.value);
        return;
      case "glorot": {
        // Glorot & Bengio: uniform in ±√(6 / (fan_in + fan_out)); a vector counts as [rows, 1]
        const s = Math.sqrt(6 / (rows + cols));
        for (let k = 0; k < value.length; k++) value[k] = (2 * randomUniform(key, k) - 1) * s;
        return;
      }
      case "uniform":
        for (let k = 0; k < value.length; k++) value[k] = (2 * randomUniform(key, k) - 1) * init.scale;
        return;
    }
  }
}

/**
 * A parameter's kind and shape without its values: what a planner reads. `Parameter` and `LookupParameter` are
 * ones, and a model can list its shapes without allocating anything (`vpps plan`).
 */
export type ParameterShape =
  | {
      readonly kind: "dense";
      readonly name: string;
      readonly rows: number;
      readonly cols: number;
      /** Declared 2-D ([rows, cols]); a vector is [rows] with cols 1. */
      readonly isMatrix: boolean;
    }
  | { readonly kind: "lookup"; readonly name: string; readonly rows: number; readonly cols: number };

/** A matrix by name and size. */
export interface MatrixShape {
  readonly name: string;
  readonly rows: number;
  readonly cols: number;
}

/**
 * The matrices VPPS keeps on chip (in registers): every dense 2-D parameter, in the collection's order. Vectors and
 * lookup tables stay in global memory: a vector is read once per use, and a lookup table's rows are gathered, not
 * multiplied. This is the one place the rule is written; the planner, `vpps plan`, the benchmarks and the tests read
 * it from here.
 */
export function onChipMatrices(params: ParameterCollection | readonly ParameterShape[]): MatrixShape[] {
  const all: readonly ParameterShape[] = params instanceof ParameterCollection ? params.all : params;
  const out: MatrixShape[] = [];
  for (const p of all) if (p.kind === "dense" && p.isMatrix) out.push({ name: p.name, rows: p.rows, cols: p.cols });
  return out;
}
