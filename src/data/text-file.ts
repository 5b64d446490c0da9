/**
 * Reading a data file as text, for every reader in src/data/: file system failures (a directory, a missing or
 * unreadable file) and bytes that are not UTF-8 become one `DataError` naming the file, instead of a raw `EISDIR`
 * trace or U+FFFD characters that silently merge distinct words.
 */
import { readFileSync } from "node:fs";
import { UserError } from "../util/errors.js";

/** A data file or directory that cannot be used (missing, malformed): the CLI prints it as one line. */
export class DataError extends UserError {
  constructor(message: string) {
    super(message);
    this.name = "DataError";
  }
}

const decoder = new TextDecoder("utf-8", { fatal: true });

/** The text of `path`, decoded as strict UTF-8; `what` names the file in messages ("training trees"). */
export function readTextFile(path: string, what = "data file"): string {
  let bytes: Buffer;
  try {
    bytes = readFileSync(path);
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
    throw new DataError(`${what} ${path} ${why}`);
  }
  try {
    return decoder.decode(bytes);
  } catch {
    throw new DataError(`${what} ${path}:${firstBadLine(bytes)}: invalid UTF-8; save the file as UTF-8`);
  }
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
