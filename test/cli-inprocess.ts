// The vpps command line run inside the test process (no node start-up per call): stdout and stderr captured, the
// exit code read from process.exitCode (and reset, so that the test runner's own exit status is not changed).
// Only for invocations that reach a command's action: commander exits the process on usage errors.

import { main } from "../src/cli/main.js";

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export async function vppsInProcess(...args: string[]): Promise<CliResult> {
  const out: string[] = [];
  const err: string[] = [];
  const write = { out: process.stdout.write, err: process.stderr.write };
  const saved = process.exitCode;
  process.exitCode = 0;
  process.stdout.write = ((chunk: string | Uint8Array) => {
    out.push(String(chunk));
    return true;
  }) as typeof process.stdout.write;
  process.stderr.write = ((chunk: string | Uint8Array) => {
    err.push(String(chunk));
    return true;
  }) as typeof process.stderr.write;
  let code: number;
  try {
    await main(["node", "vpps", ...args]);
    code = Number(process.exitCode ?? 0);
  } catch (e) {
    err.push(`uncaught: ${(e as Error).stack}\n`);
    code = -1;
  } finally {
    process.stdout.write = write.out;
    process.stderr.write = write.err;
    process.exitCode = saved;
  }
  return { code, stdout: out.join(""), stderr: err.join("") };
}
