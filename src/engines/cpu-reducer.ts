// Data-parallel training on the host (the CPU engines): before an update, the parameters' gradients are summed over
// the process group. Lookup tables are updated in their touched rows only, so the ranks first agree on the union of
// the rows any rank touched; every rank then lists them in the same (ascending) order, so that the global norm for
// clipping — and with it every update — is computed identically everywhere and the parameters stay equal.

import type { ParameterCollection } from "../model/parameters.js";
import type { GradientReducer } from "./data-parallel.js";

/** Sums `params`' gradients (dense: whole; lookup tables: the union of the ranks' touched rows) over `reducer`. */
export function reduceHostGradients(params: ParameterCollection, reducer: GradientReducer): void {
  let total = 0;
  for (const p of params.all) {
    if (p.kind === "dense") {
      total += p.grad.length;
      continue;
    }
    const rows = new Set<number>();
    for (const part of reducer.allGatherHost(Int32Array.from(p.touchedRows))) for (const r of part) rows.add(r);
    const union = [...rows].sort((a, b) => a - b);
    for (const r of union) p.touch(r);
    p.touchedRows = union;
    total += union.length * p.cols;
  }
  // one all-reduce for everything: the collective's round trip, not its bytes, dominates on small models
  const packed = new Float32Array(total);
  let at = 0;
  for (const p of params.all) {
    if (p.kind === "dense") {
      packed.set(p.grad, at);
      at += p.grad.length;
    } else {
      for (const r of p.touchedRows) {
        packed.set(p.grad.subarray(r * p.cols, (r + 1) * p.cols), at);
        at += p.cols;
      }
    }
  }
  reducer.allReduceHost(packed);
  at = 0;
  for (const p of params.all) {
    if (p.kind === "dense") {
      p.grad.set(packed.subarray(at, at + p.grad.length));
      at += p.grad.length;
    } else {
      for (const r of p.touchedRows) {
        p.grad.set(packed.subarray(at, at + p.cols), r * p.cols);
        at += p.cols;
      }
    }
  }
}
