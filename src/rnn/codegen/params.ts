/**
 * The recurrent kernels' parameter lists, each written once as a table of C declarations (`"const float* __restrict__
 * xw"`: CUDA type, then name), grouped by the lines of the generated signature. The template renders the table into
 * its `extern "C"` signature; the launch passes a record keyed by parameter name, which `kernelArgs` puts in the
 * table's order, each value packed as the type says (pointers as 64-bit addresses, `int` as i32). A missing or
 * extra name is a TypeScript error, and is refused at run time by name as well.
 */
import { type KernelArg, karg } from "../../cuda/index.js";

/** The name a C declaration declares: its last word. */
type DeclaredName<D extends string> = D extends `${string} ${infer Rest}` ? DeclaredName<Rest> : D;

/** A kernel's parameters: the signature's lines (for the template) and the declarations in order (for the launch). */
export interface ParamTable<Name extends string> {
  readonly lines: readonly (readonly string[])[];
  readonly params: readonly { readonly name: Name; readonly pack: (v: number) => KernelArg }[];
  readonly names: ReadonlySet<string>;
}

/** What a launch passes: every parameter's value by name (device pointers and ints alike are numbers). */
export type KernelArgRecord<T> = T extends ParamTable<infer Name> ? { readonly [K in Name]: number } : never;

/** A table from the signature's lines of C declarations. */
export function paramTable<const L extends readonly (readonly string[])[]>(
  lines: L,
): ParamTable<DeclaredName<L[number][number]>> {
  const params = lines.flat().map((decl) => {
    const words = decl.split(" ");
    const name = words.at(-1) as DeclaredName<L[number][number]>;
    const type = words.slice(0, -1).join(" ");
    const pack = type.includes("*") ? karg.ptr : type === "int" ? karg.i32 : type === "float" ? karg.f32 : undefined;
    if (pack === undefined) throw new Error(`paramTable: parameter '${name}' has type '${type}', not packed`);
    return { name, pack };
  });
  return { lines, params, names: new Set(params.map((p) => p.name)) };
}

/** The parameter list of a signature, one table line a line, four spaces in (the text ends before its ")"). */
export function renderParams(table: ParamTable<string>): string {
  return table.lines.map((l) => `    ${l.join(", ")}`).join(",\n");
}

/** A launch's arguments in the table's order; refuses a missing or unknown name. */
export function kernelArgs<T extends ParamTable<string>>(
  table: T,
  values: KernelArgRecord<T>,
  kernel: string,
): KernelArg[] {
  const byName = values as Readonly<Record<string, number>>;
  for (const name of Object.keys(byName)) {
    if (!table.names.has(name)) throw new Error(`${kernel}: no parameter '${name}'`);
  }
  return table.params.map((p) => {
    const v = byName[p.name];
    if (v === undefined) throw new Error(`${kernel}: parameter '${p.name}' has no value`);
    return p.pack(v);
  });
}

/** The persistent forward kernel (rnn_forward, dense-kernels.ts). */
export const PERSISTENT_FORWARD_PARAMS = paramTable([
  ["const float* w", "const float* __restrict__ xw", "const float* __restrict__ bhn"],
  ["const float* __restrict__ h0", "const float* __restrict__ c0", "float* y", "int ldy", "float* hn", "float* cn"],
  ["float* saved", "int train", "const int* __restrict__ batch_sizes", "const int* __restrict__ offsets", "int steps"],
  ["int total", "int reverse", "int bcap", "int lb", "int* status", "int mc", "int nrep", "int pipe"],
]);

