/**
 * The `rnn` graph op (src/ops/recurrent-op.ts) on the GPU engines (eager, node by node; autobatch, whose batches of
 * this op are one node each, through its node commands): each direction of the node runs as one layer
 * direction of the persistent RNN (src/rnn/runtime/: the input projection GEMM, one persistent launch — or the stepwise
 * path for a layer the registers cannot hold — and, backward, the second persistent launch and the weight-gradient
 * GEMMs), on the node's value and gradient addresses: y's direction d is the column block d·H of [N, D·H], dx and
 * the weight gradients are accumulated like every other node's. What the backward needs (the forward's saved
 * activations) stays in a workspace per node and direction until the graph is renewed (or the node is computed
 * again, as after an engine lays out a larger region); workspaces are reused.
 *
 * Everything runs on the engine's own stream (with its cuBLAS handle), also when the node's level is spread over the
 * stream pool: its arguments are complete there (the previous level joined back), and the next level forks after it.
 * The exception: the two directions of a bidirectional node are independent, so where the layer has a layout within
 * half the SMs, direction 1 runs on a second stream of this class (forked from and joined back to the engine's) at
 * the same time as direction 0, each persistent launch capped at half the SMs so that both are co-resident
 * (VPPS_RNN_CONCURRENT=0 turns this off). Its dx GEMM, which accumulates into the same buffer as direction 0's, runs
 * after the join.
 *
 * A node with a pruned W_hh (`density` < 1): its masks are derived on the device (RnnMaskKernel.pruneMatrix, the op's
 * order, row-balanced or plain), compared there with the last mask of the same W_hh; only where one moved (or is new) does the
 * forward read W_hh back to the host (waiting for the stream) and derive the mask with the op's own code, the one that
 * decides (so that every engine keeps the same weights) — a training step whose masks did not move only gathers the
 * sparse layers' values from W_hh on the device (SparsePersistentRnnLayer.refreshValues). Each direction runs on
 * the sparse persistent kernels (src/rnn/runtime/sparse.ts, one layer per node and direction holding its pairs)
 * where its mask fits them — the directions then run in turn, each launch on all SMs — else on the dense kernels with
 * W_hh ⊙ mask uploaded (the pruned weights as stored zeros), which it says once per layer size and density, in one
 * line with the reason. Either way the backward computes dW_hh into a buffer of its own and adds it at the kept
 * weights only (RnnMaskKernel).
 */
import { deviceModelOfCuda } from "../../cuda/hw/device-model.js";
import {
  type CudaDevice,
  CudaEvent,
  CudaStream,
  type DevicePtr,
  type GpuContext,
  PinnedBuffer,
} from "../../cuda/index.js";
import type { ComputationGraph } from "../../graph/graph.js";
import { applyMask } from "../../ops/prune.js";
import { gatesOf } from "../../ops/recurrent.js";
import { type RnnNode, rnnNode, rnnNodeMask } from "../../ops/recurrent-op.js";
import {
  type BackwardArgs,
  PersistentRnnLayer,
  type RnnDeviceWeights,
  RnnDoesNotFitError,
  type RnnGpu,
  type RnnLayerBase,
  RnnMaskKernel,
  RnnWorkspace,
  SparsePersistentRnnLayer,
  StepwiseRnnLayer,
} from "../../rnn/index.js";

/** A device buffer that grows (never shrinks), zero-filled on every growth. */
class Grown {
  ptr: DevicePtr = 0;
  floats = 0;
  constructor(private readonly device: CudaDevice) {}
  atLeast(floats: number): DevicePtr {
    if (floats > this.floats) {
      if (this.ptr) this.device.driver.memFree(this.ptr);
      this.floats = Math.max(floats, 2 * this.floats);
      this.ptr = this.device.driver.memAlloc(4 * this.floats);
      this.device.driver.memcpyHtoD(this.ptr, new Float32Array(this.floats));
    }
    return this.ptr;
  }
  free(): void {
    if (this.ptr) this.device.driver.memFree(this.ptr);
    this.ptr = 0;
    this.floats = 0;
  }
}

