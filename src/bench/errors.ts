/**
 * The two ways a benchmark stops early. A usage error (a bad option value, a data file that is not there, nothing
 * left to run) prints one line, with where the help is, and exits with status 2, as commander's own option errors
 * do; a BenchError (no GPU where the command needs one, an engine that disagreed with the CPU engine) prints one
 * line and exits with status 1. Neither prints a stack trace (both are `UserError`s, printed by src/cli/main.ts).
 */
import { UsageError, UserError } from "../util/errors.js";

export class BenchUsageError extends UsageError {
  constructor(message: string) {
    super(message);
    this.name = "BenchUsageError";
  }
}

export class BenchError extends UserError {
  constructor(message: string) {
    super(message);
    this.name = "BenchError";
  }
}

export const errorMessage = (e: unknown): string => (e instanceof Error ? e.message : String(e));
