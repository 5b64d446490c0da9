/**
 * VPPS benchmark: Tree-LSTM training (forward + backward + SGD update in one persistent-kernel launch per batch) in
 * sentences/s on SST training trees, hidden 256, embedding 256, batch sizes 1, 2, 4, …, 128, for the fused and the
 * ops cell. Per batch size it reports where time goes: host ms building the graph, scheduling + encoding, and
 * issuing (copies, memsets, launch, the wait for the previous batch), against the kernel's ms (CUDA events); also
 * the JIT cost (first compile, and again through the kernel cache), the profile-guided rpw choice, and the weight
 * bytes read from DRAM per 128 sentences (weights are loaded into registers once per launch). The autobatch agenda
 * engine's numbers (for vsAutobatchAgenda) are read from bench/results/batching-<this device>.json when present;
 * bench/treelstm.ts runs every engine in one process instead. The timing itself is in vpps-timing.ts.
 *
 *   node --import tsx bench/vpps.ts [--data <SST train.txt>] [--quick] [--cell fused|ops|both] [--cache <dir>]
 *                                   [--workers N] [--profile-once]
 *
 * The profile-guided variant choice runs again at each batch size, on batches of that size (Vpps.profileAgain), as
 * it would for a user training at that size; --profile-once keeps the variant chosen on batches of 8 throughout.
 *
 * --workers: schedule worker threads (Vpps `scheduleWorkers`; 0 schedules inside fb; default: the engine's).
 *
 * Writes bench/results/vpps-<device>.json (not with --quick).
 */
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TreeNode } from "../src/data/tree.js";
import { Vocabulary } from "../src/data/vocab.js";
import type { VariantInfo } from "../src/engines/vpps/vpps.js";
import { type CellFormulation, TreeLstmModel } from "../src/models/treelstm/model.js";
import { batchAt, deviceSlug, loadBenchTrees, ROOT, resultHeader, writeResult } from "./common.js";
import { requireGpu } from "./engine-timing.js";
import {
  chooseVppsVariant,
  createVppsWithJit,
  timeVppsBatch,
  type VppsJit,
  type VppsRow,
  vppsFirstLoss,
  vppsWeightFloats,
} from "./vpps-timing.js";

const argv = process.argv.slice(2);
const arg = (name: string): string | undefined => {
  const i = argv.indexOf(name);
  if (i < 0) return undefined;
  const v = argv[i + 1];
  if (!v) throw new Error(`${name} needs a value`);
  return v;
};
const quick = argv.includes("--quick");
const dataFile = arg("--data");
const cellArg = arg("--cell") ?? "both";
if (!["fused", "ops", "both"].includes(cellArg)) throw new Error(`--cell must be fused, ops or both; got ${cellArg}`);
const CELLS: CellFormulation[] = cellArg === "both" ? ["fused", "ops"] : [cellArg as CellFormulation];
const cacheArg = arg("--cache");
const workersArg = arg("--workers");
/** --profile-once: profile the variants on batches of 8 once, for every batch size (before session 6: the default). */
const profilePerSize = !argv.includes("--profile-once");
const workers = workersArg === undefined ? undefined : Number(workersArg);
if (workers !== undefined && !(Number.isInteger(workers) && workers >= 0)) {
  throw new Error(`--workers must be an integer >= 0; got ${workersArg}`);
}
requireGpu("bench/vpps.ts");
const cacheDir = cacheArg ?? mkdtempSync(join(tmpdir(), "vpps-bench-kernels-"));

const HIDDEN = 256;
const EMBED = 256;
const BATCHES = quick ? [1, 8, 128] : [1, 2, 4, 8, 16, 32, 64, 128];
/** Sentences timed per batch size (at least 20 batches), after the warm-up below. */
const SENTENCES = quick ? 1024 : 4096;
/** Sentences trained untimed at each batch size before the timed ones (vpps-timing.ts `warmSentences`). */
const WARM_SENTENCES = quick ? 256 : 2048;
const { trees, source } = loadBenchTrees(dataFile, 8192);
const vocab = Vocabulary.fromTrees(trees);

const batchOf = (size: number, k: number): TreeNode[] => batchAt(trees, size, k);

const rows: VppsRow[] = [];
const jit: Record<string, VppsJit> = {};
const chosen: Record<string, VariantInfo | undefined> = {};
const firstLoss: Record<string, { cpu: number; vpps: number }> = {};

