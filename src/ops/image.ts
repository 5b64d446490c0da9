import { type ComputationGraph, Expression, ShapeError } from "../graph/graph.js";
import { Op } from "../graph/opcodes.js";
import {
  argNode,
  type ExprLike,
  exprGraph,
  graphOf3,
  type OpDefinition,
  type OpFamily,
  shapeSignature,
} from "./common.js";

/*
 * IMAGE BATCHES. The graph's nodes are matrices, so a batch of N images of C×H×W (rank 4, Caffe's NCHW) is the
 * matrix [N, C·H·W]: one sample per row, each row in channel, row, column order — row-major, that is exactly NCHW
 * in memory. The shape of one sample (C, H, W) is not in the graph's shape: conv2d and maxPool2d are told it
 * (`ImageShape`), check it against the matrix, and keep H and W in the node (C follows from the columns). Weights are
 * Caffe's too: F filters of C×K×K are the matrix [F, C·K·K], the bias the vector [F]. `flatten` turns an image batch
 * into the vector [N·C·H·W] that the vector ops (pickRange, affine, the losses) take.
 *
 * A node keeps its geometry in its two integer attributes: aux = H·2¹⁶ + W of the input image, aux2 = K + S·2⁸ +
 * P·2¹⁶ (kernel, stride, padding). `imageGeometry` decodes them for every engine.
 */

/** One sample of an image batch: channels × height × width. */
export interface ImageShape {
  readonly channels: number;
  readonly height: number;
  readonly width: number;
}

export interface Conv2dOptions {
  /** K: filters are K×K (the weight matrix is [F, C·K·K]). */
  readonly kernel: number;
  /** Default 1. */
  readonly stride?: number;
  /** Zero padding on every side; default 0. */
  readonly padding?: number;
}

export interface MaxPool2dOptions {
  /** K: windows are K×K. */
  readonly kernel: number;
  /** Default: the kernel size (windows side by side). */
  readonly stride?: number;
}

/** Everything an engine needs of an image node, decoded from its attributes and shapes. */
export interface ImageGeometry {
  /** Samples. */
  readonly n: number;
  /** Input channels, height, width. */
  readonly c: number;
  readonly h: number;
  readonly w: number;
  /** Output channels (conv2d: filters; maxPool2d: c), height, width. */
  readonly f: number;
  readonly ho: number;
  readonly wo: number;
  readonly kernel: number;
  readonly stride: number;
  readonly padding: number;
}

const MAX_SIDE = 0xffff;
const MAX_WINDOW = 0xff;

/** Conv2d's output side: ⌊(in + 2P − K) / S⌋ + 1 (Caffe's rounding). */
export function convOutputSide(side: number, kernel: number, stride: number, padding: number): number {
  return Math.floor((side + 2 * padding - kernel) / stride) + 1;
}

/**
 * MaxPool2d's output side: ⌈(in − K) / S⌉ + 1 (Caffe's rounding, so the last window may hang over the border and is
 * clipped), less one where that window would start outside the input.
 */
export function poolOutputSide(side: number, kernel: number, stride: number): number {
  let out = Math.ceil((side - kernel) / stride) + 1;
  if ((out - 1) * stride >= side) out--;
  return out;
}

/** The shape of conv2d's output sample for `filters` filters. */
export function conv2dShape(image: ImageShape, filters: number, opts: Conv2dOptions): ImageShape {
  const { stride = 1, padding = 0, kernel } = opts;
  return {
    channels: filters,
    height: convOutputSide(image.height, kernel, stride, padding),
    width: convOutputSide(image.width, kernel, stride, padding),
  };
}

/** The shape of maxPool2d's output sample. */
export function maxPool2dShape(image: ImageShape, opts: MaxPool2dOptions): ImageShape {
  const stride = opts.stride ?? opts.kernel;
  return {
    channels: image.channels,
    height: poolOutputSide(image.height, opts.kernel, stride),
    width: poolOutputSide(image.width, opts.kernel, stride),
  };
}

