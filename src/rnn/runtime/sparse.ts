/**
 * One sparse persistent recurrent layer direction on a GPU (codegen/sparse-*.ts; docs/RNN.md, "The sparse kernels"):
 * W_hh pruned by a mask, held as ⟨index, value⟩ pairs in the registers of one persistent launch per direction and
 * pass. The input projection and the weight-gradient GEMMs are the dense layer's (layer-base.ts); W_hh's gradient is
 * computed dense by the GEMM and kept at the kept weights by the caller's mask.
 *
 * The pairs come from the host: `setWeights(W_hh, mask)` before a forward (or after W_hh changed), the forward's pairs
 * (rows of W_hh) and the backward's (its columns) packed for the plan of each batch tile the launches use (the widest
 * wide load a batch fills: batchTileFor), in the naive or the bank-aware order, and uploaded when a launch first needs
 * them. The plans are built for the mask's own pairs per row (sparsePairsPerRow), so any mask fits its plan. A launch
 * over more sequences than one tile runs the most replicas of its layout that keep the tile (each replica on its own
 * tiles of a step, the layer spread over fewer CTAs), and the steps' vectors travel through the layer's exchange
 * buffer (sparse-product.ts).
 */
import { PersistentKernelError, readStatusError, STATUS_WORDS } from "../../codegen/grid-barrier.js";
import { type DeviceModel, deviceModelOfCuda } from "../../cuda/hw/device-model.js";
import { type CudaKernel, type CudaModule, type DevicePtr, loadModule } from "../../cuda/index.js";
import {
  exchangeShape,
  indexWords,
  kernelArgs,
  SPARSE_BACKWARD_PARAMS,
  SPARSE_FORWARD_PARAMS,
  SPARSE_KERNEL_NAMES,
  type SparseKernelOptions,
  sparseBackwardSource,
  sparseForwardSource,
  sparseSharedBytes,
} from "../codegen/index.js";
import {
  type BankAwareMethod,
  bankAwareOrder,
  packPairsWithSlots,
  planSparseRnnLayer,
  type RnnCellName,
  refillPairValues,
  rowOrderOf,
  type SparsePairLayout,
  type SparseRnnKernelPlan,
  type SparseRnnPlanResult,
  type SparseRows,
  samePattern,
  sparseLaunchPlan,
  sparsePairsPerRow,
  sparseRowsOf,
  transposeSparseRows,
  type WideLoad,
} from "../plan/index.js";
import { gatesOf } from "../spec.js";
import { type BackwardArgs, type ForwardArgs, type RnnGpu, RnnLayerBase, type RnnWorkspace } from "./layer-base.js";
import type { RnnMaskKernel } from "./masked-gradient.js";

/** Build options of a sparse layer: the kernels' (the ladder's code switches) and the pairs' order. */
export interface SparseRnnLayerOptions extends SparseKernelOptions {
  /** The order of the pairs (default "bank-aware": plan/sparse-banks.ts's balanced order). */
  readonly order?: "naive" | "bank-aware";
  /**
   * Every launch at this batch tile (or the widest its batch fills, if narrower) instead of the launch rule's
   * (plan/sparse-launch.ts): comparisons, e.g. the benchmark's ladder at the paper's wide loads of 4 columns.
   * Default: none (the rule's).
   */
  readonly tile?: WideLoad | null;
}

/** A mask's sparse layer does not fit the registers (or shared memory) of this GPU: the reason, in one line. */
export function sparsePlanFor(
  cell: RnnCellName,
  hidden: number,
  model: DeviceModel,
  batch: number,
  csr: SparseRows,
): ReturnType<typeof planSparseRnnLayer> {
  const density = csr.start[csr.rows]! / (csr.rows * csr.cols);
  return planSparseRnnLayer(cell, hidden, model, {
    density: Math.max(density, 1 / (csr.rows * csr.cols)),
    batch,
    forwardPairsPerRow: Math.max(1, sparsePairsPerRow(csr, "forward")),
    backwardPairsPerRow: Math.max(1, sparsePairsPerRow(csr, "backward")),
  });
}