/** A direction's four tensors at the nodes' addresses (values or gradients); an absent b_hh reads `absent`. */
function addresses(
  w: { W_ih: number; W_hh: number; b_ih: number; b_hh: number },
  at: Float64Array,
  absent: DevicePtr,
): RnnDeviceWeights {
  return { wih: at[w.W_ih]!, whh: at[w.W_hh]!, bih: at[w.b_ih]!, bhh: w.b_hh >= 0 ? at[w.b_hh]! : absent };
}

/** A bidirectional node's two directions at once: each layer on its own stream, both launches within half the SMs. */
interface DirectionPair {
  readonly a: PersistentRnnLayer; // the engine's stream
  readonly b: PersistentRnnLayer; // the second stream
}

/** The second stream (and a cuBLAS handle on it) and the events that fork to it and join back. */
interface Lane {
  readonly gpu: RnnGpu;
  readonly fork: CudaEvent;
  readonly join: CudaEvent;
}

interface StepTable {
  readonly ptr: DevicePtr;
  readonly host: PinnedBuffer;
  readonly ints: number;
}

/** The sparse layers an engine keeps at most (their W_hh at addresses that move: computed in the graph). */
const SPARSE_LAYERS = 8;

/** The masks of pruned W_hh kept on the device at most (their W_hh at addresses that move: computed in the graph). */
const DEVICE_MASKS = 16;

/** A pruned W_hh's last mask on the device (bytes, what the prune kernel compares with) and what it ran on. */
interface DeviceMask {
  readonly last: DevicePtr;
  /** Its sparse layer (the key of `sparseLayers`), or why it runs on the dense kernels; null before the first. */
  choice: { readonly key: string; readonly layer: SparsePersistentRnnLayer } | string | null;
}

/** A pruned direction's device buffers, [G·H, H] floats each: W_hh ⊙ mask, the mask (0.0 / 1.0), dW_hh scratch. */
interface PrunedBuffers {
  readonly floats: number;
  readonly masked: DevicePtr;
  readonly mask: DevicePtr;
  readonly grad: DevicePtr;
}

interface NodeState {
  /** The layer of each direction (a pair's two, or the same one twice). */
  readonly layers: readonly RnnLayerBase[];
  readonly pair: DirectionPair | null;
  readonly ws: RnnWorkspace[];
  readonly steps: { dBatchSizes: DevicePtr; dOffsets: DevicePtr; batchSizes: Int32Array; offsets: Int32Array };
  /** Per direction, a pruned node's buffers (empty for a dense node). */
  readonly pruned: PrunedBuffers[];
}

