/**
 * One counter-based random generator for the whole project: every random number is a pure function of
 * (key, counter), so parameter initialisation, shuffling and dropout masks are repeatable from `--seed` and can be
 * recomputed bit-for-bit by any engine (a CUDA kernel evaluates the same `hash32` on the same counters).
 *
 * The mixer is the "lowbias32" integer hash (Wellons), applied twice with the key folded in between; it passes
 * the usual avalanche tests and needs only 32-bit multiplies, which is why it is cheap in a GPU kernel too.
 */
export function hash32(x: number): number {
  x ^= x >>> 16;
  x = Math.imul(x, 0x7feb352d);
  x ^= x >>> 15;
  x = Math.imul(x, 0x846ca68b);
  x ^= x >>> 16;
  return x >>> 0;
}

/** The generator's output for (key, counter): a uniformly distributed unsigned 32-bit integer. */
export function randomU32(key: number, counter: number): number {
  return hash32((hash32(counter >>> 0) ^ Math.imul(key >>> 0, 0x9e3779b9)) >>> 0);
}

/** Uniform in [0, 1) with 24 bits of precision (exactly representable in float32 — engines agree). */
export function randomUniform(key: number, counter: number): number {
  return (randomU32(key, counter) >>> 8) / 16777216;
}

/** Derives an independent key for a named purpose ("init", "shuffle", "dropout") from the user's seed. */
export function deriveKey(seed: number, purpose: string, index = 0): number {
  let h = hash32(seed >>> 0);
  for (let i = 0; i < purpose.length; i++) h = hash32(h ^ purpose.charCodeAt(i));
  return hash32(h ^ hash32(index >>> 0));
}

/** A sequential view of the generator: a key and a running counter. */
export class RandomStream {
  private counter = 0;
  constructor(readonly key: number) {}
  u32(): number {
    return randomU32(this.key, this.counter++);
  }
  /** Uniform in [0, 1). */
  uniform(): number {
    return randomUniform(this.key, this.counter++);
  }
  /** Integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.uniform() * n);
  }
  /** In-place Fisher–Yates shuffle. */
  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      const t = items[i] as T;
      items[i] = items[j] as T;
      items[j] = t;
    }
    return items;
  }
}
