/**
 * safetensors files written byte by byte, as another tool or an older vpps (without checksums) writes them, and
 * edited in place (a flipped bit): for the tests of what the readers refuse.
 */
import { readFileSync, writeFileSync } from "node:fs";

/** Writes F32 `tensors` and `metadata` in the safetensors layout, with no checksums. */
export function writeRawSafetensors(
  path: string,
  tensors: readonly (readonly [string, readonly number[], Float32Array])[],
  metadata: Record<string, string> = {},
): void {
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const [name, shape, data] of tensors) {
    header[name] = { dtype: "F32", shape, data_offsets: [offset, offset + data.byteLength] };
    offset += data.byteLength;
  }
  const json = Buffer.from(JSON.stringify(header), "utf8");
  const out = Buffer.alloc(8 + json.length + offset);
  out.writeBigUInt64LE(BigInt(json.length), 0);
  json.copy(out, 8);
  let at = 8 + json.length;
  for (const [, , data] of tensors) {
    Buffer.from(data.buffer, data.byteOffset, data.byteLength).copy(out, at);
    at += data.byteLength;
  }
  writeFileSync(path, out);
}

/** The file's header (parsed) and where its data start. */
export function rawHeader(path: string): { header: Record<string, unknown>; dataStart: number } {
  const bytes = readFileSync(path);
  const n = Number(bytes.readBigUInt64LE(0));
  return { header: JSON.parse(bytes.subarray(8, 8 + n).toString("utf8")) as Record<string, unknown>, dataStart: 8 + n };
}

/** Rewrites the safetensors file `path` as an older vpps wrote it: the same tensors and metadata, no checksums. */
export function stripChecksums(path: string): void {
  const { header, dataStart } = rawHeader(path);
  const bytes = readFileSync(path);
  const meta = { ...(header.__metadata__ as Record<string, string>) };
  delete meta.checksums;
  const tensors: [string, number[], Float32Array][] = [];
  for (const [name, e] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const { shape, data_offsets } = e as { shape: number[]; data_offsets: [number, number] };
    const data = new Float32Array((data_offsets[1] - data_offsets[0]) / 4);
    new Uint8Array(data.buffer).set(bytes.subarray(dataStart + data_offsets[0], dataStart + data_offsets[1]));
    tensors.push([name, shape, data]);
  }
  writeRawSafetensors(path, tensors, meta);
}

/** Flips bit `bit` (0 … 7) of byte `byte` of the file's data section (after the header). */
export function flipDataBit(path: string, byte: number, bit: number): void {
  const { dataStart } = rawHeader(path);
  const bytes = readFileSync(path);
  bytes[dataStart + byte]! ^= 1 << bit;
  writeFileSync(path, bytes);
}