/** The rnn nodes of one engine: their layers, workspaces and second stream; see the top of this file. */
export class GpuRnnNodes {
  private readonly gpu: RnnGpu;
  private readonly layers = new Map<string, RnnLayerBase>();
  /**
   * The sparse layers of pruned directions by `cell/H/kept/address of W_hh` (each holds its own pairs), most recently used
   * last. A parameter's address is the same in every graph, so one layer serves its W_hh in every batch (a key by
   * node id made a new layer, plan and pair upload for almost every batch, and kept them all); W_hh computed in the
   * graph moves, so at most SPARSE_LAYERS are kept, the least recently used not in use dropped first.
   */
  private readonly sparseLayers = new Map<string, SparsePersistentRnnLayer>();
  /** Row-balanced pruned W_hh's masks on the device by the same key as `sparseLayers`, most recently used last. */
  private readonly deviceMasks = new Map<string, DeviceMask>();
  /** The prune kernel's "changed" flags, one int per direction. */
  private readonly flags: Grown;
  /** Direction pairs by `cell/H` (null: the layer has no layout within half the SMs, or concurrency is off). */
  private readonly pairs = new Map<string, DirectionPair | null>();
  private lane: Lane | undefined;
  /** Workspaces not in use, by `cell/H`. */
  private readonly free = new Map<string, RnnWorkspace[]>();
  /** Node id → its workspaces and step table, for the current graph generation. */
  private readonly live = new Map<number, NodeState>();
  private liveGraph: ComputationGraph | undefined;
  private liveGeneration = -1;
  /** Stays all zeros: h0, c0, dhn, dcn and an absent b_hh. */
  private readonly zeros: Grown;
  /** Written and never read: hn, cn, dh0, dc0 and an absent b_hh's gradient. */
  private readonly sink: Grown;
  /**
   * Step tables (batch sizes, offsets) of the current graph's nodes, and those free for reuse (ints each holds), each
   * with a pinned host copy: an upload from pageable memory may wait for the stream's earlier work, which would keep
   * the host from building the next batch while the GPU runs this one.
   */
  private readonly stepTables: StepTable[] = [];
  private readonly freeTables: StepTable[] = [];
  /** Pruned directions' buffers not in use. */
  private readonly freePruned: PrunedBuffers[] = [];
  private maskKernel: RnnMaskKernel | undefined;
  /** The pruned layers (cell/H/density) already announced as running on the dense kernels. */
  private readonly announced = new Set<string>();
  /** The one-line notices of layers run on the stepwise path or pruned on the dense kernels (printed once each). */
  readonly notices: string[] = [];

  /** `engine` names the engine in messages ("eager engine", "autobatch (GPU)"). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly engine: string,
  ) {
    this.gpu = { device: ctx.device, stream: ctx.stream, cublas: ctx.cublas, cublasHandle: ctx.cublasHandle };
    this.zeros = new Grown(ctx.device);
    this.sink = new Grown(ctx.device);
    this.flags = new Grown(ctx.device);
  }

  private layer(cell: RnnLayerBase["cell"], hidden: number): RnnLayerBase {
    const key = `${cell}/${hidden}`;
    let l = this.layers.get(key);
    if (!l) {
      try {
        l = PersistentRnnLayer.create(this.gpu, cell, hidden);
      } catch (e) {
        if (!(e instanceof RnnDoesNotFitError)) throw e;
        const line = `vpps: rnn op: ${e.message}; running it on the non-persistent path (a GEMM per step)`;
        this.notices.push(line);
        process.stderr.write(`${line}\n`);
        l = new StepwiseRnnLayer(this.gpu, cell, hidden);
      }
      this.layers.set(key, l);
    }
    return l;
  }

  /** The second stream, created the first time a pair needs it. */
  private laneOf(): Lane {
    if (!this.lane) {
      const stream = CudaStream.create({ nonBlocking: true });
      const cublasHandle = this.gpu.cublas.create();
      this.gpu.cublas.setStream(cublasHandle, stream.handle);
      this.lane = {
        gpu: { ...this.gpu, stream, cublasHandle },
        fork: CudaEvent.create({ timing: false }),
        join: CudaEvent.create({ timing: false }),
      };
    }
    return this.lane;
  }

  /** The concurrent pair of a bidirectional layer, or null where there is none (then directions run in turn). */
  private pair(cell: RnnLayerBase["cell"], hidden: number): DirectionPair | null {
    const key = `${cell}/${hidden}`;
    const have = this.pairs.get(key);
    if (have !== undefined) return have;
    let pair: DirectionPair | null = null;
    // tried directly (not after building the full-SM layer, which a node with a pair never uses): a layer with no
    // layout within half the SMs has no pair, and the node then runs its directions in turn on the full layer
    if (process.env.VPPS_RNN_CONCURRENT !== "0") {
      const maxCtas = Math.floor(deviceModelOfCuda(this.gpu.device.props).smCount / 2);
      let a: PersistentRnnLayer | undefined;
      try {
        a = PersistentRnnLayer.create(this.gpu, cell, hidden, "fp32", { maxCtas });
        pair = { a, b: PersistentRnnLayer.create(this.laneOf().gpu, cell, hidden, "fp32", { maxCtas }) };
      } catch (e) {
        a?.dispose();
        if (!(e instanceof RnnDoesNotFitError)) throw e;
      }
    }
    this.pairs.set(key, pair);
    return pair;
  }

