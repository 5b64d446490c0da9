/**
 * The op × engine suite's cases: per op, small graphs that exercise it and its variants (lstmCell with 0–3 children,
 * affine with several pairs, dropout while training, a node used twice, …), each a scalar loss over seeded
 * parameters. The table is keyed by op, so a new op without a case does not compile. test/op-suite.ts runs them:
 * the CPU engine's gradients against finite differences, and every engine against the CPU engine.
 */
import type { ComputationGraph, Expression } from "../src/graph/graph.js";
import { Op, type OpTable } from "../src/graph/opcodes.js";
import { type Parameter, ParameterCollection } from "../src/model/parameters.js";
import type { Conv2dOptions, ImageShape, MaxPool2dOptions } from "../src/ops/image.js";
import {
  add,
  affine,
  affineRows,
  cmul,
  concat,
  conv2d,
  conv2dShape,
  dropout,
  flatten,
  input,
  logistic,
  lookup,
  lookupRows,
  lstmCell,
  matVec,
  maxPool2d,
  maxPool2dShape,
  parameter,
  pickNegLogSoftmax,
  pickNegLogSoftmaxRows,
  pickRange,
  relu,
  rnn,
  sub,
  sum,
  tanh,
} from "../src/ops/index.js";
import type { RnnCell } from "../src/ops/recurrent.js";

/** A case's graph: fresh parameters (the same values on every call) and a builder of the scalar loss over them. */
export interface CaseGraph {
  readonly params: ParameterCollection;
  build(cg: ComputationGraph): Expression;
}

export interface OpCase {
  /** What the case exercises (test names and messages). */
  readonly name: string;
  readonly make: () => CaseGraph;
  /** False for a case too large for finite differences over every parameter element. */
  readonly gradcheck?: false;
  /** Why VPPS cannot run the graph; VPPS holds only parameter matrices, as the weights of products. */
  readonly notOnVpps?: string;
}

/** Deterministic values in [−1, 1) (a linear congruential sequence). */
export function randoms(n: number, seed: number): number[] {
  const out: number[] = [];
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    out.push((s / 2 ** 32) * 2 - 1);
  }
  return out;
}

const unit = { kind: "uniform", scale: 1 } as const;

/** A scalar from a vector: R·y with a [1, n] parameter R, so that every element of y gets its own gradient. */
function dot(pc: ParameterCollection, n: number, name = "R"): Parameter {
  return pc.addParameters([1, n], unit, name);
}

/** A collection with one vector per entry of `dims`, uniformly random in ±1 (seeded). */
function vectors(seed: number, ...dims: number[]): { pc: ParameterCollection; ps: Parameter[] } {
  const pc = new ParameterCollection({ seed });
  const ps = dims.map((n, k) => pc.addParameters(n, unit, `v${k}`));
  return { pc, ps };
}

/** A case whose loss is built from parameters `setup` makes (seed 7): the eager GPU tests' shape of case. */
function withParams<P>(
  name: string,
  setup: (pc: ParameterCollection) => P,
  build: (cg: ComputationGraph, p: P) => Expression,
  more: Omit<OpCase, "name" | "make"> = {},
): OpCase {
  return {
    name,
    make: () => {
      const params = new ParameterCollection({ seed: 7 });
      const p = setup(params);
      return { params, build: (cg) => build(cg, p) };
    },
    ...more,
  };
}

/** A case over `vectors(seed, …dims)`: the gradient checks' shape of case. */
function overVectors(
  name: string,
  seed: number,
  dims: number[],
  build: (cg: ComputationGraph, ps: Parameter[]) => Expression,
  tweak?: (ps: Parameter[]) => void,
): OpCase {
  return {
    name,
    make: () => {
      const { pc, ps } = vectors(seed, ...dims);
      tweak?.(ps);
      return { params: pc, build: (cg) => build(cg, ps) };
    },
  };
}

const loss = (y: Expression, label = 1): Expression => pickNegLogSoftmax(y, label);

