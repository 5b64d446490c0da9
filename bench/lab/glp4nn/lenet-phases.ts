/**
 * Where a LeNet training iteration's host time goes on the eager engine, one stream against `--streams auto` (issue
 * 19: beside its convolutions, `auto`'s iteration spent about 0.7 ms more than one stream's). Per iteration, the host
 * time of each phase — building the graph, the forward up to the loss (which waits for the GPU: the loss is read),
 * issuing the backward, issuing the update — and the GPU time of the iteration from events on the engine's stream.
 * The same seeded digits and model as `vpps bench glp4nn --cnn-batches` (src/bench/glp4nn/cnn.ts). Run each setting
 * in its own process, under `node --cpu-prof` for the functions:
 *
 *   node --import tsx bench/lab/glp4nn/lenet-phases.ts <1|auto> [batch 64] [steps 200]
 */

import { seededDigits } from "../../../src/bench/glp4nn/cnn.js";
import { CudaEvent } from "../../../src/cuda/index.js";
import { EagerEngine, parseStreams } from "../../../src/engines/eager/engine.js";
import { loadSolver } from "../../../src/glp4nn/index.js";
import { ComputationGraph } from "../../../src/graph/graph.js";
import { LenetModel } from "../../../src/models/cnn/model.js";
import { makeTrainer } from "../../../src/optim/trainers.js";

const streams = parseStreams(process.argv[2] ?? "1");
const batch = Number(process.argv[3] ?? 64);
const steps = Number(process.argv[4] ?? 200);

const solver = await loadSolver();
const digits = seededDigits(4 * batch, 7);
const model = new LenetModel({ conv1: 20, conv2: 50, hidden: 500 }, 1);
const engine = new EagerEngine(model.params, { streams, solver });
const trainer = makeTrainer("adam", { learningRate: 0.001 });
const cg = new ComputationGraph();
const phases = { build: [] as number[], forward: [] as number[], backward: [] as number[], update: [] as number[] };
const gpu: number[] = [];
const total: number[] = [];
const [e0, e1] = [CudaEvent.create(), CudaEvent.create()];
let k = 0;
const step = (record: boolean) => {
  const t0 = performance.now();
  cg.renew();
  const at = (k++ % 4) * batch;
  const loss = model.batchLoss(cg, digits.slice(at, at + batch));
  const t1 = performance.now();
  if (record) e0.record(engine.ctx.stream);
  engine.forwardScalar(loss);
  const t2 = performance.now();
  engine.backward(loss);
  const t3 = performance.now();
  engine.update(trainer);
  if (record) e1.record(engine.ctx.stream);
  const t4 = performance.now();
  if (record) {
    phases.build.push(t1 - t0);
    phases.forward.push(t2 - t1);
    phases.backward.push(t3 - t2);
    phases.update.push(t4 - t3);
  }
  return t4 - t0;
};
for (let w = 0; w < 20; w++) step(false);
engine.ctx.synchronize();
for (let s = 0; s < steps; s++) {
  const host = step(true);
  // the next iteration's build overlaps this one's backward and update on the GPU, as in training; the GPU time of
  // the iteration is read after the next forward has synchronized
  e1.synchronize();
  gpu.push(CudaEvent.elapsedMs(e0, e1));
  total.push(host);
}
const median = (a: number[]) => [...a].sort((x, y) => x - y)[a.length >> 1]!;
const fmt = (a: number[]) => `${median(a).toFixed(3)} ms`;
console.log(
  `LeNet batch ${batch}, streams ${streams}, ${steps} iterations (medians): host build ${fmt(phases.build)}, ` +
    `forward+loss ${fmt(phases.forward)}, backward issue ${fmt(phases.backward)}, update issue ${fmt(phases.update)}, ` +
    `host total ${fmt(total)}; GPU (events, forward start to update end) ${fmt(gpu)}`,
);
e0.destroy();
e1.destroy();
engine.dispose();
