/**
 * `vpps bench vpps timing`: VPPS alone, Tree-LSTM training (forward + backward + SGD update in one persistent-kernel
 * launch per batch) in sentences/s on SST training trees, hidden 256, embedding 256, batch sizes 1, 2, 4, …, 128, for
 * the fused and the ops cell. Per batch size it reports where time goes: host ms building the graph, scheduling +
 * encoding, and issuing (copies, memsets, launch, the wait for the previous batch), against the kernel's ms (CUDA
 * events); also the JIT cost (first compile, and again through the kernel cache), the profile-guided rpw choice, and
 * the weight bytes read from DRAM per 128 sentences (weights are loaded into registers once per launch). The
 * autobatch agenda engine's numbers (for vsAutobatchAgenda) are read from batching.json of this device's results
 * folder when present; `vpps bench treelstm` runs every engine in one process instead.
 *
 * The profile-guided variant choice runs again at each batch size, on batches of that size (Vpps.profileAgain), as
 * it would for a user training at that size; --profile-once keeps the variant chosen on batches of 8 throughout.
 * Writes vpps.json (not with --quick).
 */
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import type { VariantInfo } from "../../engines/vpps/index.js";
import { PACKAGE_ROOT, resultHeader } from "../common.js";
import { deviceSlug, requireGpu, resultsDir } from "../device.js";
import { BenchError } from "../errors.js";
import { checkFirstLoss } from "../first-loss.js";
import { benchModel } from "../models/index.js";
import { writeJson } from "../output.js";
import {
  chooseVppsVariant,
  createVppsWithJit,
  timeVppsBatch,
  type VppsJit,
  type VppsRow,
  vppsFirstLoss,
  vppsWeightFloats,
} from "../vpps-timing.js";

export interface VppsTimingOptions {
  dataFile?: string;
  quick: boolean;
  cell: "fused" | "ops" | "both";
  cacheDir?: string;
  /** Schedule worker threads (Vpps `scheduleWorkers`; 0 schedules inside fb); the engine's default when absent. */
  workers?: number;
  /** Profile the variants on batches of 8 once, for every batch size (the old default). */
  profileOnce: boolean;
  out?: string;
  command: string;
}

const SIZE = { hidden: 256, embed: 256 };

/** sentences/s by `engine:batch` from an earlier `vpps bench autobatch batching` on this device, and its file. */
function agendaNumbers(slug: string): { from: string | null; rows: Map<string, number> } {
  const rows = new Map<string, number>();
  const file = join(resultsDir(slug), "batching.json");
  if (!existsSync(file)) return { from: null, rows };
  const data = JSON.parse(readFileSync(file, "utf8")) as {
    rows: { engine: string; batch: number; sentencesPerSecond: number }[];
  };
  for (const r of data.rows) rows.set(`${r.engine}:${r.batch}`, r.sentencesPerSecond);
  return { from: relative(PACKAGE_ROOT, file), rows };
}

