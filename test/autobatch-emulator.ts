/**
 * An emulated device for the GPU autobatch engine: the pool is a Float32Array, and each command the engine issues
 * (kernel, GEMM, fill, upload) is executed here with the meaning of its CUDA kernel (src/engines/autobatch/
 * cuda-kernels.ts), sequentially. Running the engine on it checks every record table, offset, scratch layout and
 * launch without a GPU; the GPU tests then check the CUDA source against the same CPU reference.
 */

import { type RowMajorGemm, rowMajorGemm } from "../src/cuda/index.js";
import type { DeviceCommand, NodeCommand } from "../src/engines/autobatch/cuda-backend.js";
import { AB_BIAS_CHUNK, AB_NONE, BinaryCode, UnaryCode } from "../src/engines/autobatch/cuda-kernels.js";
import type { AutobatchDevice, AutobatchLaunchCounts } from "../src/engines/autobatch/gpu-engine.js";
import type { ComputationGraph, Expression } from "../src/graph/graph.js";
import { type LookupParameter, ParameterCollection } from "../src/model/parameters.js";
import { affine, input, lstmCell, matVec, pickNegLogSoftmax, pickRange, sigmoid, sum, tanh } from "../src/ops/index.js";
import { OPS } from "../src/ops/registry.js";
import type { Trainer } from "../src/optim/trainers.js";
import { randomUniform } from "../src/util/random.js";

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
const floatOf = (bitsValue: number): number => {
  u32[0] = bitsValue;
  return f32[0]!;
};

/** ab_unary's operations by code: y from x, and the gradient from dy, y and x (a new code must be added here). */
const UNARY: { readonly [c in UnaryCode]: { y(x: number): number; dx(g: number, y: number, x: number): number } } = {
  [UnaryCode.Tanh]: { y: Math.tanh, dx: (g, y) => g * (1 - y * y) },
  [UnaryCode.Logistic]: { y: sigmoid, dx: (g, y) => g * y * (1 - y) },
  [UnaryCode.Relu]: { y: (x) => Math.max(x, 0), dx: (g, _, x) => (x > 0 ? g : 0) },
};

/** ab_binary's operations by code: y from a and b, and the gradients' factors (da = g·fa, db = g·fb). */
const BINARY: {
  readonly [c in BinaryCode]: {
    y(a: number, b: number): number;
    da(a: number, b: number): number;
    db(a: number, b: number): number;
  };
} = {
  [BinaryCode.Add]: { y: (a, b) => a + b, da: () => 1, db: () => 1 },
  [BinaryCode.Sub]: { y: (a, b) => a - b, da: () => 1, db: () => -1 },
  [BinaryCode.CMul]: { y: (a, b) => a * b, da: (_, b) => b, db: (a) => a },
};

function codeOf<T extends object>(table: T, kernel: string, code: number): T[keyof T] {
  const op = (table as Record<number, T[keyof T] | undefined>)[code];
  if (op === undefined) throw new Error(`emulator: ${kernel} has no operation ${code}`);
  return op;
}

export class EmulatedAutobatchDevice implements AutobatchDevice {
  readonly name = "emulator";
  pool: Float32Array;
  private readonly words: Uint32Array;
  private readonly valueAt: number[] = [];
  private readonly gradAt: number[] = [];
  private readonly persistent: number;
  private readonly counts: AutobatchLaunchCounts = { kernels: 0, cublas: 0, copies: 0 };
  /** Regions laid out so far. */
  regions = 0;
  /** Every command issued, in order (tests count them per batch). */
  readonly log: DeviceCommand[] = [];

  constructor(
    readonly params: ParameterCollection,
    poolFloats = 1 << 24,
  ) {
    this.pool = new Float32Array(poolFloats);
    this.words = new Uint32Array(this.pool.buffer);
    let top = 0;
    for (const p of params.all) {
      this.valueAt[p.index] = top;
      this.pool.set(p.value, top);
      top += Math.ceil(p.value.length / 64) * 64;
      this.gradAt[p.index] = top;
      top += Math.ceil(p.value.length / 64) * 64;
    }
    this.persistent = top;
  }

