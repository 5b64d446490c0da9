// What `vpps info` reports about CUDA: the libraries found (paths, versions), the driver, and every GPU's properties
// that matter for kernel generation — or, without a GPU, exactly what was missing.

import { getCublas } from "./ffi/cublas.js";
import { CudaDriver } from "./ffi/driver.js";
import { type CudaLibraryName, CudaLibraryNotFoundError, loadCudaLibrary } from "./ffi/find.js";
import { getNccl, Nccl, NcclUnavailableError } from "./ffi/nccl.js";
import { getNvrtc } from "./ffi/nvrtc.js";
import { type DeviceProperties, queryDeviceProperties } from "./runtime/device.js";
import { formatBytes } from "./units.js";

export interface CudaLibraryStatus {
  library: CudaLibraryName;
  /** The path that loaded, when one did. */
  path?: string;
  version?: string;
  /** Why it is unusable: not found (see `tried`), or a failing call. */
  error?: string;
  /** Paths tried when it was not found. */
  tried?: string[];
}

export type CudaInfo =
  | {
      available: true;
      /** `13.0` */
      driverVersion: string;
      devices: DeviceProperties[];
      libraries: CudaLibraryStatus[];
    }
  | {
      available: false;
      reason: string;
      driverVersion?: string;
      libraries: CudaLibraryStatus[];
    };

/** 13000 → `13.0`, 12040 → `12.4`. */
export function formatCudaVersion(version: number): string {
  return `${Math.floor(version / 1000)}.${Math.floor((version % 1000) / 10)}`;
}

function failure(library: CudaLibraryName, e: unknown): CudaLibraryStatus {
  if (e instanceof CudaLibraryNotFoundError) {
    return { library, error: "not found", tried: e.tried.map((t) => t.path) };
  }
  return { library, error: e instanceof Error ? e.message : String(e) };
}

/** Probes the CUDA libraries and devices. Never throws: what fails is described in the result. */
export function getCudaInfo(): CudaInfo {
  const libraries: CudaLibraryStatus[] = [];
  let driver: CudaDriver | undefined;
  let driverVersion: string | undefined;
  let reason: string | undefined;
  try {
    driver = CudaDriver.load();
    driverVersion = formatCudaVersion(driver.driverVersion());
    libraries.push({ library: "cuda", path: driver.path, version: driverVersion });
  } catch (e) {
    libraries.push(failure("cuda", e));
    reason = e instanceof CudaLibraryNotFoundError ? "the CUDA driver library (libcuda.so.1) was not found" : String(e);
  }
  try {
    const nvrtc = getNvrtc();
    const v = nvrtc.version();
    libraries.push({ library: "nvrtc", path: nvrtc.path, version: `${v.major}.${v.minor}` });
  } catch (e) {
    libraries.push(failure("nvrtc", e));
  }
  try {
    const cublas = getCublas();
    libraries.push({ library: "cublas", path: cublas.path, version: cublas.version() });
  } catch (e) {
    libraries.push(failure("cublas", e));
  }
  try {
    const cusparse = loadCudaLibrary("cusparse");
    libraries.push({ library: "cusparse", path: cusparse.file ?? cusparse.path });
  } catch (e) {
    libraries.push(failure("cusparse", e));
  }
  // NCCL: only `vpps train --gpus N` needs it
  try {
    const nccl = getNccl();
    libraries.push({ library: "nccl", path: nccl.path, version: Nccl.formatVersion(nccl.version()) });
  } catch (e) {
    libraries.push(failure("nccl", e instanceof NcclUnavailableError ? e.notFound : e));
  }

  if (!driver) return { available: false, reason: reason!, libraries };
  try {
    driver.init();
    const devices: DeviceProperties[] = [];
    const count = driver.deviceCount();
    for (let i = 0; i < count; i++) devices.push(queryDeviceProperties(driver, i));
    if (count === 0)
      return { available: false, reason: "the CUDA driver reports no devices", driverVersion, libraries };
    return { available: true, driverVersion: driverVersion!, devices, libraries };
  } catch (e) {
    return { available: false, reason: e instanceof Error ? e.message : String(e), driverVersion, libraries };
  }
}

const LIBRARY_TITLES: Record<CudaLibraryName, string> = {
  cuda: "CUDA driver",
  nvrtc: "NVRTC",
  cublas: "cuBLAS",
  cusparse: "cuSPARSE",
  nccl: "NCCL",
};

function formatLibrary(s: CudaLibraryStatus): string {
  const title = LIBRARY_TITLES[s.library].padEnd(13);
  if (s.path) return `  ${title}${s.version ? `${s.version} ` : ""}(${s.path})`;
  if (s.tried?.length) {
    const shown = s.tried.slice(0, 6).join(", ");
    const more = s.tried.length > 6 ? `, and ${s.tried.length - 6} more` : "";
    return `  ${title}not found (tried ${shown}${more})`;
  }
  return `  ${title}unusable: ${s.error}`;
}

function formatDevice(d: DeviceProperties): string[] {
  const clock = d.clockKhz ? `, ${Math.round(d.clockKhz / 1000)} MHz` : "";
  return [
    `GPU ${d.index}: ${d.name}`,
    `  compute capability ${d.ccMajor}.${d.ccMinor} (${d.arch}), ${d.smCount} SMs${clock}, warp ${d.warpSize}`,
    `  registers: ${d.regsPerSm} per SM, ${d.regsPerBlock} per block, ${d.maxRegsPerThread} per thread`,
    `  shared memory: ${formatBytes(d.sharedPerSm)} per SM, ${formatBytes(d.sharedPerBlock)} per block ` +
      `(${formatBytes(d.sharedPerBlockOptin)} opt-in)`,
    `  threads: ${d.maxThreadsPerBlock} per block, ${d.maxThreadsPerSm} per SM; blocks per SM: ${d.maxBlocksPerSm}`,
    `  memory: ${formatBytes(d.totalMemory)}, L2 ${formatBytes(d.l2CacheBytes)}`,
  ];
}

/** The text of `vpps info`'s CUDA section. */
export function formatCudaInfo(info: CudaInfo): string {
  const lines: string[] = [];
  if (info.available) {
    lines.push(`CUDA: available, driver ${info.driverVersion}, ${info.devices.length} device(s)`);
  } else {
    lines.push(`CUDA: not available: ${info.reason.split("\n")[0]}`);
  }
  lines.push("Libraries:");
  for (const lib of info.libraries) lines.push(formatLibrary(lib));
  if (info.available) {
    for (const d of info.devices) lines.push(...formatDevice(d));
    const nvrtc = info.libraries.find((l) => l.library === "nvrtc");
    if (nvrtc && !nvrtc.path) lines.push("NVRTC is required to compile the GPU kernels: set CUDA_HOME to the toolkit.");
  } else {
    const missing = info.libraries.find((l) => l.library === "cuda" && !l.path);
    if (missing) {
      lines.push("libcuda.so.1 comes with the NVIDIA driver; for NVRTC and cuBLAS set CUDA_HOME to the CUDA toolkit.");
    }
    lines.push("The CPU engine will be used (--device auto falls back to cpu).");
  }
  return lines.join("\n");
}
