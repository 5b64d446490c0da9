/**
 * VPPS data-parallel (gradient-export) mode, the part without a device: where the gradients that the ranks sum live,
 * and the lists of entries that the update kernels of host-update.ts walk (dp-update.ts launches them; the tests run
 * the same lists on the host with `applyDpStepOnHost`).
 *
 * In export mode the script ends after the backward pass (schedule option `update: "host"`): the register-held
 * matrices' gradients are exported to the `grads` region (the master copy's layout, the same on every rank), while
 * the gradients of vectors and lookup rows stay in this batch's own pool slots, which differ from rank to rank. A copy
 * list moves them into the `rest` region, laid out the same on every rank:
 *   [0, denseFloats)      every dense parameter outside the register-held matrices, at `denseOffset`
 *   [denseFloats, …)      the union of the ranks' touched lookup rows, sorted by (table, row), one after another
 * Then `grads` and `rest` are summed over the ranks, and the update list steps every matrix, every dense parameter
 * (zero gradient where no rank used it: SGD leaves it, Adam moves it by its moments, as the AdamTrainer does) and
 * every row of the union, reading the summed gradients.
 */
import type { ModelLayout } from "../plan/layout.js";
import { type AdamStep, adamRange, momentLayout } from "../plan/moments.js";
import type { ScheduledLayout } from "../schedule/batch.js";

/** Elements per entry of the lists (host-update.ts UPDATE_PIECE): a large parameter is several entries. */
export const DP_PIECE = 4096;
/** Words per entry: copy and SGD lists (destination or parameter, source or gradient, length); Adam adds m and v. */
export const DP_COPY_ENTRY = 3;
export const DP_SGD_ENTRY = 3;
export const DP_ADAM_ENTRY = 5;

/** Where each dense non-matrix parameter's gradient sits in `rest` (-1: a matrix or a lookup table), fixed per model. */
export interface DpLayout {
  readonly denseOffset: Int32Array;
  readonly denseFloats: number;
  /** Floats `rest` needs at most: the dense part plus every row of every lookup table. */
  readonly restCapacity: number;
}

export function dpLayout(model: ModelLayout): DpLayout {
  const denseOffset = new Int32Array(model.params.length).fill(-1);
  let dense = 0;
  let rows = 0;
  for (const p of model.params) {
    if (model.matrixOf[p.index]! >= 0) continue;
    if (p.kind === "dense") {
      denseOffset[p.index] = dense;
      dense += Math.ceil((p.rows * p.cols) / 32) * 32;
    } else rows += p.rows * p.cols;
  }
  return { denseOffset, denseFloats: dense, restCapacity: dense + rows };
}

/** The float offsets (from one base) of the regions the lists address. */
export interface DpBases {
  readonly master: number;
  readonly grads: number;
  readonly pool: number;
  readonly rest: number;
}

/** The lookup rows this batch touched, as (table, row) pairs: what a rank sends to the others. */
export function touchedPairs(L: ScheduledLayout): Int32Array {
  const rows = L.lookupRows;
  const out = new Int32Array(2 * rows.offset.length);
  for (let r = 0; r < rows.offset.length; r++) {
    out[2 * r] = rows.table[r]!;
    out[2 * r + 1] = rows.row[r]!;
  }
  return out;
}

/**
 * The union of every rank's (table, row) pairs, sorted by table then row: the same array on every rank, whatever
 * order the ranks' batches touched them in. Refuses a pair outside the model (ranks training different models).
 */