  paramValueOffset(index: number): number {
    return this.valueAt[index]!;
  }
  paramGradOffset(index: number): number {
    return this.gradAt[index]!;
  }
  touch(index: number, row: number): void {
    (this.params.all[index] as LookupParameter).touch(row);
  }
  touchedRows(index: number): number[] {
    const p = this.params.all[index]!;
    return p.kind === "lookup" ? [...p.touchedRows] : [];
  }
  readGradient(index: number): Float32Array {
    const p = this.params.all[index]!;
    return this.pool.slice(this.gradAt[index]!, this.gradAt[index]! + p.value.length);
  }

  allocRegion(floats: number): number {
    if (this.persistent + floats > this.pool.length) {
      throw new Error(`emulator: a region of ${floats} floats does not fit the pool of ${this.pool.length}`);
    }
    this.regions++;
    // garbage, as on a device: nothing may rely on a fresh region being zero
    this.pool.fill(Number.NaN, this.persistent, this.persistent + floats);
    return this.persistent;
  }

  upload(offset: number, words: Uint32Array): void {
    if (words.length === 0) return;
    this.words.set(words, offset);
    this.counts.copies++;
  }

  download(offset: number, out: Float32Array): Float32Array {
    out.set(this.pool.subarray(offset, offset + out.length));
    return out;
  }

  update(trainer: Trainer): void {
    for (const p of this.params.all)
      p.grad.set(this.pool.subarray(this.gradAt[p.index]!, this.gradAt[p.index]! + p.grad.length));
    trainer.update(this.params);
    for (const p of this.params.all) {
      this.pool.set(p.value, this.valueAt[p.index]!);
      this.pool.fill(0, this.gradAt[p.index]!, this.gradAt[p.index]! + p.grad.length);
    }
  }
  syncToHost(): void {
    for (const p of this.params.all)
      p.value.set(this.pool.subarray(this.valueAt[p.index]!, this.valueAt[p.index]! + p.value.length));
  }
  reloadFromHost(): void {
    for (const p of this.params.all) this.pool.set(p.value, this.valueAt[p.index]!);
  }
  synchronize(): void {}
  launchCounts(): AutobatchLaunchCounts {
    return { ...this.counts };
  }
  dispose(): void {}

