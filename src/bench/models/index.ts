/** The models `vpps bench <model>` runs the throughput suite on: every model of the registry. */
import { MODELS } from "../../models/registry.js";
import type { BenchModel } from "../model.js";
import { type BenchExtras, benchModelOf } from "./from-task.js";
import { sstBenchExtras } from "./sst.js";
import { taggerBench } from "./taggers.js";
import { TREE_LSTM_BENCH } from "./treelstm.js";

/** Bench extras by model name (a model without any runs at its default size, in its default formulation). */
const EXTRAS: Readonly<Record<string, BenchExtras>> = {
  treelstm: TREE_LSTM_BENCH,
  bilstm: taggerBench("BiLSTM tagger"),
  "bilstm-char": taggerBench("BiLSTM tagger with characters"),
  "td-rnn": sstBenchExtras("TD-RNN"),
  "td-lstm": sstBenchExtras("TD-LSTM"),
  rvnn: sstBenchExtras("RvNN"),
};

export const BENCH_MODELS: readonly BenchModel<unknown>[] = MODELS.map((task) => benchModelOf(task, EXTRAS[task.name]));

/** The bench model named `name` (a registered model). */
export function benchModel(name: string): BenchModel<unknown> {
  const m = BENCH_MODELS.find((b) => b.name === name);
  if (!m)
    throw new Error(`bench: unknown model '${name}'; choose one of ${BENCH_MODELS.map((b) => b.name).join(", ")}`);
  return m;
}
