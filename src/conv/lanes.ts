// The lanes of a convolution layer and the order between them (the conv runner's schedule: runner.ts).
//
// A sample's kernels run on one lane: a stream, a cuBLAS handle bound to it (its own cuBLAS workspace), and the
// lane's own column buffers (one buffer shared by samples in flight on different streams would be a race). By default
// there is one lane, the engine's stream; with GLP4NN's stream pool (StreamPool, src/cuda/runtime/stream-pool.ts) sample n goes to lane
// n mod L, the lanes forked from the engine's stream and joined back to it after the layer. The weight and bias
// gradients are accumulated in place, sample after sample in the order n = 0, 1, … (GEMM and GEMV with β = 1, as
// Caffe does; never atomics), each chain on a stream of its own: the bias's GEMVs on the side lane, the weight's
// GEMMs on the chain lane, where each follows the previous one in stream order. A sample's weight GEMM waits for the
// event its lane records after writing the sample's columns (im2col), and the lane's next im2col into that buffer
// waits for the event the chain records after reading it; the input gradient goes through a second buffer per lane,
// so a lane never waits for the chain otherwise. Every sum is then computed in the same order on any number of
// lanes, so the results are one lane's bit for bit. The pool's work is issued from this thread (THIS_THREAD: each
// sample's lane part, then its chain part) or from several (threads.ts).
//
// Weight sums by products (WeightSums "products", the default for pools). The chain of GEMMs above is serial: on the
// large layers (CaffeNet: 256 GEMMs of 10–60 µs) it is the backward's critical path, and its GEMMs slow down further
// when they share the SMs with the lanes'. Instead, each lane computes its sample's product dy[n]·colᵀ into a slot of
// its own (the slot zeroed, then the very GEMM of the chain, β = 1: the same kernel, so the same fp32 product acc),
// and the chain lane adds the slots into dW in sample order, one elementwise kernel per sample (dW += P, i.e.
// fl(dW + acc) — what the chain's GEMM epilogue computes with α = β = 1). The GEMMs then run on every lane at once;
// what stays serial is an addition per sample. The same sums in the same order: the results are one lane's bit for bit
// (the benchmark and test/gpu/conv.test.ts compare them). Each lane has PRODUCT_SLOTS slots used in turn: sample n
// on lane k = n mod L writes slot r = ⌊n / L⌋ mod R, rewritten R·L samples later, after the chain's addition of it
// (a pair of events per slot), so a lane runs up to R samples ahead of the chain instead of one.

import type { CublasHandle, CudaStream } from "../cuda/index.js";
import type { Lane, StreamPool } from "../cuda/runtime/stream-pool.js";
import { UserError } from "../util/errors.js";

/**
 * How a pool accumulates the weight gradient in sample order (one lane always runs Caffe's chain): "chain", the
 * weight GEMMs one after another on the chain lane; "products", each sample's product on its lane into a slot, the
 * slots added into dW on the chain lane (see the top of this file). Bit for bit the same results.
 */
export type WeightSums = "chain" | "products";
export const WEIGHT_SUMS: readonly WeightSums[] = ["chain", "products"];

/**
 * The weight sums of pools: `VPPS_CONV_WEIGHT_SUMS` (chain or products) when set, else products (measured faster on
 * the large Table 5 layers: docs/GLP4NN.md).
 */
export function weightSumsFromEnv(env: Readonly<Record<string, string | undefined>> = process.env): WeightSums {
  const raw = env["VPPS_CONV_WEIGHT_SUMS"]?.trim();
  if (raw === undefined || raw === "") return "products";
  if (!(WEIGHT_SUMS as readonly string[]).includes(raw)) {
    throw new UserError(
      `VPPS_CONV_WEIGHT_SUMS is '${raw}'; expected ${WEIGHT_SUMS.join(" or ")} (how a stream pool sums a ` +
        "convolution's weight gradient; both give one stream's results bit for bit)",
    );
  }
  return raw as WeightSums;
}

/** Where one sample's im2col and GEMMs are queued. */
export interface ConvLane {
  readonly index: number;
  readonly stream: CudaStream;
  readonly blas: CublasHandle;
}

/**
 * The lanes of a layer and their ordering. One lane runs Caffe's own sequence on one stream. A pool adds two streams:
 * the side lane (the bias gradient's chain of GEMVs, in sample order) and the chain lane (the weight gradient's chain
 * of GEMMs, in sample order); the samples' own work (im2col, the input-gradient GEMM, col2im) runs on the lanes,
 * ordered against the chain by a pair of events per lane (below). The chain's GEMMs then follow one another on one
 * stream, and a lane goes on to its next sample without waiting for the chain, except where it would overwrite a
 * column buffer the chain has yet to read.
 */
