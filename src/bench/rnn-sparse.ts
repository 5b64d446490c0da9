/**
 * `vpps bench rnn --density …`: the sparse persistent layers (src/rnn/runtime/sparse.ts) beside the dense persistent
 * ones in the same run. Per (cell, hidden, batch): the dense layer's recurrent forward, then per density the sparse
 * layer's (W_hh pruned to a random row-balanced mask: round(d·H) kept per row), and with `backward` its recurrent
 * backward; with `ladder`, each rung of the paper's ladder (naive → wide loads → bank-aware → Lamport:
 * codegen/sparse-product.ts) timed on its own, at the widest batch tile the batch fills (the launch rule may take a
 * narrower one on more replicas). Every timed launch's output is compared with the CPU reference before its time is
 * kept. With `largest`, besides the sizes asked for, the largest sparse layer
 * of each (cell, density) that fits (`largestSparseHidden`, forward and backward, batch 4). Medians of CUDA-event timings after warm-up, all buffers on
 * the device. The PyTorch script bench/pytorch/sparse_rnn.py times cuBLAS and cuSPARSE per step on the same shapes;
 * its JSON lines are merged into the report (`torch`).
 */

import { deviceModelOfCuda } from "../cuda/hw/device-model.js";
import { CudaEvent, type DevicePtr } from "../cuda/index.js";
import {
  type BackwardArgs,
  batchTileFor,
  gatesOf,
  largestSparseHidden,
  openRnnGpu,
  PersistentRnnLayer,
  type RnnCellName,
  RnnDoesNotFitError,
  RnnWorkspace,
  randomRowBalancedRows,
  referenceLayerForward,
  SPARSE_LADDER,
  SparsePersistentRnnLayer,
  type SparseRows,
  type SparseRung,
  type WideLoad,
} from "../rnn/index.js";
import { median } from "./common.js";
import { sawtoothAllocator } from "./rnn.js";

export interface SparseRnnBenchOptions {
  readonly cells: readonly RnnCellName[];
  readonly hiddens: readonly number[];
  readonly batches: readonly number[];
  readonly densities: readonly number[];
  readonly steps: number;
  readonly repeats: number;
  /** Time every rung of the ladder (else the last, the production kernel, alone). */
  readonly ladder: boolean;
  /** Also time the sparse recurrent backward (the production rung; its kernels compiled too). */
  readonly backward: boolean;
  /** Add the largest sparse layer of each (cell, density) to the sizes. */
  readonly largest: boolean;
  readonly device: number;
}

export interface SparseRnnBenchRow {
  readonly cell: RnnCellName;
  readonly hidden: number;
  readonly batch: number;
  readonly steps: number;
  /** null: the dense row of this (cell, hidden, batch). */
  readonly density: number | null;
  readonly rung: SparseRung | "dense";
  /**
   * A rung of the ladder, launched at the widest batch tile the batch fills; absent: the production kernel (the last
   * rung) at the launch rule's tile, the row the report's speed-ups use.
   */
  readonly ladder?: boolean;
  /** Why it was not timed (a layer that does not fit). */
  readonly reason?: string;
  /** Medians, ms: the recurrent forward (the input projection done before), and the recurrent backward. */
  readonly recurrentMs?: number;
  readonly backwardRecurrentMs?: number;
  /**
   * max |Δ| of the timed kernel's output against the CPU reference over its first CHECKED_STEPS steps and
   * CHECKED_SEQUENCES sequences (absent: the layer is past CHECK_MAX_WEIGHTS, not checked). Past CHECK_TOLERANCE
   * the row has no time, and its reason says so.
   */
  readonly maxError?: number;
  /** The sparse kernel's layout at this batch. */
  readonly layout?: {
    batchTile: number;
    threads: number;
    threadsPerRowGroup: number;
    rowsPerThread: number;
    pairsPerThread: number;
    /** CTAs of one replica, and the replicas a launch at this batch runs (one per tile, or tiles in turn). */
    ctas: number;
    replicas: number;
    /** CTAs resident on one SM. */
    ctasPerSm: number;
  };
}

/**
 * Steps of every timed launch's output compared with the CPU reference (float64, W_hh dense or W_hh ⊙ mask) before its
 * time is kept: three cover the first step's own initial state and two exchanges of h between the CTAs.
 */
