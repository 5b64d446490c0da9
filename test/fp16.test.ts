// float32 → fp16 → float32 rounding (src/util/fp16.ts), as the persistent RNN kernels' cvt.rn.f16x2.f32 stores W_hh:
// zeros with their sign, subnormals, the largest finite value and the overflow threshold, ties to even, ∞ and NaN, and
// a sweep against an independent oracle (the fp16 grid built from powers of two).

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { roundToFp16, roundToFp16Array } from "../src/util/fp16.js";

/** The float32 whose bit pattern is `bits`. */
const f32 = (bits: number): number => new Float32Array(Uint32Array.of(bits).buffer)[0]!;
const bitsOf = (x: number): number => new Uint32Array(Float32Array.of(x).buffer)[0]!;

const MIN_SUBNORMAL = 2 ** -24;
const MIN_NORMAL = 2 ** -14;
const MAX = 65504;

/** The oracle: every fp16 value is m·2^(e−10) with integer m; pick the nearest, ties to the even m (slow, exact). */
function oracle(x: number): number {
  const v = Math.fround(x);
  if (Number.isNaN(v)) return Number.NaN;
  const a = Math.abs(v);
  const sign = v < 0 || Object.is(v, -0) ? -1 : 1;
  if (a >= 65520) return sign * Number.POSITIVE_INFINITY;
  let q = MIN_SUBNORMAL; // the spacing of fp16 values around a
  for (let e = -14; e <= 15; e++) if (a >= 2 ** e) q = 2 ** (e - 10);
  const m = Math.floor(a / q);
  const below = m * q;
  const above = (m + 1) * q;
  let r: number;
  if (a - below < above - a) r = below;
  else if (a - below > above - a) r = above;
  else r = m % 2 === 0 ? below : above;
  return sign * r;
}

const same = (a: number, b: number, what: string): void =>
  assert.ok(Object.is(a, b) || (Number.isNaN(a) && Number.isNaN(b)), `${what}: got ${a}, expected ${b}`);

