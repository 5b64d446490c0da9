/**
 * A CPU emulator of the VPPS kernel: executes the very same encoded script with one virtual processor per CTA, each
 * holding its weight partitions (and gradients) privately, as registers would. Processors are interleaved in a
 * seeded random order that respects only the script's signal/wait instructions, one whole instruction at a time, so
 * a missing wait lets some interleaving read a value before it is written (the harness fills unwritten values with
 * NaN) and the comparison with the CPU engine fails. This is how scheduling is tested without a GPU.
 */
import { sigmoid } from "../../../ops/elementwise.js";
import { dropoutKeeps } from "../../../ops/index.js";
import { RandomStream } from "../../../util/random.js";
import { type AdamStep, adamRange } from "../plan/moments.js";
import type { VppsPlan } from "../plan/plan.js";
import { clipScale, lstmBackward, lstmForward, mnemonic, tileMatrix, tileRange } from "./emulator-math.js";
import { bitsFloat, instructionWords, NONE, Opcode, TILE } from "./format.js";

/** The device memory the kernel sees (all float offsets as in the script). */
export interface EmulatorMemory {
  readonly pool: Float32Array;
  /** Master copies of the matrices (plan.masterOffset). */
  readonly master: Float32Array;
  /** Exported register gradients, same layout as `master`. */
  readonly grads: Float32Array;
  /** One counter per barrier, zero at the start. */
  readonly barriers: Uint32Array;
  /** Adam's moments (moments.ts layout); needed by scripts with `adam` or `adam.master`. */
  readonly moments?: Float32Array;
}

export interface EmulatorOptions {
  /** Seeds the interleaving. */
  readonly seed: number;
  /**
   * "random": a random runnable processor runs a burst of 1-4 instructions; "greedy": processors have a random
   * priority and the first runnable one always runs, so one processor races as far ahead as the waits allow.
   */
  readonly interleaving?: "random" | "greedy";
  readonly learningRate: number;
  /** Clipping threshold of the kernel's `clip` argument (0 disables). */
  readonly clip: number;
  /** The kernel's Adam arguments (β1, β2, ε, bias corrections of the step); needed by Adam scripts. */
  readonly adam?: AdamStep;
}

export interface EmulatorStats {
  readonly instructions: number;
  /** Times a processor found its wait unsatisfied and had to yield. */
  readonly stalls: number;
}

/** One partition a processor holds: rows of one matrix, weights and gradient as private arrays. */
interface HeldPartition {
  readonly matrix: number;
  readonly firstRow: number;
  readonly rowCount: number;
  readonly cols: number;
  readonly registerGradient: boolean;
  readonly w: Float32Array;
  readonly g: Float32Array;
}

export class VppsEmulator {
  constructor(readonly plan: VppsPlan) {}