export const CHECKED_STEPS = 3;
/**
 * The largest |Δ| a timed output (a tanh or sigmoid of it: in [−1, 1]) may differ from the reference by: fp32 sums of
 * up to thousands of terms (the GPU tests' 5e-5 is for hidden ≤ 256); a wrong kernel misses by O(0.1).
 */
export const CHECK_TOLERANCE = 1e-3;
/** Sequences of a batch compared (each is independent of the others). */
export const CHECKED_SEQUENCES = 4;
/** W_hh sizes (G·H·H) up to which the reference runs: its dense float64 matrices, 0.5 GB each at the limit. */
export const CHECK_MAX_WEIGHTS = 1 << 26;

/** W_hh [rows, cols] of a row list, dense, in float64 (pruned weights 0). */
export function denseOfRows(m: SparseRows): Float64Array {
  const w = new Float64Array(m.rows * m.cols);
  for (let r = 0; r < m.rows; r++) {
    for (let e = m.start[r]!; e < m.start[r + 1]!; e++) w[r * m.cols + m.index[e]!] = m.value[e]!;
  }
  return w;
}

/** max |a − b| over the first n elements (NaN anywhere: Infinity). */
export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>, n: number): number {
  let m = 0;
  for (let i = 0; i < n; i++) {
    const e = Math.abs(a[i]! - b[i]!);
    if (!(e <= m)) m = Number.isNaN(e) ? Number.POSITIVE_INFINITY : e;
  }
  return m;
}

/** The sizes of one cell: those asked for, and the largest sparse layer of each density (marked). */
function sizesOf(o: SparseRnnBenchOptions, cell: RnnCellName, largest: Record<string, number>): number[] {
  const out = new Set(o.hiddens);
  if (o.largest) for (const d of o.densities) out.add(largest[`${cell}/${d}`]!);
  return [...out].sort((a, b) => a - b);
}

