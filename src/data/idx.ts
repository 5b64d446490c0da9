// The IDX format of MNIST (and Fashion-MNIST): a big-endian header — two zero bytes, the element type (0x08: unsigned
// bytes), the number of dimensions — then each dimension's size (4 bytes each), then the elements. Files may be
// gzipped (`.gz`, or any file starting with gzip's magic bytes). A malformed file is refused in one line naming the
// file, the byte offset and what was expected there.

import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { DataError, maxDataBytes, readDataFile } from "./text-file.js";

/** One IDX file: its dimensions and its unsigned bytes. */
export interface IdxArray {
  readonly dims: readonly number[];
  readonly data: Uint8Array;
}

const UBYTE = 0x08;

/** An MNIST-style image set: `count` images of `rows` × `cols` pixels (0 … 255, row-major) and their labels. */
export interface ImageSet {
  readonly count: number;
  readonly rows: number;
  readonly cols: number;
  readonly pixels: Uint8Array;
  readonly labels: Uint8Array;
  readonly source: string;
}

/** The bytes of an IDX file, gunzipped when gzipped: a regular file, inflated to at most `maxDataBytes()`. */
function readBytes(path: string): Uint8Array {
  const raw = readDataFile(path, "IDX file");
  if (raw.length >= 2 && raw[0] === 0x1f && raw[1] === 0x8b) {
    const limit = maxDataBytes();
    try {
      return gunzipSync(raw, { maxOutputLength: limit });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ERR_BUFFER_TOO_LARGE") {
        throw new DataError(
          `${path}: the gzip data inflate to more than the ${limit} bytes a data file may have; raise the limit ` +
            "with VPPS_MAX_DATA_BYTES (bytes) if the machine's memory allows",
        );
      }
      throw new DataError(`${path}: gzip data is damaged (${(e as Error).message}); download the file again`);
    }
  }
  return raw;
}

/** Parses IDX bytes (already gunzipped); `what` names the file in errors. */
export function parseIdx(bytes: Uint8Array, what: string): IdxArray {
  const at = (offset: number, expected: string) => `${what}: byte ${offset}: expected ${expected}`;
  if (bytes.length < 4)
    throw new DataError(`${at(bytes.length, "the 4-byte IDX magic number")}; the file has ${bytes.length} bytes`);
  if (bytes[0] !== 0 || bytes[1] !== 0) {
    throw new DataError(
      `${at(0, "0x00 0x00 (an IDX magic number)")}; got 0x${hex(bytes[0]!)} 0x${hex(bytes[1]!)}: not an IDX file`,
    );
  }
  if (bytes[2] !== UBYTE) {
    throw new DataError(`${at(2, "element type 0x08 (unsigned bytes)")}; got 0x${hex(bytes[2]!)}`);
  }
  const n = bytes[3]!;
  if (n < 1 || n > 4) throw new DataError(`${at(3, "1 … 4 dimensions")}; got ${n}`);
  if (bytes.length < 4 + 4 * n) {
    throw new DataError(
      `${at(bytes.length, `${n} dimension sizes (4 bytes each) after the magic number`)}; the file ends`,
    );
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const dims: number[] = [];
  let count = 1;
  for (let d = 0; d < n; d++) {
    const size = view.getUint32(4 + 4 * d, false);
    if (size === 0) throw new DataError(`${at(4 + 4 * d, "a dimension size ≥ 1")}; got 0`);
    dims.push(size);
    count *= size;
  }
  const start = 4 + 4 * n;
  if (bytes.length !== start + count) {
    throw new DataError(
      `${at(Math.min(bytes.length, start + count), `${count} elements (${dims.join(" × ")}) after the ${start}-byte header`)}; ` +
        `the file has ${bytes.length - start} (${bytes.length < start + count ? "truncated" : "trailing bytes"})`,
    );
  }
  return { dims, data: bytes.subarray(start) };
}

const hex = (b: number) => b.toString(16).padStart(2, "0");

/** Reads an IDX file, gzipped or not. */
export function readIdx(path: string): IdxArray {
  return parseIdx(readBytes(path), path);
}

/** An images file and its labels file as one set (3-dimensional images, 1-dimensional labels 0 … 9 of the same count). */
export function readImageSet(imagesPath: string, labelsPath: string): ImageSet {
  const images = readIdx(imagesPath);
  if (images.dims.length !== 3) {
    throw new DataError(
      `${imagesPath}: byte 3: expected 3 dimensions (images × rows × columns); got ${images.dims.length}`,
    );
  }
  const labels = readIdx(labelsPath);
  if (labels.dims.length !== 1) {
    throw new DataError(`${labelsPath}: byte 3: expected 1 dimension (labels); got ${labels.dims.length}`);
  }
  const [count, rows, cols] = images.dims as [number, number, number];
  if (labels.dims[0] !== count) {
    throw new DataError(
      `${labelsPath}: byte 4: expected ${count} labels (the images in ${imagesPath}); got ${labels.dims[0]}`,
    );
  }
  const header = 4 + 4 * labels.dims.length;
  const bad = labels.data.findIndex((l) => l > 9);
  if (bad >= 0)
    throw new DataError(`${labelsPath}: byte ${header + bad}: expected a label 0 … 9; got ${labels.data[bad]}`);
  return { count, rows, cols, pixels: images.data, labels: labels.data, source: imagesPath };
}

/** The file of `dir` named `base` or `base.gz` (MNIST's names use '-'; some mirrors use '.' before idx). */
export function findIdxFile(dir: string, base: string): string {
  const names = [base, `${base}.gz`, base.replace("-idx", ".idx"), `${base.replace("-idx", ".idx")}.gz`];
  for (const name of names) {
    const path = join(dir, name);
    if (existsSync(path) && statSync(path).isFile()) return path;
  }
  throw new DataError(
    `${dir}: no ${base} (or ${base}.gz): expected MNIST's IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte)`,
  );
}