export async function runVppsTiming(o: VppsTimingOptions): Promise<number> {
  requireGpu("vpps bench vpps timing");
  const cells = o.cell === "both" ? ["fused", "ops"] : [o.cell];
  const cacheDir = o.cacheDir ?? mkdtempSync(join(tmpdir(), "vpps-bench-kernels-"));
  const batches = o.quick ? [1, 8, 128] : [1, 2, 4, 8, 16, 32, 64, 128];
  /** Sentences timed per batch size (at least 20 batches), after the warm-up. */
  const sentences = o.quick ? 1024 : 4096;
  const warmSentences = o.quick ? 256 : 2048;
  const task = benchModel("treelstm").load(o.dataFile, 8192);
  const batchOf = task.batch;

  const rows: VppsRow[] = [];
  const jit: Record<string, VppsJit> = {};
  const chosen: Record<string, VariantInfo | undefined> = {};
  const firstLoss: Record<string, { cpu: number; vpps: number }> = {};
  let agenda: ReturnType<typeof agendaNumbers> | undefined;
  let deviceName = "unknown";
  for (const cell of cells) {
    const makeNet = () => task.net(SIZE, cell);
    const created = await createVppsWithJit(makeNet, { cacheDir, workers: o.workers, log: (l) => console.log(l) });
    const { vpps, net } = created;
    try {
      jit[cell] = created.jit;
      deviceName = vpps.ctx.deviceName;
      agenda ??= agendaNumbers(deviceSlug(deviceName));
      const weightFloats = vppsWeightFloats(vpps);

      // correctness guard: the first batch of 8 against the CPU engine, before any update
      const loss = await vppsFirstLoss(vpps, net, makeNet, batchOf);
      firstLoss[cell] = loss;
      console.log(`${cell}: first batch of 8: CPU loss ${loss.cpu}, VPPS ${loss.vpps}`);
      const { refusal } = checkFirstLoss(`vpps, ${cell} cell`, {
        batch: 8,
        cpu: loss.cpu,
        loss: loss.vpps,
        tolerance: 1e-3,
      });
      if (refusal !== null) throw new BenchError(refusal);
      chosen[cell] = await chooseVppsVariant(vpps, net, batchOf);

      for (const batch of batches) {
        const agendaSps =
          agenda.rows.get(`autobatch-agenda-cublas:${batch}`) ?? agenda.rows.get(`autobatch-agenda:${batch}`);
        if (!o.profileOnce) {
          // as a user training at this batch size would: the profile runs on batches of this size
          vpps.profileAgain();
          const v = await chooseVppsVariant(vpps, net, batchOf, batch);
          console.log(`${cell} batch ${batch}: profile kept ${v?.name ?? "the only variant"}`);
        }
        const row = await timeVppsBatch(vpps, net, {
          cell,
          batch,
          sentences,
          warmSentences,
          batchOf,
          weightFloats,
          agenda: agendaSps,
        });
        rows.push({ ...row, variant: vpps.chosenVariant?.name ?? null });
      }
    } finally {
      vpps.dispose();
    }
  }

  if (o.quick && o.out === undefined) {
    console.log(JSON.stringify(rows.map((r) => [r.cell, r.batch, Math.round(r.sentencesPerSecond)])));
    return 0;
  }
  const path = writeJson(resultsDir(deviceSlug(deviceName), o.out), "vpps", {
    ...resultHeader({
      benchmark: "vpps",
      command: o.command,
      device: deviceName,
      data: task.source,
      trees: task.items,
      vocabulary: task.vocabulary,
    }),
    model: { name: "treelstm", hidden: SIZE.hidden, embed: SIZE.embed, optimizer: "sgd", clip: 5 },
    method:
      "per batch: build the graph, then Vpps.fb (schedule, encode, one pinned copy, memsets, one launch, returning " +
      "the previous batch's loss); the host builds batch k+1 while the GPU runs batch k. Throughput = sentences / " +
      "wall time of all batches of a size (after an untimed warm-up of 2,048 sentences, at least 5 batches), ending " +
      "with a synchronize. Kernel ms from CUDA events around two consecutive launches in every 16 (TIMING_EVERY; " +
      "between kernels: from the first's end to the second's start). Weight bytes per 128 sentences: matrices read " +
      "from DRAM once per launch (and written back once). With schedule workers (a row's `workers` > 0) fb " +
      "snapshots the graph and posts it to a worker thread, and launches the batches whose scripts are ready, in " +
      "order; scheduleMs is then the workers' time. vsAutobatchAgenda: against the agenda engine's numbers in " +
      "`agendaFrom` (an earlier run of `vpps bench autobatch batching`).",
    jit,
    chosenVariant: chosen,
    firstBatchLoss: firstLoss,
    agendaFrom: agenda?.from ?? null,
    rows,
    targets: { batch1: 5000, batch8: 15000, batch128: 30000, vsAgendaUpTo32: 3 },
  });
  console.log(`wrote ${path}`);
  return 0;
}
