/**
 * The static part of the VPPS kernel: CUDA text that is the same for every model. Opcode numbers and operand
 * positions are rendered from the table in script.ts, so the interpreter cannot drift from the encoder.
 */
import { DEVICE_ACTIVATIONS, DEVICE_ADAM } from "../../../codegen/device-math.js";
import { OPCODES, Opcode } from "../script/format.js";

/** Words of a wait instruction (preamble, count): the interpreter groups runs of them. */
const WAIT_WORDS = 1 + OPCODES[Opcode.Wait]!.fixed.length;

/** Error codes the kernel writes to `status[0]` (part of the host interface; the first error wins). */
export const KERNEL_ERRORS = {
  /** A wait did not see its count within the spin limit: status = [code, cta, barrier, seen, expected, pc]. */
  barrierTimeout: 1,
  /** Unknown opcode: status = [code, cta, opcode, 0, 0, pc]. */
  badOpcode: 2,
  /**
   * An instruction runs past the end of the script or is longer than the staging chunk (status = [code, cta, 0, 0,
   * 0, pc]), or a tile instruction's operands are out of range (status = [code, cta, count, r0, c0, pc]).
   */
  badLength: 3,
  /** A matrix instruction names a matrix this kernel does not hold: status = [code, cta, matrix, 0, 0, pc]. */
  badMatrix: 4,
} as const;

/** Words of `status` the kernel may write on an error. */
export const STATUS_WORDS = 6;
/**
 * Word of the status block where the CTA that finishes last stores the batch loss (its float bits): the host reads
 * it back with the error words, on another stream than the kernels', so no copy sits between two launches.
 */
export const STATUS_LOSS = STATUS_WORDS;
/** Word of the status block counting the CTAs that finished; the last one sets it back to 0. */
export const STATUS_FINISHED = STATUS_WORDS + 1;

/** `OP_TANH_BWD` style C identifiers for opcodes. */
export function opcodeConstant(op: Opcode): string {
  return `OP_${Opcode[op].replace(/([a-z0-9])([A-Z])/g, "$1_$2").toUpperCase()}`;
}

/** Operand index (1-based word position after the preamble) of a named operand of `op`. */
function at(op: Opcode, name: string): number {
  const i = OPCODES[op]!.fixed.indexOf(name);
  if (i < 0) throw new Error(`kernel template: opcode ${OPCODES[op]!.mnemonic} has no operand '${name}'`);
  return i + 1;
}

/** `pool + ins[k]` for operand `name` of `op`. */
const P = (op: Opcode, name: string): string => `(pool + ins[${at(op, name)}])`;
/** The raw operand word. */
const W = (op: Opcode, name: string): string => `ins[${at(op, name)}]`;

export function renderOpcodeConstants(): string {
  return OPCODES.map(
    (o) => `constexpr u32 ${opcodeConstant(o.opcode)} = ${o.opcode}; // ${o.mnemonic} ${o.fixed.join(" ")}`,
  ).join("\n");
}

/** Words of an instruction, from the opcode table; `avail` guards reading k of a variadic one past the chunk. */
export function renderInstructionWords(): string {
  const cases = OPCODES.map((o) => {
    const fixed = 1 + o.fixed.length;
    if (o.repeated.length === 0) return `    case ${opcodeConstant(o.opcode)}: return ${fixed};`;
    const k = 1 + o.fixed.indexOf("k");
    return `    case ${opcodeConstant(o.opcode)}: return avail < ${fixed} ? ${fixed} : ${fixed} + ${o.repeated.length} * ins[${k}];`;
  });
  return `// Words of the instruction at ins (0 for an unknown opcode). A variadic instruction whose count lies past the
// staged chunk reports its fixed length, which makes the caller restage from the instruction's start.
__device__ __forceinline__ u32 instruction_words(const u32* ins, u32 avail) {
  switch (ins[0] & 0xffu) {
${cases.join("\n")}
    default: return 0;
  }
}`;
}