/** Where the autobatch agenda engine's numbers came from (the batching benchmark's file for this device). */
let agendaFrom: string | null = null;
/** sentences/s by `engine:batch`, from bench/results/batching-<slug>.json of the device this run is on. */
function other(slug: string): Map<string, number> {
  const out = new Map<string, number>();
  const file = join(ROOT, "bench", "results", `batching-${slug}.json`);
  if (!existsSync(file)) return out;
  agendaFrom = `bench/results/batching-${slug}.json`;
  const data = JSON.parse(readFileSync(file, "utf8")) as {
    rows: { engine: string; batch: number; sentencesPerSecond: number }[];
  };
  for (const r of data.rows) out.set(`${r.engine}:${r.batch}`, r.sentencesPerSecond);
  return out;
}
let others: Map<string, number> | undefined;

let deviceName = "unknown";
for (const cell of CELLS) {
  const makeModel = () => new TreeLstmModel({ vocabSize: vocab.size, embed: EMBED, hidden: HIDDEN, seed: 1, cell });
  const lines: string[] = [];
  const log = (l: string) => {
    lines.push(l);
    console.log(l);
  };
  const created = await createVppsWithJit(makeModel, { cacheDir, workers, log });
  const { vpps, model } = created;
  jit[cell] = created.jit;
  deviceName = vpps.ctx.deviceName;
  others ??= other(deviceSlug(deviceName));
  const weightFloats = vppsWeightFloats(vpps);

  // correctness guard: the first batch of 8 against the CPU engine, before any update
  firstLoss[cell] = await vppsFirstLoss(vpps, model, makeModel, batchOf, vocab);
  console.log(`${cell}: first batch of 8: CPU loss ${firstLoss[cell]!.cpu}, VPPS ${firstLoss[cell]!.vpps}`);
  chosen[cell] = await chooseVppsVariant(vpps, model, batchOf, vocab);

  for (const batch of BATCHES) {
    const agenda = others.get(`autobatch-agenda-cublas:${batch}`) ?? others.get(`autobatch-agenda:${batch}`);
    if (profilePerSize) {
      // as a user training at this batch size would: the profile runs on batches of this size
      vpps.profileAgain();
      const v = await chooseVppsVariant(vpps, model, batchOf, vocab, batch);
      console.log(`${cell} batch ${batch}: profile kept ${v?.name ?? "the only variant"}`);
    }
    const row = await timeVppsBatch(vpps, model, {
      cell,
      batch,
      sentences: SENTENCES,
      warmSentences: WARM_SENTENCES,
      batchOf,
      vocab,
      weightFloats,
      agenda,
    });
    rows.push({ ...row, variant: vpps.chosenVariant?.name ?? null });
  }
  vpps.dispose();
}

const result = {
  ...resultHeader({
    benchmark: "vpps",
    command: `node --import tsx bench/vpps.ts ${argv.join(" ")}`.trim(),
    device: deviceName,
    data: source,
    trees: trees.length,
    vocabulary: vocab.size,
  }),
  model: { name: "treelstm", hidden: HIDDEN, embed: EMBED, optimizer: "sgd", clip: 5 },
  method:
    "per batch: build the graph, then Vpps.fb (schedule, encode, one pinned copy, memsets, one launch, returning the " +
    "previous batch's loss); the host builds batch k+1 while the GPU runs batch k. Throughput = sentences / wall " +
    "time of all batches of a size (after an untimed warm-up of 2,048 sentences, at least 5 batches), ending with a synchronize. Kernel ms from CUDA events around " +
    "two consecutive launches in every 16 (TIMING_EVERY; between kernels: from the first's end to the second's start). Weight bytes per 128 sentences: matrices read from DRAM once per launch (and written back once). " +
    "With schedule workers (a row's `workers` > 0) fb snapshots the graph and posts it to a worker thread, and " +
    "launches the batches whose scripts are ready, in order; scheduleMs is then the workers' time. " +
    "vsAutobatchAgenda: against the agenda engine's numbers in `agendaFrom` (an earlier run of bench/batching.ts).",
  jit,
  chosenVariant: chosen,
  firstBatchLoss: firstLoss,
  agendaFrom,
  rows,
  targets: { batch1: 5000, batch8: 15000, batch128: 30000, vsAgendaUpTo32: 3 },
};
if (!quick) {
  const slug = deviceSlug(deviceName);
  console.log(`wrote ${writeResult(`vpps-${slug}`, result)}`);
} else {
  console.log(JSON.stringify(rows.map((r) => [r.cell, r.batch, Math.round(r.sentencesPerSecond)])));
}