export function unitePairs(model: ModelLayout, all: readonly Int32Array[]): Int32Array {
  const seen = new Set<number>();
  for (const [rank, pairs] of all.entries()) {
    if (pairs.length % 2 !== 0) throw new Error(`VPPS data-parallel: rank ${rank} sent ${pairs.length} words of rows`);
    for (let k = 0; k < pairs.length; k += 2) {
      const table = pairs[k]!;
      const row = pairs[k + 1]!;
      const p = model.params[table];
      if (p === undefined || p.kind !== "lookup" || row < 0 || row >= p.rows) {
        throw new Error(
          `VPPS data-parallel: rank ${rank} touched row ${row} of parameter #${table}, which this model's lookup ` +
            "tables do not have (every rank must train the same model)",
        );
      }
      seen.add(table * 2 ** 32 + row);
    }
  }
  const keys = Float64Array.from(seen).sort();
  const out = new Int32Array(2 * keys.length);
  keys.forEach((key, k) => {
    out[2 * k] = Math.floor(key / 2 ** 32);
    out[2 * k + 1] = key % 2 ** 32;
  });
  return out;
}

/** Where each row of the union starts in `rest`, and the floats of `rest` used (dense part included). */
export function unionSlots(model: ModelLayout, dpl: DpLayout, union: Int32Array): { slot: Int32Array; used: number } {
  const slot = new Int32Array(union.length / 2);
  let at = dpl.denseFloats;
  for (let k = 0; k < slot.length; k++) {
    slot[k] = at;
    at += model.params[union[2 * k]!]!.cols;
  }
  return { slot, used: at };
}

function pieces(into: Uint32Array, k: number, n: number, words: readonly number[], moving: number): number {
  for (let o = 0; o < n; o += DP_PIECE) {
    for (let w = 0; w < words.length; w++) into[k++] = w < moving ? words[w]! + o : words[w]!;
    into[k++] = Math.min(DP_PIECE, n - o);
  }
  return k;
}

/**
 * The copy list of one batch into `into` from word `at`: (rest destination, pool source, length) for every dense
 * parameter with a gradient this batch and every row it touched. Returns the entries written.
 */
export function copyList(
  model: ModelLayout,
  dpl: DpLayout,
  L: ScheduledLayout,
  union: Int32Array,
  slots: Int32Array,
  b: DpBases,
  into: Uint32Array,
  at: number,
): number {
  let k = at;
  for (const p of model.params) {
    const g = L.paramGrad[p.index]!;
    const d = dpl.denseOffset[p.index]!;
    if (g >= 0 && d >= 0) k = pieces(into, k, p.rows * p.cols, [b.rest + d, b.pool + g], 2);
  }
  const slotOf = new Map<number, number>();
  for (let u = 0; u < slots.length; u++) slotOf.set(union[2 * u]! * 2 ** 32 + union[2 * u + 1]!, slots[u]!);
  const rows = L.lookupRows;
  for (let r = 0; r < rows.offset.length; r++) {
    const table = rows.table[r]!;
    const s = slotOf.get(table * 2 ** 32 + rows.row[r]!);
    if (s === undefined) throw new Error(`VPPS data-parallel: row ${rows.row[r]} of #${table} is not in the union`);
    k = pieces(into, k, model.params[table]!.cols, [b.rest + s, b.pool + rows.offset[r]!], 2);
  }
  return (k - at) / DP_COPY_ENTRY;
}

/** Words the copy list of a batch may take. */
export function copyListWords(model: ModelLayout, L: ScheduledLayout): number {
  let n = 0;
  for (const p of model.params) if (L.paramGrad[p.index]! >= 0) n += Math.ceil((p.rows * p.cols) / DP_PIECE);
  for (let r = 0; r < L.lookupRows.offset.length; r++) {
    n += Math.ceil(model.params[L.lookupRows.table[r]!]!.cols / DP_PIECE);
  }
  return DP_COPY_ENTRY * n;
}

/**
 * The update list into `into` from word `at`: SGD's (parameter, gradient, length) or Adam's (parameter, gradient,
 * m, v, length; m and v from the moments base) for every matrix, every dense parameter and every row of the union,
 * gradients read from the summed `grads` and `rest`. Returns the entries written.
 */
