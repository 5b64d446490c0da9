/**
 * Writing files so that a kill never leaves a half-written one (checkpoints, state.json), and naming file system
 * failures in words a user can act on instead of raw errno codes.
 */

import { closeSync, fsyncSync, openSync, renameSync, rmSync, writeSync } from "node:fs";
import { UserError } from "./errors.js";

/** The suffix of the temporary files `writeFileAtomic` renames into place; leftovers of a killed writer end so. */
export const TEMP_INFIX = ".tmp-";

/**
 * Writes `data` to `path` atomically: into `path.tmp-<pid>` first (flushed to disk), then renamed over `path`, so a
 * reader sees the old file or the new one, never a truncated one. The temporary file is removed when writing fails.
 */
export function writeFileAtomic(path: string, data: string | Uint8Array): void {
  const tmp = `${path}${TEMP_INFIX}${process.pid}`;
  try {
    const fd = openSync(tmp, "w");
    try {
      const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
      let at = 0;
      while (at < bytes.length) at += writeSync(fd, bytes, at, bytes.length - at);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
  } catch (e) {
    rmSync(tmp, { force: true });
    // a run's files that cannot be written are the user's to fix (a full disk, a directory in the file's place)
    throw new UserError(`cannot write ${path}: ${fsErrorReason(e)}`, { cause: e });
  }
}

/** Why a file system call failed, in words ("permission denied", "is a file, not a directory"), from its errno code. */
export function fsErrorReason(e: unknown): string {
  const code = (e as NodeJS.ErrnoException).code;
  switch (code) {
    case "EACCES":
    case "EPERM":
      return "permission denied";
    case "EROFS":
      return "the file system is read-only";
    case "ENOSPC":
      return "no space left on the device";
    case "EDQUOT":
      return "the disk quota is exceeded";
    case "ENOTDIR":
      return "a part of the path is a file, not a directory";
    case "EISDIR":
      return "is a directory";
    case "EEXIST":
      return "already exists";
    case "ENOENT":
      return "does not exist";
    case "ENAMETOOLONG":
      return "the name is too long";
    default:
      return code ?? (e as Error).message;
  }
}
