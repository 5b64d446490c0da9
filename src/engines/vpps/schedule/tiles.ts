/**
 * A long operand list as tile instructions (script/format.ts TILE): the list of one matrix in one step cut into
 * blocks over the master copy, each placed on the least-loaded CTA, then written CTA by CTA. Forward lists become
 * TILE.entries × TILE.rows blocks; backward lists x̄ blocks of TILE.entries × TILE.cols and W̄ blocks (into the
 * gradient buffer) of TILE.rows × TILE.cols over TILE.wbarEntries entries.
 */
import { LIST_ENTRIES, NONE, Opcode, TILE } from "../script/format.js";
import type { ScriptWriter } from "../script/writer.js";
import { TILE_LOAD_WEIGHT } from "./loads.js";

/** Words of a list entry (script/format.ts LIST_ENTRIES), as constants for the loops. */
export const MATVEC_ENTRY = LIST_ENTRIES[Opcode.MatVec]!.length;
export const MATVEC_BWD_ENTRY = LIST_ENTRIES[Opcode.MatVecBwd]!.length;

/**
 * The tiles of one list: per tile its CTA and its instruction words (5 each), and the grouping by CTA. Every array
 * is kept across lists and batches (grow-only).
 */
export class TileList {
  private tileCta: Int32Array = new Int32Array(256);
  private tileWords: Uint32Array = new Uint32Array(5 * 256);
  private tileCount = 0;
  /**
   * emit's grouping by CTA: tiles per CTA (zero between lists), where each CTA's run starts, tile indices in CTA
   * order, and the CTAs in the order they first got a tile.
   */
  private tileOrder: Int32Array = new Int32Array(256);
  private readonly tilesOf: Int32Array;
  private readonly tileStart: Int32Array;
  private readonly ctaOrder: Int32Array;

  constructor(ctas: number) {
    this.tilesOf = new Int32Array(ctas);
    this.tileStart = new Int32Array(ctas);
    this.ctaOrder = new Int32Array(ctas);
  }

  /**
   * Cuts the list of a rows × cols matrix (`count` entries at table offset `at`, entry words `words`; `op` MatVec
   * or MatVecBwd) into tiles, placing each by `place(load)`; returns how many tile.wbar tiles it made. `wbar`
   * false: a backward list makes x̄ tiles only (an off-chip matrix's W̄ is formed after the backward pass).
   * `split`: a forward list makes tile.acc tiles over TILE.splitCols columns each (its outputs zeroed in step 0).
   */
  cut(
    op: Opcode,
    at: number,
    count: number,
    rows: number,
    cols: number,
    words: Uint32Array,
    place: (load: number) => number,
    wbar = true,
    split = false,
  ): number {
    this.tileCount = 0;
    let wbarTiles = 0;
    if (op === Opcode.MatVec && split) {
      for (let e0 = 0; e0 < count; e0 += TILE.entries) {
        const k = Math.min(TILE.entries, count - e0);
        for (let r0 = 0; r0 < rows; r0 += TILE.rows) {
          for (let c0 = 0; c0 < cols; c0 += TILE.splitCols) {
            const work = k * Math.min(TILE.rows, rows - r0) * Math.min(TILE.splitCols, cols - c0);
            this.add(place, Opcode.TileAcc, at + MATVEC_ENTRY * e0, k, r0, c0, work);
          }
        }
      }
      return 0;
    }
    if (op === Opcode.MatVec) {
      for (let e0 = 0; e0 < count; e0 += TILE.entries) {
        const k = Math.min(TILE.entries, count - e0);
        for (let r0 = 0; r0 < rows; r0 += TILE.rows) {
          this.add(place, Opcode.Tile, at + MATVEC_ENTRY * e0, k, r0, 0, k * Math.min(TILE.rows, rows - r0) * cols);
        }
      }
      return 0;
    }
    for (let e0 = 0; e0 < count; e0 += TILE.entries) {
      const k = Math.min(TILE.entries, count - e0);
      // no x̄ tile for a chunk whose entries all have x̄ NONE (W̄-only lists: backward.ts DeferredWbar)
      let xbars = 0;
      for (let e = e0; e < e0 + k && xbars === 0; e++) if (words[MATVEC_BWD_ENTRY * e + 2] !== NONE) xbars++;
      if (xbars === 0) continue;
      for (let c0 = 0; c0 < cols; c0 += TILE.cols) {
        for (let r0 = 0; r0 < rows; r0 += TILE.xbarRows) {
          const work = k * Math.min(TILE.cols, cols - c0) * Math.min(TILE.xbarRows, rows - r0);
          this.add(place, Opcode.TileXbar, at + MATVEC_BWD_ENTRY * e0, k, c0, r0, work);
        }
      }
    }
    for (let e0 = 0; wbar && e0 < count; e0 += TILE.wbarEntries) {
      const k = Math.min(TILE.wbarEntries, count - e0);
      for (let r0 = 0; r0 < rows; r0 += TILE.rows) {
        for (let c0 = 0; c0 < cols; c0 += TILE.cols) {
          const work = k * Math.min(TILE.rows, rows - r0) * Math.min(TILE.cols, cols - c0);
          this.add(place, Opcode.TileWbar, at + MATVEC_BWD_ENTRY * e0, k, r0, c0, work);
          wbarTiles++;
        }
      }
    }
    return wbarTiles;
  }

