import { dirname } from "node:path";
import { CpuEngine } from "../src/engines/cpu.js";
import { ComputationGraph, type Expression } from "../src/graph/graph.js";
import type { ParameterCollection } from "../src/model/parameters.js";
import { RunDir } from "../src/train/run-dir.js";

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

/**
 * Runs `fn` with `dir` opened as `vpps train` opens a run directory (RunDir.open, checked for a run other than the
 * one `resume` continues, closed after); undefined: no directory.
 */
export function inRunDir<T>(
  dir: string | undefined,
  run: { model: string; resume?: { checkpoint: string }; note?: (line: string) => void },
  fn: (runDir: RunDir | undefined) => T,
): T {
  if (dir === undefined) return fn(undefined);
  const runDir = RunDir.open(dir, run.note ? { note: run.note } : {});
  try {
    runDir.checkOtherRun({
      model: run.model,
      ...(run.resume ? { resumeDir: dirname(run.resume.checkpoint) } : {}),
      force: false,
    });
    return fn(runDir);
  } finally {
    runDir.close();
  }
}