/** Decodes node i's geometry (a conv2d or maxPool2d node). */
export function imageGeometry(g: ComputationGraph, i: number): ImageGeometry {
  const x = g.arg(i, 0);
  const a = g.aux[i]!;
  const b = g.aux2[i]!;
  const h = a >>> 16;
  const w = a & MAX_SIDE;
  const kernel = b & MAX_WINDOW;
  const stride = (b >>> 8) & MAX_WINDOW;
  const padding = (b >>> 16) & MAX_WINDOW;
  const c = g.cols[x]! / (h * w);
  const conv = g.op[i] === Op.Conv2d;
  const f = conv ? g.rows[g.arg(i, 1)]! : c;
  const ho = conv ? convOutputSide(h, kernel, stride, padding) : poolOutputSide(h, kernel, stride);
  const wo = conv ? convOutputSide(w, kernel, stride, padding) : poolOutputSide(w, kernel, stride);
  return { n: g.rows[x]!, c, h, w, f, ho, wo, kernel, stride, padding };
}

// ---- builders -------------------------------------------------------------------------------------------------

function positiveInt(op: string, what: string, v: number, max: number): void {
  if (!Number.isInteger(v) || v < 1 || v > max) {
    throw new ShapeError(`${op}: ${what} must be an integer in 1 … ${max}; got ${v}`);
  }
}

/** Checks that node x is an image batch of `image` samples; returns the number of samples. */
function checkImageBatch(g: ComputationGraph, x: number, image: ImageShape, op: string): number {
  positiveInt(op, "image channels", image.channels, 2 ** 30);
  positiveInt(op, "image height", image.height, MAX_SIDE);
  positiveInt(op, "image width", image.width, MAX_SIDE);
  const per = image.channels * image.height * image.width;
  if (g.cols[x] !== per) {
    throw new ShapeError(
      `${op}: argument 'x' has shape ${g.shapeOf(x)}; samples of ${image.channels}×${image.height}×${image.width} ` +
        `make an image batch [N,${per}] (one sample per row)`,
    );
  }
  return g.rows[x]!;
}

/**
 * y[n] = b + W ⋆ x[n] for every sample n: a 2-D convolution (cross-correlation, as in Caffe) of the image batch x
 * [N, C·H·W] with F filters W [F, C·K·K] and bias b [F]; y is [N, F·Ho·Wo] with Ho = ⌊(H + 2P − K)/S⌋ + 1.
 */
export function conv2d(x: Expression, W: ExprLike, b: ExprLike, image: ImageShape, opts: Conv2dOptions): Expression {
  const op = "conv2d";
  const g = graphOf3(op, x, W, b, "x", "W", "b");
  const xi = argNode(g, x, x instanceof Expression, op, "x");
  const wi = argNode(g, W, W instanceof Expression, op, "W");
  const bi = argNode(g, b, b instanceof Expression, op, "b");
  const { kernel, stride = 1, padding = 0 } = opts;
  positiveInt(op, "kernel", kernel, MAX_WINDOW);
  positiveInt(op, "stride", stride, MAX_WINDOW);
  if (!Number.isInteger(padding) || padding < 0 || padding >= kernel) {
    throw new ShapeError(`${op}: padding must be an integer in 0 … kernel − 1 = ${kernel - 1}; got ${padding}`);
  }
  const n = checkImageBatch(g, xi, image, op);
  const { channels: c, height: h, width: w } = image;
  if (h + 2 * padding < kernel || w + 2 * padding < kernel) {
    throw new ShapeError(
      `${op}: a ${kernel}×${kernel} kernel does not fit a padded ${h}×${w} image (padding ${padding})`,
    );
  }
  const f = g.rows[wi]!;
  if (g.cols[wi] !== c * kernel * kernel) {
    throw new ShapeError(
      `${op}: argument 'W' has shape ${g.shapeOf(wi)}; filters of ${c}×${kernel}×${kernel} make [F,${c * kernel * kernel}]`,
    );
  }
  if (g.rows[bi] !== f || g.cols[bi] !== 1) {
    throw new ShapeError(`${op}: argument 'b' has shape ${g.shapeOf(bi)}; W has ${f} filters, so b must be [${f}]`);
  }
  const ho = convOutputSide(h, kernel, stride, padding);
  const wo = convOutputSide(w, kernel, stride, padding);
  const id = g.addNode3(
    Op.Conv2d,
    n,
    f * ho * wo,
    xi,
    wi,
    bi,
    h * 0x10000 + w,
    kernel + stride * 0x100 + padding * 0x10000,
  );
  return new Expression(g, id, g.generation);
}

/**
 * y[n, c] = the maximum of each K×K window (stride S) of x[n, c]: max pooling of the image batch x [N, C·H·W] per
 * sample and channel; y is [N, C·Ho·Wo] with Caffe's rounding, Ho = ⌈(H − K)/S⌉ + 1 (border windows clipped).
 */
