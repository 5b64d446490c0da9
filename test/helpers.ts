import { CpuEngine } from "../src/engines/cpu.js";
import { ComputationGraph, type Expression } from "../src/graph/graph.js";
import type { ParameterCollection } from "../src/model/parameters.js";

/** Builds a scalar loss from the collection's parameters in a fresh graph. */
export type LossBuilder = (cg: ComputationGraph) => Expression;

export interface GradMismatch {
  param: string;
  index: number;
  analytic: number;
  numeric: number;
}

/**
 * Compares the f64 CPU engine's gradients of every parameter element with float64 central finite differences.
 * Parameters are stored in float32, so the perturbed points are rounded to float32 and the difference quotient
 * divides by the actual (rounded) step.
 */
export function gradientCheck(
  params: ParameterCollection,
  build: LossBuilder,
  opts: { h?: number; atol?: number; rtol?: number } = {},
): { checked: number; mismatches: GradMismatch[] } {
  const h = opts.h ?? 1e-3;
  const atol = opts.atol ?? 1e-6;
  const rtol = opts.rtol ?? 1e-4;
  const engine = new CpuEngine(params, { precision: "f64" });
  const cg = new ComputationGraph();
  const lossAt = (): number => {
    cg.renew();
    const loss = build(cg);
    return engine.valueExact(loss)[0]!;
  };
  params.zeroGradients();
  cg.renew();
  const loss = build(cg);
  engine.backward(loss);
  const analytic = params.all.map((p) => Float64Array.from(p.grad));
  params.zeroGradients();
  const mismatches: GradMismatch[] = [];
  let checked = 0;
  params.all.forEach((p, pi) => {
    for (let k = 0; k < p.value.length; k++) {
      const x = p.value[k]!;
      const xp = Math.fround(x + h);
      const xm = Math.fround(x - h);
      p.value[k] = xp;
      const fp = lossAt();
      p.value[k] = xm;
      const fm = lossAt();
      p.value[k] = x;
      const numeric = (fp - fm) / (xp - xm);
      const a = analytic[pi]![k]!;
      checked++;
      if (Math.abs(a - numeric) > atol + rtol * Math.abs(numeric)) {
        mismatches.push({ param: p.name, index: k, analytic: a, numeric });
      }
    }
  });
  return { checked, mismatches };
}