/** The persistent backward kernel (rnn_backward, dense-kernels.ts). */
export const PERSISTENT_BACKWARD_PARAMS = paramTable([
  ["const float* w", "const float* __restrict__ saved", "const float* __restrict__ y", "int ldy"],
  ["const float* __restrict__ c0", "const float* __restrict__ dy", "int lddy"],
  ["const float* __restrict__ dhn", "const float* __restrict__ dcn", "float* dpre_h", "float* dpre_x", "float* dh0"],
  ["float* dc0", "const int* __restrict__ batch_sizes", "const int* __restrict__ offsets", "int steps", "int total"],
  ["int reverse", "int bcap", "int lb", "int* status", "int mc", "int nrep", "int pipe"],
]);

/** The stepwise path's forward element-wise kernel (rnn_step_forward, stepwise.ts). */
export const STEPWISE_FORWARD_PARAMS = paramTable([
  ["const float* __restrict__ xw", "const float* __restrict__ hw0", "const float* __restrict__ bhn"],
  [
    "const float* __restrict__ h0",
    "const float* __restrict__ c0",
    "float* y",
    "int ldy",
    "float* hn",
    "float* cn",
    "float* saved",
  ],
  ["int total", "int nb", "int off", "int nprev", "int offp", "int nnext"],
]);

/** The stepwise path's backward element-wise kernel (rnn_step_backward, stepwise.ts). */
export const STEPWISE_BACKWARD_PARAMS = paramTable([
  ["const float* __restrict__ saved", "const float* __restrict__ y", "int ldy", "const float* __restrict__ c0"],
  ["const float* __restrict__ dy", "int lddy", "const float* __restrict__ dhn", "const float* __restrict__ dcn"],
  [
    "const float* __restrict__ rec",
    "float* dpre_h",
    "float* dpre_x",
    "float* dh0",
    "float* dc0",
    "float* carry",
    "int total",
  ],
  ["int B", "int t", "int nb", "int off", "int np", "int has_prev_all", "int prev_rows", "int prev_off"],
]);

/**
 * The sparse persistent forward kernel (rnn_sparse_forward, sparse-forward.ts): the pair arrays (sparse-pairs.ts;
 * coherent loads, so not __restrict__), the dense forward's buffers, the exchange buffer of the steps' vectors
 * (sparse-product.ts: [steps][tiles][K·BT] in the layout of the tile's vector in shared memory, −0.0 before the
 * launch), the replicas the launch runs, and the barrier build's step counter.
 */
export const SPARSE_FORWARD_PARAMS = paramTable([
  [
    "const float* values",
    "const u32* indices",
    "const int* __restrict__ rowmap",
    "const float* __restrict__ xw",
    "const float* __restrict__ bhn",
  ],
  ["const float* __restrict__ h0", "const float* __restrict__ c0", "float* y", "int ldy", "float* hn", "float* cn"],
  ["float* saved", "int train", "const int* __restrict__ batch_sizes", "const int* __restrict__ offsets", "int steps"],
  ["int total", "int reverse", "float* xh", "int tiles", "int nrep", "int* status", "u32* bar"],
]);

/**
 * The sparse persistent backward kernel (rnn_sparse_backward, sparse-backward.ts): the pairs of W_hhᵀ, the dense
 * backward's buffers, the carries between steps in global memory [2, B, H] (LSTM dc, GRU dh ⊙ z), the exchange buffer
 * of the steps' gate gradients (as the forward's), the replicas, the step counter.
 */
export const SPARSE_BACKWARD_PARAMS = paramTable([
  [
    "const float* values",
    "const u32* indices",
    "const int* __restrict__ rowmap",
    "const float* __restrict__ saved",
    "const float* __restrict__ y",
  ],
  ["int ldy", "const float* __restrict__ c0", "const float* __restrict__ dy", "int lddy"],
  ["const float* __restrict__ dhn", "const float* __restrict__ dcn", "float* dpre_h", "float* dpre_x", "float* dh0"],
  ["float* dc0", "float* carry", "const int* __restrict__ batch_sizes", "const int* __restrict__ offsets", "int steps"],
  ["int total", "int reverse", "float* xh", "int tiles", "int nrep", "int* status", "u32* bar"],
]);