type Kind = "forward" | "backward";

/**
 * The launch of one kernel of a mask's layer over `batch` sequences (plan/sparse-launch.ts), with the comparison
 * switches of the environment: VPPS_RNN_SPARSE_TILE=1|2|4, VPPS_RNN_SPARSE_CPS=1|2, VPPS_RNN_SPARSE_REPLICAS=N,
 * VPPS_RNN_SPARSE_GROUP=T, VPPS_RNN_SPARSE_SLACK=N (padding slots per piece; `order` "naive" plans none: its pairs
 * stay in their threads' first slots).
 */
export function sparseKernelPlanFor(
  cell: RnnCellName,
  hidden: number,
  model: DeviceModel,
  kind: Kind,
  batch: number,
  csr: SparseRows,
  order: "naive" | "bank-aware" = "bank-aware",
  pinnedTile: WideLoad | null = null,
): SparseRnnPlanResult {
  const int = (name: string, least = 1) => {
    const v = Number.parseInt(process.env[name] ?? "", 10);
    return Number.isInteger(v) && v >= least ? v : undefined;
  };
  const slack = order === "naive" ? 0 : (int("VPPS_RNN_SPARSE_SLACK", 0) ?? "auto");
  if (pinnedTile !== null && pinnedTile !== 1 && pinnedTile !== 2 && pinnedTile !== 4) {
    throw new RangeError(
      `SparsePersistentRnnLayer: tile must be 1, 2 or 4 batch columns (or null); got ${String(pinnedTile)}`,
    );
  }
  const tile = pinnedTile ?? int("VPPS_RNN_SPARSE_TILE");
  const cps = int("VPPS_RNN_SPARSE_CPS");
  return sparseLaunchPlan(cell, hidden, model, kind, batch, csr, {
    ...(tile === 1 || tile === 2 || tile === 4 ? { tile } : {}),
    ...(cps === 1 || cps === 2 ? { ctasPerSm: cps } : {}),
    ...(int("VPPS_RNN_SPARSE_REPLICAS") === undefined ? {} : { maxReplicas: int("VPPS_RNN_SPARSE_REPLICAS")! }),
    ...(int("VPPS_RNN_SPARSE_GROUP") === undefined ? {} : { threadsPerRowGroup: int("VPPS_RNN_SPARSE_GROUP")! }),
    slack,
  });
}

/**
 * The bank-aware method of the comparison switch VPPS_RNN_SPARSE_BANKS=balanced|warp|algorithm-1 (default: balanced,
 * plan/sparse-banks.ts); anything else is refused by name.
 */
export function bankMethodSwitch(): BankAwareMethod | undefined {
  const v = process.env.VPPS_RNN_SPARSE_BANKS;
  if (v === undefined || v === "") return undefined;
  if (v === "balanced" || v === "warp" || v === "algorithm-1") return v;
  throw new RangeError(`VPPS_RNN_SPARSE_BANKS must be balanced, warp or algorithm-1; got '${v}'`);
}

/** The compiled kernel of one kind, batch tile and replica count, and its pairs uploaded for the weights of `version`. */
interface KernelBuild {
  readonly plan: SparseRnnKernelPlan;
  /** Replicas a launch of this build runs at most (one per tile). */
  readonly replicas: number;
  readonly fn: CudaKernel;
  readonly module: CudaModule;
  pairs?: {
    /** The weights (`version`) and mask (`pattern`) they were uploaded for. */
    version: number;
    pattern: number;
    values: DevicePtr;
    indices: DevicePtr;
    /** The row order [ctas][rowGroups·rowsPerThread] (sparse-pairs.ts, rowOrder). */
    rowmap: DevicePtr;
    /** Where each kept entry sits in `host` (pairSlots), and the values as uploaded (for refills in place). */
    slots: Int32Array;
    host: Float32Array;
    /** For refills from W_hh on the device (refreshValues): `slots` and each entry's element of W_hh, uploaded. */
    gather?: { slots: DevicePtr; from: DevicePtr; n: number };
  };
}