  /** Direction 1's work on the lane starts after what the engine's stream has queued so far. */
  private fork(): void {
    const lane = this.laneOf();
    lane.fork.record(this.ctx.stream);
    lane.gpu.stream.wait(lane.fork);
  }

  /** The engine's stream continues after the lane's work. */
  private joinBack(): void {
    const lane = this.laneOf();
    lane.join.record(lane.gpu.stream);
    this.ctx.stream.wait(lane.join);
  }

  /** Gives the previous graph's workspaces back when a new graph (or generation) starts. */
  private renew(g: ComputationGraph): void {
    if (this.liveGraph === g && this.liveGeneration === g.generation) return;
    // the previous graph's launches are done by now (its loss was read): a failed one is reported here, once
    for (const s of this.live.values()) {
      for (const [d, ws] of s.ws.entries()) s.layers[d]!.checkStatus(ws);
    }
    for (const s of this.live.values()) {
      for (const ws of s.ws) this.release(ws);
      this.freePruned.push(...s.pruned);
    }
    this.live.clear();
    // their launches are done (checkStatus waited): the tables can be written again
    this.freeTables.push(...this.stepTables.splice(0));
    this.liveGraph = g;
    this.liveGeneration = g.generation;
  }

  private take(cell: RnnLayerBase["cell"], hidden: number, rows: number, batch: number): RnnWorkspace {
    const list = this.free.get(`${cell}/${hidden}`) ?? [];
    const k = list.findIndex((w) => w.rows >= rows && w.batch >= batch);
    if (k >= 0) return list.splice(k, 1)[0]!;
    return new RnnWorkspace(this.gpu, cell, hidden, Math.ceil(rows * 1.25), Math.ceil(batch * 1.25));
  }

  private release(ws: RnnWorkspace): void {
    const key = `${ws.cell}/${ws.hidden}`;
    const list = this.free.get(key) ?? [];
    list.push(ws);
    this.free.set(key, list);
  }

  /**
   * A pruned direction's buffers, filled: W_hh read back from `whh` (after the stream's earlier work, the last update
   * among it), its mask derived on the host as the op's CPU code derives it, and W_hh ⊙ mask and the mask uploaded.
   */
  private readMask(r: RnnNode, whh: DevicePtr): { host: Float32Array; mask: Uint8Array } {
    const host = new Float32Array(gatesOf(r.cell) * r.hidden * r.hidden);
    this.ctx.stream.synchronize();
    this.ctx.device.driver.memcpyDtoH(host, whh);
    return { host, mask: rnnNodeMask(r, host)! };
  }

  /** The sparse layer of a pruned direction with its pairs set, or the reason it runs on the dense kernels. */
  private sparseFor(
    r: RnnNode,
    whh: DevicePtr,
    w: { host: Float32Array; mask: Uint8Array },
    node: ReadonlySet<RnnLayerBase>,
  ): SparsePersistentRnnLayer | string {
    if (process.env.VPPS_RNN_SPARSE === "0") return "VPPS_RNN_SPARSE=0";
    const key = this.sparseKey(r, whh);
    let l = this.sparseLayers.get(key);
    if (l) this.sparseLayers.delete(key);
    else {
      this.dropSparseLayers(SPARSE_LAYERS - 1, node);
      l = new SparsePersistentRnnLayer(this.gpu, r.cell, r.hidden);
    }
    this.sparseLayers.set(key, l);
    return l.setWeights(w.host, w.mask, r.batchSizes[0]!) ?? l.prepare(r.batchSizes[0]!) ?? l;
  }