/** Binary ops of two parameter vectors (the gradient checks' cases). */
function binaryCase(name: string, f: (a: Expression, b: Parameter) => Expression): OpCase {
  return overVectors(`${name} of two vectors`, 6, [4, 4], (cg, ps) => loss(f(parameter(cg, ps[0]!), ps[1]!), 3));
}

/** Unary ops of a parameter vector, its elements kept away from relu's kink (where the derivative is undefined). */
function unaryCase(name: string, f: (x: Expression) => Expression): OpCase {
  return overVectors(
    `${name} of a vector`,
    7,
    [6],
    (cg, ps) => loss(f(parameter(cg, ps[0]!)), 2),
    (ps) => {
      const v = ps[0]!.value;
      for (let k = 0; k < v.length; k++) if (Math.abs(v[k]!) < 0.05) v[k] = 0.3;
    },
  );
}

/** lstmCell with k children from parameter vectors (the gradient checks' cases). */
function cellOfVectors(k: number): OpCase {
  const H = 3;
  const what = ["a Tree-LSTM leaf", "an LSTM step", "a binary Tree-LSTM node", "a 3-ary node"][k];
  return overVectors(`${k} children (${what})`, 13 + k, [(3 + k) * H, ...new Array<number>(k).fill(H)], (cg, ps) =>
    loss(
      lstmCell(
        parameter(cg, ps[0]!),
        ps.slice(1).map((p) => parameter(cg, p)),
      ),
      4,
    ),
  );
}

/** lstmCell with k children behind an affine of an input (the eager GPU tests' cases). */
function cellAfterAffine(k: number): OpCase {
  const H = 9;
  return withParams(
    `${k} children after an affine${k === 2 ? " (the same child twice, then two different)" : ""}`,
    (pc) => ({
      W: pc.addParameters([(3 + k) * H, 5]),
      b: pc.addParameters((3 + k) * H, { kind: "uniform", scale: 0.5 }),
      R: dot(pc, 2 * H),
    }),
    (cg, p) => {
      const gates = affine([p.b, p.W, input(cg, randoms(5, 20))]);
      const c1 = tanh(input(cg, randoms(H, 21)));
      const c2 = tanh(input(cg, randoms(H, 22)));
      const cs = k === 0 ? [] : k === 1 ? [c1] : [c1, c1];
      const hc = lstmCell(gates, cs);
      let y = matVec(p.R, hc);
      if (k === 2) y = add(y, matVec(p.R, lstmCell(gates, [c1, c2])));
      return y;
    },
  );
}

/**
 * Parameter values that are pairwise at least 2/n apart (a permutation of an even grid over ±1): max pooling's
 * finite differences must not move one element past another in a window.
 */
function spread(p: Parameter): void {
  const v = p.value;
  const n = v.length;
  for (let k = 0; k < n; k++) v[k] = (((k * 37 + 11) % n) / n) * 2 - 1;
}

/** An image batch of `n` samples of `image` as a parameter matrix (so that its gradient is checked too). */
function imageParam(pc: ParameterCollection, n: number, image: ImageShape, name = "x"): Parameter {
  return pc.addParameters([n, image.channels * image.height * image.width], unit, name);
}

/** conv2d of a parameter image batch, its output summed against R (every output element gets a gradient). */
function convCase(what: string, n: number, image: ImageShape, filters: number, opts: Conv2dOptions): OpCase {
  const out = conv2dShape(image, filters, opts);
  const outLen = n * out.channels * out.height * out.width;
  return withParams(
    `${what}: ${n} samples of ${image.channels}×${image.height}×${image.width}, ${filters} filters → ` +
      `${out.channels}×${out.height}×${out.width}`,
    (pc) => ({
      x: imageParam(pc, n, image),
      W: pc.addParameters([filters, image.channels * opts.kernel * opts.kernel], unit, "W"),
      b: pc.addParameters(filters, unit, "b"),
      R: dot(pc, outLen),
    }),
    (cg, p) => matVec(p.R, flatten(conv2d(parameter(cg, p.x), p.W, p.b, image, opts))),
  );
}