describe("float32 → fp16 → float32 rounding", () => {
  test("zeros keep their sign; exact fp16 values are unchanged", () => {
    same(roundToFp16(0), 0, "0");
    same(roundToFp16(-0), -0, "−0");
    for (const x of [1, -1, 0.5, 2, 1024, -3.5, 1 + 2 ** -10, MAX, -MAX, MIN_NORMAL, MIN_SUBNORMAL, 1023 * 2 ** -24]) {
      same(roundToFp16(x), x, String(x));
    }
  });

  test("subnormals: multiples of 2⁻²⁴, ties to even, the smallest to zero with its sign", () => {
    same(roundToFp16(MIN_SUBNORMAL / 2), 0, "half the smallest subnormal (a tie) → 0 (even)");
    same(roundToFp16(-MIN_SUBNORMAL / 2), -0, "−half the smallest subnormal → −0");
    same(roundToFp16(Math.fround(MIN_SUBNORMAL * 0.5000001)), MIN_SUBNORMAL, "just above half → the smallest");
    same(roundToFp16(1.5 * MIN_SUBNORMAL), 2 * MIN_SUBNORMAL, "1.5 (a tie) → 2 (even)");
    same(roundToFp16(2.5 * MIN_SUBNORMAL), 2 * MIN_SUBNORMAL, "2.5 (a tie) → 2 (even)");
    same(roundToFp16(3.4 * MIN_SUBNORMAL), 3 * MIN_SUBNORMAL, "3.4 → 3");
    same(roundToFp16(f32(1)), 0, "the smallest float32 subnormal");
    same(roundToFp16(-f32(0x007fffff)), -0, "the largest float32 subnormal, negative");
    same(roundToFp16(1023.5 * MIN_SUBNORMAL), MIN_NORMAL, "the largest subnormal + ½ (a tie) → the smallest normal");
    same(roundToFp16(MIN_NORMAL - MIN_SUBNORMAL / 4), MIN_NORMAL, "just below the smallest normal");
  });

  test("normals: 11 significant bits, ties to even", () => {
    const ulp = 2 ** -10; // at 1
    same(roundToFp16(1 + ulp / 2), 1, "1 + ½ulp (a tie) → 1 (even)");
    same(roundToFp16(1 + (3 * ulp) / 2), 1 + 2 * ulp, "1 + 1.5ulp (a tie) → 1 + 2ulp (even)");
    same(roundToFp16(Math.fround(1 + ulp / 2 + 2 ** -20)), 1 + ulp, "just above the tie → up");
    same(roundToFp16(2 - ulp / 4), 2, "a carry into the exponent");
    same(roundToFp16(-(1 + ulp / 2)), -1, "negative ties too");
    same(roundToFp16(0.1), 0.0999755859375, "0.1");
    same(roundToFp16(1 / 3), 0.333251953125, "1/3");
  });

  test("the top: 65504 is the largest; from 65520 (the tie with 2¹⁶) it overflows to ∞", () => {
    same(roundToFp16(65505), MAX, "65505");
    same(roundToFp16(65519.996), MAX, "just below 65520");
    same(roundToFp16(f32(0x477fefff)), MAX, "the float32 just below 65520");
    same(roundToFp16(65520), Number.POSITIVE_INFINITY, "65520 (a tie, to the even 2¹⁶) → ∞");
    same(roundToFp16(-65520), Number.NEGATIVE_INFINITY, "−65520 → −∞");
    same(roundToFp16(1e10), Number.POSITIVE_INFINITY, "1e10");
    same(roundToFp16(f32(0x7f7fffff)), Number.POSITIVE_INFINITY, "the largest float32");
  });

  test("∞ stays ∞ and NaN stays NaN", () => {
    same(roundToFp16(Number.POSITIVE_INFINITY), Number.POSITIVE_INFINITY, "∞");
    same(roundToFp16(Number.NEGATIVE_INFINITY), Number.NEGATIVE_INFINITY, "−∞");
    same(roundToFp16(Number.NaN), Number.NaN, "NaN");
    assert.ok(Number.isNaN(roundToFp16(f32(0xffc00001))), "a negative NaN with a payload");
  });

  test("agrees with the oracle over a sweep of float32 bit patterns (every exponent, both signs)", () => {
    const bits: number[] = [];
    for (let b = 0; b < 2 ** 31; b += 65521) bits.push(b, (b | 0x80000000) >>> 0);
    // dense around the boundaries: the subnormal/normal edge, the overflow tie, 1
    for (const c of [0x38800000, 0x477ff000, 0x3f800000, 0x33000000])
      for (let d = -3000; d <= 3000; d++) bits.push(c + d);
    const xs = new Float32Array(new Uint32Array(bits).buffer);
    const ys = roundToFp16Array(xs);
    for (let i = 0; i < xs.length; i++) same(ys[i]!, oracle(xs[i]!), `0x${bits[i]!.toString(16)} (${xs[i]})`);
  });

  test("roundToFp16Array: a copy by default, in place when asked, views respected", () => {
    const buf = Float32Array.of(7, 1 + 2 ** -11, 0.1, 9);
    const view = buf.subarray(1, 3);
    const out = roundToFp16Array(view);
    assert.deepEqual([...out], [1, roundToFp16(0.1)]);
    assert.deepEqual([...buf], [7, Math.fround(1 + 2 ** -11), Math.fround(0.1), 9], "the source is untouched");
    roundToFp16Array(view, view);
    assert.deepEqual([...buf], [7, 1, roundToFp16(0.1), 9], "in place, only the view");
    assert.equal(bitsOf(roundToFp16(-0)), 0x80000000);
    assert.throws(() => roundToFp16Array(buf, new Float32Array(2)), /out has 2 values; src has 4/);
  });
});
