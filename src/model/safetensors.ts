import { readFileSync, renameSync, writeFileSync } from "node:fs";
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

/** Reads a safetensors file into the collection's existing parameters; names and shapes must match. */
export function loadParameters(params: ParameterCollection, path: string): Record<string, string> {
  const buf = readFileSync(path);
  if (buf.length < 8) throw new Error(`${path}: not a safetensors file (shorter than its 8-byte header length)`);
  const n = Number(buf.readBigUInt64LE(0));
  if (8 + n > buf.length) throw new Error(`${path}: header length ${n} exceeds the file size ${buf.length}`);
  let header: Record<string, unknown>;
  try {
    header = JSON.parse(buf.subarray(8, 8 + n).toString("utf8")) as Record<string, unknown>;
  } catch (e) {
    throw new Error(`${path}: the safetensors header is not valid JSON (${(e as Error).message})`);
  }
  const data = 8 + n;
  for (const p of params.all) {
    const t = header[p.name] as TensorEntry | undefined;
    if (!t) throw new Error(`${path}: no tensor named '${p.name}' (the model expects it with shape [${p.shape}])`);
    if (t.dtype !== "F32") throw new Error(`${path}: tensor '${p.name}' has dtype ${t.dtype}; expected F32`);
    if (t.shape.join(",") !== p.shape.join(",")) {
      throw new Error(`${path}: tensor '${p.name}' has shape [${t.shape}]; the model expects [${p.shape}]`);
    }
    const [b, e] = t.data_offsets;
    if (e - b !== p.value.length * 4 || data + e > buf.length) {
      throw new Error(
        `${path}: tensor '${p.name}' has data offsets [${b}, ${e}] that do not fit its shape or the file`,
      );
    }
    const src = buf.subarray(data + b, data + e);
    p.value.set(new Float32Array(src.buffer.slice(src.byteOffset, src.byteOffset + src.byteLength)));
  }
  return (header.__metadata__ as Record<string, string> | undefined) ?? {};
}