export class SparsePersistentRnnLayer extends RnnLayerBase {
  /** Sparse layers made and not yet disposed in this process (a diagnostic: each holds compiled kernels and pairs). */
  static alive = 0;
  readonly path = "persistent" as const;
  readonly model: DeviceModel;
  readonly options: Required<SparseRnnLayerOptions>;
  /** By kind and batch (`${kind}/${batch}`), compiled when a launch first needs one. */
  private readonly builds = new Map<string, KernelBuild>();
  /** The exchange buffer of the steps' vectors (grown to the largest launch). */
  private xh: DevicePtr | null = null;
  private xhBytes = 0;
  /**
   * Bytes [lo, hi) of the exchange buffer that may hold something other than the pending mark: a Lamport forward
   * leaves the buffer as it found it (its kernel resets what it publishes: codegen/sparse-forward.ts), so only a new
   * buffer, a backward or barrier launch, or a failed launch makes a later Lamport launch fill it again.
   */
  private xhDirty = { lo: 0, hi: 0 };
  private csr: SparseRows | null = null;
  private transposed: SparseRows | null = null;
  /**
   * Where refreshValues last read W_hh on the device: the host's values (`csr`) are stale until a build that needs them
   * reads W_hh back from there.
   */
  private deviceWeights: DevicePtr | null = null;
  /** The weights' version (every setRows) and the mask's (a setRows whose entries differ from the last). */
  private version = 0;
  private pattern = 0;
  /** The batch the current mask was last found to fit (setRows plans only when the mask or the batch changes). */
  private fitBatch = -1;
  /** The grid barrier's step counter (barrier builds). */
  private readonly bar: DevicePtr;
  private readonly statusBack = new Int32Array(STATUS_WORDS);
  /** The plans of the last launch of each kind (tests and the benchmark). */
  readonly last: { forward?: SparseRnnKernelPlan; backward?: SparseRnnKernelPlan } = {};

  constructor(gpu: RnnGpu, cell: RnnCellName, hidden: number, options: SparseRnnLayerOptions = {}) {
    super(gpu, cell, hidden);
    SparsePersistentRnnLayer.alive++;
    this.model = deviceModelOfCuda(gpu.device.props);
    this.options = {
      sync: options.sync ?? "lamport",
      wideLoads: options.wideLoads ?? true,
      order: options.order ?? "bank-aware",
      tile: options.tile ?? null,
    };
    this.bar = gpu.device.driver.memAlloc(4);
  }

  /**
   * W_hh [G·H, H] (row-major) and its mask (nonzero: kept): the pairs of the next launches. Returns the reason in one
   * line where the mask's layer does not fit at `batch` sequences (the caller runs another path), else null.
   */
  setWeights(weights: Float32Array, mask: Uint8Array, batch = 4): string | null {
    return this.setRows(sparseRowsOf(weights, mask, gatesOf(this.cell) * this.hidden, this.hidden), batch);
  }

  /**
   * W_hh's kept entries as rows (CSR, [G·H, H]): the pairs of the next launches, or the reason in one line where
   * the layer does not fit at `batch` sequences.
   */
  setRows(csr: SparseRows, batch = 4): string | null {
    if (this.hidden % 4 !== 0) {
      return `the sparse kernels load h in 16-byte pieces: hidden ${this.hidden} is not a multiple of 4`;
    }
    const same = this.csr !== null && samePattern(this.csr, csr);
    if (!same || batch !== this.fitBatch) {
      const r = sparsePlanFor(this.cell, this.hidden, this.model, batch, csr);
      if (!r.fits) return r.reason;
      this.fitBatch = batch;
    }
    // the same mask keeps its plans and the pairs' order: the next launches refill the values in place
    if (!same) this.pattern++;
    this.csr = csr;
    this.transposed = null;
    this.deviceWeights = null;
    this.version++;
    return null;
  }

