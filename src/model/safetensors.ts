import { readFileSync } from "node:fs";
import { UserError } from "../util/errors.js";
import { fsErrorReason, writeFileAtomic } from "../util/files.js";
import { cut } from "../util/text.js";
import type { ParameterCollection } from "./parameters.js";

/*
 * safetensors: an 8-byte little-endian header length, a JSON header
 * { name: { dtype: "F32", shape, data_offsets: [begin, end] }, "__metadata__": {...} }, then the raw data.
 */

/** A checkpoint file that cannot be used (unreadable, truncated, malformed, the wrong shapes, NaN or ∞ values). */
export class CheckpointError extends UserError {
  constructor(message: string) {
    super(message);
    this.name = "CheckpointError";
  }
}

/** One F32 tensor of a safetensors file. */
export interface Tensor {
  readonly shape: readonly number[];
  readonly data: Float32Array;
}

interface TensorEntry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}

/** The index and value of the first NaN or ±∞ of `data`, or null when every value is finite. */
export function firstNonFinite(data: Float32Array): { index: number; value: number } | null {
  for (let k = 0; k < data.length; k++) {
    const x = data[k]!;
    // x − x is 0 for a finite x and NaN for NaN and ±∞: one comparison per element
    if (x - x !== 0) return { index: k, value: x };
  }
  return null;
}

/**
 * Writes F32 tensors (in the order given) and string metadata; atomic (temporary file, then rename). Refuses a
 * tensor holding NaN or ±∞: such a file could not be loaded again.
 */
export function writeSafetensors(
  path: string,
  tensors: Iterable<readonly [string, Tensor]>,
  metadata: Record<string, string> = {},
): void {
  const header: Record<string, TensorEntry | Record<string, string>> = { __metadata__: metadata };
  const list = [...tensors];
  let offset = 0;
  for (const [name, t] of list) {
    const bad = firstNonFinite(t.data);
    if (bad) {
      throw new CheckpointError(
        `${path}: refusing to write tensor '${name}': element ${bad.index} is ${bad.value} (the values diverged)`,
      );
    }
    const bytes = t.data.length * 4;
    header[name] = { dtype: "F32", shape: [...t.shape], data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  let json = JSON.stringify(header);
  // pad the header with spaces so the data starts 8-byte aligned, as the format recommends
  json += " ".repeat((8 - ((8 + Buffer.byteLength(json)) % 8)) % 8);
  const headerBytes = Buffer.from(json, "utf8");
  const out = Buffer.alloc(8 + headerBytes.length + offset);
  out.writeBigUInt64LE(BigInt(headerBytes.length), 0);
  headerBytes.copy(out, 8);
  let pos = 8 + headerBytes.length;
  for (const [, t] of list) {
    Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength).copy(out, pos);
    pos += t.data.byteLength;
  }
  writeFileAtomic(path, out);
}

/**
 * Every tensor and the metadata of a safetensors file, checked: a readable file, a header that fits and parses,
 * F32 tensors whose offsets fit their shapes and the file, and finite values. Throws CheckpointError naming the
 * file and the tensor.
 */
export function readSafetensors(path: string): { tensors: Map<string, Tensor>; metadata: Record<string, string> } {
  let buf: Buffer;
  try {
    buf = readFileSync(path);
  } catch (e) {
    throw new CheckpointError(`${path} cannot be read (${fsErrorReason(e)})`);
  }
  if (buf.length < 8)
    throw new CheckpointError(`${path}: not a safetensors file (shorter than its 8-byte header length)`);
  const n = Number(buf.readBigUInt64LE(0));
  if (8 + n > buf.length) {
    throw new CheckpointError(`${path}: header length ${n} exceeds the file size ${buf.length} (a truncated file?)`);
  }
  let header: unknown;
  try {
    header = JSON.parse(buf.subarray(8, 8 + n).toString("utf8"));
  } catch (e) {
    throw new CheckpointError(`${path}: the safetensors header is not valid JSON (${cut((e as Error).message, 80)})`);
  }
  if (typeof header !== "object" || header === null || Array.isArray(header)) {
    throw new CheckpointError(`${path}: the safetensors header is not a JSON object`);
  }
  const data = 8 + n;
  const tensors = new Map<string, Tensor>();
  let metadata: Record<string, string> = {};
  for (const [name, entry] of Object.entries(header as Record<string, unknown>)) {
    if (name === "__metadata__") {
      metadata = checkMetadata(path, entry);
      continue;
    }
    const t = entry as Partial<TensorEntry> | null;
    if (t?.dtype !== "F32")
      throw new CheckpointError(`${path}: tensor '${name}' has dtype ${cut(String(t?.dtype))}; expected F32`);
    const shape = t.shape;
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new CheckpointError(`${path}: tensor '${name}' has shape ${JSON.stringify(shape)}; expected sizes ≥ 0`);
    }
    const size = shape.reduce((a, b) => a * b, 1);
    const [b, e] = Array.isArray(t.data_offsets) ? t.data_offsets : [Number.NaN, Number.NaN];
    if (
      !(Number.isSafeInteger(b) && Number.isSafeInteger(e) && b >= 0 && e - b === size * 4 && data + e <= buf.length)
    ) {
      throw new CheckpointError(
        `${path}: tensor '${name}' has data offsets [${b}, ${e}] that do not fit its shape [${shape}] or the file ` +
          `(${buf.length - data} data bytes)`,
      );
    }
    const values = new Float32Array(size);
    new Uint8Array(values.buffer).set(buf.subarray(data + b, data + e));
    const bad = firstNonFinite(values);
    if (bad) {
      throw new CheckpointError(
        `${path}: tensor '${name}' holds ${bad.value} at element ${bad.index}; the checkpoint is corrupt ` +
          "(resume from an earlier epoch's checkpoint or train again)",
      );
    }
    tensors.set(name, { shape, data: values });
  }
  return { tensors, metadata };
}

