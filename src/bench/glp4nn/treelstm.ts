/**
 * The eager part of `vpps bench glp4nn`: Tree-LSTM training (forward, backward, SGD update; hidden and embedding 256,
 * the fused cell) on the eager engine with one stream and with `streams: "auto"` (GLP4NN's analyser sizing the pool
 * for the independent nodes of a level), at each batch size; the losses of both compared bit for bit, and what the
 * analyser chose and why.
 */
import { EagerEngine } from "../../engines/eager/engine.js";
import type { IntegerSolver } from "../../glp4nn/index.js";
import { ComputationGraph } from "../../graph/graph.js";
import { makeTrainer } from "../../optim/trainers.js";
import { collectGarbage, mean, median } from "../common.js";
import { benchModel } from "../models/index.js";

export interface TreeLstmPoolRow {
  batch: number;
  /** Sentences per second over all timed repeats (the same sentences for both). */
  oneStream: number;
  auto: number;
  /**
   * The median over the timed batches of (one stream's step time / auto's step time) − 1: both engines run each batch
   * one right after the other, so a host hiccup or a collection that lands on one engine's step moves one pair, not
   * the estimate (the rates are means over all steps). Positive: auto faster.
   */
  pairedGain: number;
  /** Streams the analyser chose, the pool size before the fork/join check, the launch cost it measured. */
  chosen: number;
  analysed: number;
  launchUs: number;
  /** The last line of the explanation (the choice); the whole of it in `explain`. */
  reason: string;
  explain: string;
  /** The losses of one stream and auto equal bit for bit over the timed batches. */
  identicalLosses: boolean;
}

const SIZE = { hidden: 256, embed: 256 };
/** Step pairs between two full garbage collections. */
const GC_EVERY = 16;

export async function runTreeLstmPool(o: {
  batches: readonly number[];
  sentences: number;
  dataFile?: string;
  solver: IntegerSolver;
  log: (line: string) => void;
}): Promise<TreeLstmPoolRow[]> {
  const task = benchModel("treelstm").load(o.dataFile, 4096);
  const rows: TreeLstmPoolRow[] = [];
  for (const batch of o.batches) {
    const steps = Math.max(2, Math.round(o.sentences / batch));
    const repeats = batch >= 128 ? 12 : 16;
    // Both engines live side by side and alternate step by step over the same batches (who goes first alternating
    // too), each step timed to its end (synchronized), a full garbage collection every GC_EVERY pairs; each engine's
    // rate is its total over all its steps. Timed in repeats of whole runs one after the other, the same code path
    // differed by up to 30%; in alternating repeats, medians over different trees, by ±8%.
    const open = (streams: number | "auto") => {
      const state = { explain: "" };
      // the same seeded parameters for both engines: the losses must agree bit for bit
      const net = task.net(SIZE, "fused");
      const engine = new EagerEngine(net.params, {
        streams,
        solver: o.solver,
        explain: (t) => {
          state.explain = t;
        },
      });
      const trainer = makeTrainer("sgd", { learningRate: 0.05 });
      const cg = new ComputationGraph();
      const losses: number[] = [];
      const times: number[] = [];
      let index = 0;
      const step = () => {
        cg.renew();
        const loss = net.batchLoss(cg, task.batch(batch, index++));
        losses.push(engine.forwardScalar(loss));
        engine.backward(loss);
        engine.update(trainer);
      };
      const timed = () => {
        const t0 = performance.now();
        step();
        engine.ctx.synchronize();
        times.push(performance.now() - t0);
      };
      return { engine, state, losses, times, step, timed };
    };
    const engines = [open(1), open("auto")] as const;
    let one: { sps: number; losses: number[]; explain: string; choice: EagerEngine["levelChoice"] };
    let auto: typeof one;
    let pairedGain: number;
    try {
      for (const e of engines) {
        for (let w = 0; w < 3; w++) e.step(); // warm-up; with auto, the profile and the analysis
        e.engine.ctx.synchronize();
      }
      for (let p = 0; p < repeats * steps; p++) {
        if (p % GC_EVERY === 0) collectGarbage();
        for (const e of p % 2 === 0 ? engines : [engines[1], engines[0]]) e.timed();
      }
      const result = (e: (typeof engines)[number]) => ({
        sps: (1000 * batch) / mean(e.times),
        losses: e.losses,
        explain: e.state.explain,
        choice: e.engine.levelChoice,
      });
      one = result(engines[0]);
      auto = result(engines[1]);
      pairedGain = median(engines[0].times.map((t, i) => t / engines[1].times[i]!)) - 1;
    } finally {
      for (const e of engines) e.engine.dispose();
    }
    const same =
      one.losses.length === auto.losses.length &&
      one.losses.every((v, i) => Object.is(Math.fround(v), Math.fround(auto.losses[i]!)));
    const explainLines = auto.explain.split("\n");
    const row: TreeLstmPoolRow = {
      batch,
      oneStream: one.sps,
      auto: auto.sps,
      pairedGain,
      chosen: auto.choice?.streams ?? 1,
      analysed: auto.choice?.analysed ?? 1,
      launchUs: auto.choice?.launchUs ?? 0,
      reason: explainLines.find((l) => l.startsWith("pool = ")) ?? explainLines[explainLines.length - 1] ?? "",
      explain: auto.explain,
      identicalLosses: same,
    };
    rows.push(row);
    o.log(
      `Tree-LSTM eager batch ${String(batch).padStart(3)}: 1 stream ${one.sps.toFixed(1)} sent/s, auto ` +
        `${auto.sps.toFixed(1)} sent/s, paired median ${(100 * pairedGain).toFixed(1)}% (${row.chosen} stream(s); analyser ${row.analysed}; launch ${row.launchUs.toFixed(2)} µs)` +
        `${same ? "" : "; LOSSES DIFFER"}`,
    );
  }
  return rows;
}