  /**
   * New values of W_hh [G·H, H] at `whh` on the device under the current mask (the caller knows it did not move):
   * every build's pairs gathered from there on the stream, no host round trip. A build made later (another batch)
   * reads W_hh back from `whh` first, so it must still hold these values then (the same training step).
   */
  refreshValues(whh: DevicePtr, kernel: RnnMaskKernel): void {
    const csr = this.csr;
    if (csr === null) throw new Error("SparsePersistentRnnLayer: setWeights before refreshValues");
    this.version++;
    this.deviceWeights = whh;
    const d = this.gpu.device.driver;
    for (const [key, b] of this.builds) {
      const pairs = b.pairs;
      if (!pairs || pairs.pattern !== this.pattern) continue;
      if (!pairs.gather) {
        const rows = key.startsWith("forward/") ? csr : (this.transposed ??= transposeSparseRows(csr));
        const from = new Uint32Array(pairs.slots.length);
        const H = this.hidden;
        for (let r = 0; r < rows.rows; r++) {
          for (let e = rows.start[r]!; e < rows.start[r + 1]!; e++) {
            // forward rows are W_hh's rows; the backward's are its columns, entry (column r, row index[e])
            from[e] = rows === csr ? r * H + rows.index[e]! : rows.index[e]! * H + r;
          }
        }
        const slots = d.memAlloc(Math.max(4, pairs.slots.byteLength));
        d.memcpyHtoD(slots, pairs.slots);
        const fromPtr = d.memAlloc(Math.max(4, from.byteLength));
        d.memcpyHtoD(fromPtr, from);
        pairs.gather = { slots, from: fromPtr, n: from.length };
      }
      kernel.gatherPairs(pairs.values, pairs.gather.slots, pairs.gather.from, whh, pairs.gather.n, this.stream);
      pairs.version = this.version;
    }
  }

  /** The host's values of the current mask read back from where refreshValues last read W_hh (see there). */
  private pullWeights(): void {
    const csr = this.csr;
    if (this.deviceWeights === null || csr === null) return;
    const G = gatesOf(this.cell);
    const dense = new Float32Array(G * this.hidden * this.hidden);
    this.gpu.stream.synchronize();
    this.gpu.device.driver.memcpyDtoH(dense, this.deviceWeights);
    const H = this.hidden;
    const value = new Float32Array(csr.value.length);
    for (let r = 0; r < csr.rows; r++) {
      for (let e = csr.start[r]!; e < csr.start[r + 1]!; e++) value[e] = dense[r * H + csr.index[e]!]!;
    }
    this.csr = { ...csr, value };
    this.transposed = null;
    this.deviceWeights = null;
  }

  /**
   * Compiles the kernels a launch over `batch` sequences runs (of `kinds`) and uploads their pairs, or returns the
   * reason in one line where a kernel cannot run (it spills under this GPU's compiler, or its CTA cannot be resident).
   */
  prepare(batch: number, kinds: readonly Kind[] = ["forward", "backward"]): string | null {
    try {
      for (const kind of kinds) this.buildFor(kind, batch);
      return null;
    } catch (e) {
      if (e instanceof Error && e.message.startsWith("SparsePersistentRnnLayer: ")) {
        return e.message.slice("SparsePersistentRnnLayer: ".length);
      }
      throw e;
    }
  }

