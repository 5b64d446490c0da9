/**
 * Timing VPPS on training batches of any model (BenchNet), shared by the throughput suite and `vpps bench vpps
 * timing`: create twice (the first create JIT-compiles every variant, the second reads them from the kernel cache),
 * check the first batch's loss against the CPU engine, let profile-guided rpw choose a variant, then time one batch
 * size at a time.
 *
 * Per batch: build the graph, then Vpps.fb (schedule, encode, one pinned copy, memsets, one launch, returning the
 * previous batch's loss); the host builds batch k+1 while the GPU runs batch k. Throughput = sentences / wall time of
 * all batches of a size (after an untimed warm-up, `warmSentences`), ending with a synchronize.
 */
import { deviceModelOfCuda } from "../cuda/hw/device-model.js";
import type { DeviceProperties } from "../cuda/index.js";
import { CpuEngine } from "../engines/cpu.js";
import {
  enumeratePlans,
  planVpps,
  type VariantInfo,
  Vpps,
  VppsPlanError,
  workerBuildFromEnv,
} from "../engines/vpps/index.js";
import { ComputationGraph } from "../graph/graph.js";
import { onChipMatrices } from "../model/parameters.js";
import type { BenchNet } from "./model.js";

/**
 * Kernel timing samples two consecutive batches in every TIMING_EVERY (Vpps option `timing`): CUDA events around
 * every batch cost 4-12 us of GPU time per batch on the H100 (the same batch submitted back to back, timed or not),
 * 2-6% at batch 1.
 */
export const TIMING_EVERY = 16;

/** One formulation (`cell`) at one batch size. */
export interface VppsRow {
  cell: string;
  batch: number;
  /** The kernel variant the profile kept for this row (null: not recorded). */
  variant?: string | null;
  sentencesPerSecond: number;
  msPerBatch: number;
  nodesPerBatch: number;
  /** Main-thread build ms per batch (averaged over every batch, those built on the workers counting 0). */
  buildMs: number;
  /** The share of the batches the schedule workers built (their build is in scheduleMs); 0 when none can. */
  builtOnWorkers?: number;
  /** Scheduling + encoding; with schedule workers, the workers' time (summed over threads). */
  scheduleMs: number;
  /** Schedule worker threads (0: scheduled inside fb). */
  workers: number;
  /** With workers, main thread: snapshotting and posting graphs, and blocked waiting for a script. */
  snapshotMs: number;
  waitMs: number;
  /** fb's submit: pinned copy, memsets, launch, and the wait for the previous batch. */
  submitMs: number;
  /** Kernel ms per batch (CUDA events around the launch). */
  kernelMs: number;
  /** The GPU's time between consecutive kernels (copies, memsets, waits for the host), ms per batch. */
  gapMs: number | null;
  scheduleNsPerNode: number;
  weightBytesPer128: number;
  vsAutobatchAgenda: number | null;
}

/**
 * The VPPS planner's refusal of `params` on the device with `props` (why its weights do not fit in the registers),
 * or null when it plans: the check Vpps.create makes with default options, made before anything is compiled. The
 * device model is built as Vpps.create builds it.
 */
export function vppsPlannerRefusal(net: BenchNet<unknown>, props: DeviceProperties): string | null {
  const matrices = onChipMatrices(net.params);
  const device = deviceModelOfCuda(props);
  try {
    if (enumeratePlans(matrices, device, "auto").length > 0) return null;
    planVpps(matrices, device, { gradients: "auto" });
    return null;
  } catch (e) {
    return e instanceof Error ? e.message : String(e);
  }
}

/** Whether an error from Vpps.create is the planner's refusal (a plan that cannot be made), not a failure. */
export function isPlannerRefusal(e: unknown): boolean {
  return e instanceof VppsPlanError || (e instanceof Error && /^planVpps:/.test(e.message));
}

/** What compiling cost: every variant's info on the first create and on the second (cached), and both creates' ms. */
export interface VppsJit {
  first: VariantInfo[];
  cached: VariantInfo[];
  createMs: [number, number];
}

export interface VppsCreateOptions {
  cacheDir: string;
  /** Schedule worker threads (Vpps `scheduleWorkers`); undefined: the engine's default. */
  workers: number | undefined;
  log: (line: string) => void;
  /** Called while the first (JIT) instance is still alive, just before it is disposed (memory samples). */
  afterFirstCreate?: () => void;
  /** Matrices forced off chip (the Vpps option `variants.offChip`). */
  offChip?: readonly string[] | "all";
}

/**
 * Creates VPPS twice on networks from `makeNet` (same seed: same weights): the first create compiles every variant
 * and is disposed; the second, kept, reads them from the cache and records kernel time (SGD, lr 0.05, clip 5).
 */
