// `vpps train … --gpus N`: the checks made before any rank starts, the launcher's command line for each rank, and
// what a rank sets up (device, NCCL, the process group). docs/PARALLEL.md describes the whole.

import { readFileSync, rmSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { cudaAvailable, getDriver, getNccl, parseDeviceSpec } from "../cuda/index.js";
import { engineEntry } from "../engines/registry.js";
import { checkBatchSplit, launchRanks, ProcessGroup, type RankEnv } from "../parallel/index.js";
import { LOCK_FILE } from "../train/run-dir.js";
import { CliError } from "./errors.js";

/** Whether `engine` with `device` runs on a GPU (else the ranks sum their gradients on the host, over TCP). */
export function runsOnGpu(engine: string, device: string): boolean {
  const entry = engineEntry(engine);
  if (entry.gpu === "none") return false;
  return !(entry.gpu === "optional" && parseDeviceSpec(device).kind === "cpu");
}

/** The command line with every `--device` (and its value) taken out. */
export function withoutDevice(args: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === "--device") {
      i++;
      continue;
    }
    if (a.startsWith("--device=")) continue;
    out.push(a);
  }
  return out;
}

/** The checks of `--gpus N` (N > 1) that need no rank: each failure is one line. */
export function checkLaunch(
  gpus: number,
  batch: number,
  engine: string,
  device: string,
  deviceGiven: boolean,
  cores: number = availableParallelism(),
): void {
  checkBatchSplit(batch, gpus);
  if (!runsOnGpu(engine, device)) {
    // CPU ranks: one process per core at most (more only share the cores, each with its own copy of the model)
    if (gpus > cores) {
      throw new CliError(
        `--gpus ${gpus} with the '${engine}' engine on the CPU starts ${gpus} processes, more than this machine's ` +
          `${cores} CPU core(s); use --gpus ${Math.max(1, cores)} or less`,
      );
    }
    return;
  }
  if (deviceGiven && parseDeviceSpec(device).kind === "cuda") {
    throw new CliError(
      `--device ${device} names one GPU, but with --gpus ${gpus} rank r runs on cuda:r (cuda:0 … cuda:${gpus - 1}); ` +
        "leave --device out (CUDA_VISIBLE_DEVICES picks the GPUs)",
    );
  }
  const available = cudaAvailable();
  if (!available.ok) {
    throw new CliError(
      `--gpus ${gpus} with the '${engine}' engine needs ${gpus} CUDA GPUs, and none can be used here: ` +
        `${available.reason}; to check a data-parallel setup without a GPU, use --engine cpu`,
    );
  }
  const count = getDriver().deviceCount();
  if (gpus > count) {
    throw new CliError(
      `--gpus ${gpus} asks for more GPUs than this machine has (${count}); use --gpus ${count} or less`,
    );
  }
  getNccl(); // NcclUnavailableError: one line, before any rank starts
}

/** The vpps script the ranks run (bin/vpps.js of this package, from src/cli/ and dist/cli/ alike). */
function vppsScript(): string {
  return fileURLToPath(new URL("../../bin/vpps.js", import.meta.url));
}

/**
 * Starts `gpus` ranks of the command line `args` (the arguments after `vpps`) and waits for them; a GPU engine's
 * rank r gets `--device cuda:r`.
 */
export function launchTrain(gpus: number, args: readonly string[], gpu: boolean): Promise<void> {
  const script = vppsScript();
  const dir = runDirOf(args);
  return launchRanks({
    worldSize: gpus,
    // a rank ended by a signal (the launcher's SIGTERM or SIGINT passed on, a kill) leaves its lock: remove it
    ...(dir !== undefined ? { afterRanks: (pids: readonly number[]) => releaseRankLock(dir, pids) } : {}),
    command: (rank) => [
      process.execPath,
      script,
      ...(gpu ? [...withoutDevice(args), "--device", `cuda:${rank}`] : args),
    ],
  });
}

/** The run directory of a `vpps train` command line: the last --out (or --resume) value, or undefined. */
export function runDirOf(args: readonly string[]): string | undefined {
  let out: string | undefined;
  let resume: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === "--out" || a === "--resume") {
      if (a === "--out") out = args[i + 1];
      else resume = args[i + 1];
      i++;
    } else if (a.startsWith("--out=")) out = a.slice(6);
    else if (a.startsWith("--resume=")) resume = a.slice(9);
  }
  return out ?? resume;
}

/** Removes `dir`'s lock file when one of `pids` (the ranks, all ended) holds it. */
export function releaseRankLock(dir: string, pids: readonly number[]): void {
  const path = join(resolve(dir), LOCK_FILE);
  try {
    const pid = Number(readFileSync(path, "utf8").split(/\s+/)[0]);
    if (pids.includes(pid)) rmSync(path, { force: true });
  } catch {
    // no lock (or not readable): nothing to release
  }
}

/**
 * A rank's setup: the batch split checked, its device (`cuda:LOCAL_RANK` unless --device names one), NCCL present
 * for a GPU engine, and the rendezvous with the other ranks. `releaseOnDeath`: the files (the run directory's lock)
 * removed when the rank is stopped by its communication thread (a peer or the launcher gone).
 */
export function joinJob(
  env: RankEnv,
  batch: number,
  engine: string,
  device: string,
  releaseOnDeath: readonly string[] = [],
): { group: ProcessGroup; device: string } {
  checkBatchSplit(batch, env.worldSize, "WORLD_SIZE");
  const gpu = runsOnGpu(engine, device);
  let rankDevice = device;
  if (gpu) {
    const spec = parseDeviceSpec(device);
    // an explicit cuda:N (a launcher that maps ranks to GPUs itself) stands; auto and cuda mean this rank's GPU
    if (spec.kind !== "cuda" || device.trim().toLowerCase() === "cuda") rankDevice = `cuda:${env.localRank}`;
    getNccl();
  }
  return { group: ProcessGroup.start(env, { releaseOnDeath }), device: rankDevice };
}
