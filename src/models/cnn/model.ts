// LeNet on MNIST: one branch of GLP4NN's Siamese network (Table 5's Siamese conv1 and conv2 are its layers), trained
// as a classifier with a softmax head, as Caffe's examples/mnist/lenet.prototxt: conv 20 × 5×5 → max pool 2×2/2 →
// conv 50 × 5×5 → max pool 2×2/2 → fully connected 500 → ReLU → fully connected 10 → softmax loss. Pixels are
// scaled by 1/256 (Caffe's 0.00390625).
//
// A batch of N images is one [N, 784] input: the convolutions and poolings take the whole batch (Caffe-style, one
// im2col + GEMM per sample on the eager engine, over GLP4NN's stream pool with `--streams`). In training, the fully
// connected layers and the loss take the batch as rows too, as Caffe's InnerProduct layers do (affineRows: one GEMM
// per layer; pickNegLogSoftmaxRows: one node for the summed loss). `scores` gives each digit its own head (an
// expression per digit, for evaluation): the same math row by row. Training once used that per-digit head as well — five nodes per sample, 320 small kernels at batch 64 launched by one host thread, which took most
// of an iteration once GLP4NN had made the convolutions concurrent.

import type { ComputationGraph, Expression } from "../../graph/graph.js";
import { type Parameter, ParameterCollection, type ParameterShape } from "../../model/parameters.js";
import {
  affine,
  affineRows,
  conv2d,
  conv2dShape,
  flatten,
  type ImageShape,
  input,
  maxPool2d,
  maxPool2dShape,
  pickNegLogSoftmax,
  pickNegLogSoftmaxRows,
  pickRange,
  relu,
  sum,
} from "../../ops/index.js";

/** One MNIST digit: 28 × 28 pixels (0 … 255, row-major) and its class. */
export interface Digit {
  readonly pixels: Uint8Array;
  readonly label: number;
}

export interface CnnSizes {
  readonly conv1: number;
  readonly conv2: number;
  readonly hidden: number;
}

export const IMAGE: ImageShape = { channels: 1, height: 28, width: 28 };
const CONV = { kernel: 5 } as const;
const POOL = { kernel: 2, stride: 2 } as const;
const CLASSES = 10;
const PIXEL_SCALE = 1 / 256;

/** The shapes after each layer. */
export function lenetShapes(s: CnnSizes) {
  const c1 = conv2dShape(IMAGE, s.conv1, CONV);
  const p1 = maxPool2dShape(c1, POOL);
  const c2 = conv2dShape(p1, s.conv2, CONV);
  const p2 = maxPool2dShape(c2, POOL);
  return { c1, p1, c2, p2, features: p2.channels * p2.height * p2.width };
}

/** The parameters `LenetModel` makes, shapes only. */
export function lenetParameterShapes(s: CnnSizes): ParameterShape[] {
  const { features } = lenetShapes(s);
  const dense = (name: string, rows: number, cols: number, isMatrix = true): ParameterShape => ({
    kind: "dense",
    name,
    rows,
    cols,
    isMatrix,
  });
  return [
    dense("conv1.W", s.conv1, 25),
    dense("conv1.b", s.conv1, 1, false),
    dense("conv2.W", s.conv2, s.conv1 * 25),
    dense("conv2.b", s.conv2, 1, false),
    dense("ip1.W", s.hidden, features),
    dense("ip1.b", s.hidden, 1, false),
    dense("ip2.W", CLASSES, s.hidden),
    dense("ip2.b", CLASSES, 1, false),
  ];
}

/** LeNet; see the top of this file. */
export class LenetModel {
  readonly params: ParameterCollection;
  private readonly p: Record<"W1" | "b1" | "W2" | "b2" | "W3" | "b3" | "W4" | "b4", Parameter>;
  private readonly shapes: ReturnType<typeof lenetShapes>;

  constructor(
    readonly sizes: CnnSizes,
    seed: number,
  ) {
    this.params = new ParameterCollection({ seed });
    this.shapes = lenetShapes(sizes);
    const [W1, b1, W2, b2, W3, b3, W4, b4] = lenetParameterShapes(sizes).map((s) =>
      this.params.addParameters(s.kind === "dense" && s.isMatrix ? [s.rows, s.cols] : s.rows, undefined, s.name),
    ) as Parameter[];
    this.p = { W1: W1!, b1: b1!, W2: W2!, b2: b2!, W3: W3!, b3: b3!, W4: W4!, b4: b4! };
  }

  /** The batch through both convolutions and poolings: the image batch [N, features]. */
  private features(cg: ComputationGraph, digits: readonly Digit[]): Expression {
    const n = digits.length;
    const per = IMAGE.height * IMAGE.width;
    const values = new Float32Array(n * per);
    digits.forEach((d, k) => {
      for (let i = 0; i < per; i++) values[k * per + i] = d.pixels[i]! * PIXEL_SCALE;
    });
    const { p } = this;
    const { c1, p1, c2 } = this.shapes;
    const x = input(cg, values, [n, per]);
    const h1 = maxPool2d(conv2d(x, p.W1, p.b1, IMAGE, CONV), c1, POOL);
    return maxPool2d(conv2d(h1, p.W2, p.b2, p1, CONV), c2, POOL);
  }

  /** The class scores of each digit (before the softmax), one expression per digit, in one graph. */
  scores(cg: ComputationGraph, digits: readonly Digit[]): Expression[] {
    const { p } = this;
    const { features } = this.shapes;
    const f = flatten(this.features(cg, digits));
    const out: Expression[] = [];
    for (let k = 0; k < digits.length; k++) {
      const h = relu(affine([p.b3, p.W3, pickRange(f, k * features, (k + 1) * features)]));
      out.push(affine([p.b4, p.W4, h]));
    }
    return out;
  }

  /** The summed softmax loss of a batch: the fully connected layers and the loss over the batch's rows. */
  batchLoss(cg: ComputationGraph, digits: readonly Digit[]): Expression {
    const { p } = this;
    const h = relu(affineRows(p.b3, p.W3, this.features(cg, digits)));
    return pickNegLogSoftmaxRows(
      affineRows(p.b4, p.W4, h),
      digits.map((d) => d.label),
    );
  }

  /** The summed softmax loss of a batch through `scores`' per-digit head (the same value; tests compare the two). */
  perDigitLoss(cg: ComputationGraph, digits: readonly Digit[]): Expression {
    const s = this.scores(cg, digits);
    return sum(s.map((e, k) => pickNegLogSoftmax(e, digits[k]!.label)));
  }
}
