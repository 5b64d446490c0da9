/**
 * `vpps plan rnn --density d`: how a sparse persistent layer (pruned W_hh as ⟨index, value⟩ pairs in registers) is
 * laid out, the bank conflicts of its loads on a random row-balanced mask, and the largest sparse layer per cell beside
 * the largest dense one.
 */
import { BenchUsageError } from "../bench/errors.js";
import type { DeviceModel } from "../cuda/hw/device-model.js";
import {
  type BankConflicts,
  denseEquivalentRatio,
  gatesOf,
  largestPersistentHidden,
  planSparseRnnLayer,
  type RnnCellName,
  randomRowBalancedRows,
  rowBalancedPairs,
  type SampledBankConflicts,
  type SparseIndexBits,
  type SparseLayerResult,
  type SparseLimit,
  type SparseRnnKernelPlan,
  sampleBankConflicts,
  sparseLaunchPlan,
  sparseLaunchShape,
  sparseLimit,
} from "../rnn/index.js";
import { quote } from "../util/text.js";
import { writeOut } from "./output.js";

/** One density: a fraction in (0, 1], or a percentage ("10%"). */
function density(v: string, given: string): number {
  const s = v.trim();
  const pct = s.endsWith("%");
  const body = pct ? s.slice(0, -1) : s;
  const d = /^(\d+(\.\d*)?|\.\d+)$/.test(body) ? Number(body) / (pct ? 100 : 1) : Number.NaN;
  if (!(d > 0 && d <= 1)) {
    throw new BenchUsageError(
      `--density: expected kept fractions of W_hh in (0, 1], e.g. 0.1 or 10% (a comma-separated list for several); got ${quote(given)}`,
    );
  }
  return d;
}

/** --density: one density or a comma-separated list, in increasing order, duplicates dropped. */
export function densityOption(v: string): number[] {
  const ds = v.split(",").map((x) => density(x, v));
  return [...new Set(ds)].sort((a, b) => a - b);
}

export interface SparsePlanFlags {
  cells: readonly RnnCellName[];
  hidden?: number;
  densities: readonly number[];
  batch: number;
  indexBits?: SparseIndexBits;
  json: boolean;
}

const percent = (d: number) => `${Number((100 * d).toPrecision(4))}%`;
const perLoad = (c: BankConflicts) => (c.wavefronts / c.loads).toFixed(2);
const kib = (bytes: number) => `${(bytes / 1024).toFixed(1)} KiB`;

const PAIRS_FROM = {
  "row-balanced": "round(d·H), row-balanced pruning",
  "column-estimate": "the most in a column of a random row-balanced mask, a 1-in-1000 bound",
  given: "given",
} as const;

/** How the layer's kernels run a batch of `batch` sequences on a random row-balanced mask of the density. */
function launchesOf(cell: RnnCellName, hidden: number, density: number, f: SparsePlanFlags, device: DeviceModel) {
  const csr = randomRowBalancedRows(gatesOf(cell) * hidden, hidden, rowBalancedPairs(hidden, density), 1);
  const batch = f.batch;
  const one = (kind: "forward" | "backward") => {
    const r = sparseLaunchPlan(cell, hidden, device, kind, batch, csr, { indexBits: f.indexBits });
    return r.fits ? { plan: r.plan, ...sparseLaunchShape(r.plan, batch) } : undefined;
  };
  return { forward: one("forward"), backward: one("backward") };
}

type Launch = NonNullable<ReturnType<typeof launchesOf>["forward"]>;

function describeLaunch(kind: string, l: Launch | undefined, batch: number): string {
  if (!l) return `  ${kind.padEnd(8)} launch at batch ${batch}: none fits a random mask of this density`;
  const p = l.plan;
  return (
    `  ${kind.padEnd(8)} launch at batch ${batch}: tiles of ${p.batchTile} column${p.batchTile > 1 ? "s" : ""}, ` +
    `${l.replicas} replica${l.replicas > 1 ? "s" : ""} of ${p.ctas} CTAs (${p.ctasPerSm} per SM), ${l.rounds} ` +
    `round${l.rounds > 1 ? "s" : ""} per step, ${kib(4 * l.floatsPerSm)} of the vector copied per SM per step; ` +
    `${p.threads} threads × ${p.pairsPerThread} pair slots${p.slackPairs > 0 ? ` (${p.slackPairs * p.rowsPerThread} slack)` : ""}`
  );
}

