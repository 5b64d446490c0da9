// Finding the CUDA shared libraries at run time. Nothing is linked at install time, so a machine without a GPU can
// install and run vpps (on the CPU engine); the search order is a pure function so that it is tested without CUDA.

import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import koffi, { type LibraryHandle } from "koffi";

/** The CUDA libraries vpps loads. `cuda` is the driver (libcuda), which ships with the NVIDIA driver, not the toolkit. */
export type CudaLibraryName = "cuda" | "nvrtc" | "cublas" | "cusparse" | "nccl";

interface LibrarySpec {
  /** Human name used in messages. */
  title: string;
  /** File name prefix; versioned files are `<prefix>.<major>[.<minor>...]`. */
  file: string;
  /** Names handed to dlopen first, so that LD_LIBRARY_PATH and the system's ld cache decide (newest major first). */
  standardNames: readonly string[];
}

const LIBRARIES: Record<CudaLibraryName, LibrarySpec> = {
  // libcuda.so.1 is the driver's SONAME; the unversioned name is often only the toolkit's stub, which cannot run.
  cuda: { title: "CUDA driver", file: "libcuda.so", standardNames: ["libcuda.so.1", "libcuda.so"] },
  nvrtc: {
    title: "NVRTC",
    file: "libnvrtc.so",
    standardNames: ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so.11.1"],
  },
  cublas: {
    title: "cuBLAS",
    file: "libcublas.so",
    standardNames: ["libcublas.so", "libcublas.so.13", "libcublas.so.12", "libcublas.so.11"],
  },
  cusparse: {
    title: "cuSPARSE",
    file: "libcusparse.so",
    standardNames: ["libcusparse.so", "libcusparse.so.12", "libcusparse.so.11"],
  },
  // NCCL (data-parallel training) is not part of the toolkit: it comes from a distribution package (libnccl2) or a
  // pip wheel, so its SONAME on the loader's path comes first
  nccl: { title: "NCCL", file: "libnccl.so", standardNames: ["libnccl.so.2", "libnccl.so"] },
};

/** Environment variables consulted, in order, for the CUDA toolkit root. */
export const CUDA_ROOT_VARIABLES = ["CUDA_HOME", "CUDA_PATH"] as const;

const DEFAULT_CUDA_ROOT = "/usr/local/cuda";

/** Where distributions put the driver's libcuda when it is not on the loader's path (WSL keeps it apart). */
const SYSTEM_DRIVER_DIRS = [
  "/usr/lib/x86_64-linux-gnu",
  "/usr/lib/aarch64-linux-gnu",
  "/usr/lib64",
  "/usr/lib/wsl/lib",
];

/** Lists a directory's file names, or undefined when it does not exist or cannot be read. */
export type ListDir = (dir: string) => readonly string[] | undefined;

export const listDirOrUndefined: ListDir = (dir) => {
  try {
    return readdirSync(dir);
  } catch {
    return undefined;
  }
};

/**
 * Sorts versioned file names of one library: the unversioned name first (it points at the toolkit's default), then
 * by version, newest first (`.so.13.0.88` before `.so.13` before `.so.12`).
 */
function versionedMatches(names: readonly string[], file: string): string[] {
  const prefix = `${file}.`;
  const matches: { name: string; version: number[] }[] = [];
  for (const name of names) {
    if (name === file) matches.push({ name, version: [Number.POSITIVE_INFINITY] });
    else if (name.startsWith(prefix) && /^\d+(\.\d+)*$/.test(name.slice(prefix.length))) {
      matches.push({ name, version: name.slice(prefix.length).split(".").map(Number) });
    }
  }
  matches.sort((a, b) => {
    for (let i = 0; i < Math.max(a.version.length, b.version.length); i++) {
      const d = (b.version[i] ?? -1) - (a.version[i] ?? -1);
      if (d !== 0) return d;
    }
    return 0;
  });
  return matches.map((m) => m.name);
}

/**
 * Every path to try for `lib`, in order: standard names (resolved by dlopen through LD_LIBRARY_PATH and the ld cache),
 * then the files found in `$CUDA_HOME`, `$CUDA_PATH` and `/usr/local/cuda` under `lib64`, `lib` and
 * `targets/<arch>-linux/lib` (and, for the driver, the usual system folders). Never a `stubs/` folder: the toolkit's
 * stub libcuda loads but fails every call with CUDA_ERROR_STUB_LIBRARY.
 */