export function runSparseRnnBench(
  o: SparseRnnBenchOptions,
  log: (line: string) => void = () => {},
): { device: string; rows: SparseRnnBenchRow[]; largest: Record<string, number> } {
  const gpu = openRnnGpu(o.device);
  const { device, stream } = gpu;
  const d = device.driver;
  const model = deviceModelOfCuda(device.props);
  const rows: SparseRnnBenchRow[] = [];
  const largest: Record<string, number> = {};
  for (const cell of o.cells) {
    for (const density of o.densities) largest[`${cell}/${density}`] = largestSparseHidden(cell, density, model, 4);
  }
  const production = SPARSE_LADDER.at(-1)!;
  // the production kernel at the launch rule's tile, then with `ladder` each rung at the widest tile the batch fills
  // (the paper's wide loads: 4 columns at batch 4, where the rule may take a narrower tile on more replicas)
  const runs: { rung: (typeof SPARSE_LADDER)[number]; ladder: boolean }[] = [
    { rung: production, ladder: false },
    ...(o.ladder ? SPARSE_LADDER.map((rung) => ({ rung, ladder: true })) : []),
  ];
  const start = CudaEvent.create({ timing: true });
  const end = CudaEvent.create({ timing: true });
  const time = (f: () => void): number => {
    start.record(stream);
    f();
    end.record(stream);
    end.synchronize();
    return end.elapsedMsSince(start);
  };
  const timed = (f: () => void): number => {
    for (let i = 0; i < 2; i++) f();
    const xs: number[] = [];
    for (let r = 0; r < o.repeats; r++) xs.push(time(f));
    return median(xs);
  };
  for (const cell of o.cells) {
    const G = gatesOf(cell);
    for (const hidden of sizesOf(o, cell, largest)) {
      const H = hidden;
      const isLargest = (density: number) => o.largest && largest[`${cell}/${density}`] === H;
      const densities = o.densities.filter((dd) => o.hiddens.includes(H) || isLargest(dd));
      let dense: PersistentRnnLayer | null = null;
      let denseReason: string | undefined;
      try {
        dense = PersistentRnnLayer.create(gpu, cell, H, "fp32");
      } catch (e) {
        if (!(e instanceof RnnDoesNotFitError)) throw e;
        denseReason = e.message;
      }
      // the masks, one per density (values scaled so that the products stay O(1))
      const masks = new Map<number, SparseRows>();
      for (const density of densities) {
        const m = randomRowBalancedRows(G * H, H, Math.max(1, Math.round(density * H)), 17);
        const scale = 1 / Math.sqrt(Math.max(1, Math.round(density * H)));
        for (let i = 0; i < m.value.length; i++) m.value[i]! *= scale;
        masks.set(density, m);
      }
      // the sparse layers by density and rung, kept over the batches (their builds are per batch tile)
      const layers = new Map<string, SparsePersistentRnnLayer | string>();
      const layerOf = (density: number, rung: (typeof SPARSE_LADDER)[number], batch: number, tile: WideLoad | null) => {
        const key = `${density}/${rung.name}/${tile}`;
        let l = layers.get(key);
        if (l === undefined) {
          const s = new SparsePersistentRnnLayer(gpu, cell, H, {
            sync: rung.sync,
            wideLoads: rung.wideLoads,
            order: rung.order,
            tile,
          });
          const why = s.setRows(masks.get(density)!, batch);
          if (why !== null) s.dispose();
          l = why ?? s;
          layers.set(key, l);
        }
        return l;
      };
      for (const batch of o.batches) {
        const N = batch * o.steps;
        const ptrs: DevicePtr[] = [];
        const alloc = sawtoothAllocator(d, ptrs);
        const ws = new RnnWorkspace(gpu, cell, H, N, batch);
        try {
          const scale = 1 / Math.sqrt(H);
          // W_ih is [G·H, H] (input size H, as `vpps bench rnn`); W_hh is dense for the dense layer only
          const weights = {
            wih: alloc(G * H * H, scale),
            whh: dense ? alloc(G * H * H, scale) : alloc(1),
            bih: alloc(G * H),
            bhh: alloc(G * H),
          };
          const batchSizes = new Int32Array(o.steps).fill(batch);
          const offsets = Int32Array.from({ length: o.steps }, (_, t) => t * batch);
          const dB = alloc(o.steps);
          const dO = alloc(o.steps);
          d.memcpyHtoD(dB, batchSizes);
          d.memcpyHtoD(dO, offsets);
          const a: BackwardArgs = {
            weights,
            x: alloc(N * H, 1),
            h0: alloc(batch * H),
            c0: alloc(batch * H),
            y: alloc(N * H),
            ldy: H,
            hn: alloc(batch * H),
            cn: alloc(batch * H),
            steps: { batchSizes, offsets, total: N, dBatchSizes: dB, dOffsets: dO },
            reverse: false,
            train: true,
            ws,
            grads: { wih: alloc(1), whh: alloc(1), bih: alloc(1), bhh: alloc(1) },
            dy: alloc(N * H, 0.1),
            lddy: H,
            dhn: alloc(batch * H),
            dcn: alloc(batch * H),
            dx: alloc(1),
            dxAccumulate: false,
            dh0: alloc(batch * H),
            dc0: alloc(batch * H),
          };
          const base = { cell, hidden: H, batch, steps: o.steps };
          // the CPU reference of the first CHECKED_STEPS steps of the first CHECKED_SEQUENCES sequences (the others
          // are independent of them), from the same inputs (downloaded), per W_hh; none for layers too large for it
          const c = Math.min(CHECKED_STEPS, o.steps);
          const bs = Math.min(CHECKED_SEQUENCES, batch);
          const checkable = G * H * H <= CHECK_MAX_WEIGHTS;
          const download = (p: DevicePtr, floats: number) => {
            const out = new Float32Array(floats);
            d.memcpyDtoH(out, p, 4 * floats);
            return out;
          };
          /** Rows [t·batch, t·batch + bs) of each of the first c steps of a [N, w] buffer, in float64. */
          const firstSequences = (all: Float32Array, w: number) => {
            const out = new Float64Array(c * bs * w);
            for (let t = 0; t < c; t++) out.set(all.subarray(t * batch * w, (t * batch + bs) * w), t * bs * w);
            return out;
          };
          let host: {
            x: Float64Array;
            xW: Float64Array | undefined;
            h0: Float64Array;
            c0: Float64Array;
            biasIh: Float64Array;
            biasHh: Float64Array;
          } | null = null;
          const f64 = (p: DevicePtr, floats: number) => Float64Array.from(download(p, floats));
          const referenceY = (whh: Float64Array) => {
            const layer = { cell, hidden: H, inputSize: H, batchSizes: new Array(c).fill(bs), reverse: false };
            host ??= {
              x: firstSequences(download(a.x, c * batch * H), H),
              xW: undefined,
              h0: f64(a.h0, bs * H),
              c0: f64(a.c0, bs * H),
              biasIh: f64(weights.bih, G * H),
              biasHh: f64(weights.bhh, G * H),
            };
            const w = {
              weightIh: host.xW ? new Float64Array(0) : f64(weights.wih, G * H * H),
              weightHh: whh,
              biasIh: host.biasIh,
              biasHh: host.biasHh,
            };
            const r = referenceLayerForward(layer, host.x, w, host.h0, G === 4 ? host.c0 : null, host.xW);
            host.xW = r.xW; // the input projection, the same for every W_hh
            return r.y;
          };
          /** max |Δ| of the last launch's y (its first steps and sequences) against `ref`. */
          const errorOf = (ref: Float64Array) =>
            maxAbsDiff(firstSequences(download(a.y, c * batch * H), H), ref, ref.length);
          const wrong = (err: number) =>
            `its output differs from the CPU reference by ${err.toPrecision(3)} (> ${CHECK_TOLERANCE}) in the first ${c} steps: not timed`;
          if (dense && o.hiddens.includes(H)) {
            dense.inputProjection(a, H);
            const ms = timed(() => dense.forwardRecurrent(a));
            dense.checkStatus(ws);
            const err = checkable ? errorOf(referenceY(f64(weights.whh, G * H * H))) : undefined;
            const row: SparseRnnBenchRow =
              err === undefined || err <= CHECK_TOLERANCE
                ? {
                    ...base,
                    density: null,
                    rung: "dense",
                    recurrentMs: ms,
                    ...(err === undefined ? {} : { maxError: err }),
                  }
                : { ...base, density: null, rung: "dense", reason: wrong(err), maxError: err };
            rows.push(row);
            log(JSON.stringify(row));
          } else if (o.hiddens.includes(H)) {
            const row: SparseRnnBenchRow = { ...base, density: null, rung: "dense", reason: denseReason! };
            rows.push(row);
            log(JSON.stringify(row));
          }
          for (const density of densities) {
            let sparseRef: Float64Array | null = null;
            for (const { rung, ladder } of runs) {
              const l = layerOf(density, rung, batch, ladder ? batchTileFor(batch) : null);
              const of = { ...base, density, rung: rung.name, ...(ladder ? { ladder } : {}) };
              if (typeof l === "string") {
                const row: SparseRnnBenchRow = { ...of, reason: l };
                rows.push(row);
                log(JSON.stringify(row));
                continue;
              }
              l.inputProjection(a, H);
              let ms: number;
              try {
                ms = timed(() => l.forwardRecurrent(a));
              } catch (e) {
                // a layer that fits at the first batch but whose kernel of this batch's tile does not (one line)
                if (!(e instanceof Error) || !e.message.startsWith("SparsePersistentRnnLayer:")) throw e;
                const row: SparseRnnBenchRow = { ...of, reason: e.message };
                rows.push(row);
                log(JSON.stringify(row));
                continue;
              }
              l.checkStatus(ws);
              if (checkable) sparseRef ??= referenceY(denseOfRows(masks.get(density)!));
              const err = sparseRef ? errorOf(sparseRef) : undefined;
              if (err !== undefined && !(err <= CHECK_TOLERANCE)) {
                const row: SparseRnnBenchRow = { ...of, reason: wrong(err), maxError: err };
                rows.push(row);
                log(JSON.stringify(row));
                continue;
              }
              let bms: number | undefined;
              if (!ladder && o.backward) {
                bms = timed(() => l.backwardRecurrent(a));
                l.checkStatus(ws);
              }
              const p = l.last.forward!;
              const row: SparseRnnBenchRow = {
                ...of,
                recurrentMs: ms,
                ...(err === undefined ? {} : { maxError: err }),
                ...(bms === undefined ? {} : { backwardRecurrentMs: bms }),
                layout: {
                  batchTile: p.batchTile,
                  threads: p.threads,
                  threadsPerRowGroup: p.threadsPerRowGroup,
                  rowsPerThread: p.rowsPerThread,
                  pairsPerThread: p.pairsPerThread,
                  ctas: p.ctas,
                  replicas: Math.min(Math.ceil(base.batch / p.batchTile), p.replicas),
                  ctasPerSm: p.ctasPerSm,
                },
              };
              rows.push(row);
              log(JSON.stringify(row));
            }
          }
        } finally {
          ws.dispose();
          for (const p of ptrs) d.memFree(p);
        }
      }
      for (const l of layers.values()) if (typeof l !== "string") l.dispose();
      dense?.dispose();
    }
  }
  start.destroy();
  end.destroy();
  gpu.dispose();
  return { device: device.props.name, rows, largest };
}