  /**
   * Drops the least recently used sparse layers not in use — by this graph's nodes or by `node` (the node being
   * computed) — until at most `keep` are left.
   */
  private dropSparseLayers(keep: number, node: ReadonlySet<RnnLayerBase>): void {
    const inUse = new Set<RnnLayerBase>(node);
    for (const s of this.live.values()) for (const l of s.layers) inUse.add(l);
    for (const [key, l] of this.sparseLayers) {
      if (this.sparseLayers.size <= keep) break;
      if (inUse.has(l)) continue;
      this.ctx.stream.synchronize();
      l.dispose();
      this.sparseLayers.delete(key);
    }
  }

  private takePruned(floats: number): PrunedBuffers {
    const k = this.freePruned.findIndex((b) => b.floats === floats);
    if (k >= 0) return this.freePruned.splice(k, 1)[0]!;
    const alloc = () => this.ctx.device.driver.memAlloc(4 * floats);
    return { floats, masked: alloc(), mask: alloc(), grad: alloc() };
  }

  /** The device mask of a pruned W_hh at `whh` (a new one compares as changed everywhere). */
  private deviceMask(r: RnnNode, whh: DevicePtr): DeviceMask {
    const key = this.sparseKey(r, whh);
    let m = this.deviceMasks.get(key);
    if (m) this.deviceMasks.delete(key);
    else {
      for (const [k, old] of this.deviceMasks) {
        if (this.deviceMasks.size < DEVICE_MASKS) break;
        this.ctx.stream.synchronize();
        this.ctx.device.driver.memFree(old.last);
        this.deviceMasks.delete(k);
      }
      const words = Math.max(1, Math.ceil((gatesOf(r.cell) * r.hidden * r.hidden) / 4));
      const last = this.ctx.device.driver.memAlloc(4 * words);
      this.ctx.device.driver.memsetD32(last, 0x02020202, words); // bytes of 2, neither 0 nor 1: every entry differs
      m = { last, choice: null };
    }
    this.deviceMasks.set(key, m);
    return m;
  }

  /**
   * Each pruned direction's buffers (W_hh ⊙ mask and the mask, filled) and what it runs on: its sparse layer with the
   * pairs set, or why the dense kernels run it. The masks are derived on the device first; a direction whose
   * mask did not move keeps its choice, its sparse layer's values gathered on the device. The others read W_hh back.
   */
  private pruneDirections(
    r: RnnNode,
    valPtr: Float64Array,
  ): { sparse: (SparsePersistentRnnLayer | string)[]; pruned: PrunedBuffers[] } {
    const driver = this.ctx.device.driver;
    const rows = gatesOf(r.cell) * r.hidden;
    const whhs = r.weights.map((w) => valPtr[w.W_hh]!);
    const pruned = whhs.map(() => this.takePruned(rows * r.hidden));
    const onDevice = process.env.VPPS_RNN_PRUNE_ON_HOST !== "1";
    const masks = onDevice ? whhs.map((whh) => this.deviceMask(r, whh)) : [];
    let moved = whhs.map(() => true);
    if (onDevice) {
      this.maskKernel ??= new RnnMaskKernel(this.gpu);
      const flags = this.flags.atLeast(whhs.length);
      driver.memsetD32Async(flags, 0, whhs.length, this.ctx.stream.handle);
      for (let d = 0; d < whhs.length; d++) {
        const b = pruned[d]!;
        this.maskKernel.pruneMatrix(
          {
            mode: r.sparsity!.pruning,
            w: whhs[d]!,
            rows,
            cols: r.hidden,
            keep: r.sparsity!.kept,
            mask: b.mask,
            masked: b.masked,
            last: masks[d]!.last,
            changed: flags + 4 * d,
          },
          this.ctx.stream,
        );
      }
      const changed = new Int32Array(whhs.length);
      this.ctx.stream.synchronize();
      driver.memcpyDtoH(changed, flags);
      moved = masks.map((m, d) => changed[d] !== 0 || !this.choiceHolds(m));
    }
    const chosen = new Set<RnnLayerBase>();
    const batch = r.batchSizes[0]!;
    const sparse = whhs.map((whh, d) => {
      const m = masks[d];
      if (!moved[d] && m && m.choice !== null) {
        if (typeof m.choice === "string") return m.choice;
        const { key, layer } = m.choice;
        this.sparseLayers.delete(key); // most recently used
        this.sparseLayers.set(key, layer);
        layer.refreshValues(whh, this.maskKernel!);
        // (a batch whose launch does not fit runs on the dense kernels; the next batch tries the layer again)
        const why = layer.prepare(batch);
        if (why !== null) return why;
        chosen.add(layer);
        return layer;
      }
      // a new or moved mask: the host's derivation decides, and its buffers and the device's last mask follow it
      const w = this.readMask(r, whh);
      const s = this.sparseFor(r, whh, w, chosen);
      if (typeof s !== "string") chosen.add(s);
      // synchronous copies: the host arrays are this call's
      driver.memcpyHtoD(pruned[d]!.masked, applyMask(w.host, w.mask));
      driver.memcpyHtoD(pruned[d]!.mask, Float32Array.from(w.mask));
      if (m) {
        driver.memcpyHtoD(m.last, w.mask);
        m.choice = typeof s === "string" ? s : { key: this.sparseKey(r, whh), layer: s };
      }
      return s;
    });
    return { sparse, pruned };
  }

