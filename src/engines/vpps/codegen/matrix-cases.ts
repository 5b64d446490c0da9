/**
 * The interpreter cases that touch the register-resident matrices or the master copy: matvec, matvec.acc,
 * matvec.bwd (staged and unstaged), the end-of-batch gradient norm, update and export, the tile instructions and
 * load.t — per matrix, fully unrolled calls of the routines of matrix.ts and tile.ts with compile-time slot, shape
 * and partition constants (paper §III-A2, Fig. 5).
 */
import type { HeldMatrix, MatrixPlan, VppsPlan } from "../plan/plan.js";
import { LIST_ENTRIES, OPCODES, Opcode, TILE } from "../script/format.js";
import { opcodeConstant, operandWord as W } from "./operands.js";
import { gradientArray as g, matrixStruct, perRegisterGradient, weightArray as w } from "./slots.js";
import { BLOCK_CHUNKS, backwardStage, forwardStage, REDUCE_BLOCK_COLS } from "./staging.js";

function entryLoop(op: Opcode, body: string): string {
  const words = LIST_ENTRIES[op]!.length;
  return `#pragma unroll 1
          for (u32 e = 0; e < count; ++e) {
            const u32* ent = list + ${words} * e;
${body}
          }`;
}

// The staged routines address entry words by position; the format fixes them (script/format.ts), this keeps them honest.
function checkEntryLayout(): void {
  const fwd = LIST_ENTRIES[Opcode.MatVec]!.join(",");
  const bwd = LIST_ENTRIES[Opcode.MatVecBwd]!.join(",");
  if (fwd !== "y,x,b" || LIST_ENTRIES[Opcode.MatVecAcc]!.join(",") !== fwd || bwd !== "ybar,x,xbar,bbar") {
    throw new Error(
      `kernel template: staged matvec routines expect entries (y,x,b) and (ybar,x,xbar,bbar); got (${fwd}) and (${bwd})`,
    );
  }
}

/** Rounds of up to kStage entries: the CTA stages the entries and their x vectors, then every warp multiplies. */
function matVecStaged(m: HeldMatrix, plan: VppsPlan, acc: boolean): string {
  const M = matrixStruct(m);
  const calls = m.slots.map(
    (s) =>
      `            if (holds<${M}>(${s})) mv_forward_staged<${M}, ${acc}>(${w(s)}, first_row<${M}>(${s}, warp), s_ent, s_stage, ne, pool, lane);`,
  );
  return `        case ${m.index}: { // ${m.name}: ${forwardStage(m, plan)} entries staged per round
          constexpr u32 S = ${M}::kStage;
#pragma unroll 1
          for (u32 e0 = 0; e0 < count; e0 += S) {
            const u32 ne = count - e0 < S ? count - e0 : S;
            if (threadIdx.x < 3 * ne) s_ent[threadIdx.x] = list[3 * e0 + threadIdx.x];
            __syncthreads();
            stage_x<${M}, 3, 1, S>(s_ent, ne, pool, s_stage);
            __syncthreads();
${calls.join("\n")}
            if (e0 + S < count) __syncthreads(); // the next round overwrites s_ent and s_stage
          }
        } break;`;
}

/**
 * matvec (y = b + W x) over the plan matrices, or matvec.acc (y += b + W x, atomics) over the plan matrices and the
 * transposed copies (the x̄ = Wᵀȳ of short backward lists).
 */
function matVecCase(plan: VppsPlan, o: Opcode.MatVec | Opcode.MatVecAcc): string {
  checkEntryLayout();
  const acc = o === Opcode.MatVecAcc;
  const at = (name: string) => LIST_ENTRIES[o]!.indexOf(name);
  // off-chip matrices have no holders: their products are tiles only
  const inRegisters = plan.matrices.filter((m) => m.placement === "registers");
  const held: HeldMatrix[] = acc ? [...inRegisters, ...plan.transposed] : inRegisters;
  const cases = held.map((m) => {
    if (forwardStage(m, plan) > 0) return matVecStaged(m, plan, acc);
    const M = matrixStruct(m);
    const calls = m.slots.map(
      (s) =>
        `            if (holds<${M}>(${s})) mv_forward<${M}, ${acc}>(${w(s)}, first_row<${M}>(${s}, warp), y, x, b, lane);`,
    );
    const body = `            float* y = pool + ent[${at("y")}];
            const float* x = pool + ent[${at("x")}];
            const float* b = ent[${at("b")}] == kNone ? nullptr : pool + ent[${at("b")}];
${calls.join("\n")}`;
    return `        case ${m.index}: // ${m.name}\n          ${entryLoop(o, body)}\n          break;`;
  });
  const what = acc ? "y += b + W x (atomics)" : "y = b + W x";
  return `      case ${opcodeConstant(o)}: { // ${OPCODES[o]!.mnemonic}: n = matrix; entries (y, x, b), ${what}; warps run through them unsynchronised
        const u32* list = table + ${W(o, "list")};
        const u32 count = ${W(o, "count")};
        switch (n) {
${cases.join("\n")}
          default: report_error(status, kErrBadMatrix, (int)n, 0, 0, (int)(pc + at)); s_abort = 1;
        }
      } break;`;
}