export function updateList(
  model: ModelLayout,
  dpl: DpLayout,
  union: Int32Array,
  slots: Int32Array,
  b: DpBases,
  into: Uint32Array,
  at: number,
  adam: boolean,
): number {
  const mo = momentLayout(model);
  let k = at;
  const push = (p: number, g: number, m: number, v: number, n: number) => {
    k = pieces(into, k, n, adam ? [p, g, m, v] : [p, g], adam ? 4 : 2);
  };
  for (const m of model.plan.matrices) {
    const o = m.masterOffset;
    push(b.master + o, b.grads + o, mo.masterM + o, mo.masterV + o, m.rows * m.cols);
  }
  for (const p of model.params) {
    const d = dpl.denseOffset[p.index]!;
    if (d < 0) continue;
    const o = model.paramOffset[p.index]!;
    push(b.pool + o, b.rest + d, mo.modelM + o, mo.modelV + o, p.rows * p.cols);
  }
  for (let u = 0; u < slots.length; u++) {
    const p = model.params[union[2 * u]!]!;
    const o = model.paramOffset[p.index]! + union[2 * u + 1]! * p.cols;
    push(b.pool + o, b.rest + slots[u]!, mo.modelM + o, mo.modelV + o, p.cols);
  }
  return (k - at) / (adam ? DP_ADAM_ENTRY : DP_SGD_ENTRY);
}

/** Words the update list may take with `unionRows` rows in the union (an upper bound). */
export function updateListWords(model: ModelLayout, union: Int32Array, adam: boolean): number {
  let n = 0;
  const count = (len: number) => Math.ceil(len / DP_PIECE);
  for (const m of model.plan.matrices) n += count(m.rows * m.cols);
  for (const p of model.params) if (model.matrixOf[p.index]! < 0 && p.kind === "dense") n += count(p.rows * p.cols);
  for (let u = 0; u < union.length; u += 2) n += count(model.params[union[u]!]!.cols);
  return (adam ? DP_ADAM_ENTRY : DP_SGD_ENTRY) * n;
}

/**
 * What the device does with the lists, on the host (the tests' emulation of dp-update.ts): `device` holds every
 * region at its base. `copy` moves this rank's gradients into `rest` (zeroed first, `used` floats); `step` applies
 * the update from the summed gradients (clipping from the norm over the list, as vpps_norm2_list sums it).
 */
export const dpStepOnHost = {
  copy(device: Float32Array, b: DpBases, used: number, list: Uint32Array, entries: number): void {
    device.fill(0, b.rest, b.rest + used);
    for (let e = 0; e < entries; e++) {
      const [dst, src, n] = [list[3 * e]!, list[3 * e + 1]!, list[3 * e + 2]!];
      device.copyWithin(dst, src, src + n);
    }
  },
  step(
    device: Float32Array,
    moments: Float32Array | undefined,
    list: Uint32Array,
    entries: number,
    lr: number,
    clip: number,
    adam: AdamStep | undefined,
  ): void {
    const words = adam ? DP_ADAM_ENTRY : DP_SGD_ENTRY;
    let sq = 0;
    for (let e = 0; e < entries; e++) {
      const g = list[words * e + 1]!;
      const n = list[words * e + words - 1]!;
      for (let i = 0; i < n; i++) sq += device[g + i]! * device[g + i]!;
    }
    const f = Math.fround;
    const norm = f(Math.sqrt(f(sq)));
    const scale = clip > 0 && norm > clip ? f(clip / norm) : 1;
    for (let e = 0; e < entries; e++) {
      const p = list[words * e]!;
      const g = list[words * e + 1]!;
      const n = list[words * e + words - 1]!;
      if (adam) {
        if (!moments) throw new Error("dpStepOnHost: Adam needs the moments");
        const m = list[words * e + 2]!;
        const v = list[words * e + 3]!;
        adamRange(device, p, device, g, scale, moments, m, v, n, adam, lr);
      } else {
        const s = f(lr * scale);
        for (let i = 0; i < n; i++) device[p + i] = f(device[p + i]! - f(s * device[g + i]!));
      }
    }
  },
};
