// The launcher of `vpps train … --gpus N`: starts N copies of the command, one per GPU (or N CPU processes), with
// torchrun's environment (rankEnvironment), and supervises them: SIGINT/SIGTERM go to every rank, and when one rank
// fails the others are stopped and the job ends with one line naming it — never a hang.

import { type ChildProcess, spawn } from "node:child_process";
import { createServer } from "node:net";
import { constants } from "node:os";
import { UserError } from "../util/errors.js";
import { rankEnvironment } from "./env.js";

/** A rank failed: the job's one line, with the exit status the launcher ends with. */
export class RankFailedError extends UserError {
  override readonly exitStatus: number;
  constructor(message: string, exitStatus: number) {
    super(message);
    this.exitStatus = exitStatus;
  }
}

export interface LaunchSpec {
  worldSize: number;
  /** The executable and its arguments for rank `rank` (`[process.execPath, "bin/vpps.js", …]`). */
  command: (rank: number) => string[];
  /** Extra environment for every rank. */
  env?: Readonly<Record<string, string>>;
  /** How long stopped ranks get between SIGTERM and SIGKILL (default 3 s). */
  graceMs?: number;
  /** MASTER_PORT; default: a free port of this host. */
  masterPort?: number;
  /**
   * Called once every rank has ended, however (done, failed, the launcher interrupted), with the ranks' pids: to
   * remove what a rank killed by a signal could not (the run directory's lock).
   */
  afterRanks?: (pids: readonly number[]) => void;
}

/** A TCP port nobody listens on now (the kernel's choice), for the ranks' rendezvous. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** `exited with code 1`, `was killed by SIGKILL (signal 9)`. */
export function describeExit(code: number | null, signal: NodeJS.Signals | null): string {
  if (signal) {
    const n = constants.signals[signal];
    return `was killed by ${signal}${n === undefined ? "" : ` (signal ${n})`}`;
  }
  return `exited with code ${code}`;
}

/** The launcher's exit status for a rank's end: its code, or 128 + the signal's number (as a shell reports it). */
export function exitStatusOf(code: number | null, signal: NodeJS.Signals | null): number {
  if (signal) return 128 + (constants.signals[signal] ?? 0);
  return code ?? 1;
}

/**
 * Runs the ranks to the end. Resolves when all exited with status 0; rejects with RankFailedError (one line: the
 * first rank that failed and how, and the ranks stopped because of it) as soon as the others have ended.
 */
export async function launchRanks(spec: LaunchSpec): Promise<void> {
  const port = spec.masterPort ?? (await freePort());
  const graceMs = spec.graceMs ?? 3000;
  const children: ChildProcess[] = [];
  const running = new Set<number>();
  let failure: { rank: number; how: string; status: number; stopped: number[] } | undefined;
  let interrupted: NodeJS.Signals | undefined;
  let killTimer: NodeJS.Timeout | undefined;

  const stopAll = (signal: NodeJS.Signals): void => {
    for (const r of running) children[r]!.kill(signal);
    killTimer ??= setTimeout(() => {
      for (const r of running) children[r]!.kill("SIGKILL");
    }, graceMs);
  };
  const forward = (signal: NodeJS.Signals): void => {
    interrupted ??= signal;
    for (const r of running) children[r]!.kill(signal);
    killTimer ??= setTimeout(() => {
      for (const r of running) children[r]!.kill("SIGKILL");
    }, graceMs);
  };
  const onInt = (): void => forward("SIGINT");
  const onTerm = (): void => forward("SIGTERM");
  process.on("SIGINT", onInt);
  process.on("SIGTERM", onTerm);

  try {
    await new Promise<void>((resolve) => {
      for (let rank = 0; rank < spec.worldSize; rank++) {
        const [file, ...args] = spec.command(rank);
        const child = spawn(file!, args, {
          stdio: "inherit",
          env: { ...process.env, ...spec.env, ...rankEnvironment(rank, spec.worldSize, port) },
        });
        children.push(child);
        running.add(rank);
        const ended = (code: number | null, signal: NodeJS.Signals | null): void => {
          if (!running.delete(rank)) return;
          if ((code !== 0 || signal) && failure === undefined && interrupted === undefined) {
            const stopped = [...running].sort((a, b) => a - b);
            failure = { rank, how: describeExit(code, signal), status: exitStatusOf(code, signal), stopped };
            stopAll("SIGTERM");
          }
          if (running.size === 0) resolve();
        };
        child.on("exit", ended);
        child.on("error", (e) => {
          // could not start at all (ENOENT): as a failure of this rank
          process.stderr.write(`vpps: rank ${rank} could not start: ${e.message}\n`);
          ended(127, null);
        });
      }
    });
  } finally {
    clearTimeout(killTimer);
    process.removeListener("SIGINT", onInt);
    process.removeListener("SIGTERM", onTerm);
    spec.afterRanks?.(children.map((c) => c.pid).filter((p): p is number => p !== undefined));
  }
  if (failure) {
    const stopped = failure.stopped.length > 0 ? `; stopped rank(s) ${failure.stopped.join(", ")}` : "";
    throw new RankFailedError(
      `rank ${failure.rank} of ${spec.worldSize} ${failure.how}${stopped} (its own message, if any, is above)`,
      failure.status,
    );
  }
  if (interrupted) {
    throw new RankFailedError(`stopped by ${interrupted}: every rank was sent it`, exitStatusOf(null, interrupted));
  }
}