export function candidatePaths(
  lib: CudaLibraryName,
  env: Readonly<Record<string, string | undefined>>,
  listDir: ListDir,
  arch: string = process.arch,
): string[] {
  const spec = LIBRARIES[lib];
  const out: string[] = [...spec.standardNames];
  const roots: string[] = [];
  for (const variable of CUDA_ROOT_VARIABLES) {
    const value = env[variable];
    if (value) roots.push(value);
  }
  roots.push(DEFAULT_CUDA_ROOT);
  const target = arch === "arm64" ? "sbsa-linux" : "x86_64-linux";
  const dirs: string[] = [];
  for (const root of roots) dirs.push(join(root, "lib64"), join(root, "lib"), join(root, "targets", target, "lib"));
  if (lib === "cuda") dirs.push(...SYSTEM_DRIVER_DIRS);
  for (const dir of dirs) {
    const names = listDir(dir);
    if (names) for (const name of versionedMatches(names, spec.file)) out.push(join(dir, name));
  }
  return [...new Set(out)];
}

/** Thrown when none of the candidate paths of a CUDA library loads; names every path tried and why it failed. */
export class CudaLibraryNotFoundError extends Error {
  override readonly name = "CudaLibraryNotFoundError";
  constructor(
    readonly library: CudaLibraryName,
    readonly tried: readonly { path: string; error: string }[],
  ) {
    super(libraryNotFoundMessage(library, tried));
  }

  /** One line for `--device auto` messages: `CUDA driver library (libcuda.so*) not found (tried 2 paths: ...)`. */
  get summary(): string {
    const spec = LIBRARIES[this.library];
    const paths = this.tried.map((t) => t.path);
    const shown = paths.length > 4 ? `${paths.slice(0, 4).join(", ")}, ...` : paths.join(", ");
    return `${spec.title} library (${spec.file}*) not found (tried ${paths.length} paths: ${shown})`;
  }
}

function libraryNotFoundMessage(library: CudaLibraryName, tried: readonly { path: string; error: string }[]): string {
  const spec = LIBRARIES[library];
  const hint =
    library === "cuda"
      ? "libcuda.so.1 comes with the NVIDIA driver (not the toolkit): is a driver installed and is this a GPU machine?"
      : library === "nccl"
        ? "NCCL is needed only to train on several GPUs (--gpus N with a GPU engine): install it (libnccl2, or the " +
          "nvidia-nccl-cu12 wheel) and add the folder holding libnccl.so.2 to LD_LIBRARY_PATH, or train with --gpus 1."
        : `Set CUDA_HOME to the CUDA toolkit root (the folder holding lib64/${spec.file}*), or add that folder to LD_LIBRARY_PATH.`;
  const lines = tried.map((t) => `  ${t.path}: ${t.error}`);
  return `${spec.title} library (${spec.file}*) not found; tried:\n${lines.join("\n")}\n${hint}`;
}

/** A loaded library and the path that worked. */
export interface LoadedLibrary {
  library: CudaLibraryName;
  /** The candidate that loaded (a bare name when the loader's search found it). */
  path: string;
  /** The file actually mapped, from /proc/self/maps, when it can be told (for `vpps info`). */
  file: string | undefined;
  handle: LibraryHandle;
}

/** The mapped file of a library loaded by bare name: the loader's search is invisible otherwise. */
export function mappedFile(
  library: CudaLibraryName,
  path: string,
  readMaps: () => string = () => readFileSync("/proc/self/maps", "utf8"),
): string | undefined {
  if (path.includes("/")) return path;
  const file = LIBRARIES[library].file;
  let maps: string;
  try {
    maps = readMaps();
  } catch {
    return undefined;
  }
  for (const line of maps.split("\n")) {
    const at = line.indexOf("/");
    if (at < 0) continue;
    const mapped = line.slice(at);
    const base = mapped.slice(mapped.lastIndexOf("/") + 1);
    if (base === file || base.startsWith(`${file}.`)) return mapped;
  }
  return undefined;
}

export interface LoadOptions {
  env?: Readonly<Record<string, string | undefined>>;
  listDir?: ListDir;
  /** The loader; replaced in tests. */
  load?: (path: string) => LibraryHandle;
}

/** Loads the first candidate of `library` that dlopen accepts, or throws CudaLibraryNotFoundError. */
export function loadCudaLibrary(library: CudaLibraryName, options: LoadOptions = {}): LoadedLibrary {
  const env = options.env ?? process.env;
  const listDir = options.listDir ?? listDirOrUndefined;
  const load = options.load ?? ((path: string) => koffi.load(path));
  const tried: { path: string; error: string }[] = [];
  for (const path of candidatePaths(library, env, listDir)) {
    try {
      const handle = load(path);
      return { library, path, file: mappedFile(library, path), handle };
    } catch (e) {
      tried.push({ path, error: e instanceof Error ? e.message : String(e) });
    }
  }
  throw new CudaLibraryNotFoundError(library, tried);
}