function describeSparseKernel(p: SparseRnnKernelPlan, c: SampledBankConflicts): string {
  const pad = " ".repeat(11);
  const reduction =
    p.reduction === "none"
      ? "no reduction (one thread per row)"
      : `reduced over the row group by ${p.reduction === "shared" ? "shared memory" : p.reduction === "shuffle" ? "warp shuffles" : "warp shuffles, then shared memory"}`;
  return (
    `  ${p.kind.padEnd(8)} ${p.ctas} CTAs × ${p.threads} threads, ${p.unitsPerCta} units per CTA (${p.rows} rows × ` +
    `${p.cols} columns of W_hh${p.kind === "backward" ? "ᵀ" : ""}), ${p.pairsPerRow} pairs per row (${PAIRS_FROM[p.pairsPerRowFrom]})\n` +
    `${pad}row groups of ${p.threadsPerRowGroup} thread${p.threadsPerRowGroup > 1 ? "s" : ""}, ${p.rowsPerThread} ` +
    `row${p.rowsPerThread > 1 ? "s" : ""} per thread: ${p.pairsPerThread} pair slots per thread` +
    `${p.slackPairs > 0 ? ` (${p.slackPairs * p.rowsPerThread} of them slack for the bank-aware order)` : ""} × ${p.registersPerPair} ` +
    `registers (${p.indexBits}-bit indices) = ${p.pairRegisters} registers + ${p.accumulatorRegisters} accumulators ` +
    `(≈ ${p.registersEstimate} of ${p.registerLimit})\n` +
    `${pad}batch tile ${p.batchTile} (${p.batchTile === 1 ? "ld.shared.f32" : `ld.shared.v${p.batchTile}`} of h ` +
    `[${p.cols}][${p.batchTile}]), ${kib(p.sharedBytes)} shared memory, ${reduction}; model cost ${Math.round(p.costCycles)} cycles per step and tile\n` +
    `${pad}shared-memory wavefronts per load on a random mask (CTAs 0–${c.ctas - 1}): naive ${perLoad(c.naive)}, ` +
    `Algorithm 1 ${perLoad(c.algorithm1)}, warp ${perLoad(c.warp)}, balanced (the kernels') ${perLoad(c.balanced)}; ` +
    `${p.batchTile} without conflicts`
  );
}

interface DensityResult {
  density: number;
  limits: {
    cell: RnnCellName;
    training: SparseLimit;
    /** The wide loads of the forward and backward kernels at the training limit. */
    loads: readonly [number, number];
    inference: SparseLimit;
    dense: number;
    ratio: number;
  }[];
  plans?: {
    cell: RnnCellName;
    plan: SparseLayerResult;
    conflicts?: Record<"forward" | "backward", SampledBankConflicts>;
    /** The launches at the flags' batch on a random row-balanced mask (sparseLaunchPlan). */
    launch?: ReturnType<typeof launchesOf>;
  }[];
}

function planDensity(f: SparsePlanFlags, device: DeviceModel, density: number): DensityResult {
  const { batch } = f;
  const limits = f.cells.map((cell) => {
    const training = sparseLimit(cell, density, device, batch, { indexBits: f.indexBits });
    const inference = sparseLimit(cell, density, device, batch, { indexBits: f.indexBits, forwardOnly: true });
    const dense = largestPersistentHidden(cell, device);
    const at = planSparseRnnLayer(cell, training.hidden, device, { density, batch, indexBits: f.indexBits });
    const loads = at.fits ? ([at.forward.batchTile, at.backward.batchTile] as const) : ([0, 0] as const);
    return { cell, training, loads, inference, dense, ratio: denseEquivalentRatio(training.hidden, dense) };
  });
  const hidden = f.hidden;
  if (hidden === undefined) return { density, limits };
  const plans = f.cells.map((cell) => {
    const plan = planSparseRnnLayer(cell, hidden, device, { density, batch, indexBits: f.indexBits });
    const conflicts = plan.fits
      ? { forward: sampleBankConflicts(plan.forward), backward: sampleBankConflicts(plan.backward) }
      : undefined;
    const launch = plan.fits ? launchesOf(cell, hidden, density, f, device) : undefined;
    return { cell, plan, conflicts, ...(launch ? { launch } : {}) };
  });
  return { density, limits, plans };
}