  run(c: DeviceCommand): void {
    this.log.push(c);
    const P = this.pool;
    if (c.kind === "fill") {
      P.fill(c.value, c.offset, c.offset + c.count);
      this.counts.copies++;
      return;
    }
    if (c.kind === "gemm") {
      this.gemm(c.gemm);
      this.counts.cublas++;
      return;
    }
    if (c.kind === "node") {
      this.node(c);
      return;
    }
    this.counts.kernels++;
    const a = c.args.map((x) => x.value);
    const W = this.words;
    const rec = (k: number) => W[c.rec + k]!;
    switch (c.name) {
      case "ab_copy_segments":
      case "ab_add_segments":
        for (let s = 0; s < a[0]!; s++) {
          const [src, dst, len] = [rec(3 * s), rec(3 * s + 1), rec(3 * s + 2)];
          for (let r = 0; r < len; r++) P[dst + r] = (c.name === "ab_add_segments" ? P[dst + r]! : 0) + P[src + r]!;
        }
        return;
      case "ab_scatter_bias": {
        const [Y, n, m] = a as [number, number, number];
        for (let j = 0; j < n; j++) {
          const b = rec(2 * j + 1);
          for (let r = 0; r < m; r++) P[rec(2 * j) + r] = (b === AB_NONE ? 0 : P[b + r]!) + P[Y + j * m + r]!;
        }
        return;
      }
      case "ab_nll_softmax_rows": {
        // one block: the threads' row sums, then their tree (the order the kernel adds in)
        const [rows, cl] = a as [number, number];
        const red = new Float32Array(c.block);
        for (let n = 0; n < rows; n++) {
          const x = rec(1) + n * cl;
          const label = P[rec(2) + n]!;
          red[n % c.block] = Math.fround(red[n % c.block]! + this.rowLoss(x, cl) - P[x + label]!);
        }
        for (let h = c.block / 2; h > 0; h >>= 1) for (let t = 0; t < h; t++) red[t] = red[t]! + red[t + h]!;
        P[rec(0)] = red[0]!;
        return;
      }
      case "ab_nll_softmax_rows_backward": {
        const [rows, cl] = a as [number, number];
        const g = P[rec(3)]!;
        for (let n = 0; n < rows; n++) {
          const x = rec(1) + n * cl;
          const logZ = this.rowLoss(x, cl);
          const label = P[rec(2) + n]!;
          for (let j = 0; j < cl; j++)
            P[rec(0) + n * cl + j]! += g * (Math.exp(P[x + j]! - logZ) - (j === label ? 1 : 0));
        }
        return;
      }
      case "ab_gather_grad_bias": {
        const [Y, n, m, shared] = a as [number, number, number, number];
        for (let r = 0; r < m; r++) {
          for (let j0 = 0; j0 < n; j0 += AB_BIAS_CHUNK) {
            let acc = 0;
            for (let j = j0; j < Math.min(n, j0 + AB_BIAS_CHUNK); j++) {
              const g = P[rec(2 * j) + r]!;
              P[Y + j * m + r] = g;
              if (shared !== AB_NONE) acc += g;
              else if (rec(2 * j + 1) !== AB_NONE) P[rec(2 * j + 1) + r]! += g;
            }
            if (shared !== AB_NONE) P[shared + r]! += acc;
          }
        }
        return;
      }
    }
    const [n, len, extra] = a as [number, number, number];
    for (let j = 0; j < n; j++) {
      for (let r = 0; r < len; r++) this.element(c.name, (k) => rec(j * stride(c.name, extra) + k), r, len, extra);
    }
  }

  /** log Σⱼ exp(x[j]) of the c values at pool offset x, the maximum subtracted first. */
  private rowLoss(x: number, c: number): number {
    const P = this.pool;
    let m = Number.NEGATIVE_INFINITY;
    for (let j = 0; j < c; j++) m = Math.max(m, P[x + j]!);
    let s = 0;
    for (let j = 0; j < c; j++) s += Math.exp(P[x + j]! - m);
    return m + Math.log(s);
  }

  /**
   * A node command by the CPU reference (src/ops): the node's and its arguments' values (and gradients) copied from
   * their pool offsets into buffers at the graph's value offsets, the op run there, and what it wrote copied back —
   * so the offsets and the accumulation (+= into the arguments' gradients) are checked, the GPU math by the GPU tests.
   */
  private node(c: NodeCommand): void {
    const { g, node } = c;
    const P = this.pool;
    const ids = [node, ...Array.from({ length: g.argCount[node]! }, (_, a) => g.arg(node, a))];
    const v = new Float32Array(g.valueSize);
    const d = new Float32Array(g.valueSize);
    ids.forEach((id, k) => {
      const n = g.rows[id]! * g.cols[id]!;
      v.set(P.subarray(c.val[k]!, c.val[k]! + n), g.valueOffset[id]!);
      if (c.backward) d.set(P.subarray(c.grad[k]!, c.grad[k]! + n), g.valueOffset[id]!);
    });
    if (!c.backward) {
      OPS[c.op]!.forward(g, node, v);
      const n = g.rows[node]! * g.cols[node]!;
      P.set(v.subarray(g.valueOffset[node]!, g.valueOffset[node]! + n), c.val[0]!);
      return;
    }
    OPS[c.op]!.backward(g, node, v, d);
    const done = new Set<number>([node]);
    ids.forEach((id, k) => {
      if (done.has(id)) return;
      done.add(id);
      const n = g.rows[id]! * g.cols[id]!;
      P.set(d.subarray(g.valueOffset[id]!, g.valueOffset[id]! + n), c.grad[k]!);
    });
  }

