/**
 * float32 → IEEE binary16 (fp16) → float32, exactly as the GPU's `cvt.rn.f16.f32` / `cvt.rn.f16x2.f32` followed by
 * `cvt.f32.f16` computes it: round to nearest, ties to even; results below 2⁻¹⁴ become fp16 subnormals (multiples of
 * 2⁻²⁴, no flush to zero); magnitudes from 65520 (the midpoint above 65504, fp16's largest finite value, which rounds
 * up to 2¹⁶) become ±∞; ±∞ stay ±∞, NaN stays NaN; the sign of zero is kept. The result is a float32 value that fp16
 * represents exactly. The persistent RNN kernels store W_hh this way with `precision: "fp16"` (src/rnn/codegen/
 * prelude.ts, pack_half2); the CPU reference rounds with this to compute the same numbers.
 */

const F32 = new Float32Array(1);
const U32 = new Uint32Array(F32.buffer);

/** 2²⁴: an fp16 subnormal is a multiple of 2⁻²⁴. */
const SUBNORMAL_SCALE = 16777216;

/** Rounds the float32 with bit pattern `bits` to fp16 and returns the float32 bit pattern of the result. */
function roundBits(bits: number): number {
  const sign = bits & 0x80000000;
  const a = bits & 0x7fffffff;
  if (a >= 0x7f800000) return bits >>> 0; // ±∞, NaN (its payload kept)
  if (a >= 0x477ff000) return (sign | 0x7f800000) >>> 0; // |x| ≥ 65520: overflows to ±∞
  if (a >= 0x38800000) {
    // |x| ≥ 2⁻¹⁴, an fp16 normal: keep 10 of float32's 23 mantissa bits, ties to even (a carry moves the exponent up)
    const odd = (a >>> 13) & 1;
    return (sign | ((a + 0xfff + odd) & 0xffffe000)) >>> 0;
  }
  // |x| < 2⁻¹⁴: an fp16 subnormal, a multiple of 2⁻²⁴ (every float32 times 2²⁴ is exact in a double)
  U32[0] = a;
  const t = F32[0]! * SUBNORMAL_SCALE;
  let n = Math.floor(t);
  const frac = t - n;
  if (frac > 0.5 || (frac === 0.5 && (n & 1) === 1)) n++;
  F32[0] = n / SUBNORMAL_SCALE;
  return (sign | U32[0]!) >>> 0;
}

/** x (as a float32) rounded to the nearest fp16, ties to even, as a number (exactly representable in fp16). */
export function roundToFp16(x: number): number {
  F32[0] = x;
  U32[0] = roundBits(U32[0]!);
  return F32[0]!;
}

/** Every value of `src` rounded to fp16 (see roundToFp16), into `out` (a new array by default; may be `src`). */
export function roundToFp16Array(src: Float32Array, out: Float32Array = new Float32Array(src.length)): Float32Array {
  if (out.length !== src.length) {
    throw new RangeError(`roundToFp16Array: out has ${out.length} values; src has ${src.length}`);
  }
  const s = new Uint32Array(src.buffer, src.byteOffset, src.length);
  const o = new Uint32Array(out.buffer, out.byteOffset, out.length);
  for (let i = 0; i < s.length; i++) o[i] = roundBits(s[i]!);
  return out;
}