  /** The build of one kind for a launch over `batch` sequences, its pairs uploaded for the current weights. */
  private buildFor(kind: Kind, batch: number): KernelBuild {
    const csr = this.csr;
    if (csr === null) throw new Error("SparsePersistentRnnLayer: setWeights before a launch");
    batch = Math.max(1, batch);
    const key = `${kind}/${batch}`;
    let b = this.builds.get(key);
    // the plan depends on the mask alone: planned again only when it changed
    const r =
      b?.pairs?.pattern === this.pattern
        ? null
        : sparseKernelPlanFor(
            this.cell,
            this.hidden,
            this.model,
            kind,
            batch,
            csr,
            this.options.order,
            this.options.tile,
          );
    if (r && !r.fits) throw new Error(`SparsePersistentRnnLayer: ${r.reason}`);
    const plan = r?.fits ? r.plan : b!.plan;
    // a new mask may need another plan (its pairs per row)
    if (b && !samePlan(plan, b.plan)) {
      this.dropBuild(key, b);
      b = undefined;
    }
    if (!b) {
      const opts: SparseKernelOptions = { sync: this.options.sync, wideLoads: this.options.wideLoads };
      const source = kind === "forward" ? sparseForwardSource(plan, opts) : sparseBackwardSource(plan, opts);
      const name = `rnn_sparse_${kind}_${this.cell}_${this.hidden}_${plan.batchTile}_${plan.ctas}_${plan.ctasPerSm}`;
      const module = loadModule(this.compile(name, source).cubin, `rnn sparse ${kind}`);
      this.modules.push(module);
      const fn = module.getFunction(SPARSE_KERNEL_NAMES[kind]);
      const bytes = sparseSharedBytes(plan);
      fn.setMaxDynamicSharedBytes(bytes);
      const attrs = fn.attributes();
      if (attrs.localBytes > 0) {
        throw new Error(`SparsePersistentRnnLayer: the ${kind} kernel spills (${attrs.localBytes} bytes per thread)`);
      }
      if (fn.maxActiveBlocksPerSm(plan.threads, bytes) < plan.ctasPerSm) {
        throw new Error(
          `SparsePersistentRnnLayer: the ${kind} kernel's ${plan.ctasPerSm === 1 ? "CTA" : `${plan.ctasPerSm} CTAs per SM`} cannot be resident`,
        );
      }
      const replicas = Math.min(Math.ceil(batch / plan.batchTile), plan.replicas);
      b = { plan, replicas, fn, module };
      this.builds.set(key, b);
    }
    if (b.pairs?.version !== this.version) {
      this.pullWeights();
      const csr = this.csr!;
      if (kind === "backward") this.transposed ??= transposeSparseRows(csr);
      const rows = kind === "forward" ? csr : this.transposed!;
      const d = this.gpu.device.driver;
      if (b.pairs?.pattern === this.pattern) {
        // the same mask: new values into their slots of the same order, and only the values uploaded
        refillPairValues(b.pairs.host, b.pairs.slots, rows);
        d.memcpyHtoD(b.pairs.values, b.pairs.host);
        b.pairs.version = this.version;
      } else {
        this.freePairs(b);
        const order = (l: SparsePairLayout) =>
          this.options.order === "bank-aware"
            ? bankAwareOrder(plan, l, this.options.wideLoads ? plan.batchTile : 1, bankMethodSwitch())
            : l;
        const { layout, slots } = packPairsWithSlots(rows, plan, order);
        const values = d.memAlloc(layout.values.byteLength);
        d.memcpyHtoD(values, layout.values);
        const indices = d.memAlloc(Math.max(4, 4 * indexWords(plan) * plan.threads * plan.ctas));
        d.memcpyHtoD(
          indices,
          new Uint32Array(layout.indices.buffer, layout.indices.byteOffset, layout.indices.byteLength / 4),
        );
        const rowOrder = rowOrderOf(layout);
        const rowmap = d.memAlloc(Math.max(4, rowOrder.byteLength));
        d.memcpyHtoD(rowmap, rowOrder);
        b.pairs = { version: this.version, pattern: this.pattern, values, indices, rowmap, slots, host: layout.values };
      }
    }
    return b;
  }