/** maxPool2d of a parameter image batch with well-separated values, into a softmax loss. */
function poolCase(what: string, n: number, image: ImageShape, opts: MaxPool2dOptions): OpCase {
  const out = maxPool2dShape(image, opts);
  return withParams(
    `${what}: ${n} samples of ${image.channels}×${image.height}×${image.width} → ${out.height}×${out.width}`,
    (pc) => {
      const x = imageParam(pc, n, image);
      spread(x);
      return { x, R: dot(pc, n * out.channels * out.height * out.width) };
    },
    (cg, p) => matVec(p.R, flatten(maxPool2d(parameter(cg, p.x), image, opts))),
  );
}

/** A small CNN on an input batch, the shape of a convolutional model: conv, tanh, max pooling, flatten, an affine per sample. */
function smallCnn(): OpCase {
  const N = 3;
  const image = { channels: 2, height: 6, width: 6 };
  const conv = { kernel: 3, padding: 1 } as const;
  const c1 = conv2dShape(image, 4, conv);
  const pool = { kernel: 3, stride: 2 } as const;
  const p1 = maxPool2dShape(c1, pool);
  const D = p1.channels * p1.height * p1.width;
  return withParams(
    `a small CNN on an input batch of ${N}: conv 3×3 (padding 1), tanh, max pooling 3×3 stride 2, flatten, affine per sample`,
    (pc) => ({
      W: pc.addParameters([4, 2 * 9], unit, "conv.W"),
      b: pc.addParameters(4, { kind: "uniform", scale: 0.1 }, "conv.b"),
      V: pc.addParameters([5, D], undefined, "fc.W"),
      c: pc.addParameters(5, { kind: "uniform", scale: 0.1 }, "fc.b"),
    }),
    (cg, p) => {
      const x = input(cg, randoms(N * 2 * 36, 60), [N, 2 * 36]);
      const h = flatten(maxPool2d(tanh(conv2d(x, p.W, p.b, image, conv)), c1, pool));
      const losses = [2, 0, 4].map((label, k) =>
        pickNegLogSoftmax(affine([p.c, p.V, pickRange(h, k * D, (k + 1) * D)]), label),
      );
      return sum(losses);
    },
  );
}

/**
 * A recurrent layer over a packed batch (lengths sorted, decreasing): x is a concat of tanh'd parameter vectors (so
 * it gets a gradient), the loss R·y. `bias2` adds b_hh (PyTorch's two biases; without it cuDNN's single bias).
 */
function rnnCase(cell: RnnCell, batchSizes: number[], bidirectional: boolean, bias2: boolean): OpCase {
  const In = 3;
  const H = 2;
  const G = cell === "lstm" ? 4 : cell === "gru" ? 3 : 1;
  const N = batchSizes.reduce((a, b) => a + b, 0);
  const D = bidirectional ? 2 : 1;
  return withParams(
    `${cell}, batch sizes [${batchSizes}], ${bidirectional ? "bidirectional" : "forward only"}, ${bias2 ? "b_ih and b_hh" : "one bias"}`,
    (pc) => ({
      xs: Array.from({ length: N }, (_, k) => pc.addParameters(In, unit, `x${k}`)),
      dirs: Array.from({ length: D }, (_, d) => ({
        W_ih: pc.addParameters([G * H, In], unit, `W_ih${d}`),
        W_hh: pc.addParameters([G * H, H], unit, `W_hh${d}`),
        b_ih: pc.addParameters(G * H, unit, `b_ih${d}`),
        ...(bias2 ? { b_hh: pc.addParameters(G * H, unit, `b_hh${d}`) } : {}),
      })),
      R: dot(pc, N * D * H),
    }),
    (cg, p) => {
      const x = concat(p.xs.map((v) => tanh(parameter(cg, v))));
      return matVec(p.R, flatten(rnn(x, batchSizes, cell, p.dirs)));
    },
  );
}

