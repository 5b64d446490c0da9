/**
 * Renders the VPPS forward-backward-update kernel for one plan: a header stating the spec and register budget,
 * derived constants as commented `constexpr`, the static part (interpreter.ts, cell.ts, src/codegen/), the
 * specialised part (staging.ts, matrix.ts, tile.ts, slots.ts, matrix-cases.ts), and the kernel: load weights →
 * interpret the script → (update and write back, which the script's last instructions ask for).
 *
 * Host interface (what the runtime must pass and prepare), in parameter order:
 *   script   const u32*  — `ctas + 1` prefix sums, every CTA's script, the shared operand table (script/format.ts)
 *   pool     float*      — values and gradients; gradient regions zeroed before the launch
 *   master   float*      — row-major master copies of the matrices at `MatrixPlan.masterOffset`
 *   grads    float*      — same layout; written by `export.grads` (may be null if the script never exports)
 *   barriers u32*        — one counter per barrier id used by the script, zero when the launch starts
 *   status   int*        — this launch's status block: `STATUS_WORDS` ints, zero when the launch starts; nonzero
 *                          `status[0]` is an error (a launch without one leaves them zero); then the loss
 *                          (`STATUS_LOSS`, float bits, stored by the CTA that finishes last) and the count of
 *                          finished CTAs (`STATUS_FINISHED`, zero when the launch starts and when it ends)
 *   lr       float       — learning rate of `sgd`, `update.regs`, `adam` and `adam.master`; with Adam, 0
 *                          takes no step at all (weights and moments stay)
 *   clip     float       — gradient clipping threshold (0 disables)
 *   profile  u64*        — null, or (kernels rendered with `profile: true`) `PROFILE_WORDS` counters the kernel adds
 *                          to: per opcode the SM cycles thread 0 spent in it (up to the barrier that ends it) and how
 *                          often it ran, then the cycles of weight loading, of script staging, and of the whole CTA
 *   moments  float*      — Adam's m and v (moments.ts: m then v of the master copy, then of the model region); may be
 *                          null when the script has no Adam instruction
 *   beta1, one_minus_beta1, beta2, one_minus_beta2, eps, inv_c1, inv_c2  float — Adam's hyper-parameters and the
 *                          reciprocals of this step's bias corrections 1 − β1ᵗ, 1 − β2ᵗ (AdamArgs in src/codegen/device-math.ts;
 *                          unused by SGD scripts)
 *   stale    u32*        — the previous launch's barrier counters (another region than `barriers`), zeroed by this
 *                          launch's prologue for the next one
 *   stale_count  u32     — how many of them
 *   loss_offset  u32     — the pool offset of the batch loss (copied to `status[STATUS_LOSS]` at the end)
 * Grid: `plan.ctas` CTAs of 256 threads, all co-resident (a persistent kernel), static shared memory only.
 */
import { createHash } from "node:crypto";
import { dumpDirectory, dumpKernelSource } from "../instrument/dump.js";
import { PROFILE_WORDS } from "../instrument/profile.js";
import { TRACE_SLOTS } from "../instrument/trace.js";
import { type VppsPlan, WARPS_PER_CTA } from "../plan/plan.js";
import { MAX_INSTRUCTION_WORDS } from "../script/format.js";
import {
  KERNEL_ERRORS,
  renderInstructionWords,
  renderOpcodeConstants,
  renderStaticCases,
  STATIC_HELPERS,
  STATUS_FINISHED,
  STATUS_LOSS,
} from "./interpreter.js";
import { MATRIX_ROUTINES } from "./matrix.js";
import { renderMatrixCases } from "./matrix-cases.js";
import { renderMatrixStructs, renderSlotDeclarations } from "./slots.js";
import {
  binaryCellBackward,
  groupWaits,
  REDUCE_BLOCK_COLS,
  STAGE_ENTRY_WORDS,
  STAGE_FLOATS,
  STAGE_YBAR_FLOATS,
  stageLoads,
} from "./staging.js";
import { tileRoutines } from "./tile.js";

