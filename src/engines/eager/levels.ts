// The levels of a chunk of the graph: node i's level is one more than the highest level among its arguments in the
// chunk (arguments computed by an earlier chunk are done), so the nodes of a level depend on none of each other and
// may run at once — on the lanes of GLP4NN's stream pool (engine.ts, `streams`). Pure host code over the graph,
// tested without a GPU.

import type { ComputationGraph } from "../../graph/graph.js";

/** Nodes [from, to] grouped by level, each level in node order; only nodes for which `works` holds are listed. */
export interface ChunkLevels {
  /** Node ids, level after level. */
  readonly nodes: Int32Array;
  /** Level k is nodes[starts[k] … starts[k + 1]). */
  readonly starts: Int32Array;
  readonly count: number;
}

/** Groups nodes [from, to] of g by level (see the top of this file). */
export function chunkLevels(
  g: ComputationGraph,
  from: number,
  to: number,
  works: (op: number) => boolean = () => true,
): ChunkLevels {
  const n = to - from + 1;
  const level = new Int32Array(Math.max(0, n));
  let top = -1;
  for (let i = from; i <= to; i++) {
    let l = 0;
    const s = g.argStart[i]!;
    for (let a = 0; a < g.argCount[i]!; a++) {
      const arg = g.args[s + a]!;
      if (arg >= from) l = Math.max(l, level[arg - from]! + 1);
    }
    level[i - from] = l;
    if (works(g.op[i]!) && l > top) top = l;
  }
  const counts = new Int32Array(top + 2);
  for (let i = from; i <= to; i++) if (works(g.op[i]!)) counts[level[i - from]! + 1]!++;
  const starts = new Int32Array(top + 2);
  for (let k = 1; k < top + 2; k++) starts[k] = starts[k - 1]! + counts[k]!;
  const fill = starts.slice(0, Math.max(0, top + 1));
  const nodes = new Int32Array(top < 0 ? 0 : starts[top + 1]!);
  for (let i = from; i <= to; i++) if (works(g.op[i]!)) nodes[fill[level[i - from]!]!++] = i;
  return { nodes, starts, count: top + 1 };
}
