import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { UserError } from "../util/errors.js";
import { cut, showValue } from "../util/text.js";
import type { ParameterCollection } from "./parameters.js";

/*
 * safetensors: an 8-byte little-endian header length, a JSON header
 * { name: { dtype: "F32", shape, data_offsets: [begin, end] }, "__metadata__": {...} }, then the raw data.
 */

interface TensorEntry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}

/** Writes every parameter as an F32 tensor named after it; atomic (temporary file, then rename). */
export function saveParameters(params: ParameterCollection, path: string, metadata: Record<string, string> = {}): void {
  const header: Record<string, TensorEntry | Record<string, string>> = {
    __metadata__: { format: "vpps", ...metadata },
  };
  let offset = 0;
  for (const p of params.all) {
    const bytes = p.value.length * 4;
    header[p.name] = { dtype: "F32", shape: p.shape, data_offsets: [offset, offset + bytes] };
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
  for (const p of params.all) {
    Buffer.from(p.value.buffer, p.value.byteOffset, p.value.byteLength).copy(out, pos);
    pos += p.value.byteLength;
  }
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, out);
  renameSync(tmp, path);
}

/**
 * A checkpoint that cannot be loaded into the model: missing or unreadable, truncated, a header that is not the
 * format's, or tensors that do not match the model's names and shapes. The message names the file and what is wrong.
 */
export class CheckpointError extends UserError {}

/** Reads a safetensors file into the collection's existing parameters; names and shapes must match. */
export function loadParameters(params: ParameterCollection, path: string): Record<string, string> {
  const buf = readCheckpoint(path);
  const fail = (why: string): never => {
    throw new CheckpointError(`checkpoint ${path}: ${why}`);
  };
  if (buf.length < 8) fail(`not a safetensors file: ${buf.length} bytes, shorter than its 8-byte header length`);
  const n = buf.readBigUInt64LE(0);
  if (n > BigInt(buf.length - 8)) {
    fail(`not a safetensors file, or truncated: the header length ${n} exceeds the ${buf.length - 8} bytes after it`);
  }
  const data = 8 + Number(n);
  let header: unknown;
  try {
    header = JSON.parse(buf.subarray(8, data).toString("utf8"));
  } catch (e) {
    fail(`the safetensors header is not valid JSON (${cut((e as Error).message, 80)})`);
  }
  if (typeof header !== "object" || header === null || Array.isArray(header)) {
    fail(`the safetensors header must be a JSON object; got ${showValue(header)}`);
  }
  const entries = header as Record<string, unknown>;
  for (const p of params.all) {
    const t = entries[p.name];
    const what = `tensor '${p.name}'`;
    if (t === undefined) fail(`no tensor named '${p.name}' (the model expects it with shape [${p.shape}])`);
    const entry = checkEntry(t, what, fail);
    if (entry.dtype !== "F32") fail(`${what} has dtype ${cut(entry.dtype)}; expected F32`);
    if (entry.shape.join(",") !== p.shape.join(",")) {
      fail(`${what} has shape [${cut(entry.shape.join(","))}]; the model expects [${p.shape}]`);
    }
    const [b, e] = entry.data_offsets;
    if (e - b !== p.value.length * 4 || data + e > buf.length) {
      fail(
        `${what} has data offsets [${b}, ${e}] that do not fit its shape (${p.value.length * 4} bytes) or the ` +
          `${buf.length - data} bytes of data: the file is truncated or not this model's`,
      );
    }
    const src = buf.subarray(data + b, data + e);
    p.value.set(new Float32Array(src.buffer.slice(src.byteOffset, src.byteOffset + src.byteLength)));
  }
  const metadata = entries.__metadata__;
  if (metadata === undefined) return {};
  if (
    typeof metadata !== "object" ||
    metadata === null ||
    Array.isArray(metadata) ||
    Object.values(metadata).some((v) => typeof v !== "string")
  ) {
    fail(`__metadata__ must be an object of strings; got ${showValue(metadata)}`);
  }
  return metadata as Record<string, string>;
}

function readCheckpoint(path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const why =
      code === "ENOENT"
        ? "does not exist"
        : code === "EISDIR"
          ? "is a directory, not a file"
          : code === "EACCES" || code === "EPERM"
            ? "cannot be read (permission denied)"
            : `cannot be read (${code ?? (e as Error).message})`;
    throw new CheckpointError(`checkpoint ${path} ${why}`);
  }
}

/** A header entry's fields, checked: a corrupt header must not reach the copy as `undefined` or a string. */
function checkEntry(t: unknown, what: string, fail: (why: string) => never): TensorEntry {
  if (typeof t !== "object" || t === null || Array.isArray(t))
    fail(`${what} must be a JSON object; got ${showValue(t)}`);
  const { dtype, shape, data_offsets } = t as Record<string, unknown>;
  if (typeof dtype !== "string") fail(`${what} has no dtype string; got ${showValue(dtype)}`);
  const naturals = (v: unknown): v is number[] =>
    Array.isArray(v) && v.every((x) => typeof x === "number" && Number.isSafeInteger(x) && x >= 0);
  if (!naturals(shape)) fail(`${what} has shape ${showValue(shape)}; expected an array of sizes`);
  if (!naturals(data_offsets) || data_offsets.length !== 2 || data_offsets[0]! > data_offsets[1]!) {
    fail(`${what} has data_offsets ${showValue(data_offsets)}; expected [begin, end] with begin <= end`);
  }
  return { dtype: dtype as string, shape: shape as number[], data_offsets: data_offsets as [number, number] };
}