/** The named spec a kernel is rendered from (together with the plan, which fixes rpw, CTAs and the deal). */
export interface KernelSpec {
  /** Model name, part of the kernel's name and header ("treelstm"). */
  readonly model: string;
  /** Script words staged into shared memory at a time (default 2048 = 8 KiB). */
  readonly scriptChunkWords?: number;
  /** Spins of a wait before it reports a timeout (default 2^24, about 2 s with the back-off sleeps). */
  readonly barrierSpinLimit?: number;
  /**
   * Count SM cycles per opcode into the `profile` argument (where the kernel's time goes: waits vs math). Costs a
   * clock read and a shared-memory add per instruction; off by default, and a different kernel name.
   */
  readonly profile?: boolean;
  /**
   * Record a timeline of the launch into the `profile` argument (instrument/trace.ts): per CTA the global time at which
   * each instruction ended and, for a signal, the barrier's count before it, which names the signal that released
   * each wait. Costs a timer read and a store per instruction, and signals return their old count; a different
   * kernel name. Exclusive with `profile`.
   */
  readonly trace?: boolean;
}

export { PROFILE_SLOTS, PROFILE_WORDS } from "../instrument/profile.js";
export { TRACE_SLOTS } from "../instrument/trace.js";

export const DEFAULT_SCRIPT_CHUNK_WORDS = 2048;
export const DEFAULT_BARRIER_SPIN_LIMIT = 1 << 24;

/**
 * Static shared memory of a kernel in bytes: the script chunk, the two x̄ reduction buffers, the staged x vectors,
 * ȳ rows and list entries of the matrix instructions, and the abort flag.
 */
export function kernelSharedBytes(spec: KernelSpec): number {
  return (
    4 * (spec.scriptChunkWords ?? DEFAULT_SCRIPT_CHUNK_WORDS) +
    4 * 2 * WARPS_PER_CTA * REDUCE_BLOCK_COLS +
    4 * (STAGE_FLOATS + STAGE_YBAR_FLOATS + STAGE_ENTRY_WORDS) +
    4 + // s_abort
    4 + // s_runs
    (spec.profile ? 8 * PROFILE_WORDS : 0)
  );
}

/** `vpps_treelstm_cta1_rpw2`: the entry point's name for a spec and plan. */
export function kernelName(plan: VppsPlan, spec: KernelSpec): string {
  const model = spec.model.replace(/[^A-Za-z0-9_]/g, "_");
  const copies = plan.transposed.length > 0 ? "_t" : "";
  // a plan made again after a spill is another program (the context loads programs by name)
  const margin = plan.budget.headroom > 0 ? `_h${plan.budget.headroom}` : "";
  // the variants of one model keep the planner's off-chip matrices or every one (codegen/compile.ts): named apart
  const off = plan.offChip.length > 0 ? `_off${plan.offChip.length}` : "";
  return `vpps_${model}_cta${plan.ctasPerSm}_rpw${plan.rowsPerWarp}${off}${copies}${margin}${spec.profile ? "_prof" : ""}${spec.trace ? "_trace" : ""}`;
}

/** A short content hash of the plan's geometry, stated in the header so a dumped source names what it was for. */
function planDigest(plan: VppsPlan): string {
  const shape = plan.matrices.map((m) => `${m.name}:${m.rows}x${m.cols}:${m.gradients}`).join(",");
  return createHash("sha256")
    .update(`${plan.device.name}|${plan.ctas}|${plan.rowsPerWarp}|${shape}`)
    .digest("hex")
    .slice(0, 12);
}

