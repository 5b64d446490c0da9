/**
 * VPPS data-parallel mode: a batch's exchange of touched lookup rows with the other ranks (the only host collective
 * of a step, dp-update.ts), and the unions kept for recurring batches. No device here: the tests run it on fakes.
 *
 * Every rank sends the (table, row) pairs its share of the batch touched, behind one flag word; the union of all the
 * ranks' pairs is what the update steps. A recurring batch (the training loop's fixed batches, `shuffle: "batches"`:
 * the same global batch, split the same way, comes back every epoch) touches the same rows every time, so its union
 * can be kept and the exchange skipped when it comes back: the launch then waits for no other rank's host. Skipping a
 * collective is safe only if every rank skips it: a rank that gathered while another did not would pair its next
 * gather with the wrong batch. So the decision is taken from the gathered words themselves, which every rank
 * receives alike: a rank flags the batch when it would keep the union (recurring, and room in its `KeptUnions`), and
 * the union is kept only where every rank flagged it — then it is kept by every rank, and a kept union is never
 * dropped except by `clear`, which every rank calls at the same step (the reducer or the optimizer changes).
 */

import { mibFromEnv } from "../../../util/env.js";
import type { GradientReducer, PendingHostGather } from "../../data-parallel.js";
import { startGather } from "../../data-parallel.js";
import type { ModelLayout } from "../plan/layout.js";
import { unitePairs } from "./dp-lists.js";

/** A batch's exchange: a gather on its way, or a union kept from an earlier run of the batch. */
export interface DpExchange {
  /** Whether the union can be had without waiting. */
  ready(): boolean;
  /** The union of the ranks' touched (table, row) pairs, sorted; waits for every rank's part when not ready. */
  union(): Int32Array;
  /** Whether every rank flagged the batch to keep its union (waits as `union` does); true for a kept union. */
  keptByAll(): boolean;
}

/**
 * Starts the exchange of this rank's touched `pairs` without waiting (a collective: every rank starts its batches'
 * exchanges in the same order). `keep`: this rank asks to keep the union.
 */
export function startRowsExchange(
  reducer: GradientReducer,
  model: ModelLayout,
  pairs: Int32Array,
  keep: boolean,
): DpExchange {
  const words = new Int32Array(pairs.length + 1);
  words[0] = keep ? 1 : 0;
  words.set(pairs, 1);
  const gather: PendingHostGather = startGather(reducer, words);
  let union: Int32Array | undefined;
  let all = false;
  const settle = (): Int32Array => {
    if (union === undefined) {
      const parts = gather.wait();
      parts.forEach((p, rank) => {
        if (p.length === 0) throw new Error(`VPPS data-parallel: rank ${rank} sent no flag word with its touched rows`);
      });
      all = parts.every((p) => p[0] === 1);
      union = unitePairs(
        model,
        parts.map((p) => p.subarray(1)),
      );
    }
    return union;
  };
  return {
    ready: () => union !== undefined || gather.ready(),
    union: settle,
    keptByAll: () => {
      settle();
      return all;
    },
  };
}

/** A kept union, standing in for the exchange. */
export function keptExchange(union: Int32Array): DpExchange {
  return { ready: () => true, union: () => union, keptByAll: () => true };
}

/** The default room for kept unions (MiB of pairs): an SST epoch at per-GPU batch 128 takes well under 1 MiB. */
export const DEFAULT_KEPT_UNIONS_MB = 256;

/** The room in bytes from `VPPS_KEPT_UNIONS_MB` (a whole number of MiB ≥ 0; 0 keeps none), else the default. */
export function keptUnionsBytes(env: Readonly<Record<string, string | undefined>> = process.env): number {
  return mibFromEnv(
    env,
    "VPPS_KEPT_UNIONS_MB",
    DEFAULT_KEPT_UNIONS_MB,
    "keep no union, every data-parallel batch exchanges its touched rows",
  );
}

/**
 * The unions of recurring batches, by the name of this rank's share (`ScriptCache.batchName`). `hasRoom` is only
 * what this rank flags; `put` always keeps (all ranks flagged the batch, so all keep it), so the capacity may be
 * passed by the exchanges flagged before it filled.
 */
export class KeptUnions {
  private readonly entries = new Map<string, Int32Array>();
  bytes = 0;
  hits = 0;

  constructor(readonly capacityBytes: number) {}

  get size(): number {
    return this.entries.size;
  }

  hasRoom(): boolean {
    return this.bytes < this.capacityBytes;
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  /** The kept union of `key`, counting a hit. */
  get(key: string): Int32Array | undefined {
    const u = this.entries.get(key);
    if (u !== undefined) this.hits++;
    return u;
  }

  put(key: string, union: Int32Array): void {
    const old = this.entries.get(key);
    if (old !== undefined) this.bytes -= old.byteLength;
    this.entries.set(key, union);
    this.bytes += union.byteLength;
  }

  clear(): void {
    this.entries.clear();
    this.bytes = 0;
  }
}