/**
 * An rnn with pruned W_hh (`density`, `pruning`): each W_hh holds a shuffle of evenly spaced magnitudes (0.05 … 0.95,
 * random signs), so that no two |w| are within the finite differences' step of each other and the mask, which the op
 * derives from the weights, is the same at every perturbed point.
 */
function sparseRnnCase(
  cell: RnnCell,
  batchSizes: number[],
  bidirectional: boolean,
  density: number,
  pruning: "row-balanced" | "plain",
): OpCase {
  const In = 3;
  const H = 4;
  const G = cell === "lstm" ? 4 : cell === "gru" ? 3 : 1;
  const N = batchSizes.reduce((a, b) => a + b, 0);
  const D = bidirectional ? 2 : 1;
  const spaced = (seed: number): Float32Array => {
    const n = G * H * H;
    const order = randoms(n, seed).map((r, i) => [r, i] as const);
    order.sort((a, b) => a[0] - b[0]);
    const signs = randoms(n, seed + 1);
    const w = new Float32Array(n);
    order.forEach(([, i], rank) => {
      w[i] = (0.05 + (0.9 * rank) / (n - 1)) * (signs[i]! < 0 ? -1 : 1);
    });
    return w;
  };
  return withParams(
    `${cell}, batch sizes [${batchSizes}], ${bidirectional ? "bidirectional" : "forward only"}, W_hh pruned to density ${density} (${pruning})`,
    (pc) => ({
      xs: Array.from({ length: N }, (_, k) => pc.addParameters(In, unit, `x${k}`)),
      dirs: Array.from({ length: D }, (_, d) => {
        const W_hh = pc.addParameters([G * H, H], unit, `W_hh${d}`);
        W_hh.value.set(spaced(31 + d));
        return {
          W_ih: pc.addParameters([G * H, In], unit, `W_ih${d}`),
          W_hh,
          b_ih: pc.addParameters(G * H, unit, `b_ih${d}`),
          b_hh: pc.addParameters(G * H, unit, `b_hh${d}`),
        };
      }),
      R: dot(pc, N * D * H),
    }),
    (cg, p) => {
      const x = concat(p.xs.map((v) => tanh(parameter(cg, v))));
      return matVec(p.R, flatten(rnn(x, batchSizes, cell, p.dirs, { density, pruning })));
    },
  );
}

/**
 * The taggers' batch-level head over an rnn's rows: word rows looked up (lookupRows), a BiLSTM (rnn, [N, 2H]), an
 * affine over rows, tanh, an affine over rows to class scores and the summed softmax loss, one label per row.
 */
function rowHeadCase(): OpCase {
  const E = 3;
  const H = 2;
  const batchSizes = [3, 2, 1];
  const ids = [4, 1, 2, 4, 0, 3];
  return withParams(
    "a packed batch's rows: lookupRows → rnn → affineRows → tanh → affineRows → pickNegLogSoftmaxRows",
    (pc) => ({
      T: pc.addLookupParameters(6, E, unit, "T"),
      dirs: [0, 1].map((d) => ({
        W_ih: pc.addParameters([4 * H, E], unit, `W_ih${d}`),
        W_hh: pc.addParameters([4 * H, H], unit, `W_hh${d}`),
        b_ih: pc.addParameters(4 * H, unit, `b_ih${d}`),
      })),
      Wm: pc.addParameters([3, 2 * H], unit, "W_mlp"),
      bm: pc.addParameters(3, unit, "b_mlp"),
      Wo: pc.addParameters([4, 3], unit, "W_out"),
      bo: pc.addParameters(4, unit, "b_out"),
    }),
    (cg, p) => {
      const y = rnn(lookupRows(cg, p.T, ids), batchSizes, "lstm", p.dirs);
      const scores = affineRows(p.bo, p.Wo, tanh(affineRows(p.bm, p.Wm, y)));
      return pickNegLogSoftmaxRows(scores, [0, 3, 1, 2, 3, 0]);
    },
  );
}

/** Size of the large dropout case: enough elements to measure the dropped fraction. */
export const DROPOUT_ELEMENTS = 20_000;
export const DROPOUT_P = 0.3;

