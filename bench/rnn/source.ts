// Writes the generated CUDA of a (cell, hidden) layer's two kernels into a folder, for nvcc/cuobjdump inspection.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { H100_SXM } from "../../src/cuda/hw/device-model.js";
import { backwardKernelSource, forwardKernelSource } from "../../src/rnn/gpu/kernel-source.js";
import { planRnnLayer, type RnnCellName } from "../../src/rnn/plan.js";

const [cell, hidden, dir] = [process.argv[2] as RnnCellName, Number(process.argv[3]), process.argv[4] ?? "."];
const plan = planRnnLayer(cell, hidden, H100_SXM);
if (!plan.fits) throw new Error(plan.reason);
writeFileSync(join(dir, `${cell}-${hidden}-forward.cu`), forwardKernelSource(plan.forward));
writeFileSync(
  join(dir, `${cell}-${hidden}-forward-pipelined.cu`),
  forwardKernelSource(plan.forward, { pipelinedForward: true }),
);
writeFileSync(join(dir, `${cell}-${hidden}-backward.cu`), backwardKernelSource(plan.backward));
// the builds used by launches of one replica over more than two tiles
writeFileSync(
  join(dir, `${cell}-${hidden}-backward-deferred.cu`),
  backwardKernelSource(plan.backward, { deferredBackward: true }),
);