/** matvec.bwd in staged rounds: entries, x vectors and the CTA's ȳ rows in shared memory, then entry by entry. */
function matVecBwdStaged(m: MatrixPlan, plan: VppsPlan): string {
  const M = matrixStruct(m);
  const registers = m.gradients === "registers";
  const stageYbar = m.slots.map(
    (s, j) =>
      `            stage_ybar<${M}>(s_ent, ne, holds<${M}>(${s}), first_row<${M}>(${s}, 0), pool, s_gy + ${j} * S * kRowsPerPartition);`,
  );
  const perSlot = m.slots.map(
    (s, j) => `              const bool h${s} = holds<${M}>(${s});
              float gy${s}[kRpw];
              read_ybar<${M}>(gy${s}, s_gy + (${j} * S + e) * kRowsPerPartition, warp);
              if (h${s}) {
                bias_grad<${M}>(gy${s}, first_row<${M}>(${s}, warp), bbar, lane);${registers ? `\n                mv_outer<${M}>(${g(s)}, gy${s}, x, lane);` : ""}
              }`,
  );
  const blocks = Math.ceil(m.chunks / BLOCK_CHUNKS);
  const reduce: string[] = [];
  for (let b = 0; b < blocks; b++) {
    reduce.push(`                { // columns ${b * REDUCE_BLOCK_COLS}..${Math.min(m.cols, (b + 1) * REDUCE_BLOCK_COLS) - 1}
                  float p[${BLOCK_CHUNKS}] = {${new Array(BLOCK_CHUNKS).fill("0.f").join(", ")}};`);
    for (const s of m.slots) reduce.push(`                  mv_partial<${M}, ${b}>(${w(s)}, gy${s}, p);`);
    reduce.push(`                  reduce_partials_db<${M}, ${b}>(p, s_reduce, parity, xbar, lane, warp);
                }`);
  }
  return `        case ${m.index}: { // ${m.name}: gradient in ${m.gradients}; ${backwardStage(m, plan)} entries staged per round
          constexpr u32 S = ${M}::kStageBwd;
          int parity = 0;
#pragma unroll 1
          for (u32 e0 = 0; e0 < count; e0 += S) {
            const u32 ne = count - e0 < S ? count - e0 : S;
            if (threadIdx.x < 4 * ne) s_ent[threadIdx.x] = list[4 * e0 + threadIdx.x];
            __syncthreads();${registers ? `\n            stage_x<${M}, 4, 1, S>(s_ent, ne, pool, s_stage);` : ""}
${stageYbar.join("\n")}
            __syncthreads();
            // Holders start the round at different entries (rotated by CTA), so that they do not all add into the
            // same x̄ vector at the same moment: same-address atomics serialise in the L2.
            const u32 e_first = blockIdx.x % ne;
#pragma unroll 1
            for (u32 ee = 0; ee < ne; ++ee) {
              const u32 e = ee + e_first < ne ? ee + e_first : ee + e_first - ne;
              const u32 xo = s_ent[4 * e + 2], bo = s_ent[4 * e + 3];
              float* xbar = xo == kNone ? nullptr : pool + xo;
              float* bbar = bo == kNone ? nullptr : pool + bo;
              const float* x = s_stage + e * ${M}::kCols;
              (void)x;
${perSlot.join("\n")}
              if (xbar) { // uniform across the CTA: every thread reaches the reduction's __syncthreads
${reduce.join("\n")}
              }
            }
            if (e0 + S < count) __syncthreads(); // the next round overwrites the staged entries
          }
        } break;`;
}

