// The integer-program solver: HiGHS (MIT; the `highs` package, compiled to WebAssembly, no native build). Loaded
// once per process, asynchronously; a solve is synchronous and builds a fresh native model each time.

import highsModule, { type Highs } from "highs";

type Loader = typeof highsModule.default;
// The package's one declaration file describes its CommonJS build, whose default export TypeScript (NodeNext)
// types as the module object; Node imports the ES build (`exports.import`), whose default export is the loader.
const highsLoader: Loader =
  typeof highsModule === "function" ? (highsModule as unknown as Loader) : highsModule.default;

/** A maximisation over integer variables: `objective · x` subject to `rows`, with `lower ≤ x ≤ upper`. */
export interface IntegerProgram {
  /** Variable names (letters, digits, underscores). */
  readonly variables: readonly string[];
  readonly objective: readonly number[];
  readonly rows: readonly {
    readonly name: string;
    readonly coefficients: readonly number[];
    readonly sense: "<=" | ">=";
    readonly bound: number;
  }[];
  readonly lower: readonly number[];
  readonly upper: readonly number[];
}

export interface IntegerSolution {
  readonly values: readonly number[];
  readonly objective: number;
}

/** The program in CPLEX LP format (what HiGHS reads; also printed by `--explain` on request). */
export function lpText(p: IntegerProgram): string {
  const sum = (c: readonly number[]) => {
    const terms = c.map((a, k) => (a === 0 ? "" : `${a < 0 ? "- " : "+ "}${Math.abs(a)} ${p.variables[k]}`));
    const s = terms.filter((t) => t !== "").join(" ");
    return s === "" ? `0 ${p.variables[0]}` : s.replace(/^\+ /, "");
  };
  const lines = ["Maximize", ` obj: ${sum(p.objective)}`, "Subject To"];
  for (const r of p.rows) lines.push(` ${r.name}: ${sum(r.coefficients)} ${r.sense} ${r.bound}`);
  lines.push("Bounds");
  p.variables.forEach((v, k) => {
    lines.push(` ${p.lower[k]} <= ${v} <= ${p.upper[k]}`);
  });
  lines.push("General", ` ${p.variables.join(" ")}`, "End");
  return lines.join("\n");
}

/** Solves integer programs; see `loadSolver`. */
export class IntegerSolver {
  constructor(private readonly highs: Highs) {}

  /** The optimum; throws naming HiGHS's status (and the program) when there is none. */
  maximise(p: IntegerProgram): IntegerSolution {
    const n = p.variables.length;
    for (const [what, a] of [
      ["objective", p.objective],
      ["lower", p.lower],
      ["upper", p.upper],
    ] as const) {
      if (a.length !== n) throw new RangeError(`IntegerSolver: ${n} variables but ${a.length} ${what} entries`);
    }
    const text = lpText(p);
    const r = this.highs.solve(text, { output_flag: false });
    if (r.Status !== "Optimal") {
      throw new Error(`IntegerSolver: HiGHS found no optimum (status '${r.Status}') for the program:\n${text}`);
    }
    const values = p.variables.map((v) => {
      const col = r.Columns[v] as { Primal?: number } | undefined;
      // an integer variable comes back as a double within HiGHS's feasibility tolerance of an integer
      return Math.round(col?.Primal ?? 0) || 0; // no −0
    });
    return { values, objective: r.ObjectiveValue };
  }
}

let loading: Promise<IntegerSolver> | undefined;

/** The process-wide solver (HiGHS's WebAssembly module is instantiated on the first call). */
export function loadSolver(): Promise<IntegerSolver> {
  if (loading === undefined) loading = highsLoader().then((h: Highs) => new IntegerSolver(h));
  return loading;
}