  /** Whether a device mask's sparse layer is still kept (the least recently used are dropped). */
  private choiceHolds(m: DeviceMask): boolean {
    if (m.choice === null) return false;
    return typeof m.choice === "string" || this.sparseLayers.get(m.choice.key) === m.choice.layer;
  }

  /** A pruned W_hh's sparse layer and device mask: one per weights and kept count (each layer holds one mask). */
  private sparseKey(r: RnnNode, whh: DevicePtr): string {
    return `${r.cell}/${r.hidden}/${r.sparsity!.kept}/${String(whh)}`;
  }

  private announce(r: RnnNode, layer: RnnLayerBase, why: string): void {
    const density = Number(r.sparsity!.density.toPrecision(3));
    const key = `${r.cell}/${r.hidden}/${density}/${r.sparsity!.pruning}`;
    if (this.announced.has(key)) return;
    this.announced.add(key);
    const where = layer.path === "persistent" ? "the dense kernel" : "the dense stepwise path";
    const plain = r.sparsity!.pruning === "plain" ? " (plain pruning)" : "";
    const line =
      `vpps: rnn op: persistent ${r.cell} ${r.hidden}: density ${density}${plain} runs on ${where} with the pruned ` +
      `weights stored as zeros (${why})`;
    this.notices.push(line);
    process.stderr.write(`${line}\n`);
  }

  private upload(data: Int32Array): DevicePtr {
    const k = this.freeTables.findIndex((t) => t.ints >= data.length);
    let table: StepTable;
    if (k >= 0) table = this.freeTables.splice(k, 1)[0]!;
    else {
      const ints = Math.max(64, data.length);
      table = { ptr: this.ctx.device.driver.memAlloc(4 * ints), host: PinnedBuffer.alloc(4 * ints), ints };
    }
    // the pinned copy is not written again before the copy is done: tables are reused only after renew() waited
    table.host.i32.set(data);
    this.ctx.device.driver.memcpyHtoDAsync(table.ptr, table.host.u8, 4 * data.length, this.ctx.stream.handle);
    this.stepTables.push(table);
    return table.ptr;
  }