  /**
   * The exchange buffer of a `kind` launch of `b` over `steps` steps of at most `batch` sequences,
   * [steps][tiles][K·BT]: bytes [0, bytes) of a buffer grown to the largest launch, holding −0.0 (the pending mark)
   * for Lamport builds (filled where `xhDirty` says it may not; barrier builds copy only what was written). Its
   * pointer and tiles per step.
   */
  private exchange(kind: Kind, b: KernelBuild, steps: number, batch: number): { xh: DevicePtr; tiles: number } {
    const { tiles, bytes } = exchangeShape(b.plan, steps, batch);
    const d = this.gpu.device.driver;
    if (this.xh === null || this.xhBytes < bytes) {
      if (this.xh !== null) {
        this.gpu.stream.synchronize();
        d.memFree(this.xh);
      }
      this.xh = d.memAlloc(bytes);
      this.xhBytes = bytes;
      this.xhDirty = { lo: 0, hi: bytes };
    }
    const dirty = this.xhDirty;
    const lamport = this.options.sync === "lamport";
    if (lamport && dirty.lo < Math.min(dirty.hi, bytes)) {
      const floats = (Math.min(dirty.hi, bytes) - dirty.lo) / 4;
      this.fillPending(this.xh + dirty.lo, 1, floats, floats);
      this.xhDirty = bytes < dirty.hi ? { lo: bytes, hi: dirty.hi } : { lo: 0, hi: 0 };
    }
    // what the launch leaves: a Lamport forward restores its bytes; the others write values there
    if (!(lamport && kind === "forward")) {
      const d0 = this.xhDirty;
      this.xhDirty = { lo: 0, hi: Math.max(bytes, d0.lo < d0.hi ? d0.hi : 0) };
    }
    return { xh: this.xh, tiles };
  }

  private freePairs(b: KernelBuild): void {
    if (!b.pairs) return;
    const d = this.gpu.device.driver;
    this.gpu.stream.synchronize();
    d.memFree(b.pairs.values);
    d.memFree(b.pairs.indices);
    d.memFree(b.pairs.rowmap);
    if (b.pairs.gather) {
      d.memFree(b.pairs.gather.slots);
      d.memFree(b.pairs.gather.from);
    }
    b.pairs = undefined;
  }

  private dropBuild(key: string, b: KernelBuild): void {
    this.freePairs(b);
    this.builds.delete(key);
    this.modules.splice(this.modules.indexOf(b.module), 1);
    b.module.unload();
  }

  private resetSync(ws: RnnWorkspace): void {
    const d = this.gpu.device.driver;
    d.memsetD32Async(ws.status, 0, STATUS_WORDS, this.stream.handle);
    d.memsetD32Async(this.bar, 0, 1, this.stream.handle);
  }

  /**
   * What every launch of `kind` over packed steps starts with: its build (compiled, pairs uploaded), the exchange
   * buffer (filled) and the status block and step counter reset. A packed batch's first step holds every sequence.
   */
  private begin(kind: Kind, batchSizes: ArrayLike<number>, ws: RnnWorkspace) {
    const batch = Math.max(1, batchSizes[0] ?? 1);
    const b = this.buildFor(kind, batch);
    this.last[kind] = b.plan;
    const { xh, tiles } = this.exchange(kind, b, batchSizes.length, batch);
    this.resetSync(ws);
    return { b, xh, tiles };
  }

  /** The persistent grid of a build: its CTAs times the replicas a launch runs. */
  private launch(b: KernelBuild, args: ReturnType<typeof kernelArgs>): void {
    const p = b.plan;
    b.fn.launch(
      { grid: p.ctas * b.replicas, block: p.threads, sharedBytes: sparseSharedBytes(p), stream: this.stream },
      args,
    );
  }

  forwardRecurrent(a: ForwardArgs): void {
    const { total, batchSizes } = a.steps;
    const { b, xh, tiles } = this.begin("forward", batchSizes, a.ws);
    const args = kernelArgs(
      SPARSE_FORWARD_PARAMS,
      {
        values: b.pairs!.values,
        indices: b.pairs!.indices,
        rowmap: b.pairs!.rowmap,
        xw: a.ws.xw,
        bhn: a.weights.bhh + 4 * 2 * this.hidden, // GRU's b_hn (unused otherwise)
        h0: a.h0,
        c0: a.c0,
        y: a.y,
        ldy: a.ldy,
        hn: a.hn,
        cn: a.cn,
        saved: a.ws.saved,
        train: a.train ? 1 : 0,
        batch_sizes: a.steps.dBatchSizes,
        offsets: a.steps.dOffsets,
        steps: batchSizes.length,
        total,
        reverse: a.reverse ? 1 : 0,
        xh,
        tiles,
        nrep: b.replicas,
        status: a.ws.status,
        bar: this.bar,
      },
      SPARSE_KERNEL_NAMES.forward,
    );
    this.launch(b, args);
  }