  /** One thread's work of an element-wise kernel: element r of the node whose record `q` reads. */
  private element(name: string, q: (k: number) => number, r: number, len: number, extra: number): void {
    const P = this.pool;
    switch (name) {
      case "ab_unary":
        P[q(0) + r] = codeOf(UNARY, name, extra).y(P[q(1) + r]!);
        return;
      case "ab_unary_backward": {
        const dx = codeOf(UNARY, name, extra).dx(P[q(0) + r]!, P[q(2) + r]!, P[q(3) + r]!);
        P[q(1) + r]! += dx;
        return;
      }
      case "ab_binary":
        P[q(0) + r] = codeOf(BINARY, name, extra).y(P[q(1) + r]!, P[q(2) + r]!);
        return;
      case "ab_binary_backward": {
        const op = codeOf(BINARY, name, extra);
        const g = P[q(0) + r]!;
        const [a, b] = [P[q(3) + r]!, P[q(4) + r]!];
        P[q(1) + r]! += g * op.da(a, b);
        P[q(2) + r]! += g * op.db(a, b);
        return;
      }
      case "ab_dropout":
      case "ab_dropout_backward": {
        const p = floatOf(q(4));
        const keep = randomUniform(q(2), (q(3) + r) >>> 0) >= p;
        if (name === "ab_dropout") P[q(0) + r] = keep ? P[q(1) + r]! / (1 - p) : 0;
        else if (keep) P[q(1) + r]! += P[q(0) + r]! / (1 - p);
        return;
      }
      case "ab_sum":
      case "ab_sum_wide": {
        let acc = 0;
        for (let k = 0; k < extra; k++) acc = Math.fround(acc + P[q(1 + k) + r]!);
        P[q(0) + r] = acc;
        return;
      }
      case "ab_sum_backward":
        for (let k = 0; k < extra; k++) P[q(1 + k) + r]! += P[q(0) + r]!;
        return;
      case "ab_nll_softmax": {
        if (r > 0) return; // a warp per node: done once
        const x = q(1);
        const n = len;
        let m = Number.NEGATIVE_INFINITY;
        for (let k = 0; k < n; k++) m = Math.max(m, P[x + k]!);
        let s = 0;
        for (let k = 0; k < n; k++) s += Math.exp(P[x + k]! - m);
        P[q(0)] = m + Math.log(s) - P[x + q(2)]!;
        return;
      }
      case "ab_nll_softmax_backward": {
        const logZ = P[q(3)]! + P[q(2) + q(4)]!;
        P[q(1) + r]! += P[q(0)]! * (Math.exp(P[q(2) + r]! - logZ) - (r === q(4) ? 1 : 0));
        return;
      }
      case "ab_lstm_cell": {
        const H = len;
        const gt = q(1);
        let c = sigmoid(P[gt + r]!) * Math.tanh(P[gt + 2 * H + r]!);
        for (let t = 0; t < extra; t++) c += sigmoid(P[gt + (3 + t) * H + r]!) * P[q(2 + t) + r]!;
        P[q(0) + H + r] = c;
        P[q(0) + r] = sigmoid(P[gt + H + r]!) * Math.tanh(P[q(0) + H + r]!);
        return;
      }
      case "ab_lstm_cell_backward": {
        const H = len;
        const k = extra;
        const gt = q(2);
        const dg = q(3);
        const c = P[q(0) + H + r]!;
        const tc = Math.tanh(c);
        const so = sigmoid(P[gt + H + r]!);
        const dh = P[q(1) + r]!;
        const dc = P[q(1) + H + r]! + dh * so * (1 - tc * tc);
        const si = sigmoid(P[gt + r]!);
        const tu = Math.tanh(P[gt + 2 * H + r]!);
        P[dg + r]! += dc * tu * si * (1 - si);
        P[dg + H + r]! += dh * tc * so * (1 - so);
        P[dg + 2 * H + r]! += dc * si * (1 - tu * tu);
        for (let t = 0; t < k; t++) {
          const sf = sigmoid(P[gt + (3 + t) * H + r]!);
          P[dg + (3 + t) * H + r]! += dc * P[q(4 + t) + r]! * sf * (1 - sf);
          P[q(4 + k + t) + r]! += dc * sf;
        }
        return;
      }
      default:
        throw new Error(`emulator: unknown kernel ${name}`);
    }
  }

