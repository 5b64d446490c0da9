/**
 * Scripts of recurring batches (the training loop's `shuffle: "batches"`: the same examples form a batch every epoch):
 * the first time such a batch is scheduled its script, layout and input values are kept, and later the launcher
 * submits the kept copy instead of posting the batch to the schedule workers, so that neither a graph is built nor a
 * schedule computed for it again. A script depends only on the batch's graph and the variant it was scheduled for
 * (learning rate, clip and Adam's step are the launch's: BatchTag), and, where the graph has dropout nodes, on its
 * dropout key — such an entry is reused only for the same key. The launcher empties the cache whenever its
 * schedulers change (`setOptimizer`, scheduler options): their scripts would differ.
 */
import type { BuildRequest } from "../../../graph/builder.js";
import { mibFromEnv } from "../../../util/env.js";
import type { ScheduledBatch } from "../schedule/batch.js";

/** A kept batch: its own copies of the script and the input values. */
export interface CachedBatch {
  readonly variant: number;
  readonly batch: ScheduledBatch;
  readonly inputs: Float32Array;
  /** The dropout key the script was built with, where it depends on one. */
  readonly dropoutKey: number | undefined;
  readonly bytes: number;
}

/** The default capacity (MiB); `VPPS_SCRIPT_CACHE_MB` sets another (0: keep nothing). */
export const DEFAULT_SCRIPT_CACHE_MB = 2048;

/** The capacity in bytes from `VPPS_SCRIPT_CACHE_MB` (a whole number of MiB ≥ 0), else the default. */
export function scriptCacheBytes(env: Readonly<Record<string, string | undefined>> = process.env): number {
  return mibFromEnv(env, "VPPS_SCRIPT_CACHE_MB", DEFAULT_SCRIPT_CACHE_MB, "keep no script");
}

export class ScriptCache {
  private readonly entries = new Map<string, CachedBatch>();
  /** Bytes kept (scripts and input values). */
  bytes = 0;
  hits = 0;
  /** Recurring batches scheduled because none was kept (their first time, or the cache was full). */
  misses = 0;

  constructor(readonly capacityBytes: number) {}

  /**
   * A recurring request's name, whatever the variant: its training flag and examples (undefined: the request does not
   * recur). A kept script goes by it and the variant (`keyOf`); a kept union of touched rows by it alone
   * (dp-exchange.ts).
   */
  static batchName(r: BuildRequest): string | undefined {
    if (r.recurring !== true) return undefined;
    return `${r.training ? 1 : 0}|${Array.prototype.join.call(r.examples, ",")}`;
  }

  /** The key of a recurring request on a variant (undefined: the request does not recur, keep nothing). */
  static keyOf(variant: number, r: BuildRequest): string | undefined {
    return ScriptCache.scriptKey(variant, ScriptCache.batchName(r));
  }

  /** The key of a batch named `name` (batchName) on a variant. */
  static scriptKey(variant: number, name: string | undefined): string | undefined {
    return name === undefined ? undefined : `${variant}|${name}`;
  }

  get size(): number {
    return this.entries.size;
  }

  /** The kept batch of `key` usable with `dropoutKey`, counting a hit or a miss. */
  get(key: string, dropoutKey: number): CachedBatch | undefined {
    const e = this.entries.get(key);
    if (e !== undefined && (e.dropoutKey === undefined || e.dropoutKey === dropoutKey)) {
      this.hits++;
      return e;
    }
    this.misses++;
    return undefined;
  }

  /**
   * Keeps copies of a scheduled batch's script and input values under `key` (the layout's arrays are the batch's own
   * and stay valid), unless that would pass the capacity. `dropout`: the script depends on `dropoutKey`.
   */
  put(key: string, variant: number, batch: ScheduledBatch, inputs: Float32Array, dropout: boolean, dropoutKey: number) {
    const bytes = batch.script.byteLength + inputs.byteLength;
    const old = this.entries.get(key);
    if (this.bytes - (old?.bytes ?? 0) + bytes > this.capacityBytes) return;
    if (old !== undefined) this.bytes -= old.bytes;
    this.entries.set(key, {
      variant,
      batch: { ...batch, script: batch.script.slice() },
      inputs: inputs.slice(),
      dropoutKey: dropout ? dropoutKey : undefined,
      bytes,
    });
    this.bytes += bytes;
  }

  clear(): void {
    this.entries.clear();
    this.bytes = 0;
  }
}
