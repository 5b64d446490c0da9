// The vpps command line run inside the test process (no node start-up per call): stdout (through writeOut) and
// stderr captured, and the exit status main returns. One harness for every in-process test: test/cli-harness.ts.

import { type CliResult, cli } from "./cli-harness.js";

export type { CliResult };

export function vppsInProcess(...args: string[]): Promise<CliResult> {
  return cli(...args);
}
