import { readFileSync } from "node:fs";
import { Command, CommanderError, Option } from "commander";
import { ENGINES } from "../engines/registry.js";
import { MODELS } from "../models/registry.js";
import type { AnyTask } from "../models/task.js";
import { isUserError, UsageError } from "../util/errors.js";
import { systemErrorLine } from "../util/files.js";
import { cut, quote } from "../util/text.js";
import { addBenchCommand } from "./bench.js";
import { addEngineOptions, addModelOptions } from "./commands.js";
import type { EvalCommandOptions } from "./eval.js";
import { invocation } from "./invocation.js";
import { integer, nonNegativeNumber, offChipList, oneOf, pathName, positiveInt, positiveNumber } from "./options.js";
import { isClosedPipe, OUTPUT_CLOSED_STATUS, OutputClosed, writeOut } from "./output.js";
import type { PlanCommandOptions } from "./plan.js";
import { addRnnCommands } from "./rnn.js";
import { runTrain, type TrainCommandOptions } from "./train.js";

const engineList = ENGINES.map((e) => (e.summary ? `${e.name} (${e.summary})` : e.name)).join(", ");
const modelList = MODELS.map((t) => t.name).join(", ");
const VERSION = readVersion();

export function buildProgram(): Command {
  const program = new Command("vpps")
    .description(
      "Train dynamic neural networks (trees, sequences) fast at small batches by keeping weights on chip.\n" +
        `Engines: ${engineList}.\n` +
        `Models: ${MODELS.map((t) => `${t.name} (${t.title})`).join(", ")}.`,
    )
    .version(VERSION, "-V, --version", "print the version of vpps")
    // main() prints every error, as one line; commander's own printing of them is off (in every subcommand, which
    // inherits these settings), and it throws instead of exiting, so that main() sees every failure
    .exitOverride()
    .configureOutput({ writeOut: (text) => writeOut(text), outputError: () => {} });

  const train = program.command("train").description(`train a model: ${modelList}`);
  for (const task of MODELS) addTrainCommand(train, task);

  const evaluate = program.command("eval").description(`evaluate a run saved with --out on a data file: ${modelList}`);
  for (const task of MODELS) addEvalCommand(evaluate, task);

  const plan = program
    .command("plan")
    .description(`show how VPPS spreads a model's weights over GPU registers: ${modelList}`);
  for (const task of MODELS) addPlanCommand(plan, task);

  const bench = addBenchCommand(program);
  addRnnCommands(plan, bench);

  program
    .command("info")
    .description("GPU name, compute capability, SMs, registers and shared memory per SM, driver and NVRTC versions")
    .option("--json", "print as JSON", false)
    .action(async (opts: { json: boolean }) => {
      const { runInfo } = await import("./info.js");
      runInfo(opts);
    });

  return program;
}

function addTrainCommand(train: Command, task: AnyTask): void {
  const noun = task.data.noun;
  const command = train
    .command(task.name)
    .description(`train ${task.description}; without --data, ${task.data.synthetic.description}`)
    .option("--data <dir>", task.data.help, pathName("--data", "a directory"))
    .option("--epochs <n>", "passes over the training set", positiveInt("--epochs"), 3)
    .option("--batch <n>", `${noun} per batch (one graph, one update)`, positiveInt("--batch"), 16);
  addModelOptions(command, task, "sizes")
    .option("--lr <x>", "learning rate (default: 0.001 for adam, 0.1 for sgd)", positiveNumber("--lr"))
    .addOption(
      new Option("--optimizer <name>", "sgd or adam (default: adam)").argParser(oneOf("--optimizer", ["sgd", "adam"])),
    )
    .option("--seed <n>", "seed for initialisation, shuffling and dropout (same seed, same run)", integer("--seed"), 1)
    .addOption(
      new Option(
        "--shuffle <what>",
        "examples: new batches every epoch; batches: the batches formed once, only their order shuffled per epoch " +
          "(VPPS then reuses each batch's script from the first epoch)",
      )
        .argParser(oneOf("--shuffle", ["examples", "batches"]))
        .default("examples"),
    );
  addEngineOptions(command).option(
    "--max-sentences <n>",
    `use only the first n training ${noun}`,
    positiveInt("--max-sentences"),
  );
  addModelOptions(command, task, "others")
    .option("--clip <x>", "gradient clipping threshold on the global norm (0 = off)", nonNegativeNumber("--clip"), 5)
    .option(
      "--out <dir>",
      "write a checkpoint (safetensors) per epoch and state.json here (locked while training)",
      pathName("--out", "a directory"),
    )
    .option(
      "--resume <dir>",
      "continue the run saved in <dir> with its settings (a flag given here overrides or is refused) up to --epochs",
      pathName("--resume", "a directory of a run saved with --out"),
    )
    .option(
      "--force",
      "replace a run that --out already holds (its checkpoints and state.json go when this run writes its first)",
      false,
    )
    .option(
      "--accept-data-change",
      "with --resume: continue although the data's content differs from the run's (the run checks it by content)",
      false,
    )
    .option(
      "--gpus <n>",
      "data-parallel over n GPUs (one process each; --batch is the global batch); with --engine cpu or --device " +
        "cpu, n CPU processes (docs/PARALLEL.md)",
      positiveInt("--gpus"),
      1,
    )
    .option("--explain", "with --engine eager --streams auto: print GLP4NN's choice of streams and why", false)
    .addOption(offChipOption())
    .option("--json", "print the final summary as one JSON object on stdout", false)
    .action((opts: TrainCommandOptions, cmd: Command) => runTrain(task, opts, (key) => cmd.getOptionValueSource(key)));
}

