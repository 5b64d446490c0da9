/**
 * The update at the end of a VPPS batch's script (scheduler.ts calls it after the backward pass): the gradient norm
 * for clipping, the register gradients exported, and — when the kernel updates — SGD or Adam.
 */
import type { BatchLayout } from "../plan/layout.js";
import { momentLayout } from "../plan/moments.js";
import { NONE, Opcode } from "../script/format.js";
import type { Emitter } from "./backward.js";

/**
 * The end of the script, from step `s`: the squared gradient norm (for clipping), the register gradients exported
 * when asked, when the host updates or for Adam, then — when the kernel updates — a grid-wide barrier and the SGD or
 * Adam steps. Returns the number of steps (barrier counters) used.
 *
 * Adam follows the AdamTrainer: every dense parameter moves, used in the batch or not (an unused one has no gradient
 * slot: g = NONE, its moments decay), and of the lookup tables only the touched rows. The register-held matrices are
 * updated by `adam.master` over their master copy with the gradients their holders exported before the grid
 * barrier, in pieces of at most one partition placed like any other instruction.
 *
 * Off-chip matrices (plan/types.ts Placement) have their W̄ in the gradient buffer already (tile.wbar): their norm
 * is `norm2.grads`, their step `sgd.master` or `adam.master`, in pieces over their rows on the least-loaded
 * processors. One the batch did not use has no W̄ (its region was not written): no norm, no SGD step, and Adam
 * moves it by its moments (g = NONE), as the AdamTrainer moves an unused parameter.
 */
