/**
 * The tables of `vpps bench rnn` and `vpps plan rnn`: our persistent layers beside cuDNN (bench/pytorch/rnn.py's
 * JSON lines, read from --reference), ratios of whole layer calls, and the recurrent part's ms and TFLOP/s.
 */
import { readFileSync } from "node:fs";
import type { WeightPrecision } from "../rnn/index.js";
import { BenchError } from "./errors.js";
import type { RnnBenchRow } from "./rnn.js";

/** One line of bench/pytorch/rnn.py bench. */
export interface CudnnRow {
  readonly system: "cudnn";
  readonly cell: string;
  readonly hidden: number;
  readonly batch: number;
  readonly steps: number;
  readonly precision: "fp32" | "tf32";
  readonly forwardMs: number;
  readonly forwardBackwardMs: number;
  readonly device?: string;
}

/** Reads rnn.py's JSON lines; a line that is not one is refused with the file and line. */
export function readCudnnRows(file: string): CudnnRow[] {
  const rows: CudnnRow[] = [];
  readFileSync(file, "utf8")
    .split("\n")
    .forEach((line, i) => {
      if (line.trim() === "") return;
      let r: unknown;
      try {
        r = JSON.parse(line);
      } catch {
        throw new BenchError(`${file}:${i + 1}: not a JSON line of bench/pytorch/rnn.py`);
      }
      const row = r as Partial<CudnnRow>;
      if (row.system !== "cudnn" || typeof row.forwardMs !== "number" || typeof row.hidden !== "number") {
        throw new BenchError(`${file}:${i + 1}: expected a line of bench/pytorch/rnn.py bench (system "cudnn")`);
      }
      rows.push(row as CudnnRow);
    });
  return rows;
}

const f = (x: number | undefined, digits = 3): string => (x === undefined ? "–" : x.toFixed(digits));

/**
 * The markdown table: per (cell, hidden, batch), ours and cuDNN's ms and the ratios. `precision` (by default the
 * rows') is how our kernels stored W_hh; the title says it.
 */
export function rnnBenchMarkdown(
  device: string,
  rows: readonly RnnBenchRow[],
  cudnn: readonly CudnnRow[],
  precision: WeightPrecision = rows[0]?.precision ?? "fp32",
): string {
  const find = (r: RnnBenchRow, p: "fp32" | "tf32") =>
    cudnn.find((c) => c.cell === r.cell && c.hidden === r.hidden && c.batch === r.batch && c.precision === p);
  const out = [
    `Persistent recurrent layers vs cuDNN on ${device}: T = ${rows[0]?.steps ?? "?"}, input size = hidden, ` +
      `${precision === "fp16" ? "ours with W_hh stored as fp16 in registers (fp32 arithmetic)" : "fp32"}; ` +
      "medians of CUDA-event timings after warm-up. *rec*: the recurrent part alone (the input projection is one " +
      "GEMM done beforehand, as in the paper); *rec fwd+bwd*: the recurrent part of forward+backward (the forward and " +
      "backward recurrent kernels and the recurrent weights' gradient GEMM; the input projection and its backward " +
      "GEMMs, W_ih and dx, left out likewise); *fwd*, *fwd+bwd*: whole layer calls (projection and weight-gradient " +
      "GEMMs included), as cuDNN's are; ×: cuDNN fp32 time / ours; *layout*: CTAs per replica × replicas (each " +
      "replica runs its share of the sequences on its own copy of the weights), *cl*: CTAs per cluster forward/backward.",
    "",
    "| cell | hidden | batch | layout | rec ms | µs/step | rec TFLOP/s | rec fwd+bwd ms | fwd ms | fwd+bwd ms | cuDNN fwd | cuDNN fwd+bwd | × fwd | × fwd+bwd | cuDNN TF32 fwd / fwd+bwd |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  ];
  for (const r of rows) {
    const c = find(r, "fp32");
    const t = find(r, "tf32");
    out.push(
      `| ${r.cell}${r.path === "stepwise" ? " (stepwise: does not fit)" : ""} | ${r.hidden} | ${r.batch} | ${r.layout ? `${r.layout.ctas} × ${r.layout.replicas}${r.layout.cluster?.some((c) => c > 0) ? ` (cl ${r.layout.cluster.join("/")})` : ""}` : "–"} | ${f(r.recurrentMs)} | ${f(r.perStepUs, 2)} | ${f(r.recurrentTflops, 2)} | ${f(r.recurrentForwardBackwardMs)} | ` +
        `${f(r.forwardMs)} | ${f(r.forwardBackwardMs)} | ${f(c?.forwardMs)} | ${f(c?.forwardBackwardMs)} | ` +
        `${c && r.forwardMs ? f(c.forwardMs / r.forwardMs, 2) : "–"} | ` +
        `${c && r.forwardBackwardMs ? f(c.forwardBackwardMs / r.forwardBackwardMs, 2) : "–"} | ` +
        `${t ? `${f(t.forwardMs)} / ${f(t.forwardBackwardMs)}` : "–"} |`,
    );
  }
  return `${out.join("\n")}\n`;
}
