/**
 * Device math written once and included by every engine's CUDA source: the activations, the project's
 * counter-based generator (src/util/random.ts, so dropout masks agree bit for bit across engines) and the Adam
 * element update of the reference AdamTrainer (src/optim/trainers.ts). The including source defines
 * `typedef unsigned int u32;` first.
 *
 * The text is VPPS's original helpers, verbatim: the VPPS kernel must not change by a byte when it is assembled
 * from here (test/vpps-golden.test.ts).
 */

/** `sigm(x)`, `hash32(x)`, `random_uniform(key, counter)`. */
export const DEVICE_ACTIVATIONS = `
// Accurate expf/tanhf rather than the fast intrinsics: the CPU engine is the oracle and checks agree to fp32 noise.
__device__ __forceinline__ float sigm(float x) { return 1.f / (1.f + expf(-x)); }

// The project's counter-based generator (src/util/random.ts): dropout masks agree bit for bit with every engine.
__device__ __forceinline__ u32 hash32(u32 x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
__device__ __forceinline__ float random_uniform(u32 key, u32 counter) {
  return (float)(hash32(hash32(counter) ^ (key * 0x9e3779b9u)) >> 8) * (1.f / 16777216.f);
}
`;

/** `struct AdamArgs` (one launch's hyper-parameters) and `adam_element(w, g, m, v, args)`. */
export const DEVICE_ADAM = `
// Adam's hyper-parameters of the launch. They are kernel arguments rather than script operands: they are the same
// for every instruction of a launch, the bias corrections change with every step (so no script word would be
// constant), and arguments live in the constant bank, costing neither script words nor registers. The host passes
// 1 − β and 1/c rather than having the kernel derive them: values derived from arguments are loop-invariant, and
// the compiler hoists them out of the interpreter loop into registers held for the whole launch, which made the
// tightest plans spill (measured: 2 CTAs/SM, hidden 256).
struct AdamArgs {
  float lr, beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  float inv_c1, inv_c2; // 1 / (1 - beta1^t), 1 / (1 - beta2^t) of this launch's step t
};

// One element of the reference AdamTrainer (src/train/trainers.ts), g already scaled by the clipping factor:
// m = β1 m + (1 − β1) g, v = β2 v + (1 − β2) g², w −= lr (m / c1) / (√(v / c2) + ε). The emulator's adamElement
// (moments.ts) is the same arithmetic. Reciprocals, the approximate division (__fdividef, 2 ulp) and square root
// (sqrt.approx, ~1 ulp; subnormals flush to 0, where ε dominates anyway) rather than IEEE '/' and sqrtf: their slow
// paths cost registers the tightest plans do not have (measured: spills), and the comparison with the reference
// allows fp32 noise anyway. The remaining divisor is at least ε, far from where __fdividef returns 0.
__device__ __forceinline__ float adam_element(float w, float g, float& m, float& v, const AdamArgs& a) {
  m = a.beta1 * m + a.one_minus_beta1 * g;
  v = a.beta2 * v + a.one_minus_beta2 * g * g;
  float root;
  asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(root) : "f"(v * a.inv_c2));
  return w - __fdividef(a.lr * (m * a.inv_c1), root + a.eps);
}
`;