  /** Places one tile on `place(work · TILE_LOAD_WEIGHT)` and records its instruction words. */
  private add(
    place: (load: number) => number,
    code: Opcode,
    list: number,
    entries: number,
    a: number,
    b: number,
    work: number,
  ): void {
    const n = this.tileCount;
    if (n === this.tileCta.length) {
      this.tileCta = grow(this.tileCta);
      this.tileOrder = grow(this.tileOrder);
      const w = new Uint32Array(this.tileWords.length * 2);
      w.set(this.tileWords);
      this.tileWords = w;
    }
    this.tileCta[n] = place(work * TILE_LOAD_WEIGHT);
    const w = this.tileWords;
    w[5 * n] = code;
    w[5 * n + 1] = list;
    w[5 * n + 2] = entries;
    w[5 * n + 3] = a;
    w[5 * n + 4] = b;
    this.tileCount = n + 1;
  }

  /**
   * Writes the tiles of matrix m: per CTA, in the order CTAs first got a tile, `before(q)` (its waits), all its
   * tiles in placement order, then `after(q)` (its signal).
   */
  emit(writer: ScriptWriter, m: number, before: (q: number) => void, after: (q: number) => void): void {
    const n = this.tileCount;
    const cta = this.tileCta;
    // Group the tiles by CTA with a counting sort: at batch 128 a list has hundreds of tiles, and rescanning them
    // per CTA was a visible share of scheduling.
    const { tilesOf, tileStart, tileOrder, ctaOrder } = this;
    let order = 0;
    for (let i = 0; i < n; i++) {
      const q = cta[i]!;
      if (tilesOf[q]!++ === 0) ctaOrder[order++] = q;
    }
    for (let j = 0, next = 0; j < order; j++) {
      const q = ctaOrder[j]!;
      tileStart[q] = next;
      next += tilesOf[q]!;
    }
    for (let i = 0; i < n; i++) tileOrder[tileStart[cta[i]!]!++] = i;
    const w = this.tileWords;
    for (let j = 0, next = 0; j < order; j++) {
      const q = ctaOrder[j]!;
      before(q);
      for (const end = next + tilesOf[q]!; next < end; next++) {
        const t = 5 * tileOrder[next]!;
        const code = w[t]! as Opcode;
        if (code === Opcode.Tile) writer.ins3(q, code, m, w[t + 1]!, w[t + 2]!, w[t + 3]!);
        else writer.ins4(q, code, m, w[t + 1]!, w[t + 2]!, w[t + 3]!, w[t + 4]!);
      }
      tilesOf[q] = 0;
      after(q);
    }
  }
}

function grow(a: Int32Array): Int32Array {
  const b = new Int32Array(a.length * 2);
  b.set(a);
  return b;
}