export async function createVppsWithJit<N extends BenchNet<unknown>>(
  makeNet: () => N,
  opts: VppsCreateOptions,
): Promise<{ vpps: Vpps; net: N; jit: VppsJit }> {
  const { cacheDir, log } = opts;
  const workerOption = {
    ...(opts.workers === undefined ? {} : { host: { scheduleWorkers: opts.workers } }),
    ...(opts.offChip === undefined ? {} : { variants: { offChip: opts.offChip } }),
  };
  // JIT: the first create compiles every variant; a second one reads them from the cache. The kernels carry a
  // per-run name: NVRTC keeps its own cache of programs it has compiled (by preprocessed text), which would
  // otherwise serve a "first" compile of kernels an earlier run already built in a few ms instead of seconds.
  const name = `bench_${process.pid}_${Date.now().toString(36)}`;
  let t = performance.now();
  const first = await Vpps.create(makeNet().params, { cacheDir, log, name, ...workerOption });
  const firstMs = performance.now() - t;
  const firstInfo = first.variantInfo.map((v) => ({ ...v }));
  try {
    opts.afterFirstCreate?.();
  } finally {
    first.dispose();
  }
  const net = makeNet();
  t = performance.now();
  const vpps = await Vpps.create(net.params, {
    cacheDir,
    log,
    name,
    // events around one batch pair in 16: around every batch they cost GPU time between the kernels
    instrument: { timing: TIMING_EVERY },
    training: { learningRate: 0.05, clip: 5 },
    ...workerOption,
  });
  const jit: VppsJit = {
    first: firstInfo,
    cached: vpps.variantInfo.map((v) => ({ ...v })),
    createMs: [firstMs, performance.now() - t],
  };
  return { vpps, net, jit };
}

/**
 * The correctness guard: the first batch of 8 through VPPS against the CPU engine on a fresh network from `makeNet`,
 * before any update (VPPS then applies that batch's update).
 */
export async function vppsFirstLoss<T>(
  vpps: Vpps,
  net: BenchNet<T>,
  makeNet: () => BenchNet<T>,
  batchOf: (size: number, k: number) => readonly T[],
): Promise<{ cpu: number; vpps: number }> {
  const ref = makeNet();
  const cpu = new CpuEngine(ref.params).forwardScalar(ref.batchLoss(new ComputationGraph(), batchOf(8, 0)));
  const cg = new ComputationGraph();
  vpps.fb(cg, net.batchLoss(cg, batchOf(8, 0)));
  return { cpu, vpps: await vpps.syncLatestLoss() };
}

/** Profile-guided rpw: runs batches of `size` (8) until a variant is chosen. */
export async function chooseVppsVariant<T>(
  vpps: Vpps,
  net: BenchNet<T>,
  batchOf: (size: number, k: number) => readonly T[],
  size = 8,
): Promise<VariantInfo | undefined> {
  for (let k = 1; vpps.chosenVariant === undefined; k++) {
    const cg = new ComputationGraph();
    vpps.fb(cg, net.batchLoss(cg, batchOf(size, k)));
  }
  await vpps.syncLatestLoss();
  return vpps.chosenVariant;
}

/** Floats of the weight matrices the kernel loads into registers (once per launch). */
export function vppsWeightFloats(vpps: Vpps): number {
  return vpps.plan.matrices.reduce((s, m) => s + m.rows * m.cols, 0);
}

export interface VppsBatchOptions<T> {
  cell: string;
  batch: number;
  /** Sentences timed (at least 20 batches), after an untimed warm-up (`warmSentences`, at least 5 batches). */
  sentences: number;
  /**
   * Sentences trained untimed first (at least 5 batches): the host's steady state needs V8's optimised code in every
   * schedule worker (each sees 1/W of the batches) and a grown heap; at batch 1 on the H100 the first ~3,000
   * batches ran at 4,500 sentences/s and the same batches then at 5,300.
   */
  warmSentences: number;
  batchOf: (size: number, k: number) => readonly T[];
  weightFloats: number;
  /** The autobatch agenda engine's sentences/s at this batch size, when known (for vsAutobatchAgenda). */
  agenda: number | undefined;
  /** Where the row's line goes (stdout by default). */
  log?: (line: string) => void;
  /**
   * The indices of `batchOf`'s batch among the loaded items: with it, a net that has a worker graph builder and
   * schedule workers, and VPPS_WORKER_BUILD not 0, batches are built as training builds them — by the workers when
   * one has room, else on the main thread.
   */
  indicesOf?: (size: number, k: number) => Int32Array;
}

/** The Vpps instances whose workers were given a bench net's graph builder (once per instance). */
const builderSet = new WeakMap<Vpps, unknown>();

/**
 * Whether this row's batches go to the workers' graph builder (VppsBatchOptions.indicesOf): sets it on the first
 * row of `vpps` and waits (up to 60 s) for every worker to load it.
 */