  backwardRecurrent(a: BackwardArgs): void {
    const { total, batchSizes } = a.steps;
    const { b, xh, tiles } = this.begin("backward", batchSizes, a.ws);
    // the carries between steps [2, B, H]: the workspace's stepwise carries (zeroed: a sequence's last step reads none)
    const B = batchSizes[0] ?? 0;
    this.gpu.device.driver.memsetD32Async(a.ws.stepCarry, 0, 2 * B * this.hidden, this.stream.handle);
    const args = kernelArgs(
      SPARSE_BACKWARD_PARAMS,
      {
        values: b.pairs!.values,
        indices: b.pairs!.indices,
        rowmap: b.pairs!.rowmap,
        saved: a.ws.saved,
        y: a.y,
        ldy: a.ldy,
        c0: a.c0,
        dy: a.dy,
        lddy: a.lddy,
        dhn: a.dhn,
        dcn: a.dcn,
        dpre_h: a.ws.dpreH,
        dpre_x: a.ws.dpreX,
        dh0: a.dh0,
        dc0: a.dc0,
        carry: a.ws.stepCarry,
        batch_sizes: a.steps.dBatchSizes,
        offsets: a.steps.dOffsets,
        steps: batchSizes.length,
        total,
        reverse: a.reverse ? 1 : 0,
        xh,
        tiles,
        nrep: b.replicas,
        status: a.ws.status,
        bar: this.bar,
      },
      SPARSE_KERNEL_NAMES.backward,
    );
    this.launch(b, args);
  }

  /** The exchange buffer's words as they are now, after the stream (tests: what a Lamport forward leaves). */
  exchangeWords(): Uint32Array | null {
    if (this.xh === null) return null;
    this.stream.synchronize();
    const out = new Uint32Array(this.xhBytes / 4);
    this.gpu.device.driver.memcpyDtoH(out, this.xh, this.xhBytes);
    return out;
  }

  checkStatus(ws: RnnWorkspace): void {
    this.stream.synchronize();
    this.gpu.device.driver.memcpyDtoH(this.statusBack, ws.status);
    const e = readStatusError(this.statusBack);
    if (!e) return;
    // a launch that ended early left values in the exchange buffer
    if (this.xhBytes > 0) this.xhDirty = { lo: 0, hi: this.xhBytes };
    const what = `sparse persistent ${this.cell} kernel, CTA ${e.cta}`;
    throw new PersistentKernelError(
      `${what}: step ${e.a} failed with code ${e.code} (row ${e.b}, column ${e.c}): a value another CTA writes never arrived`,
      e.code,
      e.cta,
      -1,
      e.words,
    );
  }

  override dispose(): void {
    for (const [key, b] of [...this.builds]) this.dropBuild(key, b);
    if (this.xh !== null) this.gpu.device.driver.memFree(this.xh);
    this.gpu.device.driver.memFree(this.bar);
    SparsePersistentRnnLayer.alive--;
    super.dispose();
  }
}

function samePlan(a: SparseRnnKernelPlan, b: SparseRnnKernelPlan): boolean {
  return (
    a.pairsPerRow === b.pairsPerRow &&
    a.pairsPerThread === b.pairsPerThread &&
    a.threads === b.threads &&
    a.rowsPerThread === b.rowsPerThread &&
    a.threadsPerRowGroup === b.threadsPerRowGroup &&
    a.batchTile === b.batchTile &&
    a.ctas === b.ctas &&
    a.ctasPerSm === b.ctasPerSm &&
    a.indexBits === b.indexBits
  );
}