  run(script: Uint32Array, mem: EmulatorMemory, opts: EmulatorOptions): EmulatorStats {
    const { plan } = this;
    const ctas = plan.ctas;
    const header = ctas + 1;
    const table = header + script[ctas]!;
    const held: HeldPartition[][] = Array.from({ length: ctas }, () => []);
    for (const m of plan.matrices) {
      for (const p of m.partitions) {
        const w = mem.master.slice(
          m.masterOffset + p.firstRow * m.cols,
          m.masterOffset + (p.firstRow + p.rowCount) * m.cols,
        );
        const part = { matrix: m.index, firstRow: p.firstRow, rowCount: p.rowCount, cols: m.cols, w };
        held[p.cta]!.push({ ...part, registerGradient: m.gradients === "registers", g: new Float32Array(w.length) });
      }
    }
    // transposed copies: no gradient, never written back; NaN until the CTA's load.t reads them from the master copy
    for (const t of plan.transposed) {
      for (const p of t.partitions) {
        const w = new Float32Array(p.rowCount * t.cols).fill(Number.NaN);
        const part = { matrix: t.index, firstRow: p.firstRow, rowCount: p.rowCount, cols: t.cols, w };
        held[p.cta]!.push({ ...part, registerGradient: false, g: new Float32Array(0) });
      }
    }
    const pc = new Int32Array(ctas);
    const end = new Int32Array(ctas);
    for (let c = 0; c < ctas; c++) {
      pc[c] = header + script[c]!;
      end[c] = header + script[c + 1]!;
    }
    const rng = new RandomStream(opts.seed);
    const priority = rng.shuffle(Array.from({ length: ctas }, (_, c) => c));
    const greedy = opts.interleaving === "greedy";
    let instructions = 0;
    let stalls = 0;
    const live = Array.from({ length: ctas }, (_, c) => c).filter((c) => pc[c]! < end[c]!);
    const runnable = (c: number): boolean => {
      const pre = script[pc[c]!]!;
      return (pre & 0xff) !== Opcode.Wait || mem.barriers[pre >>> 8]! >= script[pc[c]! + 1]!;
    };
    while (live.length > 0) {
      let pick = -1;
      if (greedy) {
        for (const c of priority) {
          if (pc[c]! < end[c]! && runnable(c)) {
            pick = c;
            break;
          }
        }
      } else {
        const start = rng.int(live.length);
        for (let k = 0; k < live.length && pick < 0; k++) {
          const c = live[(start + k) % live.length]!;
          if (runnable(c)) pick = c;
          else stalls++;
        }
      }
      if (pick < 0) throw new Error(deadlock(script, live, pc, mem.barriers));
      const burst = greedy ? 1 : 1 + rng.int(4);
      for (let b = 0; b < burst && pc[pick]! < end[pick]! && runnable(pick); b++) {
        this.execute(script, pc[pick]!, table, pick, held[pick]!, mem, opts);
        pc[pick]! += instructionWords(script, pc[pick]!);
        instructions++;
      }
      if (pc[pick]! >= end[pick]!) live.splice(live.indexOf(pick), 1);
    }
    return { instructions, stalls };
  }