function densityJson(r: DensityResult) {
  const largest = Object.fromEntries(
    r.limits.map((l) => [
      l.cell,
      {
        training: l.training.hidden,
        wideLoads: { forward: l.loads[0], backward: l.loads[1] },
        inference: l.inference.hidden,
        dense: l.dense,
        denseEquivalentRatio: Number(l.ratio.toFixed(2)),
        bound: l.training.bound,
        kind: l.training.kind,
        reason: l.training.reason,
      },
    ]),
  );
  const conflicts = (c: SampledBankConflicts) => ({
    ctas: c.ctas,
    naive: c.naive,
    algorithm1: c.algorithm1,
    bankAware: c.warp,
  });
  const launchJson = (l: Launch | undefined) =>
    l && {
      batchTile: l.plan.batchTile,
      replicas: l.replicas,
      ctas: l.plan.ctas,
      ctasPerSm: l.plan.ctasPerSm,
      rounds: l.rounds,
      threads: l.plan.threads,
      pairsPerThread: l.plan.pairsPerThread,
      vectorBytesPerSm: 4 * l.floatsPerSm,
    };
  const plans = r.plans?.map(({ cell, plan, conflicts: c, launch }) => ({
    cell,
    plan,
    conflicts: c && { forward: conflicts(c.forward), backward: conflicts(c.backward) },
    ...(launch ? { launch: { forward: launchJson(launch.forward), backward: launchJson(launch.backward) } } : {}),
  }));
  return { density: r.density, largest, ...(plans ? { plans } : {}) };
}

/** The largest layers of every (density, cell), as a table. */
function limitsTable(results: DensityResult[]): string {
  const header = [
    "density",
    "cell",
    "training",
    "wide loads",
    "inference",
    "dense",
    "dense-equivalent",
    "what stops the next size",
  ];
  const rows = results.flatMap((r) =>
    r.limits.map((l) => [
      percent(r.density),
      l.cell,
      String(l.training.hidden),
      `${l.loads[0]} / ${l.loads[1]}`,
      String(l.inference.hidden),
      String(l.dense),
      `${l.ratio.toFixed(1)}×`,
      `${l.training.bound} (${l.training.kind} kernel)`,
    ]),
  );
  const left = new Set([0, 1, header.length - 1]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (r: string[]) =>
    `  ${r.map((x, i) => (left.has(i) ? x.padEnd(widths[i]!) : x.padStart(widths[i]!))).join("  ")}`.trimEnd();
  return [header, ...rows].map(line).join("\n");
}

/** `vpps plan rnn --density d`: one layer's sparse plans, or the largest sparse layer of every cell. */
export function runPlanRnnSparse(f: SparsePlanFlags, device: DeviceModel): void {
  const results = f.densities.map((d) => planDensity(f, device, d));
  const head = { device: device.name, batch: f.batch, indexBits: f.indexBits ?? "auto" };
  if (f.json) {
    writeOut(
      `${JSON.stringify({ ...head, ...(f.hidden ? { hidden: f.hidden } : {}), densities: results.map(densityJson) })}\n`,
    );
    return;
  }
  if (f.hidden === undefined) {
    writeOut(
      `largest sparse persistent layer on ${device.name} (${device.smCount} SMs, ${device.regsPerSm} registers per SM), ` +
        `batch ${f.batch}: fp32 values, ${f.indexBits ?? "16"}-bit indices` +
        `${f.indexBits ? "" : " (32 where the index range passes 65,536)"}; training = the forward and backward kernels, ` +
        "wide loads = the batch columns of each pair's load of h there (forward / backward; narrower where a tile's vector " +
        "or the accumulators would not fit); inference = the forward alone; dense-equivalent = (training / dense)², the " +
        "unpruned parameters against the largest dense layer's\n" +
        `${limitsTable(results)}\n`,
    );
    return;
  }
  for (const r of results) {
    for (const { cell, plan, conflicts, launch } of r.plans!) {
      const l = r.limits.find((x) => x.cell === cell)!;
      const what = `${cell}, hidden ${f.hidden}, density ${percent(r.density)}, batch ${f.batch}, on ${device.name}`;
      const largest = `the largest that fits is hidden ${l.training.hidden} (the forward alone: ${l.inference.hidden})`;
      if (plan.fits && conflicts) {
        writeOut(
          `${what}: fits; ${denseEquivalentRatio(f.hidden, l.dense).toFixed(1)}× the dense-equivalent parameters of ` +
            `the largest dense layer (${l.dense}); ${largest}\n` +
            `${describeSparseKernel(plan.forward, conflicts.forward)}\n${describeSparseKernel(plan.backward, conflicts.backward)}\n` +
            (launch
              ? `${describeLaunch("forward", launch.forward, f.batch)}\n${describeLaunch("backward", launch.backward, f.batch)}\n`
              : ""),
        );
      } else if (!plan.fits) writeOut(`${what}: does not fit — ${plan.reason}; ${largest}\n`);
    }
  }
}