/** Every op's cases. */
export const OP_CASES: OpTable<readonly OpCase[]> = {
  [Op.Input]: [
    overVectors("inputs: one used twice, one straight into the loss", 30, [4], (cg, ps) => {
      const x = input(cg, randoms(4, 31));
      const y = input(cg, randoms(4, 32));
      return sum([loss(add(cmul(x, parameter(cg, ps[0]!)), x), 2), loss(y, 0)]);
    }),
  ],
  [Op.Parameter]: [
    overVectors("a parameter vector straight into the loss, and in a sum", 9, [5, 5], (cg, ps) =>
      sum([loss(parameter(cg, ps[0]!), 3), loss(add(parameter(cg, ps[0]!), ps[1]!), 1)]),
    ),
  ],
  [Op.Lookup]: [
    {
      name: "a row used twice (sparse, accumulated)",
      make: () => {
        const pc = new ParameterCollection({ seed: 11 });
        const E = pc.addLookupParameters(5, 3, unit, "E");
        return { params: pc, build: (cg) => loss(concat([lookup(cg, E, 1), lookup(cg, E, 3), lookup(cg, E, 1)]), 4) };
      },
    },
    withParams(
      "repeated rows, and an unreached lookup, which must not be touched",
      (pc) => ({
        E: pc.addLookupParameters(10, 6),
        W: pc.addParameters([6, 6]),
        b: pc.addParameters(6, { kind: "uniform", scale: 0.1 }),
        R: dot(pc, 6),
      }),
      (cg, p) => {
        const hs = [3, 5, 3, 3, 9].map((row) => tanh(affine([p.b, p.W, lookup(cg, p.E, row)])));
        lookup(cg, p.E, 7); // not on the loss's path
        const e3 = lookup(cg, p.E, 3);
        return matVec(p.R, sum([...hs, cmul(e3, e3)]));
      },
    ),
  ],
  [Op.MatVec]: [
    {
      name: "W·x of a parameter vector",
      make: () => {
        const pc = new ParameterCollection({ seed: 3 });
        const W = pc.addParameters([3, 4], undefined, "W");
        const x = pc.addParameters(4, unit, "x");
        return { params: pc, build: (cg) => loss(matVec(W, parameter(cg, x))) };
      },
    },
    withParams(
      "with a computed matrix, after an affine with two pairs and tanh",
      (pc) => ({
        W1: pc.addParameters([6, 5]),
        W2: pc.addParameters([6, 4]),
        b: pc.addParameters(6, { kind: "uniform", scale: 0.5 }),
        P: pc.addParameters([3, 6]),
        Q: pc.addParameters([3, 6]),
        R: dot(pc, 3),
      }),
      (cg, p) => {
        const y = tanh(affine([p.b, p.W1, input(cg, randoms(5, 1)), p.W2, input(cg, randoms(4, 2))]));
        const M = sum([parameter(cg, p.P), parameter(cg, p.Q)]); // a [3, 6] node that is not a parameter
        return matVec(p.R, add(matVec(M, y), matVec(p.P, y)));
      },
      { notOnVpps: "a computed matrix, and a matrix parameter used as a value" },
    ),
  ],
  [Op.Affine]: [
    {
      name: "two pairs",
      make: () => {
        const pc = new ParameterCollection({ seed: 4 });
        const b = pc.addParameters(3, unit, "b");
        const W1 = pc.addParameters([3, 4], undefined, "W1");
        const W2 = pc.addParameters([3, 2], undefined, "W2");
        const x1 = pc.addParameters(4, unit, "x1");
        const x2 = pc.addParameters(2, unit, "x2");
        return { params: pc, build: (cg) => loss(affine([b, W1, parameter(cg, x1), W2, parameter(cg, x2)]), 2) };
      },
    },
    withParams(
      "one pair in a chain of five, its node reused by many consumers",
      (pc) => ({ W: pc.addParameters([8, 8]), b: pc.addParameters(8), R: dot(pc, 8) }),
      (cg, p) => {
        let h = tanh(input(cg, randoms(8, 30)));
        for (let step = 0; step < 5; step++) {
          const a = affine([p.b, p.W, h]);
          h = add(tanh(a), cmul(logistic(a), h));
        }
        return matVec(p.R, sum([h, tanh(h), relu(h)]));
      },
    ),
    withParams(
      "three pairs, and a computed bias",
      (pc) => ({
        W1: pc.addParameters([4, 3]),
        W2: pc.addParameters([4, 5]),
        W3: pc.addParameters([4, 2]),
        R: dot(pc, 4),
      }),
      (cg, p) => {
        const b = tanh(input(cg, randoms(4, 40)));
        const xs = [3, 5, 2].map((n, k) => tanh(input(cg, randoms(n, 41 + k))));
        return matVec(p.R, affine([b, p.W1, xs[0]!, p.W2, xs[1]!, p.W3, xs[2]!]));
      },
    ),
  ],
  [Op.Concat]: [
    overVectors("two vectors, then a range of it", 5, [2, 3], (cg, ps) =>
      loss(pickRange(concat([parameter(cg, ps[0]!), ps[1]!]), 1, 5), 0),
    ),
    withParams(
      "six arguments (two launches on eager, one argument twice), a pickRange, a sum with a repeated argument",
      (pc) => ({ W: pc.addParameters([4, 4]), R: dot(pc, 23), S: dot(pc, 5, "S") }),
      (cg, p) => {
        const x = tanh(matVec(p.W, input(cg, randoms(4, 5))));
        const z = input(cg, randoms(5, 6));
        const c = concat([x, z, x, logistic(z), tanh(x), input(cg, randoms(1, 7))]); // 23 values
        const r = pickRange(c, 4, 9);
        const s = sum([r, z, r, tanh(r)]);
        return add(matVec(p.R, c), matVec(p.S, s));
      },
    ),
  ],
  [Op.PickRange]: [
    overVectors("ranges at the start, middle and end, overlapping", 50, [7], (cg, ps) => {
      const x = tanh(parameter(cg, ps[0]!));
      return loss(concat([pickRange(x, 0, 3), pickRange(x, 2, 5), pickRange(x, 4, 7)]), 5);
    }),
  ],
  [Op.Add]: [
    binaryCase("add", add),
    overVectors("a node reused: gradients accumulate over both uses", 12, [4], (cg, ps) => {
      const y = tanh(parameter(cg, ps[0]!));
      return loss(cmul(add(y, y), y), 1);
    }),
  ],
  [Op.Sub]: [binaryCase("sub", sub)],
  [Op.CMul]: [
    binaryCase("cmul", cmul),
    withParams(
      "add, sub, cmul (also of a node with itself), logistic, relu",
      (pc) => ({ W: pc.addParameters([7, 3]), b: pc.addParameters(7, unit), R: dot(pc, 7) }),
      (cg, p) => {
        const a = affine([p.b, p.W, input(cg, randoms(3, 3))]);
        const b = tanh(input(cg, randoms(7, 4)));
        const y = add(cmul(a, a), sub(logistic(a), relu(cmul(a, b))));
        return matVec(p.R, sub(y, relu(b)));
      },
    ),
  ],
  [Op.Tanh]: [unaryCase("tanh", tanh)],
  [Op.Logistic]: [unaryCase("logistic", logistic)],
  [Op.Relu]: [unaryCase("relu", relu)],
  [Op.Dropout]: [
    overVectors("a fixed mask for a fixed key", 8, [16], (cg, ps) => {
      cg.dropoutKey = 1234;
      return loss(dropout(tanh(parameter(cg, ps[0]!)), 0.4), 5);
    }),
    withParams(
      `p = ${DROPOUT_P} over ${DROPOUT_ELEMENTS} elements (masks bit-identical on every engine)`,
      (pc) => ({
        W: pc.addParameters([DROPOUT_ELEMENTS, 2]),
        b: pc.addParameters(DROPOUT_ELEMENTS, unit),
        R: dot(pc, DROPOUT_ELEMENTS),
      }),
      (cg, q) => {
        cg.dropoutKey = 0x9e37_79b9 | 0;
        return matVec(q.R, dropout(affine([q.b, q.W, input(cg, [0.5, -0.25])]), DROPOUT_P));
      },
      { gradcheck: false, notOnVpps: "R and W are too large for VPPS's registers (a row of R has 20 000 columns)" },
    ),
  ],
  [Op.PickNegLogSoftmax]: [
    ...[0, 1, 2, 3, 4].map((label) =>
      overVectors(`label ${label} of a vector`, 9, [5], (cg, ps) => loss(parameter(cg, ps[0]!), label)),
    ),
    withParams(
      "several labels after affines",
      (pc) => ({ W: pc.addParameters([5, 8]), b: pc.addParameters(5, unit) }),
      (cg, p) =>
        sum(
          [0, 3, 4, 1].map((label, k) => pickNegLogSoftmax(affine([p.b, p.W, input(cg, randoms(8, 10 + k))]), label)),
        ),
    ),
  ],
  [Op.Sum]: [
    overVectors("three vectors", 10, [4, 4, 4], (cg, ps) =>
      loss(sum([parameter(cg, ps[0]!), ps[1]!, tanh(parameter(cg, ps[2]!))]), 0),
    ),
    overVectors("one argument three times, and a single term", 51, [3, 3], (cg, ps) => {
      const x = tanh(parameter(cg, ps[0]!));
      return loss(sum([sum([x, parameter(cg, ps[1]!), x, x])]), 2);
    }),
  ],
  [Op.LstmCell]: [0, 1, 2, 3].map(cellOfVectors).concat([0, 1, 2].map(cellAfterAffine)),
  [Op.Conv2d]: [
    convCase("3×3, stride 1, padding 1", 2, { channels: 2, height: 5, width: 5 }, 3, { kernel: 3, padding: 1 }),
    convCase(
      "5×5, stride 2, padding 2 (windows over every border, a non-square image)",
      2,
      { channels: 1, height: 4, width: 7 },
      2,
      {
        kernel: 5,
        stride: 2,
        padding: 2,
      },
    ),
    withParams(
      "two convolutions in a chain on an input batch (the second 2×2, stride 2)",
      (pc) => ({
        W1: pc.addParameters([4, 2 * 9], unit, "W1"),
        b1: pc.addParameters(4, unit, "b1"),
        W2: pc.addParameters([2, 4 * 4], unit, "W2"),
        b2: pc.addParameters(2, unit, "b2"),
        R: dot(pc, 3 * 2 * 3 * 3),
      }),
      (cg, p) => {
        const image = { channels: 2, height: 6, width: 6 };
        const x = input(cg, randoms(3 * 72, 61), [3, 72]);
        const h = tanh(conv2d(x, p.W1, p.b1, image, { kernel: 3, padding: 1 }));
        const y = conv2d(h, p.W2, p.b2, { channels: 4, height: 6, width: 6 }, { kernel: 2, stride: 2 });
        return matVec(p.R, flatten(y));
      },
    ),
  ],
  [Op.MaxPool2d]: [
    poolCase("2×2 windows side by side", 2, { channels: 2, height: 4, width: 4 }, { kernel: 2 }),
    poolCase(
      "3×3 windows, stride 2: overlapping, the last column clipped (Caffe's rounding)",
      1,
      { channels: 2, height: 7, width: 6 },
      {
        kernel: 3,
        stride: 2,
      },
    ),
  ],
  [Op.Flatten]: [
    withParams(
      "a parameter matrix into per-sample vectors (pickRange), each into a loss",
      (pc) => ({ x: pc.addParameters([3, 4], unit, "x") }),
      (cg, p) => {
        const v = flatten(parameter(cg, p.x));
        return sum([0, 1, 2].map((k) => pickNegLogSoftmax(pickRange(v, 4 * k, 4 * k + 4), k)));
      },
    ),
    smallCnn(),
  ],
  [Op.Rnn]: [
    rnnCase("rnn-tanh", [2, 2, 1], false, true),
    rnnCase("rnn-relu", [3, 1], true, true),
    rnnCase("lstm", [3, 2, 1], true, true),
    rnnCase("lstm", [2, 2], false, false),
    rnnCase("gru", [3, 3, 1], true, true),
    rnnCase("gru", [1], true, false),
    sparseRnnCase("lstm", [3, 2, 1], true, 0.5, "row-balanced"),
    sparseRnnCase("gru", [2, 2], false, 0.25, "plain"),
    sparseRnnCase("rnn-tanh", [3, 1], true, 0.3, "row-balanced"),
  ],
  [Op.LookupRows]: [
    {
      name: "rows with repeats, beside a lookup of the same table, and an unreached lookupRows (not touched)",
      make: () => {
        const pc = new ParameterCollection({ seed: 12 });
        const E = pc.addLookupParameters(7, 3, unit, "E");
        const R = dot(pc, 12);
        return {
          params: pc,
          build: (cg) => {
            lookupRows(cg, E, [6, 5]); // not on the loss's path
            const x = lookupRows(cg, E, [2, 5, 2, 0]);
            const y = tanh(
              add(flatten(x), concat([lookup(cg, E, 5), lookup(cg, E, 3), lookup(cg, E, 2), lookup(cg, E, 5)])),
            );
            return matVec(R, y);
          },
        };
      },
    },
    withParams(
      "one row, straight into an affine over rows and the row loss",
      (pc) => ({
        E: pc.addLookupParameters(4, 5, unit, "E"),
        W: pc.addParameters([3, 5], unit),
        b: pc.addParameters(3),
      }),
      (cg, p) => pickNegLogSoftmaxRows(affineRows(p.b, p.W, lookupRows(cg, p.E, [3])), [2]),
    ),
  ],
  [Op.AffineRows]: [
    withParams(
      "a parameter matrix of 4 rows, every output element into the loss",
      (pc) => ({
        X: pc.addParameters([4, 3], unit, "X"),
        W: pc.addParameters([5, 3], unit, "W"),
        b: pc.addParameters(5, unit, "b"),
        R: dot(pc, 20),
      }),
      (cg, p) => matVec(p.R, flatten(affineRows(p.b, p.W, parameter(cg, p.X)))),
    ),
    withParams(
      "a computed bias and weight matrix, a chain of two, rows used twice",
      (pc) => ({
        X: pc.addParameters([3, 4], unit, "X"),
        W: pc.addParameters([4, 4], unit, "W"),
        V: pc.addParameters([4, 4], unit, "V"),
        b: pc.addParameters(4, unit, "b"),
        R: dot(pc, 12),
      }),
      (cg, p) => {
        const b = tanh(parameter(cg, p.b));
        const W = add(parameter(cg, p.W), parameter(cg, p.V)); // a [4, 4] node that is not a parameter
        const h = tanh(affineRows(b, W, parameter(cg, p.X)));
        return matVec(p.R, flatten(add(affineRows(p.b, p.V, h), h)));
      },
      { notOnVpps: "a computed matrix" },
    ),
    rowHeadCase(),
  ],
  [Op.PickNegLogSoftmaxRows]: [
    withParams(
      "a label per row of a parameter matrix [4, 5]",
      (pc) => ({ X: pc.addParameters([4, 5], unit, "X") }),
      (cg, p) => pickNegLogSoftmaxRows(parameter(cg, p.X), [0, 4, 2, 2]),
    ),
    withParams(
      "rows after tanh, one of a single class's chance, summed with a per-vector loss",
      (pc) => ({ X: pc.addParameters([3, 2], unit, "X"), v: pc.addParameters(2, unit, "v") }),
      (cg, p) =>
        sum([pickNegLogSoftmaxRows(tanh(parameter(cg, p.X)), [1, 0, 1]), pickNegLogSoftmax(parameter(cg, p.v), 1)]),
    ),
  ],
};