export const STATIC_HELPERS = `
// ---- helpers -------------------------------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

${DEVICE_ACTIVATIONS.slice(1)}
// Gradient clipping as the reference trainer does it: scale = clip / ||g|| when the global norm exceeds clip.
__device__ __forceinline__ float clip_scale(const float* pool, u32 acc, float clip) {
  if (acc == kNone || !(clip > 0.f)) return 1.f;
  const float norm = sqrtf(pool[acc]);
  return norm > clip ? clip / norm : 1.f;
}

${DEVICE_ADAM.slice(1)}
// ---- signal / wait on global counters --------------------------------------------------------------------------

__device__ __forceinline__ u32 ld_acquire(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void red_release_add(u32* p, u32 v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// The returning form, for traced kernels only: the old count says which signal completed a barrier.
__device__ __forceinline__ u32 atom_release_add(u32* p, u32 v) {
  u32 old;
  asm volatile("atom.release.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// The GPU-wide nanosecond timer (comparable across SMs, unlike clock64), for traced kernels.
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Records the first error of the launch; later ones (mostly processors timing out behind the first) are dropped.
__device__ void report_error(int* status, int code, int a, int b, int c, int pc) {
  if (atomicCAS(status, 0, code) == 0) {
    status[1] = (int)blockIdx.x;
    status[2] = a;
    status[3] = b;
    status[4] = c;
    status[5] = pc;
    __threadfence();
  }
}

// Called by thread 0 only, after the __syncthreads that ends the previous instruction: that barrier orders every
// thread's writes before this release, and a release is cumulative (PTX memory model), so consumers that acquire
// the counter see all of them. No separate __threadfence: it would be a second, stronger fence.sc on the critical
// path of every step (the release already waits for the CTA's writes).
__device__ __forceinline__ void vpps_signal(u32* counter) {
  red_release_add(counter, 1u);
}

// Called by thread 0 only; the __syncthreads after the instruction releases the other threads. Bounded: a barrier
// nobody signals (a scheduling bug) or a failed peer ends the launch with an error instead of a hang.
__device__ bool vpps_wait(const u32* counter, u32 expected, int* status, u32 barrier, int pc) {
  // The wait is on the critical path of every step (batch 1: ~85 waits of the busiest processor): spin without
  // sleeping for the first kSpinHot polls (each is an L2 round trip, ~0.5 us, one thread per CTA, so the L2 barely
  // notices), and back off only when a wait is long, i.e. off the critical path anyway.
  constexpr u32 kSpinHot = 2048u;
  u32 seen;
  u32 spins = 0;
  u32 sleep_ns = 32;
  while ((seen = ld_acquire(counter)) < expected) {
    if (++spins > kBarrierSpinLimit) {
      report_error(status, kErrBarrierTimeout, (int)barrier, (int)seen, (int)expected, pc);
      return false;
    }
    if ((spins & 1023u) == 0 && *(volatile int*)status != 0) return false; // another processor already failed
    if (spins > kSpinHot) {
      __nanosleep(sleep_ns);
      if (sleep_ns < 256) sleep_ns <<= 1;
    }
  }
  return true;
}
`;