export interface ConvLanes {
  readonly count: number;
  /** The stream the lanes are forked from and joined to (the lane itself on one lane). */
  readonly origin: CudaStream;
  lane(k: number): ConvLane;
  /** The bias gradient's chain: the lane itself on one lane, a stream of its own with a pool. */
  side(): ConvLane;
  /** The weight gradient's chain: the lane itself on one lane, a stream of its own with a pool. */
  chain(): ConvLane;
  /** The lanes' later work (the side and chain lanes' too) waits for the engine's stream. */
  fork(): void;
  /** The engine's stream waits for every lane. */
  join(): void;
  /**
   * Pools only: `lane` has written sample n's column buffer, or its product slot `slot` (recorded on the lane; one
   * event per lane and slot, slot 0 for a column buffer).
   */
  columnsReady(lane: ConvLane, slot: number): void;
  /** Pools only: the chain's later work waits for `lane`'s last columnsReady of `slot`. */
  chainAwaitColumns(lane: ConvLane, slot: number): void;
  /** Pools only: the chain has read `lane`'s column buffer or slot (recorded on the chain after the GEMM or the sum). */
  weightsDone(lane: ConvLane, slot: number): void;
  /** Pools only: `lane`'s later work waits for the chain's last weightsDone for it and `slot`. */
  awaitWeights(lane: ConvLane, slot: number): void;
}

/** One lane, the engine's own stream: no events at all. */
export function oneLane(stream: CudaStream, blas: CublasHandle): ConvLanes {
  const lane: ConvLane = { index: 0, stream, blas };
  const nothing = () => {};
  return {
    count: 1,
    origin: stream,
    lane: () => lane,
    side: () => lane,
    chain: () => lane,
    fork: nothing,
    join: nothing,
    columnsReady: nothing,
    chainAwaitColumns: nothing,
    weightsDone: nothing,
    awaitWeights: nothing,
  };
}

/**
 * A pool's side lane (the bias chain) and chain lane (the weight chain), extra lanes of the pool shared by every
 * layer on it. (The chain lane at the device's highest stream priority measured the same with CUDA graphs, within
 * ±1%.)
 */
export function convExtraLanes<S, E, H>(pool: StreamPool<S, E, H>): { side: Lane<S, H>; chain: Lane<S, H> } {
  return { side: pool.extraLane("conv.side"), chain: pool.extraLane("conv.chain") };
}

/** The first `count` lanes of a stream pool, forked from and joined to `origin`, with its side and chain lanes. */
export function poolLanes<E>(
  pool: StreamPool<CudaStream, E, CublasHandle>,
  origin: CudaStream,
  count: number,
): ConvLanes {
  if (!Number.isInteger(count) || count < 2 || count > pool.size) {
    throw new RangeError(`poolLanes: count must be an integer in 2 … ${pool.size} (the pool's size); got ${count}`);
  }
  const { side, chain } = convExtraLanes(pool);
  const extras = [side, chain];
  const columns = convEventSets(pool, "conv.columns");
  const weights = convEventSets(pool, "conv.weights");
  return {
    count,
    origin,
    lane: (k) => pool.lane(k, count),
    side: () => side,
    chain: () => chain,
    fork: () => pool.fork(origin, count, extras),
    join: () => pool.join(origin, count, extras),
    columnsReady: (lane, r) => pool.recordOn(columns[r]![lane.index]!, pool.lanes[lane.index]!),
    chainAwaitColumns: (lane, r) => pool.waitOn(chain, columns[r]![lane.index]!),
    weightsDone: (lane, r) => pool.recordOn(weights[r]![lane.index]!, chain),
    awaitWeights: (lane, r) => pool.waitOn(pool.lanes[lane.index]!, weights[r]![lane.index]!),
  };
}

/** Product slots per lane (see the top of this file): a lane runs up to this many samples ahead of the chain. */
export const PRODUCT_SLOTS = 2;

/** The event sets of a pool's ordering `name`, one per slot (slot 0 also the column buffers'), one event per lane. */
export function convEventSets<S, E, H>(pool: StreamPool<S, E, H>, name: string): (readonly E[])[] {
  return Array.from({ length: PRODUCT_SLOTS }, (_, r) => pool.eventSet(r === 0 ? name : `${name}.${r}`));
}

/** How many samples of a lane are in flight between the lane and the chain: the lane's slots, or 1 (its columns). */
export function convDepth(weightSums: WeightSums): number {
  return weightSums === "products" ? PRODUCT_SLOTS : 1;
}