async function useWorkerBuilder<T>(vpps: Vpps, net: BenchNet<T>, o: VppsBatchOptions<T>): Promise<boolean> {
  if (o.indicesOf === undefined || net.workerBuilder === undefined || vpps.scheduleWorkers === 0) return false;
  if (!workerBuildFromEnv()) return false;
  if (builderSet.get(vpps) !== net) {
    vpps.setGraphBuilder(net.workerBuilder());
    builderSet.set(vpps, net);
  }
  const t0 = performance.now();
  while (!vpps.buildsInWorkers) {
    if (performance.now() - t0 > 60_000) return false;
    await new Promise((r) => setTimeout(r, 5));
  }
  return true;
}

/** Times one batch size and prints a line. Throws when the loss becomes non-finite. */
export async function timeVppsBatch<T>(vpps: Vpps, net: BenchNet<T>, o: VppsBatchOptions<T>): Promise<VppsRow> {
  const { cell, batch, batchOf, weightFloats, agenda } = o;
  const count = Math.max(20, Math.ceil(o.sentences / batch));
  const graphs = [new ComputationGraph(), new ComputationGraph(), new ComputationGraph()];
  const onWorkers = await useWorkerBuilder(vpps, net, o);
  const run = (k: number, stats: { build: number; onWorkers: number }) => {
    // as the training loop: the workers build the batch when one has room (Vpps.workersHaveRoom)
    if (onWorkers && vpps.workersHaveRoom) {
      stats.onWorkers++;
      return vpps.fbBuilt({ examples: o.indicesOf!(batch, k), training: true, dropoutKey: k });
    }
    const cg = graphs[k % 3]!; // a graph stays untouched while its batch may still be in flight
    cg.renew();
    const t0 = performance.now();
    const loss = net.batchLoss(cg, batchOf(batch, k));
    stats.build += performance.now() - t0;
    return vpps.fb(cg, loss);
  };
  const scratch = { build: 0, onWorkers: 0 };
  const warm = Math.max(5, Math.ceil(o.warmSentences / batch));
  // the warm-up trains on the batches after the timed ones: the timed batches are the data's first `count`
  for (let k = 0; k < warm; k++) run(count + k, scratch);
  await vpps.syncLatestLoss();
  const s0 = { ...vpps.stats };
  const host = { build: 0, onWorkers: 0 };
  const t0 = performance.now();
  let last = 0;
  for (let k = 0; k < count; k++) last = run(k, host);
  last = await vpps.syncLatestLoss();
  const wall = performance.now() - t0;
  if (!Number.isFinite(last)) throw new Error(`${cell} batch ${batch}: the loss became ${last}`);
  const s1 = vpps.stats;
  const per = (x: number) => x / count;
  const sps = (count * batch) / (wall / 1000);
  const nodes = per(s1.nodes - s0.nodes);
  const row: VppsRow = {
    cell,
    batch,
    sentencesPerSecond: sps,
    msPerBatch: wall / count,
    nodesPerBatch: nodes,
    buildMs: per(host.build),
    builtOnWorkers: host.onWorkers / count,
    scheduleMs: per(s1.scheduleMs - s0.scheduleMs),
    workers: vpps.scheduleWorkers,
    snapshotMs: per(s1.snapshotMs - s0.snapshotMs),
    waitMs: per(s1.waitMs - s0.waitMs),
    submitMs: per(s1.submitMs - s0.submitMs),
    kernelMs: (s1.kernelMs - s0.kernelMs) / Math.max(1, s1.timedBatches - s0.timedBatches),
    gapMs: s1.gapBatches > s0.gapBatches ? (s1.gapMs - s0.gapMs) / (s1.gapBatches - s0.gapBatches) : null,
    scheduleNsPerNode: (1e6 * per(s1.scheduleMs - s0.scheduleMs)) / Math.max(1, nodes),
    weightBytesPer128: 4 * weightFloats * (128 / batch),
    vsAutobatchAgenda: agenda ? sps / agenda : null,
  };
  (o.log ?? ((l: string) => console.log(l)))(
    `${cell} batch ${String(batch).padStart(3)}: ${sps.toFixed(0).padStart(7)} sentences/s, ` +
      `${row.msPerBatch.toFixed(3)} ms/batch (build ${row.buildMs.toFixed(3)}` +
      `${host.onWorkers > 0 ? `, ${Math.round(100 * row.builtOnWorkers!)}% of the batches built on the workers` : ""}, ` +
      `schedule ${row.scheduleMs.toFixed(3)} = ` +
      `${row.scheduleNsPerNode.toFixed(0)} ns/node${row.workers > 0 ? ` on ${row.workers} workers, snapshot ${row.snapshotMs.toFixed(3)}, wait ${row.waitMs.toFixed(3)}` : ""}, ` +
      `submit ${row.submitMs.toFixed(3)}; kernel ${row.kernelMs.toFixed(3)}` +
      `${row.gapMs !== null ? `, between kernels ${row.gapMs.toFixed(3)}` : ""}), ` +
      `${nodes.toFixed(0)} nodes${agenda ? `, ${row.vsAutobatchAgenda!.toFixed(2)}x autobatch agenda` : ""}`,
  );
  return row;
}