/** Interpreter cases of the instructions that do not touch the register-resident matrices. */
export function renderStaticCases(): string {
  const O = Opcode;
  const lines: string[] = [];
  const elementwise = (op: Opcode, body: string, decl: string) => {
    lines.push(`      case ${opcodeConstant(op)}: { // ${OPCODES[op]!.mnemonic}
        ${decl}
#pragma unroll 1
        for (u32 i = threadIdx.x; i < n; i += kThreads) ${body}
      } break;`);
  };
  lines.push(`      case ${opcodeConstant(O.End)}:
        stop = true;
        break;
      case ${opcodeConstant(O.Signal)}:
        if (threadIdx.x == 0) {
          if (kTrace) t_aux = atom_release_add(barriers + n, 1u);
          else vpps_signal(barriers + n);
        }
        break;
      case ${opcodeConstant(O.Wait)}: {
        // This wait and the waits right after it (a step often starts with several): warp 0 polls up to 32
        // barriers at once, a lane each, so a run of waits costs one L2 round trip instead of one per wait.
        // (the run length goes through shared memory: a register live across the interpreter loop made the
        // tightest plan spill)
        u32 runs = 1;
        while (kGroupWaits && runs < 32u && at + ${WAIT_WORDS}u * runs + ${WAIT_WORDS}u <= avail &&
               (s_script[at + ${WAIT_WORDS}u * runs] & 0xffu) == ${opcodeConstant(O.Wait)}) {
          ++runs;
        }
        if (threadIdx.x == 0) s_runs = runs;
        if (warp == 0 && (u32)lane < runs) {
          const u32* w = ins + ${WAIT_WORDS} * lane;
          const u32 b = w[0] >> 8;
          if (!vpps_wait(barriers + b, w[${at(O.Wait, "count")}], status, b, (int)(pc + at + ${WAIT_WORDS} * lane))) s_abort = 1;
        }
      } break;`);
  const yx = (op: Opcode) => `float* y = ${P(op, "y")}; const float* x = ${P(op, "x")};`;
  const yab = (op: Opcode) =>
    `float* y = ${P(op, "y")}; const float* a = ${P(op, "a")}; const float* b = ${P(op, "b")};`;
  elementwise(O.Copy, "y[i] = x[i];", yx(O.Copy));
  elementwise(O.Add, "y[i] = a[i] + b[i];", yab(O.Add));
  elementwise(O.Sub, "y[i] = a[i] - b[i];", yab(O.Sub));
  elementwise(O.CMul, "y[i] = a[i] * b[i];", yab(O.CMul));
  elementwise(O.Tanh, "y[i] = tanhf(x[i]);", yx(O.Tanh));
  elementwise(O.Logistic, "y[i] = sigm(x[i]);", yx(O.Logistic));
  elementwise(O.Relu, "y[i] = fmaxf(x[i], 0.f);", yx(O.Relu));
  elementwise(O.Acc, "atomicAdd(y + i, x[i]);", yx(O.Acc));
  elementwise(O.AccNeg, "atomicAdd(y + i, -x[i]);", yx(O.AccNeg));
  // A sum of few elements (the loss sums of a batch: scalars over up to ~60 operands) gives each element a warp,
  // its lanes loading the operands at once: one thread walking them waits an L2 round trip per operand (measured
  // on the H100: ~6.5 µs per chained sum instruction on the critical path). Wide sums keep a thread per element.
  lines.push(`      case ${opcodeConstant(O.Sum)}: { // sum: y = sum of k operands (y may be one of them)
        float* y = ${P(O.Sum, "y")}; const u32 k = ${W(O.Sum, "k")}; const u32* xs = ins + ${1 + OPCODES[O.Sum]!.fixed.length};
        if (n <= 32u) {
#pragma unroll 1
          for (u32 i = warp; i < n; i += kWarps) {
            float s = 0.f;
#pragma unroll 1
            for (u32 j = lane; j < k; j += 32) s += pool[xs[j] + i];
            s = warp_sum(s); // every lane has read its operands before lane 0 writes y, which may be one of them
            if (lane == 0) y[i] = s;
          }
        } else {
#pragma unroll 1
          for (u32 i = threadIdx.x; i < n; i += kThreads) {
            float s = 0.f;
#pragma unroll 1
            for (u32 j = 0; j < k; ++j) s += pool[xs[j] + i];
            y[i] = s;
          }
        }
      } break;`);
  elementwise(O.Set, `y[i] = __uint_as_float(${W(O.Set, "bits")});`, `float* y = ${P(O.Set, "y")};`);
  elementwise(
    O.CMulBwd,
    `{
          if (abar) atomicAdd(abar + i, ybar[i] * b[i]);
          if (bbar) atomicAdd(bbar + i, ybar[i] * a[i]);
        }`,
    `float* abar = ${W(O.CMulBwd, "abar")} == kNone ? nullptr : ${P(O.CMulBwd, "abar")};
        float* bbar = ${W(O.CMulBwd, "bbar")} == kNone ? nullptr : ${P(O.CMulBwd, "bbar")};
        const float* ybar = ${P(O.CMulBwd, "ybar")}; const float* a = ${P(O.CMulBwd, "a")}; const float* b = ${P(O.CMulBwd, "b")};`,
  );
  const bwd = (op: Opcode, third: string) =>
    `float* xbar = ${P(op, "xbar")}; const float* ybar = ${P(op, "ybar")}; const float* ${third} = ${P(op, third)};`;
  elementwise(O.TanhBwd, "atomicAdd(xbar + i, ybar[i] * (1.f - y[i] * y[i]));", bwd(O.TanhBwd, "y"));
  elementwise(O.LogisticBwd, "atomicAdd(xbar + i, ybar[i] * y[i] * (1.f - y[i]));", bwd(O.LogisticBwd, "y"));
  elementwise(O.ReluBwd, "if (x[i] > 0.f) atomicAdd(xbar + i, ybar[i]);", bwd(O.ReluBwd, "x"));
  const dropDecl = (op: Opcode) =>
    `const u32 key = ${W(op, "key")}; const u32 base = ${W(op, "base")}; const float p = __uint_as_float(${W(op, "prob")});
        const float scale = 1.f / (1.f - p);`;
  elementwise(
    O.Dropout,
    "y[i] = random_uniform(key, base + i) >= p ? x[i] * scale : 0.f;",
    `float* y = ${P(O.Dropout, "y")}; const float* x = ${P(O.Dropout, "x")};\n        ${dropDecl(O.Dropout)}`,
  );
  elementwise(
    O.DropoutBwd,
    "if (random_uniform(key, base + i) >= p) atomicAdd(xbar + i, ybar[i] * scale);",
    `float* xbar = ${P(O.DropoutBwd, "xbar")}; const float* ybar = ${P(O.DropoutBwd, "ybar")};\n        ${dropDecl(O.DropoutBwd)}`,
  );
  lines.push(renderCellCases(), renderLossCases(), renderUpdateCases());
  return lines.join("\n");
}