  forward(g: ComputationGraph, i: number, valPtr: Float64Array): void {
    this.renew(g);
    const r = rnnNode(g, i);
    const { hidden: H, rows: N, inputSize, directions: D, batchSizes } = r;
    const B = batchSizes[0]!;
    const GH = gatesOf(r.cell) * H;
    // (directions that share a parameter would add into the same gradient from both streams: those run in turn)
    const [w0, w1] = r.weights;
    const shared =
      w1 !== undefined &&
      [w0!.W_ih, w0!.W_hh, w0!.b_ih, w0!.b_hh].some(
        (id) => id >= 0 && [w1.W_ih, w1.W_hh, w1.b_ih, w1.b_hh].includes(id),
      );
    // computed again in this graph (the engine started it over): the earlier run's workspaces go back first
    const earlier = this.live.get(i);
    if (earlier) {
      for (const w of earlier.ws) this.release(w);
      this.freePruned.push(...earlier.pruned);
    }
    // pruned W_hh: masks derived (and, where one moved, read back) before direction 1 forks (both wait for the
    // engine's stream); each direction on a sparse layer where its mask fits one (then the directions run in turn: a
    // sparse launch takes every SM)
    const { sparse, pruned } = r.sparsity ? this.pruneDirections(r, valPtr) : { sparse: [], pruned: [] };
    const onSparse = sparse.map((s) => typeof s !== "string");
    const pair = D === 2 && !shared && !onSparse.some((x) => x) ? this.pair(r.cell, H) : null;
    const dense = pair || (onSparse.every((x) => x) && onSparse.length === D) ? null : this.layer(r.cell, H);
    const layers = pair
      ? [pair.a, pair.b]
      : Array.from({ length: D }, (_, d) => {
          const s = sparse[d];
          return s !== undefined && typeof s !== "string" ? s : dense!;
        });
    const offsets = new Int32Array(batchSizes.length);
    for (let t = 1; t < batchSizes.length; t++) offsets[t] = offsets[t - 1]! + batchSizes[t - 1]!;
    // synchronous: the host arrays must not change before the copies are done (they are this call's)
    const steps = { batchSizes, offsets, dBatchSizes: this.upload(batchSizes), dOffsets: this.upload(offsets) };
    const zeros = this.zeros.atLeast(Math.max(B * H, GH));
    const sink = this.sink.atLeast(Math.max(B * H, GH));
    sparse.forEach((s, d) => {
      if (typeof s === "string") this.announce(r, layers[d]!, s);
    });
    const ws: RnnWorkspace[] = [];
    if (pair) this.fork();
    for (let d = 0; d < D; d++) {
      const w = r.weights[d]!;
      const space = this.take(r.cell, H, N, B);
      ws.push(space);
      const l = layers[d]!;
      const values = addresses(w, valPtr, zeros);
      l.forward(
        {
          weights: pruned[d] ? { ...values, whh: pruned[d].masked } : values,
          x: valPtr[g.arg(i, 0)]!,
          h0: zeros,
          c0: zeros,
          // the node's value need not be 16-byte aligned: the direction's y goes to the workspace, then into place
          y: space.y,
          ldy: H,
          hn: sink,
          // a sparse layer keeps LSTM's c there between steps: the direction's own scratch, not the shared sink
          cn: onSparse[d] ? space.stepCarry : sink,
          steps: { ...steps, total: N },
          reverse: d === 1,
          train: true,
          ws: space,
        },
        inputSize,
      );
      l.copyColumns(valPtr[i]! + 4 * d * H, D * H, space.y, H, N, H);
    }
    if (pair) this.joinBack();
    this.live.set(i, { layers, pair, ws, steps, pruned });
  }