function matVecBwdMatrix(m: MatrixPlan, plan: VppsPlan): string {
  if (backwardStage(m, plan) > 0) return matVecBwdStaged(m, plan);
  const o = Opcode.MatVecBwd;
  const at = (name: string) => LIST_ENTRIES[o]!.indexOf(name);
  const M = matrixStruct(m);
  const lines = [
    `            const float* ybar = pool + ent[${at("ybar")}];
            const float* x = pool + ent[${at("x")}];
            float* xbar = ent[${at("xbar")}] == kNone ? nullptr : pool + ent[${at("xbar")}];
            float* bbar = ent[${at("bbar")}] == kNone ? nullptr : pool + ent[${at("bbar")}];`,
  ];
  for (const s of m.slots) {
    lines.push(`            const bool h${s} = holds<${M}>(${s});
            const int r${s} = first_row<${M}>(${s}, warp);
            float gy${s}[kRpw];
            load_ybar<${M}>(gy${s}, h${s}, r${s}, ybar);
            if (h${s}) {
              bias_grad<${M}>(gy${s}, r${s}, bbar, lane);${m.gradients === "registers" ? `\n              mv_outer<${M}>(${g(s)}, gy${s}, x, lane);` : ""}
            }`);
  }
  const blocks = Math.ceil(m.chunks / BLOCK_CHUNKS);
  // x̄ needs the CTA-wide reduction; xbar is uniform across the CTA, so every thread reaches its __syncthreads
  lines.push("            if (xbar) {");
  for (let b = 0; b < blocks; b++) {
    lines.push(`              { // columns ${b * REDUCE_BLOCK_COLS}..${Math.min(m.cols, (b + 1) * REDUCE_BLOCK_COLS) - 1}
                float p[${BLOCK_CHUNKS}] = {${new Array(BLOCK_CHUNKS).fill("0.f").join(", ")}};`);
    for (const s of m.slots) lines.push(`                mv_partial<${M}, ${b}>(${w(s)}, gy${s}, p);`);
    lines.push(`                reduce_partials<${M}, ${b}>(p, s_reduce, xbar, lane, warp);
              }`);
  }
  lines.push("            }");
  return `        case ${m.index}: { // ${m.name}: gradient in ${m.gradients}
          ${entryLoop(o, lines.join("\n"))}
        } break;`;
}

function matVecBwdCase(plan: VppsPlan): string {
  const o = Opcode.MatVecBwd;
  return `      case ${opcodeConstant(o)}: { // matvec.bwd: n = matrix; entries (ybar, x, xbar, bbar)
        const u32* list = table + ${W(o, "list")};
        const u32 count = ${W(o, "count")};
        switch (n) {
${plan.matrices
  .filter((m) => m.placement === "registers")
  .map((m) => matVecBwdMatrix(m, plan))
  .join("\n")}
          default: report_error(status, kErrBadMatrix, (int)n, 0, 0, (int)(pc + at)); s_abort = 1;
        }
      } break;`;
}

function endOfBatchCases(plan: VppsPlan): string {
  const norm = plan.slots
    .filter((s) => s.gradientChunks > 0)
    .map(
      (s) => `#pragma unroll
        for (int q = 0; q < kRpw; ++q)
#pragma unroll
          for (int i = 0; i < ${s.gradientChunks}; ++i) s = fmaf(${g(s.index)}[q][i], ${g(s.index)}[q][i], s);`,
    );
  const accOf = (op: Opcode) => W(op, "acc");
  const update = perRegisterGradient(
    plan,
    (M, s) => `update_rows<${M}>(${w(s)}, ${g(s)}, first_row<${M}>(${s}, warp), step, master, lane)`,
  );
  const exports = perRegisterGradient(
    plan,
    (M, s) => `export_rows<${M}>(${g(s)}, first_row<${M}>(${s}, warp), grads, lane)`,
  );
  return `      case ${opcodeConstant(Opcode.GradNorm2)}: { // gradnorm2: acc += sum of this CTA's register gradients squared
        float s = 0.f;
        ${norm.join("\n        ")}
        s = warp_sum(s);
        if (lane == 0 && s != 0.f) atomicAdd(pool + ${accOf(Opcode.GradNorm2)}, s);
      } break;
      case ${opcodeConstant(Opcode.UpdateRegs)}: { // update.regs: W -= lr * scale * Wbar, write back
        const float step = lr * clip_scale(pool, ${accOf(Opcode.UpdateRegs)}, clip);
${update.join("\n")}
      } break;
      case ${opcodeConstant(Opcode.ExportGrads)}: // export.grads: Wbar to the gradient buffer
${exports.join("\n")}
        break;`;
}

/**
 * One tile instruction's case: pick matrix n's shape (an unknown n is reported, as by matvec), refuse more entries
 * than a tile takes or a first row or column past the matrix (scheduler bugs, reported as a bad length: status =
 * [code, cta, count, r0, c0, pc]; the check also rules out any wrap-around of r0 + i and c0 + j), put the operands
 * into TileArgs (s_ent), stage the entries (s_gy), then run `routine`. Every branch is on instruction words, which
 * are the same for the whole CTA, so every thread reaches the routines' barriers.
 */
