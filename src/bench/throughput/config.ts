/**
 * What the throughput suite runs: its options, and the configurations they make — one per model size, with its
 * engines and batch sizes.
 */
import type { VariantInfo } from "../../engines/vpps/index.js";
import type { FirstLoss } from "../first-loss.js";
import type { MemoryRecord } from "../memory.js";
import type { BenchModel } from "../model.js";
import type { VppsJit } from "../vpps-timing.js";
import { type EngineSpec, sweepEngineIds } from "./engines.js";

export const DEFAULT_BATCHES = [1, 8, 32, 128];
const QUICK_BATCHES = [1, 8, 128];
/** Batch sizes of the sweep's other model sizes (those of the main list, when any). */
const SWEEP_BATCHES = [1, 8, 128];
export const LOSS_TOLERANCE = 1e-3;

export interface ThroughputOptions {
  /** The model's data file; its default data when absent. */
  dataFile?: string;
  /** Engine ids (engines.ts); every engine when absent. */
  engines?: readonly string[];
  batches?: readonly number[];
  /** Hidden sizes: the first is the main one; the model's sizes when absent. */
  hidden?: readonly number[];
  /** Sentences per timed repeat of the engines that wait for each batch (64 on the GPU, 16 on the CPU). */
  sentences?: number;
  /** VPPS: sentences timed per batch size (4096), and trained untimed before them (2048). */
  vppsSentences?: number;
  vppsWarm?: number;
  /** Batch sizes 1, 8, 128, fewer sentences and repeats; no files unless `out` is given. */
  quick: boolean;
  /** VPPS schedule worker threads; the engine's default when absent. */
  workers?: number;
  /** VPPS kernel cache folder; a new empty one (a real first JIT) when absent. */
  cacheDir?: string;
  /** The results folder; bench/results/<device>/ when absent. */
  out?: string;
  /** The command line, for the result file. */
  command: string;
  /**
   * Also time the PyTorch reference (bench/pytorch/<model>.py) at the main size, when python3 with torch is here
   * (reference.ts); otherwise one line says why it is skipped.
   */
  reference?: boolean;
  /**
   * Values of the model's choices (`{ rnn: "persistent" }`) the engines' networks are built with; the PyTorch
   * reference's network (the weights it starts from, and the CPU loss it is checked against) is built without them:
   * the script reads the default formulation's weights.
   */
  modelOptions?: Readonly<Record<string, string | number>>;
  /** The engines that can be run (a test adds a planted one); engineSpecs(model) when absent. */
  specs?: readonly EngineSpec[];
}

/** One model size and what runs on it. */
export interface Config {
  hidden: number;
  embed: number;
  batches: number[];
  engines: EngineSpec[];
  /** VPPS sentences timed per batch size, and trained untimed first (vpps-timing.ts `warmSentences`). */
  sentences: number;
  warmSentences: number;
}

/** What happened to one engine at one size. */
export interface EngineRun {
  engine: string;
  hidden: number;
  embed: number;
  cell: string;
  batches: number[];
  /**
   * timed; wrong-loss (first batch off the CPU engine's); planner-refused (VPPS); skipped (the PyTorch reference
   * where python3 or torch is missing); failed (an error, in `reason`).
   */
  status: "timed" | "wrong-loss" | "planner-refused" | "skipped" | "failed";
  reason: string | null;
  /** ms to create the engine (VPPS: the second create, through the kernel cache; the first is in `jit`). */
  createMs: number | null;
  firstBatchLoss: FirstLoss | null;
  memory: MemoryRecord | null;
  /** VPPS only. */
  jit: VppsJit | null;
  chosenVariant: VariantInfo | null;
  weightFloats: number | null;
}

/**
 * One configuration per hidden size. By default the first size runs every engine at every batch size and the others
 * the sweep's engines at the sweep's batch sizes; engines named by `engines` run at every size, and batch sizes
 * given by `batches` are used at every size (`--hidden 1024,1536 --batches 1,8,32 --engines …` compares the same
 * engines at the same points on both sizes).
 */
export function configsOf(model: BenchModel<unknown>, o: ThroughputOptions, specs: readonly EngineSpec[]): Config[] {
  const picked =
    o.engines === undefined ? specs.filter((s) => !s.optIn) : specs.filter((s) => o.engines!.includes(s.id));
  const sweep = o.engines === undefined ? sweepEngineIds(model) : picked.map((s) => s.id);
  const batches = [...(o.batches ?? (o.quick ? QUICK_BATCHES : DEFAULT_BATCHES))];
  const sweepBatches = o.batches === undefined ? SWEEP_BATCHES.filter((b) => batches.includes(b)) : batches;
  const hidden = o.hidden ?? model.sizes.map((s) => s.hidden);
  const out: Config[] = [];
  hidden.forEach((h, i) => {
    const main = i === 0;
    const engines = picked.filter((e) => main || sweep.includes(e.id));
    if (engines.length === 0) {
      console.log(
        `hidden ${h}: none of the engines asked for (${picked.map((e) => e.id).join(", ")}) runs at this size ` +
          `(only ${sweep.join(", ")} do); skipping it`,
      );
      return;
    }
    out.push({
      hidden: h,
      embed: model.sizes.find((s) => s.hidden === h)?.embed ?? model.embedFor(h),
      batches: main || sweepBatches.length === 0 ? batches : sweepBatches,
      engines,
      sentences: o.vppsSentences ?? (o.quick ? 1024 : 4096),
      warmSentences: o.vppsWarm ?? (o.quick ? 256 : 2048),
    });
  });
  return out;
}
