/**
 * A model's parameter shapes as one table, by name in creation order: `[rows, cols]` a matrix, `[n]` a vector, and
 * one lookup table. The model's constructor creates its parameters from the table and `parameterShapes` lists them
 * from the same table without allocating (`vpps plan` plans sizes far too large to allocate).
 */
import type { ParameterShape } from "../../model/parameters.js";

/** A dense parameter's shape ([rows, cols] or [n]), or a lookup table's [rows, dim]. */
export type Dims = readonly [number] | readonly [number, number];

/** The shapes of a size table; `lookup` names its lookup table (every other entry is dense). */
export function shapesOf(sizes: Readonly<Record<string, Dims>>, lookup = "E"): ParameterShape[] {
  return Object.entries(sizes).map(
    ([name, dims]): ParameterShape =>
      name === lookup
        ? { kind: "lookup", name, rows: dims[0], cols: dims[1]! }
        : { kind: "dense", name, rows: dims[0], cols: dims[1] ?? 1, isMatrix: dims.length === 2 },
  );
}