function checkMetadata(path: string, entry: unknown): Record<string, string> {
  if (typeof entry !== "object" || entry === null || Array.isArray(entry)) {
    throw new CheckpointError(`${path}: __metadata__ is not an object of strings`);
  }
  for (const [k, v] of Object.entries(entry)) {
    if (typeof v !== "string") throw new CheckpointError(`${path}: __metadata__.${k} is not a string`);
  }
  return entry as Record<string, string>;
}

/** The parameters as tensors named after them, in the collection's order. */
export function parameterTensors(params: ParameterCollection): [string, Tensor][] {
  return params.all.map((p) => [p.name, { shape: p.shape, data: p.value }]);
}

/**
 * Writes every parameter as an F32 tensor named after it, then `extra` tensors (an optimiser's state); atomic
 * (temporary file, then rename).
 */
export function saveParameters(
  params: ParameterCollection,
  path: string,
  metadata: Record<string, string> = {},
  extra: Iterable<readonly [string, Tensor]> = [],
): void {
  writeSafetensors(path, [...parameterTensors(params), ...extra], { format: "vpps", ...metadata });
}

/**
 * Copies `tensors` (read from `path`) into the collection's parameters; every parameter must be there with its
 * shape. Nothing is changed when one is missing or of another shape.
 */
export function assignParameters(
  params: ParameterCollection,
  tensors: ReadonlyMap<string, Tensor>,
  path: string,
): void {
  for (const p of params.all) {
    const t = tensors.get(p.name);
    if (!t)
      throw new CheckpointError(`${path}: no tensor named '${p.name}' (the model expects it with shape [${p.shape}])`);
    if (t.shape.join(",") !== p.shape.join(",")) {
      throw new CheckpointError(`${path}: tensor '${p.name}' has shape [${t.shape}]; the model expects [${p.shape}]`);
    }
  }
  for (const p of params.all) p.value.set(tensors.get(p.name)!.data);
}

/**
 * Reads a safetensors file into the collection's existing parameters (names and shapes must match, every value
 * finite); returns its metadata. Throws CheckpointError naming the file and the tensor.
 */
export function loadParameters(params: ParameterCollection, path: string): Record<string, string> {
  const { tensors, metadata } = readSafetensors(path);
  assignParameters(params, tensors, path);
  return metadata;
}
