/**
 * What a kernel template gives a cell's pointwise math (cells/*.ts) to render into: a "site". The persistent kernels
 * (dense-kernels.ts) and the stepwise element-wise kernels (stepwise.ts) run the same math on the same buffers
 * (`saved`, gate order, packed rows) but read a gate's pre-activation, keep a step's state and lay out their lines
 * differently; a cell writes its math once against these interfaces and each template supplies its own site.
 *
 * Names a cell may use directly, because every kernel defines them: `h` (the new hidden value, declared by the
 * template), `hprev`, `row` (the packed row), `dh` (backward: the gradient reaching h), `ci` ((sequence, unit) index of
 * the [B, H] buffers), `has_prev`, `from_next`, the saved buffers `sgates`, `sstate`, `shprev`, and the kernel
 * arguments `y`, `ldy`, `bhn`, `c0`, `dc0`, `dpre_x`.
 */

/** One `const float name = value;` of a cell's math; `load`: a read of memory (the persistent backward's prefetch). */
export interface Decl {
  readonly name: string;
  readonly value: string;
  readonly load: boolean;
}

/** A value the cell computes. */
export const value = (name: string, v: string): Decl => ({ name, value: v, load: false });
/** A value the cell reads from memory. */
export const load = (name: string, v: string): Decl => ({ name, value: v, load: true });

/** A line the persistent backward issues before its wait for the other CTAs (a read of memory). */
export interface Fetch {
  readonly fetch: string;
}

/** A line of a cell's CUDA, without the template's indentation (nested lines carry their own two spaces). */
export type Line = string | Fetch;

export const textOf = (l: Line): string => (typeof l === "string" ? l : l.fetch);

/** What both directions' sites give a cell. */
interface Site {
  /** The hidden unit's variable ("unit" in the persistent kernels, "u" in the stepwise). */
  readonly unit: string;
  /** Declarations, laid out as the kernel does (the persistent kernels one a line, the stepwise two). */
  declare(...decls: Decl[]): Line[];
  /** The cell's state of the step before (a cell with a CarriedState only). */
  readonly prevState: string;
}

/** Where the forward math of a step runs. */
export interface ForwardSite extends Site {
  /** The pre-activation of gate g: its recurrent share plus its input projection. */
  pre(g: number): string;
  /** Gate g's input projection (x·W_ihᵀ + biases) alone. */
  x(g: number): string;
  /** Gate g's recurrent share (W_hh h(t−1)) alone. */
  rec(g: number): string;
  /** Keeps the state where the next step of this thread reads it (the persistent kernels: shared memory). */
  keep(state: string): Line[];
  /** Saves the gates' values and the state for the backward (the persistent forward: when training). */
  save(gates: readonly string[], state: string): Line[];
}

/** Where the backward math of a step runs: `dh` is known, the gate gradients go out. */
export interface BackwardSite extends Site {
  /** Reads the gates the forward saved (as variables of the same names). */
  savedGates(gates: readonly string[]): Line[];
  /** The outer gradient of the state's last value (a cell with a CarriedState only). */
  readonly lastGrad: string;
  /** The gradient a cell hands from one step to the one before besides dh·W_hh (LSTM "c": dc; GRU "h": dh ⊙ z). */
  carry(which: "c" | "h"): string;
  /** Writes the recurrent pre-activations' gradients (dpre_h, which the step before reads), gate by gate. */
  gateGrads(values: readonly string[]): Line[];
  /** Plain stores, laid out as the kernel does. */
  stores(lines: readonly string[]): Line[];
}

/** A state a cell carries from step to step beside h (LSTM's memory c), and the kernel arguments that hold it. */
export interface CarriedState {
  /** Its variable in the math. */
  readonly name: string;
  /** The arguments of its initial value, its last value and the last value's outer gradient ([B, H] each). */
  readonly initial: string;
  readonly last: string;
  readonly lastGrad: string;
}

/** A gate's offset in a row of G·H values: 0, H, 2 * H, … */
export const gateOffset = (g: number): string => (g === 0 ? "0" : g === 1 ? "H" : `${g} * H`);

/** `const float a = …, b = …;` lines of at most `perLine` declarations each, balanced (4 at most 3 a line: 2 + 2). */
export function declLines(decls: readonly Decl[], perLine: number): string[] {
  const lines = Math.ceil(decls.length / perLine);
  const each = Math.ceil(decls.length / lines);
  const out: string[] = [];
  for (let i = 0; i < decls.length; i += each) {
    out.push(
      `const float ${decls
        .slice(i, i + each)
        .map((d) => `${d.name} = ${d.value}`)
        .join(", ")};`,
    );
  }
  return out;
}

/** Statements on one line where it fits the 120 columns at `indent`, else one a line. */
export function packed(lines: readonly string[], indent: number): string[] {
  const one = lines.join(" ");
  return indent + one.length <= 120 ? [one] : [...lines];
}

/** Lines with the template's indentation. */
export const indented = (lines: readonly Line[], spaces: number): string =>
  lines.map((l) => `${" ".repeat(spaces)}${textOf(l)}`).join("\n");
