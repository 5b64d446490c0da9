// Writes the generated CUDA of a (cell, hidden) layer's two kernels into a folder, for nvcc/cuobjdump inspection:
// `npx tsx bench/lab/rnn/source.ts CELL HIDDEN [DIR] [fp16]` (fp16: the plan and kernels of fp16 weight storage).
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { H100_SXM } from "../../../src/cuda/hw/device-model.js";
import { backwardKernelSource, forwardKernelSource } from "../../../src/rnn/codegen/index.js";
import { planRnnLayer, type RnnCellName, type WeightPrecision } from "../../../src/rnn/plan/index.js";

const [cell, hidden, dir] = [process.argv[2] as RnnCellName, Number(process.argv[3]), process.argv[4] ?? "."];
const precisionArg = process.argv[5] ?? "fp32";
if (precisionArg !== "fp16" && precisionArg !== "fp32") {
  throw new Error(`bench/lab/rnn/source.ts: the 4th argument is fp16 or fp32; got '${precisionArg}'`);
}
const precision: WeightPrecision = precisionArg;
const plan = planRnnLayer(cell, hidden, H100_SXM, precision);
if (!plan.fits) throw new Error(plan.reason);
// fp32 files keep their names; fp16 ones say so
const name = precision === "fp16" ? `${cell}-${hidden}-fp16` : `${cell}-${hidden}`;
writeFileSync(join(dir, `${name}-forward.cu`), forwardKernelSource(plan.forward));
writeFileSync(join(dir, `${name}-forward-pipelined.cu`), forwardKernelSource(plan.forward, { pipelinedForward: true }));
writeFileSync(join(dir, `${name}-backward.cu`), backwardKernelSource(plan.backward));
// the builds used by launches of one replica over more than two tiles
writeFileSync(
  join(dir, `${name}-backward-deferred.cu`),
  backwardKernelSource(plan.backward, { deferredBackward: true }),
);