function renderCellCases(): string {
  const O = Opcode;
  const cs = 1 + OPCODES[O.LstmCell]!.fixed.length;
  const pairs = 1 + OPCODES[O.LstmCellBwd]!.fixed.length;
  return `      case ${opcodeConstant(O.LstmCell)}: { // lstm: n = H, gates [i; o; u; f1..fk]
        float* out = ${P(O.LstmCell, "out")}; const float* gt = ${P(O.LstmCell, "gates")};
        float* h2 = ${W(O.LstmCell, "h2")} == kNone ? nullptr : ${P(O.LstmCell, "h2")}; // h into the parent's concat
        const u32 k = ${W(O.LstmCell, "k")}; const u32* cs = ins + ${cs};
        if (k == 2) {
          // binary trees' cell: every load first, so one round trip to L2 instead of one per child (the generic
          // loop below is not unrolled: it would cost registers in every plan). The same sums in the same order.
          const float* c0 = pool + cs[0]; const float* c1 = pool + cs[1];
#pragma unroll 1
          for (u32 r = threadIdx.x; r < n; r += kThreads) {
            const float gi = gt[r], go = gt[n + r], gu = gt[2 * n + r], g0 = gt[3 * n + r], g1 = gt[4 * n + r];
            const float x0 = c0[r], x1 = c1[r];
            float c = sigm(gi) * tanhf(gu);
            c += sigm(g0) * x0;
            c += sigm(g1) * x1;
            out[n + r] = c;
            const float h = sigm(go) * tanhf(c);
            out[r] = h;
            if (h2) h2[r] = h;
          }
          break;
        }
#pragma unroll 1
        for (u32 r = threadIdx.x; r < n; r += kThreads) {
          float c = sigm(gt[r]) * tanhf(gt[2 * n + r]);
#pragma unroll 1
          for (u32 j = 0; j < k; ++j) c += sigm(gt[(3 + j) * n + r]) * pool[cs[j] + r];
          out[n + r] = c;
          const float h = sigm(gt[n + r]) * tanhf(c);
          out[r] = h;
          if (h2) h2[r] = h;
        }
      } break;
      case ${opcodeConstant(O.LstmCellBwd)}: { // lstm.bwd: the reference's formulas (src/ops/cells.ts)
        const float* outbar = ${P(O.LstmCellBwd, "outbar")}; const float* out = ${P(O.LstmCellBwd, "out")};
        const float* gt = ${P(O.LstmCellBwd, "gates")};
        float* gbar = ${W(O.LstmCellBwd, "gatesbar")} == kNone ? nullptr : ${P(O.LstmCellBwd, "gatesbar")};
        const float* hb2 = ${W(O.LstmCellBwd, "hbar2")} == kNone ? nullptr : ${P(O.LstmCellBwd, "hbar2")};
        const u32 k = ${W(O.LstmCellBwd, "k")}; const u32* cp = ins + ${pairs};
        if (kBinaryCellBwd && k == 2) {
          // binary trees' cell, every load first (see lstm), where the plan has the registers (kernel-template.ts)
#pragma unroll 1
          for (u32 r = threadIdx.x; r < n; r += kThreads) {
            const float c = out[n + r], go = gt[n + r], dh = outbar[r] + (hb2 ? hb2[r] : 0.f), cb = outbar[n + r];
            const float gi = gt[r], gu = gt[2 * n + r], g0 = gt[3 * n + r], g1 = gt[4 * n + r];
            const float x0 = pool[cp[0] + r], x1 = pool[cp[2] + r];
            const float tc = tanhf(c), so = sigm(go);
            const float dc = cb + dh * so * (1.f - tc * tc);
            const float s0 = sigm(g0), s1 = sigm(g1);
            if (cp[1] != kNone) atomicAdd(pool + cp[1] + r, dc * s0);
            if (cp[3] != kNone) atomicAdd(pool + cp[3] + r, dc * s1);
            if (gbar) {
              const float si = sigm(gi), tu = tanhf(gu);
              atomicAdd(gbar + r, dc * tu * si * (1.f - si));
              atomicAdd(gbar + n + r, dh * tc * so * (1.f - so));
              atomicAdd(gbar + 2 * n + r, dc * si * (1.f - tu * tu));
              atomicAdd(gbar + 3 * n + r, dc * x0 * s0 * (1.f - s0));
              atomicAdd(gbar + 4 * n + r, dc * x1 * s1 * (1.f - s1));
            }
          }
          break;
        }
#pragma unroll 1
        for (u32 r = threadIdx.x; r < n; r += kThreads) {
          const float c = out[n + r], tc = tanhf(c), so = sigm(gt[n + r]), dh = outbar[r] + (hb2 ? hb2[r] : 0.f);
          const float dc = outbar[n + r] + dh * so * (1.f - tc * tc);
          const float si = sigm(gt[r]), tu = tanhf(gt[2 * n + r]);
          if (gbar) {
            atomicAdd(gbar + r, dc * tu * si * (1.f - si));
            atomicAdd(gbar + n + r, dh * tc * so * (1.f - so));
            atomicAdd(gbar + 2 * n + r, dc * si * (1.f - tu * tu));
          }
#pragma unroll 1
          for (u32 j = 0; j < k; ++j) {
            const float sf = sigm(gt[(3 + j) * n + r]);
            if (gbar) atomicAdd(gbar + (3 + j) * n + r, dc * pool[cp[2 * j] + r] * sf * (1.f - sf));
            if (cp[2 * j + 1] != kNone) atomicAdd(pool + cp[2 * j + 1] + r, dc * sf);
          }
        }
      } break;`;
}

