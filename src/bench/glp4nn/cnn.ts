/**
 * The CNN part of `vpps bench glp4nn`: a whole training iteration of LeNet (src/models/cnn: conv 20, pool, conv 50,
 * pool, fully connected 500 and 10 over the batch's rows; Adam) on the eager engine with one stream and with `streams: "auto"`
 * (GLP4NN sizing each convolution's pool, its direct launches from dispatch threads, and a level's nodes), at each
 * batch size. The two engines live side by side and their timed repeats alternate, as the Tree-LSTM part's do; the
 * losses of both are compared bit for bit. The digits are seeded random pixels: the timing does not depend on them.
 */

import { EagerEngine } from "../../engines/eager/engine.js";
import type { IntegerSolver } from "../../glp4nn/index.js";
import { ComputationGraph } from "../../graph/graph.js";
import { type Digit, IMAGE, LenetModel } from "../../models/cnn/model.js";
import { makeTrainer } from "../../optim/trainers.js";
import { collectGarbage, mean } from "../common.js";

export interface CnnPoolRow {
  batch: number;
  /** ms per training iteration (forward, backward, update), mean over the repeats. */
  oneStreamMs: number;
  autoMs: number;
  /** one stream's ms over auto's. */
  speedup: number;
  /** The losses of one stream and auto equal bit for bit over every iteration. */
  identicalLosses: boolean;
}

const SIZES = { conv1: 20, conv2: 50, hidden: 500 };

/** `count` digits of seeded random pixels and labels (the timing does not depend on them). */
export function seededDigits(count: number, seed: number): Digit[] {
  let state = seed >>> 0 || 1;
  const next = () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return state >>> 0;
  };
  const per = IMAGE.height * IMAGE.width;
  return Array.from({ length: count }, () => {
    const pixels = new Uint8Array(per);
    for (let i = 0; i < per; i++) pixels[i] = next() & 255;
    return { pixels, label: next() % 10 };
  });
}

export function runCnnPool(o: {
  batches: readonly number[];
  /** Iterations per timed repeat. */
  steps: number;
  repeats: number;
  solver: IntegerSolver;
  log: (line: string) => void;
}): CnnPoolRow[] {
  const rows: CnnPoolRow[] = [];
  for (const batch of o.batches) {
    const digits = seededDigits(4 * batch, 7);
    const open = (streams: number | "auto") => {
      const model = new LenetModel(SIZES, 1); // the same seeded weights for both engines
      const engine = new EagerEngine(model.params, { streams, solver: o.solver });
      const trainer = makeTrainer("adam", { learningRate: 0.001 });
      const cg = new ComputationGraph();
      const losses: number[] = [];
      const times: number[] = [];
      let k = 0;
      const step = () => {
        cg.renew();
        const at = (k++ % 4) * batch;
        const loss = model.batchLoss(cg, digits.slice(at, at + batch));
        losses.push(engine.forwardScalar(loss));
        engine.backward(loss);
        engine.update(trainer);
      };
      const timed = () => {
        collectGarbage();
        const t0 = performance.now();
        for (let s = 0; s < o.steps; s++) step();
        engine.ctx.synchronize();
        times.push((performance.now() - t0) / o.steps);
      };
      return { engine, losses, times, step, timed };
    };
    const engines = [open(1), open("auto")] as const;
    try {
      for (const e of engines) {
        // warm-up; with auto, the analysis of each convolution and of the levels, and the dispatch threads' start
        for (let w = 0; w < 4; w++) e.step();
        e.engine.ctx.synchronize();
      }
      for (let r = 0; r < o.repeats; r++) {
        for (const e of r % 2 === 0 ? engines : [engines[1], engines[0]]) e.timed();
      }
      const [one, auto] = engines;
      const row: CnnPoolRow = {
        batch,
        // the same iterations on the same images for both: totals (means), see treelstm.ts
        oneStreamMs: mean(one.times),
        autoMs: mean(auto.times),
        speedup: mean(one.times) / mean(auto.times),
        identicalLosses:
          one.losses.length === auto.losses.length &&
          one.losses.every((v, i) => Object.is(Math.fround(v), Math.fround(auto.losses[i]!))),
      };
      rows.push(row);
      o.log(
        `LeNet eager batch ${String(batch).padStart(3)}: 1 stream ${row.oneStreamMs.toFixed(2)} ms/iteration, ` +
          `auto ${row.autoMs.toFixed(2)} ms (${row.speedup.toFixed(2)}×); losses ${row.identicalLosses ? "bit for bit equal" : "DIFFER"}`,
      );
    } finally {
      for (const e of engines) e.engine.dispose();
    }
  }
  return rows;
}
