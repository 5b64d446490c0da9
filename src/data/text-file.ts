/**
 * Reading a data file, for every reader in src/data/ (the one way their bytes come in): only a regular file is read
 * (a directory, a FIFO, `/dev/zero` or another device is refused before it is opened, so nothing hangs or reads
 * without end), of at most `maxDataBytes()` bytes, inflated to at most as many; file system failures and bytes that
 * are not UTF-8 become one `DataError` naming the file, instead of a raw `EISDIR` trace or U+FFFD characters that
 * silently merge distinct words. Every file read is hashed on the way in (SHA-256, at a few hundred MB/s), so that a
 * run knows its data by content (`recordDataReads`).
 */
import { createHash } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { UserError } from "../util/errors.js";
import { fsErrorReason } from "../util/files.js";

/** A data file or directory that cannot be used (missing, malformed): the CLI prints it as one line. */
export class DataError extends UserError {
  constructor(message: string) {
    super(message);
    this.name = "DataError";
  }
}

const decoder = new TextDecoder("utf-8", { fatal: true });

/** The default limit of one data file's bytes (and of what a compressed one inflates to): 256 MiB. */
export const DEFAULT_MAX_DATA_BYTES = 256 * 2 ** 20;
/** The most characters a JavaScript string holds in V8 (2^29 − 24): a text file decodes into one. */
const MAX_STRING = 2 ** 29 - 24;

/** The limit of one data file's bytes: VPPS_MAX_DATA_BYTES (a positive integer) or DEFAULT_MAX_DATA_BYTES. */
export function maxDataBytes(env: Readonly<Record<string, string | undefined>> = process.env): number {
  const v = env.VPPS_MAX_DATA_BYTES;
  if (v === undefined || v.trim() === "") return DEFAULT_MAX_DATA_BYTES;
  const n = Number(v);
  if (!(Number.isSafeInteger(n) && n > 0)) {
    throw new DataError(`VPPS_MAX_DATA_BYTES must be a positive whole number of bytes; got "${v.slice(0, 40)}"`);
  }
  return n;
}

const mb = (n: number): string => `${(n / 2 ** 20).toFixed(n < 2 ** 20 ? 3 : 1)} MiB`;

/** The files read while `recordDataReads` runs: absolute path → SHA-256 (hex). */
let recording: Map<string, string> | null = null;

/**
 * Runs `f` (which reads data files) and returns its value with every data file it read, by path as given, and its
 * SHA-256. Synchronous: the readers are.
 */
export function recordDataReads<T>(f: () => T): { value: T; files: Map<string, string> } {
  const outer = recording;
  const files = new Map<string, string>();
  recording = files;
  try {
    return { value: f(), files };
  } finally {
    recording = outer;
    if (outer) for (const [k, v] of files) outer.set(k, v);
  }
}

/**
 * The bytes of data file `path`: a regular file of at most `maxDataBytes()` bytes, else one DataError naming it
 * (`what`: "tree file"). Recorded for `recordDataReads`.
 */
export function readDataFile(path: string, what = "data file"): Buffer {
  const limit = maxDataBytes();
  let bytes: Buffer;
  try {
    const st = statSync(path);
    if (st.isDirectory()) throw new DataError(`${what} ${path} is a directory, not a file`);
    if (!st.isFile()) {
      const kind = st.isFIFO()
        ? "a named pipe (FIFO)"
        : st.isCharacterDevice() || st.isBlockDevice()
          ? "a device"
          : st.isSocket()
            ? "a socket"
            : "not a regular file";
      throw new DataError(`${what} ${path} is ${kind}; give a regular file (copy the data into one first)`);
    }
    if (st.size > limit) {
      throw new DataError(
        `${what} ${path} has ${mb(st.size)}, more than the ${mb(limit)} a data file may have; split it, or raise ` +
          "the limit with VPPS_MAX_DATA_BYTES (bytes) if the machine's memory allows",
      );
    }
    bytes = readFileSync(path);
  } catch (e) {
    if (e instanceof DataError) throw e;
    const code = (e as NodeJS.ErrnoException).code;
    const why = code === "ENOENT" ? "does not exist" : `cannot be read (${fsErrorReason(e)})`;
    throw new DataError(`${what} ${path} ${why}`);
  }
  if (bytes.length > limit) {
    // it grew between the size check and the read
    throw new DataError(`${what} ${path} has more than the ${mb(limit)} a data file may have (VPPS_MAX_DATA_BYTES)`);
  }
  recording?.set(path, createHash("sha256").update(bytes).digest("hex"));
  return bytes;
}

/** The text of `path`, decoded as strict UTF-8; `what` names the file in messages ("training trees"). */
export function readTextFile(path: string, what = "data file"): string {
  const bytes = readDataFile(path, what);
  let text: string;
  try {
    text = decoder.decode(bytes);
  } catch {
    throw new DataError(`${what} ${path}:${firstBadLine(bytes)}: invalid UTF-8; save the file as UTF-8`);
  }
  if (text.length > MAX_STRING) {
    throw new DataError(`${what} ${path} has more characters than one JavaScript string holds; split the file`);
  }
  return text;
}

/** The 1-based line of the first byte sequence that is not UTF-8. */
function firstBadLine(bytes: Uint8Array): number {
  let line = 1;
  let start = 0;
  for (let i = 0; i <= bytes.length; i++) {
    if (i === bytes.length || bytes[i] === 0x0a) {
      try {
        decoder.decode(bytes.subarray(start, i));
      } catch {
        return line;
      }
      line++;
      start = i + 1;
    }
  }
  return line;
}