export function maxPool2d(x: Expression, image: ImageShape, opts: MaxPool2dOptions): Expression {
  const op = "maxPool2d";
  const g = exprGraph(x, op, "x");
  const xi = g.check(x, op, "x");
  const { kernel } = opts;
  const stride = opts.stride ?? kernel;
  positiveInt(op, "kernel", kernel, MAX_WINDOW);
  positiveInt(op, "stride", stride, MAX_WINDOW);
  const n = checkImageBatch(g, xi, image, op);
  const { channels: c, height: h, width: w } = image;
  if (h < kernel || w < kernel)
    throw new ShapeError(`${op}: a ${kernel}×${kernel} window does not fit a ${h}×${w} image`);
  const ho = poolOutputSide(h, kernel, stride);
  const wo = poolOutputSide(w, kernel, stride);
  const id = g.addNode1(Op.MaxPool2d, n, c * ho * wo, xi, h * 0x10000 + w, kernel + stride * 0x100);
  return new Expression(g, id, g.generation);
}

/** y = x's values as one vector: an image batch [N, D] becomes [N·D] (sample n is y[n·D … (n+1)·D)). */
export function flatten(x: Expression): Expression {
  const g = exprGraph(x, "flatten", "x");
  const xi = g.check(x, "flatten", "x");
  return new Expression(g, g.addNode1(Op.Flatten, g.rows[xi]! * g.cols[xi]!, 1, xi), g.generation);
}

// ---- reference kernels ----------------------------------------------------------------------------------------

const conv2dOp: OpDefinition = {
  // batched with convolutions of the same geometry and the same weights (a parameter, or one computed node)
  signature(g, i, key) {
    const w = g.arg(i, 1);
    key[1] = g.rows[i]!;
    key[2] = g.cols[i]!;
    key[3] = g.aux[i]!;
    key[4] = g.aux2[i]!;
    const isParam = g.op[w] === Op.Parameter;
    key[5] = isParam ? 0 : 1;
    key[6] = isParam ? g.aux[w]! : w;
    return 7;
  },
  // y[n,f,oy,ox] = b[f] + Σ_{c,ky,kx} W[f,c,ky,kx] · x[n,c,oy·S−P+ky,ox·S−P+kx] (zero outside the image)
  forward(g, i, v) {
    const G = imageGeometry(g, i);
    const { c, h, w, f, ho, wo, kernel: K, stride: S, padding: P } = G;
    const x0 = g.valueOffset[g.arg(i, 0)]!;
    const W0 = g.valueOffset[g.arg(i, 1)]!;
    const b0 = g.valueOffset[g.arg(i, 2)]!;
    let y = g.valueOffset[i]!;
    for (let n = 0; n < G.n; n++) {
      const xn = x0 + n * c * h * w;
      for (let fi = 0; fi < f; fi++) {
        for (let oy = 0; oy < ho; oy++) {
          for (let ox = 0; ox < wo; ox++) {
            let s = v[b0 + fi]!;
            for (let ci = 0; ci < c; ci++) {
              for (let ky = 0; ky < K; ky++) {
                const iy = oy * S - P + ky;
                if (iy < 0 || iy >= h) continue;
                const wrow = W0 + ((fi * c + ci) * K + ky) * K;
                const xrow = xn + (ci * h + iy) * w;
                for (let kx = 0; kx < K; kx++) {
                  const ix = ox * S - P + kx;
                  if (ix >= 0 && ix < w) s += v[wrow + kx]! * v[xrow + ix]!;
                }
              }
            }
            v[y++] = s;
          }
        }
      }
    }
  },
  // db[f] += Σ dy; dW[f,c,ky,kx] += Σ dy · x[…]; dx[…] += Σ dy · W[f,c,ky,kx] (the forward's terms, transposed)
  backward(g, i, v, d) {
    const G = imageGeometry(g, i);
    const { c, h, w, f, ho, wo, kernel: K, stride: S, padding: P } = G;
    const xa = g.valueOffset[g.arg(i, 0)]!;
    const W0 = g.valueOffset[g.arg(i, 1)]!;
    const b0 = g.valueOffset[g.arg(i, 2)]!;
    let y = g.valueOffset[i]!;
    for (let n = 0; n < G.n; n++) {
      const xn = xa + n * c * h * w;
      for (let fi = 0; fi < f; fi++) {
        for (let oy = 0; oy < ho; oy++) {
          for (let ox = 0; ox < wo; ox++) {
            const gy = d[y++]!;
            if (gy === 0) continue;
            d[b0 + fi] = d[b0 + fi]! + gy;
            for (let ci = 0; ci < c; ci++) {
              for (let ky = 0; ky < K; ky++) {
                const iy = oy * S - P + ky;
                if (iy < 0 || iy >= h) continue;
                const wrow = W0 + ((fi * c + ci) * K + ky) * K;
                const xrow = xn + (ci * h + iy) * w;
                for (let kx = 0; kx < K; kx++) {
                  const ix = ox * S - P + kx;
                  if (ix < 0 || ix >= w) continue;
                  d[wrow + kx] = d[wrow + kx]! + gy * v[xrow + ix]!;
                  d[xrow + ix] = d[xrow + ix]! + gy * v[wrow + kx]!;
                }
              }
            }
          }
        }
      }
    }
  },
};

