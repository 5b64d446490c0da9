/**
 * Which device a result belongs to: the GPU's name from the driver, or the host CPU's model for benchmarks that run
 * on the CPU alone; and its slug, the folder under bench/results/ its results go to (h100, h200, cpu-intel-xeon-2c).
 */
import { existsSync } from "node:fs";
import { cpus } from "node:os";
import { join } from "node:path";
import { cudaAvailable } from "../cuda/index.js";
import { PACKAGE_ROOT } from "./common.js";
import { BenchError } from "./errors.js";

export interface BenchDevice {
  /** As the driver or the OS names it: `NVIDIA H100 80GB HBM3`, `Intel(R) Xeon(R) Processor @ 2.50GHz (2 cores)`. */
  readonly name: string;
  /** The results folder's name: `h100`, `cpu-intel-xeon-2c`. */
  readonly slug: string;
}

/** `NVIDIA H100 80GB HBM3` → `h100`; other names as a lower-case slug. */
export function deviceSlug(name: string): string {
  const m = /\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b/.exec(name.replace(/^NVIDIA\s+/, ""));
  return (m ? m[1]! : name).toLowerCase().replace(/[^a-z0-9]+/g, "-");
}

/** `Intel(R) Xeon(R) Processor @ 2.50GHz` with 2 cores → `intel-xeon-2c`. */
export function cpuSlug(model = cpus()[0]?.model ?? "cpu", cores = cpus().length): string {
  const name = model
    .replace(/\((R|TM)\)/gi, "")
    .replace(/@.*$/, "")
    .replace(/\b(CPU|Processor|\d+-Core)\b/gi, "")
    .trim();
  const slug = name
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-|-$/g, "");
  return `${slug || "cpu"}-${cores}c`;
}

/** The host CPU as a device: results of CPU-only benchmarks go to bench/results/cpu-<model>-<cores>c/. */
export function cpuDevice(): BenchDevice {
  const c = cpus();
  return { name: `${c[0]?.model ?? "unknown CPU"} (${c.length} cores)`, slug: `cpu-${cpuSlug()}` };
}

export function gpuDevice(name: string): BenchDevice {
  return { name, slug: deviceSlug(name) };
}

/**
 * Without a usable CUDA driver, a BenchError that says why (before any data is read), instead of a stack trace from
 * deep inside the first engine.
 */
export function requireGpu(what: string): void {
  const gpu = cudaAvailable();
  if (gpu.ok) return;
  throw new BenchError(
    `${what}: this benchmark needs an NVIDIA GPU and its driver, and none can be used here: ${gpu.reason}`,
  );
}

/**
 * Where results go: `out` when given, else bench/results/<slug>/ of the checkout (an installed package has no
 * bench/: then of the current folder).
 */
export function resultsDir(slug: string, out?: string): string {
  if (out !== undefined) return out;
  const base = existsSync(join(PACKAGE_ROOT, "bench")) ? PACKAGE_ROOT : process.cwd();
  return join(base, "bench", "results", slug);
}