function header(plan: VppsPlan, spec: KernelSpec, name: string): string {
  const b = plan.budget;
  const matrices = plan.matrices
    .map((m) => ` *   ${m.name.padEnd(12)} [${m.rows} x ${m.cols}]  gradient in ${m.gradients}`)
    .concat(plan.transposed.map((t) => ` *   ${t.name.padEnd(12)} [${t.rows} x ${t.cols}]  transposed copy, read-only`))
    .join("\n");
  return `/*
 * ${name} — VPPS forward/backward/update kernel, generated by src/engines/vpps/kernel-template.ts. Do not edit.
 * spec: { model: "${spec.model}", rowsPerWarp: ${plan.rowsPerWarp}, ctasPerSm: ${plan.ctasPerSm}, scriptChunkWords: ${
   spec.scriptChunkWords ?? DEFAULT_SCRIPT_CHUNK_WORDS
 }, barrierSpinLimit: ${spec.barrierSpinLimit ?? DEFAULT_BARRIER_SPIN_LIMIT} }
 * device: ${plan.device.name} (${plan.device.arch}), ${plan.ctas} persistent CTAs x ${plan.threadsPerCta} threads; plan ${planDigest(plan)}
 * register budget per thread: ${b.limitPerThread} limit - ${b.interpreterReserve} reserved for the interpreter ${
   b.headroom > 0 ? `- ${b.headroom} kept free after a spill ` : ""
 }= ${b.forParameters} for parameters;
 *   used: ${plan.weightRegs} weights + ${plan.gradientRegs} gradients = ${plan.weightRegs + plan.gradientRegs}
 * matrices held in registers:
${matrices}
 */`;
}

function constants(plan: VppsPlan, spec: KernelSpec): string {
  const chunk = spec.scriptChunkWords ?? DEFAULT_SCRIPT_CHUNK_WORDS;
  if (spec.profile && spec.trace) {
    throw new Error("generateKernelSource: a kernel is rendered with profile or with trace, not both");
  }
  if (chunk < MAX_INSTRUCTION_WORDS) {
    throw new Error(`generateKernelSource: scriptChunkWords must be at least ${MAX_INSTRUCTION_WORDS}; got ${chunk}`);
  }
  return `typedef unsigned int u32;

constexpr int kThreads = ${plan.threadsPerCta};              // threads per CTA: one virtual processor
constexpr int kWarps = ${WARPS_PER_CTA};                   // warps per CTA; each holds whole rows
constexpr int kCtasPerSm = ${plan.ctasPerSm};              // persistent CTAs per SM (launch bounds)
constexpr int kCtas = ${plan.ctas};                 // grid size: every CTA is resident for the whole launch
constexpr int kRpw = ${plan.rowsPerWarp};                    // rows per warp per partition
constexpr int kRowsPerPartition = kWarps * kRpw; // consecutive rows of one matrix in one slot of one CTA
constexpr u32 kScriptChunkWords = ${chunk}u;     // script words staged in shared memory at a time
constexpr u32 kBarrierSpinLimit = ${spec.barrierSpinLimit ?? DEFAULT_BARRIER_SPIN_LIMIT}u;  // spins before a wait reports a timeout
constexpr u32 kNone = 0xffffffffu;         // absent optional operand
constexpr bool kProfile = ${spec.profile ? "true" : "false"};         // count cycles per opcode into \`profile\`
constexpr int kProfileWords = ${PROFILE_WORDS};
constexpr bool kTrace = ${spec.trace ? "true" : "false"};           // record each instruction's end time into \`profile\` (kernel-trace.ts)
constexpr u32 kTraceSlots = ${TRACE_SLOTS}u;
constexpr int kStatusLoss = ${STATUS_LOSS}, kStatusFinished = ${STATUS_FINISHED}; // status words (kernel-static.ts)
constexpr bool kBinaryCellBwd = ${binaryCellBackward(plan) ? "true" : "false"};  // lstm.bwd's two-child loop (kernel-partition.ts binaryCellBackward)
constexpr bool kGroupWaits = ${groupWaits(plan) ? "true" : "false"};      // poll a run of waits at once, a lane each (kernel-partition.ts groupWaits)
constexpr int kStageLoads = ${stageLoads(plan)};              // x loads in flight per thread while staging (registers)
constexpr int kErrBarrierTimeout = ${KERNEL_ERRORS.barrierTimeout}, kErrBadOpcode = ${KERNEL_ERRORS.badOpcode}, kErrBadLength = ${
    KERNEL_ERRORS.badLength
  }, kErrBadMatrix = ${KERNEL_ERRORS.badMatrix};

${renderOpcodeConstants()}`;
}

