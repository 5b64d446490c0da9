/** What every `vpps bench` command shares: exit statuses, usage lines, the common options, the action wrapper. */
import { type Command, type CommanderError, Option } from "commander";
import { BenchError, BenchUsageError } from "../bench/errors.js";
import { folder, treeFile } from "../bench/options.js";

/** What the results were made with, for the result files. */
export const commandLine = (): string => `vpps ${process.argv.slice(2).join(" ")}`;

/** Commander's errors exit with status 2 here (help with 0); its default, 1, is the benchmarks' own failure. */
export function exitOnUsageError(err: CommanderError): never {
  process.exit(err.exitCode === 0 ? 0 : 2);
}

/** `vpps bench vpps timing` */
export function pathOf(cmd: Command): string {
  const path: string[] = [];
  for (let c: Command | null = cmd; c; c = c.parent) path.unshift(c.name());
  return path.join(" ");
}

export function usageOf(cmd: Command): string {
  return `usage: ${pathOf(cmd)} ${cmd.usage()}  (--help lists the options)`;
}

/** A leaf command: errors print one line and its usage. */
export function leaf(cmd: Command): Command {
  return cmd.showHelpAfterError(usageOf(cmd)).allowExcessArguments(false);
}

/** Runs a benchmark, turning its usage errors and failures into one line and an exit status. */
export function run<A extends unknown[]>(cmd: () => Command, body: (...args: A) => Promise<number> | number) {
  return async (...args: A): Promise<void> => {
    try {
      process.exitCode = await body(...args);
    } catch (e) {
      const c = cmd();
      if (e instanceof BenchUsageError) {
        process.stderr.write(`${pathOf(c)}: ${e.message}\n${usageOf(c)}\n`);
        process.exitCode = 2;
      } else if (e instanceof BenchError) {
        process.stderr.write(`${e.message}\n`);
        process.exitCode = 1;
      } else {
        throw e;
      }
    }
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