export function emitUpdate(E: Emitter, L: BatchLayout, s: number): number {
  const t = E.t;
  const w = t.writer;
  const kernelUpdate = E.update === "kernel";
  const adam = kernelUpdate && E.options.optimizer === "adam";
  const clip = kernelUpdate && (E.options.clip ?? true);
  const acc = clip ? L.normOffset : NONE;
  const params = E.model.params;
  const rows = L.lookupRows;
  const imported = t.registerWbarTiles > 0;
  const offChip = offChipPieces(E, t.offChipGradients);
  if (t.wbarTiles > 0) {
    // tile.wbar instructions added W̄ into the gradient buffer: all of them finish before the holders fold it in
    // and before anyone reads an off-chip matrix's gradient
    t.gridBarrier(s);
    s++;
  }
  t.startStep(s);
  if (imported) {
    for (const q of E.registerGradCtas) {
      t.touch(q);
      w.insN(q, Opcode.ImportGrads, 0, [], 0);
    }
  }
  if (clip) {
    for (let p = 0; p < params.length; p++) {
      if (L.paramGrad[p]! < 0) continue;
      const size = params[p]!.rows * params[p]!.cols;
      const q = t.leastLoaded(size);
      t.needGrad(q, L.paramNode[p]!);
      w.ins2(q, Opcode.Norm2, size, acc, L.paramGrad[p]!);
    }
    for (let r = 0; r < rows.offset.length; r++) {
      const size = params[rows.table[r]!]!.cols;
      const q = t.leastLoaded(size);
      t.needGrad(q, rows.node[r]!);
      w.ins2(q, Opcode.Norm2, size, acc, rows.offset[r]!);
    }
    for (const q of E.registerGradCtas) {
      t.touch(q);
      w.ins1(q, Opcode.GradNorm2, 0, acc);
    }
    for (const p of offChip) if (p.used) w.ins2(t.leastLoaded(p.n), Opcode.Norm2Grads, p.n, acc, p.at);
  }
  if (E.options.exportGradients === true || !kernelUpdate || adam) {
    for (const q of E.registerGradCtas) {
      t.touch(q);
      w.insN(q, Opcode.ExportGrads, 0, [], 0);
    }
  }
  t.endStep();
  if (!kernelUpdate) return s + 1;
  // Every gradient is complete and every read of a parameter done: only now may parameters change.
  t.gridBarrier(s + 1);
  t.startStep(s + 2);
  if (adam) {
    const model = E.model;
    const mo = momentLayout(model);
    // pieces of a long vector go to different processors (Adam reads and writes four floats per element)
    const piece = 8192;
    for (let p = 0; p < params.length; p++) {
      if (model.matrixOf[p]! >= 0 || params[p]!.kind !== "dense") continue;
      const size = params[p]!.rows * params[p]!.cols;
      const at = model.paramOffset[p]!;
      const g = L.paramGrad[p]!;
      for (let o = 0; o < size; o += piece) {
        const n = Math.min(piece, size - o);
        const q = t.leastLoaded(2 * n);
        w.ins5(q, Opcode.Adam, n, at + o, g >= 0 ? g + o : NONE, mo.modelM + at + o, mo.modelV + at + o, acc);
      }
    }
    for (let r = 0; r < rows.offset.length; r++) {
      const table = rows.table[r]!;
      const cols = params[table]!.cols;
      const at = model.paramOffset[table]! + rows.row[r]! * cols;
      w.ins5(t.leastLoaded(2 * cols), Opcode.Adam, cols, at, rows.offset[r]!, mo.modelM + at, mo.modelV + at, acc);
    }
    for (const m of model.plan.matrices) {
      for (const part of m.partitions) {
        const at = m.masterOffset + part.firstRow * m.cols;
        const n = part.rowCount * m.cols;
        w.ins5(t.leastLoaded(2 * n), Opcode.AdamMaster, n, at, at, mo.masterM + at, mo.masterV + at, acc);
      }
    }
    for (const p of offChip) {
      const g = p.used ? p.at : NONE;
      w.ins5(t.leastLoaded(2 * p.n), Opcode.AdamMaster, p.n, p.at, g, mo.masterM + p.at, mo.masterV + p.at, acc);
    }
    return s + 3;
  }
  for (let p = 0; p < params.length; p++) {
    if (L.paramGrad[p]! < 0) continue;
    const size = params[p]!.rows * params[p]!.cols;
    w.ins3(t.leastLoaded(size), Opcode.Sgd, size, E.model.paramOffset[p]!, L.paramGrad[p]!, acc);
  }
  for (let r = 0; r < rows.offset.length; r++) {
    const table = rows.table[r]!;
    const cols = params[table]!.cols;
    const at = E.model.paramOffset[table]! + rows.row[r]! * cols;
    w.ins3(t.leastLoaded(cols), Opcode.Sgd, cols, at, rows.offset[r]!, acc);
  }
  for (const q of E.registerGradCtas) {
    t.touch(q);
    w.ins1(q, Opcode.UpdateRegs, 0, acc);
  }
  for (const p of offChip) if (p.used) w.ins3(t.leastLoaded(p.n), Opcode.SgdMaster, p.n, p.at, p.at, acc);
  return s + 3;
}

/** Floats of an off-chip matrix one norm or update instruction covers (a piece per processor). */
const OFF_CHIP_PIECE = 16384;

/**
 * The off-chip matrices in pieces of at most OFF_CHIP_PIECE floats (offsets in the master copy, which the gradient
 * buffer shares), each with whether its matrix got W̄ tiles in this batch (bit m of `withGradient`).
 */
function offChipPieces(E: Emitter, withGradient: number): { at: number; n: number; used: boolean }[] {
  const pieces: { at: number; n: number; used: boolean }[] = [];
  for (const m of E.model.plan.matrices) {
    if (m.placement !== "off-chip") continue;
    const used = ((withGradient >>> m.index) & 1) === 1;
    const size = m.rows * m.cols;
    for (let o = 0; o < size; o += OFF_CHIP_PIECE) {
      pieces.push({ at: m.masterOffset + o, n: Math.min(OFF_CHIP_PIECE, size - o), used });
    }
  }
  return pieces;
}