  /** One instruction on processor `cta`: the emulator's single switch, mirroring the kernel's. */
  private execute(
    s: Uint32Array,
    at: number,
    table: number,
    cta: number,
    held: HeldPartition[],
    mem: EmulatorMemory,
    o: EmulatorOptions,
  ): void {
    const pool = mem.pool;
    const pre = s[at]!;
    const op = pre & 0xff;
    const n = pre >>> 8;
    const a = (k: number): number => s[at + k]!;
    switch (op) {
      case Opcode.End:
        return;
      case Opcode.Signal:
        mem.barriers[n]!++;
        return;
      case Opcode.Wait:
        return; // satisfied: the scheduler only runs a wait whose count is reached
      case Opcode.MatVec:
      case Opcode.MatVecAcc:
        for (let e = table + a(1), end = e + 3 * a(2); e < end; e += 3) {
          const [y, x, b] = [s[e]!, s[e + 1]!, s[e + 2]!];
          for (const p of held) {
            if (p.matrix !== n) continue;
            for (let r = 0; r < p.rowCount; r++) {
              let acc = 0;
              for (let j = 0; j < p.cols; j++) acc += p.w[r * p.cols + j]! * pool[x + j]!;
              const row = p.firstRow + r;
              const v = (b === NONE ? 0 : pool[b + row]!) + acc;
              if (op === Opcode.MatVec) pool[y + row] = v;
              else pool[y + row]! += v;
            }
          }
        }
        return;
      case Opcode.MatVecBwd:
        for (let e = table + a(1), end = e + 4 * a(2); e < end; e += 4) {
          const [ybar, x, xbar, bbar] = [s[e]!, s[e + 1]!, s[e + 2]!, s[e + 3]!];
          for (const p of held) {
            if (p.matrix !== n) continue;
            for (let r = 0; r < p.rowCount; r++) {
              const row = p.firstRow + r;
              const gy = pool[ybar + row]!;
              if (bbar !== NONE) pool[bbar + row]! += gy;
              for (let j = 0; j < p.cols; j++) {
                if (p.registerGradient) p.g[r * p.cols + j]! += gy * pool[x + j]!;
                if (xbar !== NONE) pool[xbar + j]! += p.w[r * p.cols + j]! * gy;
              }
            }
          }
        }
        return;
      case Opcode.Tile: {
        const m = tileMatrix(this.plan, op, n, a(2), TILE.entries, cta);
        const [rBegin, rEnd] = tileRange(op, "r0", a(3), TILE.rows, m.rows, cta);
        const W = mem.master;
        for (let e = table + a(1), end = e + 3 * a(2); e < end; e += 3) {
          const [y, x, b] = [s[e]!, s[e + 1]!, s[e + 2]!];
          for (let r = rBegin; r < rEnd; r++) {
            let acc = 0;
            for (let k = 0, w = m.masterOffset + r * m.cols; k < m.cols; k++) acc += W[w + k]! * pool[x + k]!;
            pool[y + r] = (b === NONE ? 0 : pool[b + r]!) + acc;
          }
        }
        return;
      }
      case Opcode.TileAcc: {
        const m = tileMatrix(this.plan, op, n, a(2), TILE.entries, cta);
        const [rBegin, rEnd] = tileRange(op, "r0", a(3), TILE.rows, m.rows, cta);
        const [cBegin, cEnd] = tileRange(op, "c0", a(4), TILE.splitCols, m.cols, cta);
        const W = mem.master;
        for (let e = table + a(1), end = e + 3 * a(2); e < end; e += 3) {
          const [y, x, b] = [s[e]!, s[e + 1]!, s[e + 2]!];
          for (let r = rBegin; r < rEnd; r++) {
            let acc = cBegin === 0 && b !== NONE ? pool[b + r]! : 0;
            for (let c = cBegin, w = m.masterOffset + r * m.cols; c < cEnd; c++) acc += W[w + c]! * pool[x + c]!;
            pool[y + r]! += acc;
          }
        }
        return;
      }
      case Opcode.TileXbar: {
        const m = tileMatrix(this.plan, op, n, a(2), TILE.entries, cta);
        const [cBegin, cEnd] = tileRange(op, "c0", a(3), TILE.cols, m.cols, cta);
        const [rBegin, rEnd] = tileRange(op, "r0", a(4), TILE.xbarRows, m.rows, cta);
        const W = mem.master;
        for (let e = table + a(1), end = e + 4 * a(2); e < end; e += 4) {
          const [ybar, xbar] = [s[e]!, s[e + 2]!];
          if (xbar === NONE) continue;
          for (let c = cBegin; c < cEnd; c++) {
            let acc = 0;
            for (let r = rBegin; r < rEnd; r++) acc += W[m.masterOffset + r * m.cols + c]! * pool[ybar + r]!;
            pool[xbar + c]! += acc;
          }
        }
        return;
      }
      case Opcode.TileWbar: {
        const m = tileMatrix(this.plan, op, n, a(2), TILE.wbarEntries, cta);
        const [rBegin, rEnd] = tileRange(op, "r0", a(3), TILE.rows, m.rows, cta);
        const [cBegin, cEnd] = tileRange(op, "c0", a(4), TILE.cols, m.cols, cta);
        const list = table + a(1);
        const count = a(2);
        for (let r = rBegin; r < rEnd; r++) {
          for (let c = cBegin; c < cEnd; c++) {
            let acc = 0;
            for (let e = list; e < list + 4 * count; e += 4) acc += pool[s[e]! + r]! * pool[s[e + 1]! + c]!;
            mem.grads[m.masterOffset + r * m.cols + c]! += acc;
          }
        }
        // b̄ once per entry and row: only the tiles of the first column block add it
        if (cBegin === 0) {
          for (let e = list; e < list + 4 * count; e += 4) {
            const [ybar, bbar] = [s[e]!, s[e + 3]!];
            if (bbar !== NONE) for (let r = rBegin; r < rEnd; r++) pool[bbar + r]! += pool[ybar + r]!;
          }
        }
        return;
      }
      case Opcode.LoadTransposed: {
        // row r of Wᵀ is column r of W
        const mats = this.plan.matrices;
        for (const p of held) {
          if (p.matrix < mats.length) continue;
          const src = mats[this.plan.transposed[p.matrix - mats.length]!.source]!;
          for (let r = 0; r < p.rowCount; r++) {
            for (let c = 0; c < p.cols; c++) {
              p.w[r * p.cols + c] = mem.master[src.masterOffset + c * src.cols + p.firstRow + r]!;
            }
          }
        }
        return;
      }
      case Opcode.ImportGrads:
        for (const p of held) {
          if (!p.registerGradient) continue;
          const from = this.plan.matrices[p.matrix]!.masterOffset + p.firstRow * p.cols;
          for (let i = 0; i < p.g.length; i++) p.g[i]! += mem.grads[from + i]!;
        }
        return;
      case Opcode.Copy:
        for (let i = 0; i < n; i++) pool[a(1) + i] = pool[a(2) + i]!;
        return;
      case Opcode.Add:
        for (let i = 0; i < n; i++) pool[a(1) + i] = pool[a(2) + i]! + pool[a(3) + i]!;
        return;
      case Opcode.Sub:
        for (let i = 0; i < n; i++) pool[a(1) + i] = pool[a(2) + i]! - pool[a(3) + i]!;
        return;
      case Opcode.CMul:
        for (let i = 0; i < n; i++) pool[a(1) + i] = pool[a(2) + i]! * pool[a(3) + i]!;
        return;
      case Opcode.Tanh:
        for (let i = 0; i < n; i++) pool[a(1) + i] = Math.tanh(pool[a(2) + i]!);
        return;
      case Opcode.Logistic:
        for (let i = 0; i < n; i++) pool[a(1) + i] = sigmoid(pool[a(2) + i]!);
        return;
      case Opcode.Relu:
        for (let i = 0; i < n; i++) pool[a(1) + i] = Math.max(pool[a(2) + i]!, 0);
        return;
      case Opcode.Acc:
        for (let i = 0; i < n; i++) pool[a(1) + i]! += pool[a(2) + i]!;
        return;
      case Opcode.AccNeg:
        for (let i = 0; i < n; i++) pool[a(1) + i]! -= pool[a(2) + i]!;
        return;
      case Opcode.Sum: {
        const k = a(2);
        for (let i = 0; i < n; i++) {
          let acc = 0;
          for (let j = 0; j < k; j++) acc += pool[a(3 + j) + i]!;
          pool[a(1) + i] = acc;
        }
        return;
      }
      case Opcode.Set:
        pool.fill(bitsFloat(a(2)), a(1), a(1) + n);
        return;
      case Opcode.CMulBwd: {
        const [abar, bbar, ybar, x, y] = [a(1), a(2), a(3), a(4), a(5)];
        for (let i = 0; i < n; i++) {
          if (abar !== NONE) pool[abar + i]! += pool[ybar + i]! * pool[y + i]!;
          if (bbar !== NONE) pool[bbar + i]! += pool[ybar + i]! * pool[x + i]!;
        }
        return;
      }
      case Opcode.TanhBwd:
        for (let i = 0; i < n; i++) {
          const t = pool[a(3) + i]!;
          pool[a(1) + i]! += pool[a(2) + i]! * (1 - t * t);
        }
        return;
      case Opcode.LogisticBwd:
        for (let i = 0; i < n; i++) {
          const t = pool[a(3) + i]!;
          pool[a(1) + i]! += pool[a(2) + i]! * t * (1 - t);
        }
        return;
      case Opcode.ReluBwd:
        for (let i = 0; i < n; i++) if (pool[a(3) + i]! > 0) pool[a(1) + i]! += pool[a(2) + i]!;
        return;
      case Opcode.Dropout:
      case Opcode.DropoutBwd: {
        const p = bitsFloat(a(5));
        const scale = 1 / (1 - p);
        for (let i = 0; i < n; i++) {
          const keep = dropoutKeeps(a(3) | 0, a(4) | 0, i, p);
          if (op === Opcode.Dropout) pool[a(1) + i] = keep ? pool[a(2) + i]! * scale : 0;
          else if (keep) pool[a(1) + i]! += pool[a(2) + i]! * scale;
        }
        return;
      }
      case Opcode.LstmCell:
        lstmForward(pool, n, a(1), a(2), a(3), a(4), (j) => a(5 + j));
        return;
      case Opcode.LstmCellBwd:
        lstmBackward(
          pool,
          n,
          [a(1), a(2), a(3), a(4), a(5)],
          a(6),
          (j) => a(7 + 2 * j),
          (j) => a(8 + 2 * j),
        );
        return;
      case Opcode.PickNls:
      case Opcode.PickNlsBwd: {
        const x = a(op === Opcode.PickNls ? 2 : 3);
        const label = a(op === Opcode.PickNls ? 3 : 4);
        let m = Number.NEGATIVE_INFINITY;
        for (let i = 0; i < n; i++) m = Math.max(m, pool[x + i]!);
        let z = 0;
        for (let i = 0; i < n; i++) z += Math.exp(pool[x + i]! - m);
        if (op === Opcode.PickNls) {
          pool[a(1)] = m + Math.log(z) - pool[x + label]!;
        } else {
          const gy = pool[a(2)]!;
          for (let i = 0; i < n; i++) pool[a(1) + i]! += gy * (Math.exp(pool[x + i]! - m) / z - (i === label ? 1 : 0));
        }
        return;
      }
      case Opcode.Norm2:
      case Opcode.Norm2Grads: {
        const g = op === Opcode.Norm2 ? pool : mem.grads;
        let acc = 0;
        for (let i = 0; i < n; i++) acc += g[a(2) + i]! ** 2;
        pool[a(1)]! += acc;
        return;
      }
      case Opcode.GradNorm2: {
        let acc = 0;
        for (const p of held) if (p.registerGradient) for (const v of p.g) acc += v * v;
        pool[a(1)]! += acc;
        return;
      }
      case Opcode.Sgd:
      case Opcode.SgdMaster: {
        const step = o.learningRate * clipScale(pool, a(3), o.clip);
        const [p, g] = op === Opcode.Sgd ? [pool, pool] : [mem.master, mem.grads];
        for (let i = 0; i < n; i++) p[a(1) + i]! -= step * g[a(2) + i]!;
        return;
      }
      case Opcode.UpdateRegs: {
        const step = o.learningRate * clipScale(pool, a(1), o.clip);
        for (const p of held) {
          if (!p.registerGradient) continue;
          for (let k = 0; k < p.w.length; k++) p.w[k]! -= step * p.g[k]!;
          mem.master.set(p.w, this.plan.matrices[p.matrix]!.masterOffset + p.firstRow * p.cols);
        }
        return;
      }
      case Opcode.Adam:
      case Opcode.AdamMaster: {
        if (o.learningRate === 0) return; // no step, as in the kernel
        if (mem.moments === undefined || o.adam === undefined) {
          throw new Error(`VPPS emulator: ${mnemonic(op)} needs the moments and the Adam arguments (options.adam)`);
        }
        const master = op === Opcode.AdamMaster;
        const g = a(2) === NONE ? undefined : master ? mem.grads : pool;
        const scale = clipScale(pool, a(5), o.clip);
        adamRange(master ? mem.master : pool, a(1), g, a(2), scale, mem.moments, a(3), a(4), n, o.adam, o.learningRate);
        return;
      }
      case Opcode.ExportGrads:
        for (const p of held) {
          if (p.registerGradient) mem.grads.set(p.g, this.plan.matrices[p.matrix]!.masterOffset + p.firstRow * p.cols);
        }
        return;
      default:
        throw new Error(`VPPS emulator: processor ${cta} has unknown opcode ${op} at word ${at}`);
    }
  }
}

function deadlock(script: Uint32Array, live: readonly number[], pc: Int32Array, barriers: Uint32Array): string {
  const waits = live.slice(0, 8).map((c) => {
    const pre = script[pc[c]!]!;
    const b = pre >>> 8;
    return `processor ${c} waits on barrier ${b} for ${script[pc[c]! + 1]} signals (has ${barriers[b]})`;
  });
  return `VPPS emulator: deadlock, ${live.length} processor(s) blocked: ${waits.join("; ")}${live.length > 8 ? "; ..." : ""}`;
}
