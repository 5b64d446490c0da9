// The on-disk cubin cache: an entry per content hash of everything that determines the cubin (source, options,
// headers, NVRTC version, architecture), so that the JIT cost is paid once per kernel version and machine, not once
// per run. Entries are written atomically, so that processes compiling the same kernel at once never see half a file.

import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, renameSync, unlinkSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";

/** Bump when the cache's layout or what a key covers changes, so old entries are ignored rather than misread. */
export const KERNEL_CACHE_FORMAT = 1;

export interface CacheKeyInput {
  source: string;
  options: readonly string[];
  nvrtcVersion: string;
  arch: string;
  headers?: Readonly<Record<string, string>>;
}

/** sha256 over everything that determines the cubin. JSON keeps field boundaries unambiguous. */
export function kernelCacheKey(input: CacheKeyInput): string {
  const headers = Object.entries(input.headers ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const material = JSON.stringify([
    KERNEL_CACHE_FORMAT,
    input.nvrtcVersion,
    input.arch,
    input.options,
    input.source,
    headers,
  ]);
  return createHash("sha256").update(material).digest("hex");
}

/** `$VPPS_CACHE_DIR`, else `$XDG_CACHE_HOME/vpps/kernels`, else `~/.cache/vpps/kernels`. */
export function defaultCacheDir(
  env: Readonly<Record<string, string | undefined>> = process.env,
  home: string = homedir(),
): string {
  if (env.VPPS_CACHE_DIR) return env.VPPS_CACHE_DIR;
  if (env.XDG_CACHE_HOME) return join(env.XDG_CACHE_HOME, "vpps", "kernels");
  return join(home, ".cache", "vpps", "kernels");
}

/**
 * Writes a file so that readers see either the old content or the whole new content: write a uniquely named temp
 * file in the same folder, then rename over the target (atomic within one file system). Two processes compiling the
 * same kernel at once both succeed; the last rename wins with identical bytes.
 */
export function writeFileAtomic(path: string, data: Uint8Array | string): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`;
  try {
    writeFileSync(tmp, data);
    renameSync(tmp, path);
  } catch (e) {
    try {
      unlinkSync(tmp);
    } catch {
      // the temp file was never created
    }
    throw e;
  }
}

/** The cache's files for a key: the cubin (its presence marks a complete entry) and the compile log. */
export function cacheEntryPaths(cacheDir: string, key: string): { cubin: string; log: string } {
  return { cubin: join(cacheDir, `${key}.cubin`), log: join(cacheDir, `${key}.log`) };
}

export function readCacheEntry(cacheDir: string, key: string): { cubin: Uint8Array; log: string } | undefined {
  const paths = cacheEntryPaths(cacheDir, key);
  let cubin: Uint8Array;
  try {
    cubin = new Uint8Array(readFileSync(paths.cubin));
  } catch {
    return undefined;
  }
  let log = "";
  try {
    log = readFileSync(paths.log, "utf8");
  } catch {
    // an entry written without a log is still usable
  }
  return { cubin, log };
}

/** Log first, cubin last: a reader that finds the cubin finds the log too. */
export function writeCacheEntry(cacheDir: string, key: string, entry: { cubin: Uint8Array; log: string }): void {
  const paths = cacheEntryPaths(cacheDir, key);
  writeFileAtomic(paths.log, entry.log);
  writeFileAtomic(paths.cubin, entry.cubin);
}
