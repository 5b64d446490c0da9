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
    const code = (e as NodeJS.ErrnoException).code;
    const advice = code !== undefined && code in OS_ADVICE ? `; ${OS_ADVICE[code]}` : "";
    throw new UserError(`cannot write ${path}: ${fsErrorReason(e)}${advice}`, { cause: e });
  }
}

/** What a user can do about an operating-system error, by errno code. */
const OS_ADVICE: Readonly<Record<string, string>> = {
  ENOSPC: "free space on that disk, or write somewhere else",
  EDQUOT: "free space within your quota, or write somewhere else",
  EROFS: "write somewhere else (a writable directory)",
  EACCES: "check the permissions, or use another path",
  EPERM: "check the permissions, or use another path",
  EISDIR: "a directory is where a file is expected: move it away, or use another path",
  ENOTDIR: "a file is where a directory is expected: check the path",
  ENOENT: "check the path",
  EEXIST: "remove it, or use another path",
  ENAMETOOLONG: "use a shorter path",
  ENOTEMPTY: "empty or remove the directory, or use another path",
  EMFILE: "too many open files: raise the limit (ulimit -n)",
  ENFILE: "too many open files on the system: close some programs",
  EIO: "the disk reported an input/output error: check the device",
  ENOMEM: "the system is out of memory: close other programs or use smaller sizes",
  ELOOP: "the path has a symbolic-link loop: check the path",
  ETXTBSY: "the file is in use: try again when it is not",
  EBUSY: "the file or device is in use: try again when it is not",
  EPIPE: "the reader of the output went away",
};

/**
 * One line for an operating-system error a user can cause (a full disk, a read-only or protected path, a directory
 * in a file's place): the operation, the path, the reason in words and what to do; null for anything else (a bug).
 * The command line's last resort, so that no such error ends in a stack trace.
 */
export function systemErrorLine(e: unknown): string | null {
  if (!(e instanceof Error)) return null;
  const err = e as NodeJS.ErrnoException & { info?: { code?: string; path?: string; syscall?: string } };
  // Node's own fs checks (ERR_FS_EISDIR …) carry the errno in `info`
  const code = err.info?.code ?? err.code;
  if (typeof code !== "string" || !(code in OS_ADVICE)) return null;
  const path = err.info?.path ?? err.path;
  const syscall = err.info?.syscall ?? err.syscall;
  if (path === undefined && syscall === undefined) return null;
  const op = syscall === undefined ? "a file operation" : (OPERATION[syscall] ?? syscall);
  return `cannot ${op}${path !== undefined ? ` ${path}` : ""}: ${fsErrorReason({ code })}; ${OS_ADVICE[code]}`;
}

/** Some system calls in words. */
const OPERATION: Readonly<Record<string, string>> = {
  open: "open",
  write: "write",
  read: "read",
  mkdir: "create the directory",
  rmdir: "remove the directory",
  rm: "remove",
  unlink: "remove",
  rename: "rename",
  stat: "read the status of",
  lstat: "read the status of",
  scandir: "list",
  fsync: "flush",
  close: "close",
};

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
    case "ENOTEMPTY":
      return "the directory is not empty";
    case "EMFILE":
    case "ENFILE":
      return "too many open files";
    case "EIO":
      return "an input/output error";
    case "ENOMEM":
      return "out of memory";
    case "EPIPE":
      return "the reader closed the pipe";
    case "ELOOP":
      return "too many symbolic links";
    case "EBUSY":
    case "ETXTBSY":
      return "busy";
    default:
      return code ?? (e as Error).message;
  }
}
