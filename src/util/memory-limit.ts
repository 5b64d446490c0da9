/**
 * The memory a run may use: the smallest of this machine's RAM, Node's `process.constrainedMemory()` (the
 * container's limit, where Node can tell), and the cgroup limits of this process's cgroup and each one above it
 * (cgroup v2 `memory.max`, v1 `memory.limit_in_bytes`). A container that limits memory kills a process beyond its
 * limit without a word, so a size check against the machine's RAM is no check there.
 *
 * `VPPS_CGROUP_ROOT` names another cgroup file system root (default /sys/fs/cgroup), and `VPPS_PROC_CGROUP` another
 * /proc/self/cgroup: the tests give a fake limit so, with no mock of the estimate.
 */
import { readFileSync } from "node:fs";
import { totalmem } from "node:os";
import { join } from "node:path";

/** A memory limit and where it comes from, for messages. */
export interface MemoryLimit {
  bytes: number;
  /** "the cgroup limit in /sys/fs/cgroup/…/memory.max", "this machine's RAM". */
  source: string;
}

/** Values at or above this are "no limit" (cgroup v1 writes 2^63 rounded to pages; Node answers 2^64 − 1). */
const UNLIMITED = 2 ** 60;

function readLimit(path: string): number | undefined {
  let text: string;
  try {
    text = readFileSync(path, "utf8").trim();
  } catch {
    return undefined;
  }
  const n = Number(text);
  return Number.isFinite(n) && n > 0 && n < UNLIMITED ? n : undefined;
}

/** The cgroup paths of this process from /proc/self/cgroup: v2's ("0::/a/b") and v1's memory controller's. */
function cgroupPaths(procCgroup: string): { v2?: string; v1?: string } {
  let text = "";
  try {
    text = readFileSync(procCgroup, "utf8");
  } catch {
    return {};
  }
  const out: { v2?: string; v1?: string } = {};
  for (const line of text.split("\n")) {
    const [id, controllers, path] = [line.split(":")[0], line.split(":")[1], line.split(":").slice(2).join(":")];
    if (path === undefined || path === "") continue;
    if (id === "0" && controllers === "") out.v2 = path;
    else if (controllers?.split(",").includes("memory")) out.v1 = path;
  }
  return out;
}

/** `dir` and each directory above it up to `root` (all under `root`). */
function upTo(root: string, path: string): string[] {
  const parts = path.split("/").filter(Boolean);
  const dirs: string[] = [];
  for (let k = parts.length; k >= 0; k--) dirs.push(join(root, ...parts.slice(0, k)));
  return dirs;
}

/** The memory this process may use (see the module comment). */
export function memoryLimit(env: Readonly<Record<string, string | undefined>> = process.env): MemoryLimit {
  let best: MemoryLimit = { bytes: totalmem(), source: "this machine's RAM" };
  const consider = (bytes: number | undefined, source: string): void => {
    if (bytes !== undefined && bytes < best.bytes) best = { bytes, source };
  };
  const fake = env.VPPS_CGROUP_ROOT !== undefined && env.VPPS_CGROUP_ROOT !== "";
  if (!fake) {
    const constrained = (process as { constrainedMemory?: () => number | undefined }).constrainedMemory?.();
    consider(
      constrained !== undefined && constrained > 0 && constrained < UNLIMITED ? constrained : undefined,
      "the container's memory limit",
    );
  }
  const root = fake ? env.VPPS_CGROUP_ROOT! : "/sys/fs/cgroup";
  const paths = cgroupPaths(env.VPPS_PROC_CGROUP || "/proc/self/cgroup");
  for (const dir of upTo(root, paths.v2 ?? "/")) {
    const file = join(dir, "memory.max");
    consider(readLimit(file), `the cgroup limit in ${file}`);
  }
  for (const dir of upTo(join(root, "memory"), paths.v1 ?? "/")) {
    const file = join(dir, "memory.limit_in_bytes");
    consider(readLimit(file), `the cgroup limit in ${file}`);
  }
  return best;
}

/** `1.5 GB`, `320 MB`: a byte count in messages. */
export function formatBytes(bytes: number): string {
  return bytes >= 1e9 ? `${(bytes / 1e9).toFixed(1)} GB` : `${Math.max(1, Math.round(bytes / 1e6))} MB`;
}