/**
 * The input element a pooling window takes its maximum from: the first largest in row-major window order (strict
 * `>`), which every engine uses, so that ties send the gradient to the same element everywhere. Returns its offset
 * from the channel plane's start.
 */
function windowArgmax(
  v: ArrayLike<number>,
  plane: number,
  h: number,
  w: number,
  y0: number,
  x0: number,
  K: number,
): number {
  const y1 = Math.min(y0 + K, h);
  const x1 = Math.min(x0 + K, w);
  let best = y0 * w + x0;
  let m = v[plane + best]!;
  for (let iy = y0; iy < y1; iy++) {
    for (let ix = x0; ix < x1; ix++) {
      const at = iy * w + ix;
      if (v[plane + at]! > m) {
        m = v[plane + at]!;
        best = at;
      }
    }
  }
  return best;
}

const maxPool2dOp: OpDefinition = {
  // batched by geometry
  signature(g, i, key) {
    key[1] = g.rows[i]!;
    key[2] = g.cols[i]!;
    key[3] = g.aux[i]!;
    key[4] = g.aux2[i]!;
    return 5;
  },
  // y[n,c,oy,ox] = max over iy ∈ [oy·S, oy·S + K) ∩ [0, H), ix likewise, of x[n,c,iy,ix]
  forward(g, i, v) {
    const { n, c, h, w, ho, wo, kernel: K, stride: S } = imageGeometry(g, i);
    const x0 = g.valueOffset[g.arg(i, 0)]!;
    let y = g.valueOffset[i]!;
    for (let p = 0; p < n * c; p++) {
      const plane = x0 + p * h * w;
      for (let oy = 0; oy < ho; oy++) {
        for (let ox = 0; ox < wo; ox++) v[y++] = v[plane + windowArgmax(v, plane, h, w, oy * S, ox * S, K)]!;
      }
    }
  },
  // dx[argmax of each window] += dy
  backward(g, i, v, d) {
    const { n, c, h, w, ho, wo, kernel: K, stride: S } = imageGeometry(g, i);
    const x0 = g.valueOffset[g.arg(i, 0)]!;
    let y = g.valueOffset[i]!;
    for (let p = 0; p < n * c; p++) {
      const plane = x0 + p * h * w;
      for (let oy = 0; oy < ho; oy++) {
        for (let ox = 0; ox < wo; ox++) {
          const at = plane + windowArgmax(v, plane, h, w, oy * S, ox * S, K);
          d[at] = d[at]! + d[y++]!;
        }
      }
    }
  },
};

const flattenOp: OpDefinition = {
  signature: shapeSignature,
  forward(g, i, v) {
    const y = g.valueOffset[i]!;
    const x = g.valueOffset[g.arg(i, 0)]!;
    for (let k = 0, len = g.rows[i]!; k < len; k++) v[y + k] = v[x + k]!;
  },
  backward(g, i, _v, d) {
    const y = g.valueOffset[i]!;
    const x = g.valueOffset[g.arg(i, 0)]!;
    for (let k = 0, len = g.rows[i]!; k < len; k++) d[x + k] = d[x + k]! + d[y + k]!;
  },
};

/** The image ops' definitions (their part of the registry, src/ops/registry.ts). */
export const IMAGE_OPS = {
  [Op.Conv2d]: conv2dOp,
  [Op.MaxPool2d]: maxPool2dOp,
  [Op.Flatten]: flattenOp,
} satisfies OpFamily;