function kernel(plan: VppsPlan, name: string): string {
  return `
extern "C" __global__ void __launch_bounds__(kThreads, kCtasPerSm)
${name}(const u32* __restrict__ script, float* pool, float* master, float* grads, u32* barriers, int* status,
        float lr, float clip, unsigned long long* profile,
        float* moments, float beta1, float one_minus_beta1, float beta2, float one_minus_beta2, float eps,
        float inv_c1, float inv_c2, u32* stale, u32 stale_count, u32 loss_offset) {
  __shared__ u32 s_script[kScriptChunkWords];
  // s_reduce and s_stage also hold the staged operand chunks of the tile instructions, read as float4
  __shared__ __align__(16) float s_reduce[2 * kWarps * ${REDUCE_BLOCK_COLS}]; // x̄ partials, two alternating buffers
  __shared__ __align__(16) float s_stage[${STAGE_FLOATS}];   // x vectors of the staged list entries
  __shared__ float s_gy[${STAGE_YBAR_FLOATS}];      // ȳ rows of the staged matvec.bwd entries; a tile's list entries
  __shared__ u32 s_ent[${STAGE_ENTRY_WORDS}];        // the staged list entries; a tile's TileArgs
  __shared__ int s_abort;
  __shared__ u32 s_runs; // waits the last wait instruction polled at once (see its case)
  // profiling (kProfile): thread 0's cycle counts, added to \`profile\` once at the end
  __shared__ unsigned long long s_prof[kProfile ? kProfileWords : 1];
  // The previous launch's barrier counters (the other region; this launch never touches it) are zeroed here for
  // the next launch, which starts after this one ends: no memset between the launches.
#pragma unroll 1
  for (u32 i = blockIdx.x * kThreads + threadIdx.x; i < stale_count; i += kCtas * kThreads) stale[i] = 0u;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  long long t_cta = 0, t_ins = 0;
  // tracing (kTrace): thread 0 writes this CTA's timeline; t_aux carries a signal's old count to its record
  unsigned long long* trace = kTrace && profile != nullptr ? profile + (unsigned long long)blockIdx.x * kTraceSlots : nullptr;
  unsigned long long t_start = 0;
  u32 t_count = 0, t_aux = 0;
  if (kTrace && threadIdx.x == 0 && trace != nullptr) trace[0] = global_ns();
  if (kProfile && threadIdx.x == 0) {
    t_cta = clock64();
    for (int k = 0; k < kProfileWords; ++k) s_prof[k] = 0;
  }

  // ---- specialised: this CTA's partitions into registers, gradients zeroed ----
${renderSlotDeclarations(plan)}

  // ---- the script interpreter ----
  if (threadIdx.x == 0) s_abort = 0;
  if (kProfile) {
    __syncthreads(); // the weight loads above are done
    if (threadIdx.x == 0) s_prof[kProfileWords - 3] += clock64() - t_cta;
  }
  const u32 begin = script[blockIdx.x];
  const u32 end = script[blockIdx.x + 1];
  const u32* mine = script + (kCtas + 1);
  const u32* table = mine + script[kCtas]; // shared operand lists of the matrix instructions
  u32 pc = begin;
  bool stop = false;
  __syncthreads();
  if (kTrace && threadIdx.x == 0 && trace != nullptr) {
    t_start = global_ns();
    trace[1] = t_start;
  }
  while (pc < end && !stop) {
    const u32 avail = end - pc < kScriptChunkWords ? end - pc : kScriptChunkWords;
    if (kProfile && threadIdx.x == 0) t_ins = clock64();
#pragma unroll 1
    for (u32 i = threadIdx.x; i < avail; i += kThreads) s_script[i] = mine[pc + i];
    __syncthreads();
    if (kProfile && threadIdx.x == 0) s_prof[kProfileWords - 2] += clock64() - t_ins;
    u32 at = 0;
    while (at < avail && !stop) {
      const u32* ins = s_script + at;
      const u32 op = ins[0] & 0xffu;
      const u32 n = ins[0] >> 8;
      const u32 words = instruction_words(ins, avail - at);
      if (words == 0) {
        if (threadIdx.x == 0) report_error(status, kErrBadOpcode, (int)op, 0, 0, (int)(pc + at));
        return;
      }
      if (at + words > avail) break; // restage from this instruction
      if (kProfile && threadIdx.x == 0) t_ins = clock64();
      switch (op) {
${renderStaticCases()}
${renderMatrixCases(plan)}
      }
      __syncthreads(); // the next instruction may read what this one wrote
      // instructions this iteration ran: a wait takes the waits right after it along (all of the same length)
      const u32 runs = op == OP_WAIT ? s_runs : 1u;
      if (kProfile && threadIdx.x == 0) {
        s_prof[2 * op] += clock64() - t_ins;
        s_prof[2 * op + 1] += runs;
      }
      if (kTrace && threadIdx.x == 0 && trace != nullptr) {
        const u32 t = (u32)(global_ns() - t_start);
        for (u32 r = 0; r < runs; ++r) { // grouped waits end together
          if (t_count < kTraceSlots - 3) trace[3 + t_count] = ((unsigned long long)t_aux << 32) | t;
          ++t_count;
        }
        trace[2] = t_count;
        t_aux = 0;
      }
      if (s_abort) return;
      at += words * runs;
    }
    if (at == 0 && !stop) {
      if (threadIdx.x == 0) report_error(status, kErrBadLength, 0, 0, 0, (int)pc);
      return;
    }
    pc += at;
    __syncthreads(); // everyone is done with the chunk before it is overwritten
  }
  if (kProfile && threadIdx.x == 0 && profile != nullptr) {
    s_prof[kProfileWords - 1] += clock64() - t_cta;
    for (int k = 0; k < kProfileWords; ++k) if (s_prof[k] != 0) atomicAdd(profile + k, s_prof[k]);
  }
  // The CTA that finishes last (every instruction of the launch has run) copies the loss into the status block,
  // which the host reads back on its read-back stream: a copy of the loss on the kernel stream cost ~8 us of GPU
  // time between launches (H100). Each CTA's writes are fenced before it counts itself.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    unsigned int* finished = reinterpret_cast<unsigned int*>(status + kStatusFinished);
    if (atomicAdd(finished, 1u) == (unsigned int)(kCtas - 1)) {
      __threadfence();
      status[kStatusLoss] = __float_as_int(__ldcg(pool + loss_offset));
      *finished = 0u;
    }
  }
}
`;
}

/** The complete CUDA source of the kernel for `plan`, ready for NVRTC or nvcc (no includes needed). */
export function generateKernelSource(plan: VppsPlan, spec: KernelSpec): string {
  const name = kernelName(plan, spec);
  const source = [
    header(plan, spec, name),
    constants(plan, spec),
    STATIC_HELPERS,
    renderInstructionWords(),
    MATRIX_ROUTINES,
    tileRoutines(plan),
    renderMatrixStructs(plan),
    kernel(plan, name),
  ].join("\n");
  const dir = dumpDirectory();
  if (dir !== undefined) dumpKernelSource(dir, name, source);
  return source;
}
