/**
 * Stopping the command while it waits on work off the main thread (VPPS's JIT: NVRTC on libuv's worker threads):
 * Ctrl-C or SIGTERM prints one line and ends the process at once with the signal's own status, the threads with it
 * (exiting normally would first join the worker threads, each in the middle of a compile of many seconds).
 */

/** Runs `work` with SIGINT and SIGTERM ending the process at once, after one line naming the signal and `what`. */
export async function stoppable<T>(what: string, work: () => Promise<T>): Promise<T> {
  const stop = (signal: NodeJS.Signals): void => {
    process.stderr.write(`vpps: stopped by ${signal} while ${what}\n`);
    release();
    // with no listener left the signal's default action applies: the process ends now, its threads with it
    process.kill(process.pid, signal);
  };
  const onInt = (): void => stop("SIGINT");
  const onTerm = (): void => stop("SIGTERM");
  const release = (): void => {
    process.removeListener("SIGINT", onInt);
    process.removeListener("SIGTERM", onTerm);
  };
  process.on("SIGINT", onInt);
  process.on("SIGTERM", onTerm);
  try {
    return await work();
  } finally {
    release();
  }
}