/** `--off-chip` of `vpps plan` and `vpps train --engine vpps`: the Vpps option `variants.offChip`. */
function offChipOption(): Option {
  return new Option(
    "--off-chip <names>",
    "vpps: weight matrices kept in global memory (products as tiles), comma-separated names or all; the planner " +
      "adds the fewest that must (default: only those; `vpps plan <model>` lists them)",
  ).argParser(offChipList("--off-chip"));
}

function addEvalCommand(evaluate: Command, task: AnyTask): void {
  const command = evaluate
    .command(task.name)
    .description(`${task.metrics.map((m) => m.name).join(", ")} of a saved ${task.title} run on one data file`)
    .requiredOption(
      "--run <dir>",
      "a run saved with --out (its state.json and last checkpoint)",
      pathName("--run", "a directory of a run saved with --out"),
    )
    .requiredOption(
      "--data <file>",
      `one file of ${task.data.noun} in the --data format of train`,
      pathName("--data", "a file"),
    );
  addEngineOptions(command, "execution engine (one that cannot run forward passes is evaluated on another)")
    .option("--batch <n>", `${task.data.noun} per forward pass`, positiveInt("--batch"), 64)
    .addOption(
      new Option(
        "--split <part>",
        "only this part of --data, split as training split a single file (the run's --split-seed): the held-out " +
          "test part of a file that train split",
      ).choices(["train", "dev", "test"]),
    )
    .option("--json", "print the result as one JSON object on stdout", false)
    .action(async (opts: EvalCommandOptions) => {
      const { runEval } = await import("./eval.js");
      runEval(task, opts);
    });
}

function addPlanCommand(plan: Command, task: AnyTask): void {
  const command = plan
    .command(task.name)
    .description(`the VPPS weight distribution for the ${task.title} model (no GPU needed with --gpu h100|h200)`);
  addModelOptions(command, task, "sizes")
    .addOption(
      new Option("--gpu <kind>", "device model: h100, h200, or device (the GPU of this machine)")
        .argParser(oneOf("--gpu", ["h100", "h200", "device"]))
        .default("h100"),
    )
    .addOption(
      new Option("--ctas-per-sm <n>", "persistent CTAs per SM (default: 2 when it fits)").argParser((v) =>
        Number(oneOf("--ctas-per-sm", ["1", "2"])(v)),
      ),
    )
    .option("--rpw <n>", "rows per warp per partition (default: the smallest valid)", positiveInt("--rpw"))
    .addOption(
      new Option("--gradients <where>", "auto, registers or gemm")
        .argParser(oneOf("--gradients", ["auto", "registers", "gemm"]))
        .default("auto"),
    )
    .option("--transposed", "add transposed copies where registers allow (the Vpps option `transposed`)", false)
    .addOption(offChipOption())
    .option("--json", "print the plan as JSON", false)
    .action(async (opts: PlanCommandOptions) => {
      const { runPlan } = await import("./plan.js");
      runPlan(task, opts);
    });
}

/**
 * The exit statuses of `vpps`: 0 done; 1 refused (a `UserError`: a bad file, run, size or engine, printed as one line);
 * 2 a command line that cannot be parsed (one line and where the help is); 70 a bug in vpps (the trace and a line
 * saying so; EX_SOFTWARE of sysexits.h); 141 stdout closed by its reader (`| head -1`; 128 + SIGPIPE, as a Unix tool
 * killed by the signal), quietly.
 */
export const EXIT_STATUS = { done: 0, refused: 1, usage: 2, bug: 70, outputClosed: OUTPUT_CLOSED_STATUS } as const;

