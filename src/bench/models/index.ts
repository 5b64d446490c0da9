/** The models `vpps bench <model>` runs the throughput suite on. */
import type { BenchModel } from "../model.js";
import { treeLstmBench } from "./treelstm.js";

export const BENCH_MODELS: readonly BenchModel<unknown>[] = [treeLstmBench as BenchModel<unknown>];