function renderLossCases(): string {
  const O = Opcode;
  // One warp: the class count is small (5 for sentiment) and the loss is a scalar.
  const softmax = (op: Opcode) => `const float* x = ${P(op, "x")}; const u32 label = ${W(op, "label")};
          float m = -__int_as_float(0x7f800000); // -inf without math headers (NVRTC)
#pragma unroll 1
          for (u32 i = lane; i < n; i += 32) m = fmaxf(m, x[i]);
          m = warp_max(m);
          float s = 0.f;
#pragma unroll 1
          for (u32 i = lane; i < n; i += 32) s += expf(x[i] - m);
          s = warp_sum(s);`;
  return `      case ${opcodeConstant(O.PickNls)}: // picknls: n = classes, loss = log sum exp(x) - x[label]
        if (warp == 0) {
          ${softmax(O.PickNls)}
          if (lane == 0) pool[${W(O.PickNls, "loss")}] = m + logf(s) - x[label];
        }
        break;
      case ${opcodeConstant(O.PickNlsBwd)}: // picknls.bwd: xbar += lossbar (softmax(x) - onehot(label))
        if (warp == 0) {
          ${softmax(O.PickNlsBwd)}
          float* xbar = ${P(O.PickNlsBwd, "xbar")};
          const float gy = pool[${W(O.PickNlsBwd, "lossbar")}];
#pragma unroll 1
          for (u32 i = lane; i < n; i += 32) atomicAdd(xbar + i, gy * (expf(x[i] - m) / s - (i == label ? 1.f : 0.f)));
        }
        break;`;
}

