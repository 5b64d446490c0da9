/**
 * The static part of the VPPS kernel: CUDA text that is the same for every model (helpers, the decoding of an
 * instruction's length, and the interpreter cases of the instructions that do not touch register-resident matrices).
 * Opcode numbers and operand positions are rendered from the table in script/format.ts, so the interpreter cannot
 * drift from the encoder.
 */
import { DEVICE_ACTIVATIONS, DEVICE_ADAM } from "../../../codegen/device-math.js";
import { FIRST_KERNEL_ERROR, GRID_BARRIER_CUDA, GRID_ERRORS, STATUS_WORDS } from "../../../codegen/grid-barrier.js";
import { OPCODES, Opcode } from "../script/format.js";
import { renderCellCases } from "./cell.js";
import { operandIndex as at, opcodeConstant, operandPointer as P, operandWord as W } from "./operands.js";

/** Words of a wait instruction (preamble, count): the interpreter groups runs of them. */
const WAIT_WORDS = 1 + OPCODES[Opcode.Wait]!.fixed.length;

/**
 * Error codes the kernel writes to `status[0]` (part of the host interface; the first error wins): the grid
 * barrier's timeout (src/codegen/grid-barrier.ts), then the interpreter's own.
 */
export const KERNEL_ERRORS = {
  /** A wait did not see its count within the spin limit: status = [code, cta, barrier, seen, expected, pc]. */
  barrierTimeout: GRID_ERRORS.barrierTimeout,
  /** Unknown opcode: status = [code, cta, opcode, 0, 0, pc]. */
  badOpcode: FIRST_KERNEL_ERROR,
  /**
   * An instruction runs past the end of the script or is longer than the staging chunk (status = [code, cta, 0, 0,
   * 0, pc]), or a tile instruction's operands are out of range (status = [code, cta, count, r0, c0, pc]).
   */
  badLength: FIRST_KERNEL_ERROR + 1,
  /** A matrix instruction names a matrix this kernel does not hold: status = [code, cta, matrix, 0, 0, pc]. */
  badMatrix: FIRST_KERNEL_ERROR + 2,
} as const;

/** Words of `status` the kernel may write on an error (the grid barrier's status block). */
export { STATUS_WORDS };
/**
 * Word of the status block where the CTA that finishes last stores the batch loss (its float bits): the host reads
 * it back with the error words, on another stream than the kernels', so no copy sits between two launches.
 */
export const STATUS_LOSS = STATUS_WORDS;
/** Word of the status block counting the CTAs that finished; the last one sets it back to 0. */
export const STATUS_FINISHED = STATUS_WORDS + 1;

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
${GRID_BARRIER_CUDA.slice(1)}`;

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
  // its lanes loading the operands at once: one thread walking them waits an L2 round trip per operand, on the
  // critical path of every chained sum. Wide sums keep a thread per element.
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
  // norm2 and norm2.grads, sgd and sgd.master share a case the same way
  if (
    OPCODES[O.Norm2]!.fixed.join() !== OPCODES[O.Norm2Grads]!.fixed.join() ||
    OPCODES[O.Sgd]!.fixed.join() !== OPCODES[O.SgdMaster]!.fixed.join()
  ) {
    throw new Error("kernel template: norm2/norm2.grads and sgd/sgd.master must have the same operands");
  }
  return `      case ${opcodeConstant(O.Norm2)}:
      case ${opcodeConstant(O.Norm2Grads)}: { // norm2, norm2.grads: acc += sum g^2 (pool, gradient buffer), one atomic per warp
        const float* g = (op == ${opcodeConstant(O.Norm2Grads)} ? grads : pool) + ${W(O.Norm2, "g")};
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
      case ${opcodeConstant(O.Sgd)}:
      case ${opcodeConstant(O.SgdMaster)}: { // sgd, sgd.master: p -= lr * scale * g (pool; master copy and gradient buffer)
        const bool off = op == ${opcodeConstant(O.SgdMaster)};
        float* p = (off ? master : pool) + ${W(O.Sgd, "p")};
        const float* g = (off ? grads : pool) + ${W(O.Sgd, "g")};
        const float step = lr * clip_scale(pool, ${W(O.Sgd, "acc")}, clip);
#pragma unroll 1
        for (u32 i = threadIdx.x; i < n; i += kThreads) p[i] -= step * g[i];
      } break;`;
}