  backward(g: ComputationGraph, i: number, valPtr: Float64Array, gradPtr: Float64Array): void {
    const state = this.live.get(i);
    if (!state || this.liveGraph !== g || this.liveGeneration !== g.generation) {
      throw new Error(`${this.engine}: rnn node ${i}: backward without its forward in this graph`);
    }
    const r = rnnNode(g, i);
    const { hidden: H, rows: N, inputSize, directions: D } = r;
    const B = r.batchSizes[0]!;
    const GH = gatesOf(r.cell) * H;
    const zeros = this.zeros.atLeast(Math.max(B * H, GH));
    const sink = this.sink.atLeast(Math.max(B * H, GH));
    const { pair } = state;
    if (pair) this.fork();
    let deferred: BackwardArgs | undefined;
    for (let d = 0; d < D; d++) {
      const w = r.weights[d]!;
      const l = state.layers[d]!;
      const pruned = state.pruned[d];
      const values = addresses(w, valPtr, zeros);
      const grads = addresses(w, gradPtr, sink);
      // a pruned W_hh: the backward kernel multiplies by W_hh ⊙ mask, and dW_hh goes to scratch first
      if (pruned) l.gpu.device.driver.memsetD32Async(pruned.grad, 0, pruned.floats, l.gpu.stream.handle);
      const args: BackwardArgs = {
        weights: pruned ? { ...values, whh: pruned.masked } : values,
        grads: pruned ? { ...grads, whh: pruned.grad } : grads,
        x: valPtr[g.arg(i, 0)]!,
        h0: zeros,
        c0: zeros,
        y: state.ws[d]!.y,
        ldy: H,
        hn: sink,
        cn: sink,
        steps: { ...state.steps, total: N },
        reverse: d === 1,
        train: true,
        ws: state.ws[d]!,
        dy: gradPtr[i]! + 4 * d * H,
        lddy: D * H,
        dhn: zeros,
        dcn: zeros,
        dx: gradPtr[g.arg(i, 0)]!,
        dxAccumulate: true,
        dh0: sink,
        dc0: sink,
      };
      l.backwardRecurrent(args);
      // a pair's direction 1 leaves its dx GEMM (+= into the buffer direction 0 also adds to) until after the join
      const later = pair !== null && d === 1;
      l.backwardGemms(args, inputSize, !later);
      if (pruned) {
        this.maskKernel ??= new RnnMaskKernel(this.gpu);
        this.maskKernel.addMasked(grads.whh, pruned.grad, pruned.mask, pruned.floats, l.gpu.stream);
      }
      if (later) deferred = args;
    }
    if (pair) {
      this.joinBack();
      if (deferred) pair.a.inputGradient(deferred, inputSize);
    }
  }

  dispose(): void {
    for (const s of this.live.values()) {
      for (const ws of s.ws) ws.dispose();
      this.freePruned.push(...s.pruned);
    }
    this.live.clear();
    for (const b of this.freePruned.splice(0)) {
      for (const p of [b.masked, b.mask, b.grad]) this.ctx.device.driver.memFree(p);
    }
    this.maskKernel?.dispose();
    this.maskKernel = undefined;
    for (const list of this.free.values()) for (const ws of list) ws.dispose();
    this.free.clear();
    for (const t of [...this.stepTables.splice(0), ...this.freeTables.splice(0)]) {
      this.ctx.device.driver.memFree(t.ptr);
      t.host.free();
    }
    for (const l of this.layers.values()) l.dispose();
    this.layers.clear();
    for (const l of this.sparseLayers.values()) l.dispose();
    this.sparseLayers.clear();
    for (const p of this.pairs.values()) {
      p?.a.dispose();
      p?.b.dispose();
    }
    this.pairs.clear();
    if (this.lane) {
      this.gpu.cublas.destroy(this.lane.gpu.cublasHandle);
      this.lane.gpu.stream.destroy();
      this.lane.fork.destroy();
      this.lane.join.destroy();
      this.lane = undefined;
    }
    for (const m of this.deviceMasks.values()) this.ctx.device.driver.memFree(m.last);
    this.deviceMasks.clear();
    this.zeros.free();
    this.sink.free();
    this.flags.free();
  }
}