  /** cuBLAS's column-major SGEMM of the call the device would make for this row-major request. */
  private gemm(g: RowMajorGemm<number>): void {
    const c = rowMajorGemm(g);
    const P = this.pool;
    for (let j = 0; j < c.n; j++) {
      for (let i = 0; i < c.m; i++) {
        let s = 0;
        for (let l = 0; l < c.k; l++) {
          const x = c.transa === 0 ? P[c.A + i + l * c.lda]! : P[c.A + l + i * c.lda]!;
          const y = c.transb === 0 ? P[c.B + l + j * c.ldb]! : P[c.B + j + l * c.ldb]!;
          s += x * y;
        }
        const at = c.C + i + j * c.ldc;
        P[at] = c.alpha * s + (c.beta === 0 ? 0 : c.beta * P[at]!);
      }
    }
  }
}

/** Words per record of an element-wise kernel (`extra`: its last integer argument). */
function stride(name: string, extra: number): number {
  switch (name) {
    case "ab_unary":
      return 2;
    case "ab_unary_backward":
      return 4;
    case "ab_binary":
    case "ab_nll_softmax":
      return 3;
    case "ab_binary_backward":
    case "ab_dropout":
    case "ab_dropout_backward":
    case "ab_nll_softmax_backward":
      return 5;
    case "ab_sum":
    case "ab_sum_wide":
    case "ab_sum_backward":
      return extra + 1;
    case "ab_lstm_cell":
      return extra + 2;
    case "ab_lstm_cell_backward":
      return 2 * extra + 4;
    default:
      throw new Error(`emulator: unknown kernel ${name}`);
  }
}

/**
 * A graph whose batches are wider than one block or warp: 200 products with 300 rows, softmax losses over 300
 * classes (a warp loops), Tree-LSTM-style cells with H = 150, and a loss summed over 220 nodes (the block-reduced sum).
 */
export function wideCase(seed: number): { params: ParameterCollection; build: (cg: ComputationGraph) => Expression } {
  const params = new ParameterCollection({ seed });
  const u = { kind: "uniform", scale: 0.2 } as const;
  const W = params.addParameters([300, 50], u, "W");
  const b = params.addParameters(300, u, "b");
  const G = params.addParameters([750, 300], u, "G");
  const build = (cg: ComputationGraph): Expression => {
    const losses: Expression[] = [];
    const hs: Expression[] = [];
    for (let t = 0; t < 200; t++) {
      const x = input(
        cg,
        Array.from({ length: 50 }, (_, k) => Math.sin(t * 50 + k)),
      );
      const y = tanh(affine([b, W, x]));
      losses.push(pickNegLogSoftmax(y, (7 * t) % 300));
      hs.push(y);
    }
    for (let t = 0; t + 1 < 40; t += 2) {
      const cell = lstmCell(matVec(G, hs[t]!), [pickRange(hs[t]!, 0, 150), pickRange(hs[t + 1]!, 150, 300)]);
      losses.push(pickNegLogSoftmax(cell, t));
    }
    return sum(losses);
  };
  return { params, build };
}