/** The most characters of one error line: a net under the messages, which cut the tokens they echo themselves. */
const MAX_LINE = 2000;

/** Commander's codes for help and version output, which it has already printed. */
const HELP_CODES = new Set(["commander.helpDisplayed", "commander.version", "commander.help"]);

/**
 * Runs the command line `argv` (as `process.argv`: node, script, arguments) and returns its exit status, also set as
 * `process.exitCode`. This is the one handler of the command line's errors: a `UserError` (any class extending it,
 * src/util/errors.ts) and commander's own errors are printed as one line `vpps: …`; anything else is a bug in vpps
 * and is printed with its trace and a line saying so. Tests call it in-process.
 */
export async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  invocation.args = argv.slice(2);
  process.exitCode = undefined; // a command sets it (the benchmarks' status); a failure below replaces it
  let status: number;
  try {
    await program.parseAsync(argv);
    status = Number(process.exitCode ?? EXIT_STATUS.done);
  } catch (e) {
    status = reportError(e, commandOf(program, argv.slice(2)));
  }
  process.exitCode = status;
  return status;
}

/**
 * The entry point of bin/vpps.js: `main` with the process-wide guards, which tests running `main` in-process must not
 * install: a closed stdout or stderr pipe ends the process quietly, and an error thrown outside `main`'s promise (a
 * timer, a stream, a worker's message) is reported as `main` reports it, then ends the process.
 */
export async function runCli(argv: string[] = process.argv): Promise<void> {
  const fatal = (e: unknown): void => {
    process.exit(isClosedPipe(e) ? EXIT_STATUS.outputClosed : reportError(e, null));
  };
  process.stdout.on("error", fatal);
  process.stderr.on("error", (e) => process.exit(isClosedPipe(e) ? EXIT_STATUS.outputClosed : EXIT_STATUS.bug));
  process.on("uncaughtException", fatal);
  process.on("unhandledRejection", fatal);
  await main(argv);
}

/** Prints `e` as the command line reports errors (see `EXIT_STATUS`) and returns the exit status. */
export function reportError(e: unknown, command: Command | null): number {
  if (e instanceof OutputClosed || isClosedPipe(e)) return EXIT_STATUS.outputClosed;
  const help = command ? ` (see ${pathOf(command)} --help)` : "";
  if (e instanceof CommanderError) {
    if (e.exitCode === 0 || HELP_CODES.has(e.code)) return e.exitCode; // help or version: already printed
    printLine(`${cutQuoted(e.message.replace(/^error: /, ""))}${help}`);
    return EXIT_STATUS.usage;
  }
  if (isUserError(e)) {
    printLine(e instanceof UsageError ? `${e.message}${help}` : e.message);
    return e.exitStatus;
  }
  // an operating-system error a user can cause (a full disk, a protected path, a directory in a file's place) that
  // no layer named itself: one line with the path and what to do, not a trace
  const os = systemErrorLine(e);
  if (os !== null) {
    printLine(os);
    return EXIT_STATUS.refused;
  }
  const trace = e instanceof Error ? (e.stack ?? `${e.name}: ${e.message}`) : String(e);
  process.stderr.write(`${trace}\n`);
  process.stderr.write(
    `vpps: this is a bug in vpps ${VERSION} (Node ${process.version}, ${process.platform}-${process.arch}), not a ` +
      "problem with your input; please report it to the vpps maintainers with the command line and the trace above\n",
  );
  return EXIT_STATUS.bug;
}

function printLine(message: string): void {
  process.stderr.write(`vpps: ${cut(message.replace(/\s*\n\s*/g, " ").trim(), MAX_LINE)}\n`);
}

/** Commander quotes tokens whole ("unknown option '--…'"): cut the long ones. */
function cutQuoted(message: string): string {
  return message.replace(/'([^'\n]{41,})'/g, (_, token: string) => quote(token));
}

/** The (sub)command that `args` names, as far as they name one: for the line that says where the help is. */
function commandOf(program: Command, args: readonly string[]): Command {
  let command = program;
  for (const a of args) {
    if (a.startsWith("-")) continue;
    const sub = command.commands.find((c) => c.name() === a || c.aliases().includes(a));
    if (!sub) break;
    command = sub;
  }
  return command;
}

function pathOf(command: Command): string {
  const names: string[] = [];
  for (let c: Command | null = command; c; c = c.parent) names.unshift(c.name());
  return names.join(" ");
}

/** The package's version, from package.json: two folders up from src/cli/ and from dist/cli/ alike. */
function readVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };
  return pkg.version;
}
