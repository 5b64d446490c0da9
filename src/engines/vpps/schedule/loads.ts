/**
 * The processors' loads within one step and the least-loaded choice the scheduler places work by (DESIGN §6.4: a
 * matrix op goes to every holder of the matrix, any other op to the least-loaded processor). Load is about the
 * bytes an instruction touches, matrix work weighted by the constants below.
 */

/** Load of one weight element of a matrix product relative to one float of an elementwise instruction. */
export const MATRIX_LOAD_WEIGHT = 0.25;
/**
 * Load of one multiply-add of a tile instruction relative to one float of an elementwise instruction: tiles read
 * the master copy through shared memory in 64×64 blocks, far denser work than a list's per-entry rounds.
 */
export const TILE_LOAD_WEIGHT = MATRIX_LOAD_WEIGHT / 16;

/** Heaps remembered per scheduler (each `ctas` words). */
const HEAP_MEMO_LIMIT = 512;

/**
 * One step's load per CTA and a binary heap over them. Kept across steps and batches (nothing is allocated per
 * step once the memo is warm).
 */
export class StepLoads {
  /** This step's load of each CTA (the heap mirrors it once built). */
  readonly load: Float64Array;
  private readonly heap: Int32Array;
  private readonly heapLoad: Float64Array;
  private readonly identity: Int32Array;
  private heapReady = false;
  /**
   * Heaps already built, by the step's announcement (see buildHeap): `announced` spells this step's announcements,
   * or is undefined once loads depend on anything else (a placement before an announcement).
   */
  private readonly heapMemo = new Map<string, { heap: Int32Array; heapLoad: Float64Array }>();
  private announced: string | undefined = "";

  constructor(readonly ctas: number) {
    this.load = new Float64Array(ctas);
    this.heap = new Int32Array(ctas);
    this.heapLoad = new Float64Array(ctas);
    this.identity = Int32Array.from({ length: ctas }, (_, k) => k);
  }

  /** A new step: every load is zero. */
  startStep(): void {
    this.load.fill(0);
    this.heapReady = false;
    this.announced = "";
  }

  /**
   * The caller added the load of `entries` products of matrix m to `load` before any placement of the step
   * (`backward`: backward products), which makes the loads a function of the step's announcements.
   */
  announce(m: number, entries: number, backward: boolean): void {
    this.heapReady = false;
    if (this.announced !== undefined) this.announced += backward ? `${m}:${entries}b,` : `${m}:${entries},`;
  }

  /** The CTA with the least load in this step; `work` is added to its load. */
  take(work: number): number {
    if (!this.heapReady) this.buildHeap();
    const q = this.heap[0]!;
    const l = this.heapLoad[0]! + work;
    this.load[q] = l;
    this.heapLoad[0] = l;
    this.siftDown(0);
    return q;
  }

  /**
   * Heapifies the loads. Before the first placement of a step the loads are a function of the step's announcement
   * alone (the same matrices with the same product counts give the same floats), and so is the heap: a step
   * announcing what an earlier one did (every level of a small batch does) copies that heap instead of building it.
   */
  private buildHeap(): void {
    const key = this.announced;
    this.announced = undefined; // from now on loads include placements
    this.heapReady = true;
    const { heap, heapLoad, load } = this;
    const memo = key === undefined ? undefined : this.heapMemo.get(key);
    if (memo !== undefined) {
      heap.set(memo.heap);
      heapLoad.set(memo.heapLoad);
      return;
    }
    // Bottom-up heapify of the identity order. While position k is processed it still holds CTA k, and sifting
    // down a zero load moves nothing (loads are never negative), so only loaded positions need the call.
    heap.set(this.identity);
    heapLoad.set(load);
    for (let k = (this.ctas >> 1) - 1; k >= 0; k--) if (heapLoad[k]! > 0) this.siftDown(k);
    if (key !== undefined) {
      if (this.heapMemo.size >= HEAP_MEMO_LIMIT) this.heapMemo.clear(); // large batches rarely repeat a step
      this.heapMemo.set(key, { heap: heap.slice(), heapLoad: heapLoad.slice() });
    }
  }

  /** Restores the heap order below position k (`heapLoad` mirrors the loads in heap order: one load per level). */
  private siftDown(k: number): void {
    const { heap, heapLoad } = this;
    const n = this.ctas;
    const q = heap[k]!;
    const l = heapLoad[k]!;
    for (;;) {
      let c = 2 * k + 1;
      if (c >= n) break;
      let lc = heapLoad[c]!;
      if (c + 1 < n) {
        const l2 = heapLoad[c + 1]!;
        if (l2 < lc) {
          c++;
          lc = l2;
        }
      }
      if (lc >= l) break;
      heap[k] = heap[c]!;
      heapLoad[k] = lc;
      k = c;
    }
    heap[k] = q;
    heapLoad[k] = l;
  }
}