function tileCase(plan: VppsPlan, op: Opcode, limit: string, what: string, routine: string, buffer: string): string {
  const words = LIST_ENTRIES[op]!.length;
  const has = (name: string) => OPCODES[op]!.fixed.includes(name);
  const matrices = plan.matrices.map(
    (m) => `          case ${m.index}: tile_matrix<${matrixStruct(m)}>(offset, rows, cols); break; // ${m.name}`,
  );
  return `      case ${opcodeConstant(op)}: { // ${OPCODES[op]!.mnemonic}: n = matrix; ${what}
        const u32 count = ${W(op, "count")};
        u32 offset = 0u, rows = 0u, cols = 0u;
        switch (n) {
${matrices.join("\n")}
          default: report_error(status, kErrBadMatrix, (int)n, 0, 0, (int)(pc + at)); s_abort = 1;
        }
        if (rows == 0u) break; // unknown matrix, reported
        const u32 r0 = ${has("r0") ? W(op, "r0") : "0u"}, c0 = ${has("c0") ? W(op, "c0") : "0u"};
        if (count > ${limit} || r0 >= rows || c0 >= cols) {
          report_error(status, kErrBadLength, (int)count, (int)r0, (int)c0, (int)(pc + at));
          s_abort = 1;
          break;
        }
        TileArgs& args = *reinterpret_cast<TileArgs*>(s_ent);
        if (threadIdx.x == 0) args = {offset, rows, cols, count, r0, c0, kNone, 0u};
        tile_stage_entries(table + ${W(op, "list")}, ${words}u * count, reinterpret_cast<u32*>(s_gy), opaque_tid());
        ${routine}(args, reinterpret_cast<const u32*>(s_gy), pool, ${buffer}, s_stage, s_reduce);
      } break;`;
}

function tileCases(plan: VppsPlan): string {
  const o = Opcode;
  for (const m of plan.matrices) {
    if (m.masterOffset + m.rows * m.cols >= 2 ** 32) {
      throw new Error(
        `kernel template: tile routines address the master copy with 32-bit offsets; ${m.name} ends at float ${m.masterOffset + m.rows * m.cols}`,
      );
    }
  }
  const importGrads = perRegisterGradient(
    plan,
    (M, s) => `import_rows<${M}>(${g(s)}, first_row<${M}>(${s}, warp), grads, lane)`,
  );
  return [
    tileCase(
      plan,
      o.Tile,
      "kTileEntries",
      "entries (y, x, b); y = b + W x for rows [r0, r0 + 64)",
      "tile_forward",
      "master",
    ),
    tileCase(
      plan,
      o.TileXbar,
      "kTileEntries",
      `entries (ybar, x, xbar, bbar); xbar += W^T ybar for columns [c0, c0 + 64), rows [r0, r0 + ${TILE.xbarRows})`,
      "tile_xbar",
      "master",
    ),
    tileCase(
      plan,
      o.TileWbar,
      "kTileWbarEntries",
      "entries (ybar, x, xbar, bbar); Wbar += ybar x^T into grads, bbar += ybar",
      "tile_wbar",
      "grads",
    ),
    // tile.acc only where some matrix is off chip: its routine's registers made the tightest plan (Tree-LSTM 512/256,
    // nothing off chip) spill 4 bytes; a script never has it otherwise, and the case reports a bad opcode
    ...(plan.offChip.length > 0
      ? [
          tileCase(
            plan,
            o.TileAcc,
            "kTileEntries",
            `entries (y, x, b); y += (c0 == 0 ? b : 0) + W x over columns [c0, c0 + ${TILE.splitCols}), rows [r0, r0 + 64) (atomics)`,
            "tile_forward_acc",
            "master",
          ),
        ]
      : [
          `      case ${opcodeConstant(o.TileAcc)}: // tile.acc: no matrix of this plan is off chip
        if (threadIdx.x == 0) report_error(status, kErrBadOpcode, (int)op, 0, 0, (int)(pc + at));
        s_abort = 1;
        break;`,
        ]),
    `      case ${opcodeConstant(o.ImportGrads)}: // import.grads: Wbar += the gradient buffer's rows (tile.wbar's sums)
${importGrads.join("\n")}
        break;`,
  ].join("\n");
}

/** The load.t case: this CTA's partitions of the transposed copies, read from the master copy (load_rows_t). */
function loadTransposedCase(plan: VppsPlan): string {
  const loads: string[] = [];
  for (const t of plan.transposed) {
    const M = matrixStruct(t);
    for (const s of t.slots) {
      loads.push(
        `        if (holds<${M}>(${s})) load_rows_t<${M}>(${w(s)}, first_row<${M}>(${s}, warp), master, s_stage, warp, lane);`,
      );
    }
  }
  return `      case ${opcodeConstant(Opcode.LoadTransposed)}: // load.t: the transposed copies this CTA holds
${loads.join("\n")}
        break;`;
}

/** The interpreter cases that touch register-resident matrices or the master copy. */
export function renderMatrixCases(plan: VppsPlan): string {
  return [
    matVecCase(plan, Opcode.MatVec),
    matVecCase(plan, Opcode.MatVecAcc),
    loadTransposedCase(plan),
    matVecBwdCase(plan),
    endOfBatchCases(plan),
    tileCases(plan),
  ].join("\n");
}