/** One JSON line of bench/pytorch/sparse_rnn.py: cuBLAS GEMM or cuSPARSE SpMM per step, in a CUDA graph. */
export interface TorchSparseRow {
  readonly hidden: number;
  readonly batch: number;
  readonly steps: number;
  /** null: the dense GEMM. */
  readonly density: number | null;
  readonly impl: "cublas" | "cusparse";
  readonly ms: number;
}

const fmt = (ms: number | undefined) => (ms === undefined ? "—" : ms < 10 ? ms.toFixed(3) : ms.toFixed(1));

/** The report: per (cell, hidden, batch) dense and each density's sparse ms, speed-ups, the ladder, PyTorch's rows. */
export function sparseRnnBenchMarkdown(
  device: string,
  rows: readonly SparseRnnBenchRow[],
  torch: readonly TorchSparseRow[] = [],
  largest: Record<string, number> = {},
): string {
  const out: string[] = [
    `# Sparse persistent RNN layers on ${device}`,
    "",
    "Recurrent forward (the input projection done before), fp32, medians in ms; `sparse` is the production kernel",
    "(Lamport, wide loads, bank-aware order), `×dense` its speed-up over the dense persistent layer of the same size and",
    "batch in the same run; `bwd` the sparse recurrent backward. cuBLAS / cuSPARSE: bench/pytorch/sparse_rnn.py (a GEMM",
    "or torch.sparse CSR SpMM per step plus the cell's pointwise ops, captured in a CUDA graph), where merged.",
    "",
  ];
  const largestLine = Object.entries(largest)
    .map(([k, h]) => `${k.replace(/\/(.*)$/, (_, dd) => ` ${Number((100 * Number(dd)).toPrecision(3))}%`)}: ${h}`)
    .join(", ");
  if (largestLine) out.push(`Largest sparse layers (training, batch 4): ${largestLine}.`, "");
  const checked = rows.filter((r) => r.recurrentMs !== undefined && r.maxError !== undefined);
  const unchecked = rows.filter((r) => r.recurrentMs !== undefined && r.maxError === undefined);
  if (checked.length > 0 || unchecked.length > 0) {
    const worst = Math.max(0, ...checked.map((r) => r.maxError!));
    out.push(
      `Checked: ${checked.length} timed launches' outputs against the CPU reference (float64) over their ` +
        `first ${CHECKED_STEPS} steps and ${CHECKED_SEQUENCES} sequences, largest max |Δ| ${worst.toExponential(2)} ` +
        `(limit ${CHECK_TOLERANCE})${unchecked.length > 0 ? `; ${unchecked.length} not checked (W_hh past ${CHECK_MAX_WEIGHTS.toLocaleString("en")} weights)` : ""}.`,
      "",
    );
  }
  const torchMs = (impl: "cublas" | "cusparse", h: number, b: number, s: number, dd: number | null) =>
    torch.find((t) => t.impl === impl && t.hidden === h && t.batch === b && t.steps === s && t.density === dd)?.ms;
  out.push(
    "| cell | hidden | batch | density | dense | sparse | ×dense | bwd | cuBLAS | ×cuBLAS | cuSPARSE | ×cuSPARSE |",
    "| ---- | -----: | ----: | ------: | ----: | -----: | -----: | --: | -----: | ------: | -------: | --------: |",
  );
  const prod = SPARSE_LADDER.at(-1)!.name;
  for (const r of rows) {
    if (r.rung !== prod || r.ladder) continue;
    const dense = rows.find(
      (x) => x.rung === "dense" && x.cell === r.cell && x.hidden === r.hidden && x.batch === r.batch,
    );
    const ratio = (a?: number, b?: number) => (a !== undefined && b !== undefined ? `${(a / b).toFixed(2)}×` : "—");
    const cublas = r.cell.startsWith("rnn") ? torchMs("cublas", r.hidden, r.batch, r.steps, null) : undefined;
    const cusparse = r.cell.startsWith("rnn") ? torchMs("cusparse", r.hidden, r.batch, r.steps, r.density) : undefined;
    out.push(
      `| ${r.cell} | ${r.hidden} | ${r.batch} | ${Number((100 * r.density!).toPrecision(3))}% | ${fmt(dense?.recurrentMs)} | ` +
        `${r.reason ? (r.maxError !== undefined ? "wrong output" : "does not fit") : fmt(r.recurrentMs)} | ${ratio(dense?.recurrentMs, r.recurrentMs)} | ` +
        `${fmt(r.backwardRecurrentMs)} | ${fmt(cublas)} | ${ratio(cublas, r.recurrentMs)} | ${fmt(cusparse)} | ` +
        `${ratio(cusparse, r.recurrentMs)} |`,
    );
  }
  const ladder = rows.filter((r) => r.ladder);
  if (ladder.length > 0) {
    out.push(
      "",
      "## The ladder",
      "",
      "Each rung adds one step to the one before: naive (scalar loads of h, naive order, a grid barrier per step) →",
      "wide loads (one ld.shared.v{2,4} per pair) → bank-aware order → Lamport flags instead of the barrier. Every rung",
      "runs at the widest batch tile the batch fills (the paper's wide loads: 4 columns from batch 4); `launch rule` is",
      "the production kernel at the rule's launch, the `sparse` column above (at batch 4 the rule may take a narrower",
      "tile on more replicas).",
      "",
      `| cell | hidden | batch | density | tile | ${SPARSE_LADDER.map((r) => r.name).join(" | ")} | launch rule |`,
      `| ---- | -----: | ----: | ------: | ---: | ${SPARSE_LADDER.map(() => "---:").join(" | ")} | ---: |`,
    );
    const keys = new Set(ladder.map((r) => `${r.cell}/${r.hidden}/${r.batch}/${r.density}`));
    for (const k of keys) {
      const [cell, h, b, dd] = k.split("/");
      const at = (name: string, isLadder: boolean) =>
        rows.find(
          (r) =>
            r.rung === name &&
            !!r.ladder === isLadder &&
            r.cell === cell &&
            r.hidden === Number(h) &&
            r.batch === Number(b) &&
            r.density === Number(dd),
        );
      const tile = SPARSE_LADDER.map((r) => at(r.name, true)?.layout?.batchTile).find((t) => t !== undefined);
      out.push(
        `| ${cell} | ${h} | ${b} | ${Number((100 * Number(dd)).toPrecision(3))}% | ${tile ?? "—"} | ` +
          `${SPARSE_LADDER.map((r) => fmt(at(r.name, true)?.recurrentMs)).join(" | ")} | ${fmt(at(prod, false)?.recurrentMs)} |`,
      );
    }
  }
  const missing = rows.filter((r) => r.reason);
  if (missing.length > 0) {
    out.push("", "Not timed:", "");
    for (const r of missing) {
      out.push(
        `- ${r.cell} ${r.hidden} batch ${r.batch}${r.density === null ? " dense" : ` ${Number((100 * r.density).toPrecision(3))}% ${r.rung}${r.ladder ? " (ladder)" : ""}`}: ${r.reason}`,
      );
    }
  }
  return `${out.join("\n")}\n`;
}

/** The JSON lines of bench/pytorch/sparse_rnn.py (blank lines skipped). */
export function parseTorchSparseRows(text: string): TorchSparseRow[] {
  return text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as TorchSparseRow);
}