function renderUpdateCases(): string {
  const O = Opcode;
  // adam and adam.master share one case, which reads their operands at the same positions
  if (OPCODES[O.Adam]!.fixed.join() !== OPCODES[O.AdamMaster]!.fixed.join()) {
    throw new Error("kernel template: adam and adam.master must have the same operands");
  }
  return `      case ${opcodeConstant(O.Norm2)}: { // norm2: acc += sum g^2, one atomic per warp
        const float* g = ${P(O.Norm2, "g")};
        float s = 0.f;
#pragma unroll 1
        for (u32 i = threadIdx.x; i < n; i += kThreads) s += g[i] * g[i];
        s = warp_sum(s);
        if (lane == 0 && s != 0.f) atomicAdd(${P(O.Norm2, "acc")}, s);
      } break;
      case ${opcodeConstant(O.Adam)}:
      case ${opcodeConstant(O.AdamMaster)}: { // adam, adam.master: p, m, v <- Adam's step on n elements; lr = 0: no step
        if (lr == 0.f) break;
        // one loop for both (the bases differ): a second copy of such a loop made ptxas spill in the tightest plans
        const bool regs = op == ${opcodeConstant(O.AdamMaster)};
        float* p = (regs ? master : pool) + ${W(O.Adam, "p")};
        const u32 go = ${W(O.Adam, "g")};
        const float* g = go == kNone ? nullptr : (regs ? grads : pool) + go;
        float* m = moments + ${W(O.Adam, "m")};
        float* v = moments + ${W(O.Adam, "v")};
        const float scale = clip_scale(pool, ${W(O.Adam, "acc")}, clip);
        const AdamArgs a = {lr, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, inv_c1, inv_c2};
#pragma unroll 1
        for (u32 i = threadIdx.x; i < n; i += kThreads) {
          // a parameter this batch does not use (g = NONE) still moves: its moments decay, as in the reference
          float mi = m[i], vi = v[i];
          p[i] = adam_element(p[i], g ? g[i] * scale : 0.f, mi, vi, a);
          m[i] = mi;
          v[i] = vi;
        }
      } break;
      case ${opcodeConstant(O.Sgd)}: { // sgd: p -= lr * scale * g
        float* p = ${P(O.Sgd, "p")}; const float* g = ${P(O.Sgd, "g")};
        const float step = lr * clip_scale(pool, ${W(O.Sgd, "acc")}, clip);
#pragma unroll 1
        for (u32 i = threadIdx.x; i < n; i += kThreads) p[i] -= step * g[i];
      } break;`;
}
