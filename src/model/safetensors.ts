import { createHash } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { UserError } from "../util/errors.js";
import { fsErrorReason, writeFileAtomic } from "../util/files.js";
import { cut } from "../util/text.js";
import type { ParameterCollection } from "./parameters.js";

/*
 * safetensors: an 8-byte little-endian header length, a JSON header
 * { name: { dtype: "F32", shape, data_offsets: [begin, end] }, "__metadata__": {...} }, then the raw data.
 *
 * Integrity: vpps records a SHA-256 of every tensor's bytes, and one of the rest of the metadata, in the metadata
 * key `checksums` ({ "<tensor>": hex, "__metadata__": hex }); `readSafetensors` recomputes them and refuses a file
 * whose bytes changed after it was written (a flipped bit, a partial copy), naming the tensor. A file without the
 * key (written by an older vpps or another tool) is read with its values checked only for being finite, and says
 * so (`checksummed: false`).
 */

/** The metadata key holding the checksums. */
export const CHECKSUMS_KEY = "checksums";
const METADATA_ENTRY = "__metadata__";

function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** The checksum of the metadata other than the checksums themselves, over its keys in sorted order. */
function metadataChecksum(metadata: Readonly<Record<string, string>>): string {
  const keys = Object.keys(metadata)
    .filter((k) => k !== CHECKSUMS_KEY)
    .sort();
  return sha256(Buffer.from(JSON.stringify(keys.map((k) => [k, metadata[k]])), "utf8"));
}

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
  const list = [...tensors];
  const checksums: Record<string, string> = { [METADATA_ENTRY]: metadataChecksum(metadata) };
  const header: Record<string, TensorEntry | Record<string, string>> = {
    __metadata__: { ...metadata, [CHECKSUMS_KEY]: "" },
  };
  let offset = 0;
  for (const [name, t] of list) {
    if (name === METADATA_ENTRY) throw new CheckpointError(`${path}: a tensor cannot be named '${METADATA_ENTRY}'`);
    const bad = firstNonFinite(t.data);
    if (bad) {
      throw new CheckpointError(
        `${path}: refusing to write tensor '${name}': element ${bad.index} is ${bad.value} (the values diverged)`,
      );
    }
    const bytes = t.data.length * 4;
    header[name] = { dtype: "F32", shape: [...t.shape], data_offsets: [offset, offset + bytes] };
    checksums[name] = sha256(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength));
    offset += bytes;
  }
  (header.__metadata__ as Record<string, string>)[CHECKSUMS_KEY] = JSON.stringify(checksums);
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

/** What `readSafetensors` returns. */
export interface SafetensorsFile {
  tensors: Map<string, Tensor>;
  /** The metadata, without the checksums. */
  metadata: Record<string, string>;
  /** Whether the file carried checksums (and they matched); false for a file of an older vpps or another tool. */
  checksummed: boolean;
}

const DAMAGED =
  "the file changed after vpps wrote it (a flipped bit, a partial copy); restore it from a copy or use an " +
  "earlier checkpoint, or start the run afresh (--out with --force)";

/**
 * Every tensor and the metadata of a safetensors file, checked: a readable regular file, a header that fits and
 * parses, F32 tensors whose offsets fit their shapes and the file, the checksums vpps recorded (when present), and
 * finite values. Throws CheckpointError naming the file and the tensor.
 */
export function readSafetensors(path: string): SafetensorsFile {
  let buf: Buffer;
  try {
    if (!statSync(path).isFile()) {
      throw new CheckpointError(`${path} is not a regular file (a directory, a pipe or a device); give a checkpoint`);
    }
    buf = readFileSync(path);
  } catch (e) {
    if (e instanceof CheckpointError) throw e;
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
  const entries = header as Record<string, unknown>;
  const metadata: Record<string, string> =
    entries.__metadata__ === undefined ? {} : { ...checkMetadata(path, entries.__metadata__) };
  const checksums = readChecksums(path, metadata);
  delete metadata[CHECKSUMS_KEY];
  if (checksums) {
    const recorded = checksums[METADATA_ENTRY];
    if (recorded !== metadataChecksum(metadata)) {
      throw new CheckpointError(`${path}: the metadata do not match the checksum written with them; ${DAMAGED}`);
    }
    for (const name of Object.keys(checksums)) {
      if (name !== METADATA_ENTRY && !(name in entries)) {
        throw new CheckpointError(`${path}: tensor '${cut(name)}' was written but is not in the file; ${DAMAGED}`);
      }
    }
  }
  for (const [name, entry] of Object.entries(entries)) {
    if (name === "__metadata__") continue;
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
    const bytes = buf.subarray(data + b, data + e);
    if (checksums) {
      const recorded = checksums[name];
      if (recorded === undefined) {
        throw new CheckpointError(`${path}: tensor '${cut(name)}' has no checksum (it was added later); ${DAMAGED}`);
      }
      const now = sha256(bytes);
      if (now !== recorded) {
        throw new CheckpointError(
          `${path}: tensor '${cut(name)}' does not match its checksum (sha256 ${recorded.slice(0, 12)}… written, ` +
            `${now.slice(0, 12)}… read); ${DAMAGED}`,
        );
      }
    }
    const values = new Float32Array(size);
    new Uint8Array(values.buffer).set(bytes);
    const bad = firstNonFinite(values);
    if (bad) {
      throw new CheckpointError(
        `${path}: tensor '${name}' holds ${bad.value} at element ${bad.index}; the checkpoint is corrupt ` +
          "(resume from an earlier epoch's checkpoint or train again)",
      );
    }
    tensors.set(name, { shape, data: values });
  }
  return { tensors, metadata, checksummed: checksums !== undefined };
}

/** The checksums recorded in `metadata`, or undefined when it has none; malformed ones are a CheckpointError. */
function readChecksums(path: string, metadata: Record<string, string>): Record<string, string> | undefined {
  const text = metadata[CHECKSUMS_KEY];
  if (text === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  if (
    typeof parsed !== "object" ||
    parsed === null ||
    Array.isArray(parsed) ||
    !Object.values(parsed).every((v) => typeof v === "string" && /^[0-9a-f]{64}$/.test(v)) ||
    !(METADATA_ENTRY in parsed)
  ) {
    throw new CheckpointError(`${path}: metadata '${CHECKSUMS_KEY}' is not a set of SHA-256 checksums; ${DAMAGED}`);
  }
  return parsed as Record<string, string>;
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
