/**
 * `vpps bench vpps gap`: GPU time between VPPS kernels. One scheduled batch of 1, 8, 32 and 128 SST trees
 * (Tree-LSTM hidden 256, cta1 rpw2, no transposed copies) submitted back to back through the runtime, without host
 * scheduling in between; wall time per batch after a synchronize, against the kernel's CUDA-event time. The
 * difference is what the stream does besides the kernel (copies, memsets, read-backs, launch gaps). Three rounds per
 * size. It reaches into the engine's runtime (private API), as a measurement may. Prints only.
 */
import { Vocabulary } from "../../data/vocab.js";
import { Vpps } from "../../engines/vpps/index.js";
import { ComputationGraph } from "../../graph/graph.js";
import { TreeLstmModel } from "../../models/treelstm/model.js";
import { requireGpu } from "../device.js";
import { batchAt, loadBenchTrees } from "../trees.js";

export async function runVppsGap(o: { dataFile?: string }): Promise<number> {
  requireGpu("vpps bench vpps gap");
  const { trees } = loadBenchTrees(o.dataFile, 4096);
  const vocab = Vocabulary.fromTrees(trees);
  const model = new TreeLstmModel({ vocabSize: vocab.size, embed: 256, hidden: 256 });
  const vpps = await Vpps.create(model.params, {
    variants: { rowsPerWarp: 2, ctasPerSm: 1 },
    host: { scheduleWorkers: 0 },
    cacheDir: null,
    instrument: { timing: true },
  });
  // biome-ignore lint: probe
  const V = vpps as any;
  try {
    for (const B of [1, 8, 32, 128]) {
      const cg = new ComputationGraph();
      const loss = model.buildBatchLoss(cg, batchAt(trees, B, 3), vocab);
      for (let i = 0; i < 5; i++) vpps.fb(cg, loss);
      vpps.latestLossSync();
      const rt = V.runtime;
      const { variant, schedule } = V.launcher.last;
      const inputs = cg.inputData.subarray(0, cg.inputSize);
      const res: string[] = [];
      for (let rep = 0; rep < 3; rep++) {
        // untimed back to back
        const N = B >= 32 ? 60 : 300;
        rt.drain();
        let t0 = performance.now();
        let host = 0;
        for (let i = 0; i < N; i++) {
          const a = performance.now();
          rt.submit(variant, schedule, inputs, 0, 5, false);
          host += performance.now() - a;
        }
        rt.drain();
        const wall = (performance.now() - t0) / N;
        // timed: kernel events
        const before = V.stats.kernelMs;
        const nb = V.stats.timedBatches;
        for (let i = 0; i < N; i++) rt.submit(variant, schedule, inputs, 0, 5, true);
        rt.drain();
        const k = (V.stats.kernelMs - before) / (V.stats.timedBatches - nb);
        // one submit into an idle pipeline: host cost
        t0 = performance.now();
        rt.submit(variant, schedule, inputs, 0, 5, false);
        const one = performance.now() - t0;
        rt.drain();
        res.push(
          `wall ${(wall * 1000).toFixed(1)} us, kernel ${(k * 1000).toFixed(1)} us, gap ${((wall - k) * 1000).toFixed(1)} us, submit host ${((host / N) * 1000).toFixed(1)} us (idle ${(one * 1000).toFixed(1)})`,
        );
      }
      console.log(
        `b${B} (${schedule.script.length} words, ${schedule.barriers} barriers, pool ${schedule.layout.poolFloats - schedule.layout.gradStart} grad floats):\n  ${res.join("\n  ")}`,
      );
    }
  } finally {
    vpps.dispose();
  }
  return 0;
}
