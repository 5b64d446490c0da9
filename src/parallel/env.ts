// The rank's place in a data-parallel job, from torchrun's environment conventions (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT), so that `vpps train` runs as one rank under torchrun, under a cluster scheduler or under
// its own launcher (`--gpus N`, launcher.ts) alike; and how a global batch is split over the ranks.

import { UserError } from "../util/errors.js";
import { quote } from "../util/text.js";

/** Where this process sits in the job. */
export interface RankEnv {
  /** 0 … worldSize-1; rank 0 hosts the rendezvous, evaluates and writes checkpoints. */
  rank: number;
  worldSize: number;
  /** The rank on its host: its GPU (`cuda:LOCAL_RANK`). */
  localRank: number;
  /** Rank 0's host and port, where the others connect. */
  masterAddr: string;
  masterPort: number;
  /** The pid of vpps's own launcher (VPPS_LAUNCHER_PID), which the rank watches: it stops when the launcher is gone. */
  launcherPid?: number;
}

/** The variables a rank reads (torchrun's names). */
export const RANK_VARIABLES = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"] as const;

/** A malformed or inconsistent rank environment. */
export class RankEnvError extends UserError {}

function integerVar(env: Readonly<Record<string, string | undefined>>, name: string, min: number): number {
  const v = env[name];
  if (v === undefined || v.trim() === "") {
    throw new RankEnvError(
      `WORLD_SIZE is set, so this process is one rank of a data-parallel job, but ${name} is not set; set all of ` +
        `${RANK_VARIABLES.join(", ")} (as torchrun does), or unset WORLD_SIZE and use --gpus N`,
    );
  }
  const n = /^\d+$/.test(v.trim()) ? Number(v.trim()) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < min) {
    throw new RankEnvError(`${name} must be an integer ≥ ${min}; got ${quote(v)}`);
  }
  return n;
}

/**
 * This process's rank from the environment, or null when WORLD_SIZE is not set (a plain run, or the launcher before
 * it starts the ranks). MASTER_ADDR defaults to 127.0.0.1 and MASTER_PORT to 29500 (torchrun's defaults); LOCAL_RANK
 * to RANK when only one host runs the job.
 */
export function rankEnvFrom(env: Readonly<Record<string, string | undefined>> = process.env): RankEnv | null {
  if (env.WORLD_SIZE === undefined) return null;
  const worldSize = integerVar(env, "WORLD_SIZE", 1);
  const rank = integerVar(env, "RANK", 0);
  if (rank >= worldSize) throw new RankEnvError(`RANK ${rank} is not below WORLD_SIZE ${worldSize}`);
  const localRank = env.LOCAL_RANK === undefined ? rank : integerVar(env, "LOCAL_RANK", 0);
  const masterAddr = env.MASTER_ADDR?.trim() || "127.0.0.1";
  const masterPort = env.MASTER_PORT === undefined ? 29500 : integerVar(env, "MASTER_PORT", 1);
  if (masterPort > 65535) throw new RankEnvError(`MASTER_PORT must be a TCP port (1 … 65535); got ${masterPort}`);
  const launcher = Number(env.VPPS_LAUNCHER_PID);
  return {
    rank,
    worldSize,
    localRank,
    masterAddr,
    masterPort,
    ...(Number.isSafeInteger(launcher) && launcher > 1 ? { launcherPid: launcher } : {}),
  };
}

/** The environment of rank `rank` of a job of `worldSize` processes on this host. */
export function rankEnvironment(rank: number, worldSize: number, masterPort: number): Record<string, string> {
  return {
    RANK: String(rank),
    WORLD_SIZE: String(worldSize),
    LOCAL_RANK: String(rank),
    LOCAL_WORLD_SIZE: String(worldSize),
    MASTER_ADDR: "127.0.0.1",
    MASTER_PORT: String(masterPort),
    // the ranks watch the launcher, and stop when it is gone (killed: it cannot take them down itself)
    VPPS_LAUNCHER_PID: String(process.pid),
  };
}

/** VPPS_RANK_SPLIT: "work" (the default, rankShare's deal) or "contiguous" (slices in rank order, for comparisons). */
export function rankSplitFromEnv(
  env: Readonly<Record<string, string | undefined>> = process.env,
): "work" | "contiguous" {
  const raw = env["VPPS_RANK_SPLIT"];
  if (raw === undefined || raw === "" || raw === "work") return "work";
  if (raw === "contiguous") return "contiguous";
  throw new RankEnvError(`VPPS_RANK_SPLIT is '${raw}'; expected work (the default) or contiguous`);
}

/**
 * Rank `rank`'s share of a global batch, balanced by work: the examples sorted by `weight` (their loss units: tree
 * nodes, tokens; heaviest first, ties by position) and dealt to the ranks in snake order (0, 1, …, N−1, N−1, …, 0), so
 * the ranks get as many examples (differing by one at most in a short last batch) and nearly the same work — a
 * step waits for its slowest rank. Returned in the batch's order. The same batch gives every rank the same share.
 * `split` "contiguous": the r-th slice of the batch instead (VPPS_RANK_SPLIT=contiguous).
 */
export function rankShare(
  indices: readonly number[],
  weight: (index: number) => number,
  rank: number,
  worldSize: number,
  split: "work" | "contiguous" = rankSplitFromEnv(),
): number[] {
  const n = indices.length;
  if (split === "contiguous") {
    return indices.slice(Math.floor((rank * n) / worldSize), Math.floor(((rank + 1) * n) / worldSize));
  }
  const byWeight = Array.from({ length: n }, (_, p) => p);
  const w = indices.map(weight);
  byWeight.sort((a, b) => w[b]! - w[a]! || a - b);
  const mine: number[] = [];
  for (let q = 0; q < n; q++) {
    const round = Math.floor(q / worldSize);
    const j = q % worldSize;
    if ((round % 2 === 0 ? j : worldSize - 1 - j) === rank) mine.push(byWeight[q]!);
  }
  mine.sort((a, b) => a - b);
  return mine.map((p) => indices[p]!);
}

/** Refuses a global batch that does not split evenly over the ranks (one line saying what would). */
export function checkBatchSplit(batch: number, worldSize: number, flag = "--gpus"): void {
  if (batch % worldSize !== 0) {
    const lower = Math.max(worldSize, batch - (batch % worldSize));
    throw new RankEnvError(
      `--batch ${batch} is the global batch and must split evenly over the ${worldSize} ranks (${flag} ` +
        `${worldSize}); use --batch ${lower} or ${lower + worldSize}`,
    );
  }
}
