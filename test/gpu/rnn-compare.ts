// What the persistent RNN GPU tests (rnn.test.ts, rnn-fp16.test.ts) share: seeded inputs and the relative comparison
// against the CPU reference.
import assert from "node:assert/strict";
import type { RandomStream } from "../../src/util/random.js";

/** n uniform values in ±scale. */
export function randoms(rng: RandomStream, n: number, scale = 1): Float32Array {
  return Float32Array.from({ length: n }, () => (rng.uniform() * 2 - 1) * scale);
}

/** Largest |a − b| / (1 + |b|), and where. */
export function worst(a: ArrayLike<number>, b: ArrayLike<number>): { err: number; at: number } {
  assert.equal(a.length, b.length);
  let err = 0;
  let at = -1;
  for (let i = 0; i < a.length; i++) {
    const e = Math.abs(a[i]! - b[i]!) / (1 + Math.abs(b[i]!));
    if (!(e <= err)) {
      err = e;
      at = i;
    }
  }
  return { err, at };
}

/** Fails, naming `what` and the worst element, where `a` and `b` differ by more than `tol` relative to 1 + |b|. */
export function close(a: ArrayLike<number>, b: ArrayLike<number>, what: string, tol: number): void {
  const { err, at } = worst(a, b);
  if (!(err <= tol)) assert.fail(`${what}: relative error ${err.toExponential(2)} at [${at}]: ${a[at]} vs ${b[at]}`);
}
