/** What every `vpps bench` command shares: the common options and the action wrapper. */
import { type Command, Option } from "commander";
import { folder, treeFile } from "../bench/options.js";

/** What the results were made with, for the result files. */
export const commandLine = (): string => `vpps ${process.argv.slice(2).join(" ")}`;

/** A leaf command: it takes no arguments beyond its options. */
export function leaf(cmd: Command): Command {
  return cmd.allowExcessArguments(false);
}

/**
 * Runs a benchmark: its status (1 where an engine disagreed with the CPU engine) becomes the exit status. Its
 * failures go to main.ts's handler: a `BenchUsageError` is a usage error (one line, status 2), a `BenchError` one line
 * with status 1; neither prints a stack trace.
 */
export function run<A extends unknown[]>(body: (...args: A) => Promise<number> | number) {
  return async (...args: A): Promise<void> => {
    process.exitCode = await body(...args);
  };
}

export const dataOption = () =>
  new Option(
    "--data <file>",
    "SST train.txt (or a folder holding it); default: SST beside the repository, else the synthetic trees",
  ).argParser(treeFile("--data"));
export const outOption = () =>
  new Option("--out <dir>", "results folder (default: bench/results/<device>/)").argParser(folder("--out"));
export const quickOption = () =>
  new Option("--quick", "a short run; writes no files unless --out is given").default(false);
