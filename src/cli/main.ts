import { Command, Option } from "commander";
import { TreeFormatError } from "../data/sst.js";
import { ENGINES, EngineUnavailableError } from "../engines/registry.js";
import { ShapeError } from "../graph/graph.js";
import { MODELS } from "../models/registry.js";
import { type AnyTask, DataError } from "../models/task.js";
import { isRunError } from "../train/errors.js";
import { addBenchCommand } from "./bench.js";
import { addEngineOptions, addModelOptions } from "./commands.js";
import { CliError } from "./errors.js";
import type { EvalCommandOptions } from "./eval.js";
import { integer, nonNegativeNumber, oneOf, positiveInt, positiveNumber } from "./options.js";
import type { PlanCommandOptions } from "./plan.js";
import { runTrain, type TrainCommandOptions } from "./train.js";

const engineList = ENGINES.map((e) => (e.summary ? `${e.name} (${e.summary})` : e.name)).join(", ");
const modelList = MODELS.map((t) => t.name).join(", ");

export function buildProgram(): Command {
  const program = new Command("vpps")
    .description(
      "Train dynamic neural networks (trees, sequences) fast at small batches by keeping weights on chip.\n" +
        `Engines: ${engineList}.\n` +
        `Models: ${MODELS.map((t) => `${t.name} (${t.title})`).join(", ")}.`,
    )
    .showHelpAfterError("(run with --help for usage)");

  const train = program.command("train").description(`train a model: ${modelList}`);
  for (const task of MODELS) addTrainCommand(train, task);

  const evaluate = program.command("eval").description(`evaluate a run saved with --out on a data file: ${modelList}`);
  for (const task of MODELS) addEvalCommand(evaluate, task);

  const plan = program
    .command("plan")
    .description(`show how VPPS spreads a model's weights over GPU registers: ${modelList}`);
  for (const task of MODELS) addPlanCommand(plan, task);

  addBenchCommand(program);

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
    .option("--data <dir>", task.data.help)
    .option("--epochs <n>", "passes over the training set", positiveInt("--epochs"), 3)
    .option("--batch <n>", `${noun} per batch (one graph, one update)`, positiveInt("--batch"), 16);
  addModelOptions(command, task, "sizes")
    .option("--lr <x>", "learning rate (default: 0.001 for adam, 0.1 for sgd)", positiveNumber("--lr"))
    .addOption(
      new Option("--optimizer <name>", "sgd or adam (default: adam)").argParser(oneOf("--optimizer", ["sgd", "adam"])),
    )
    .option("--seed <n>", "seed for initialisation, shuffling and dropout (same seed, same run)", integer("--seed"), 1);
  addEngineOptions(command).option(
    "--max-sentences <n>",
    `use only the first n training ${noun}`,
    positiveInt("--max-sentences"),
  );
  addModelOptions(command, task, "others")
    .option("--clip <x>", "gradient clipping threshold on the global norm (0 = off)", nonNegativeNumber("--clip"), 5)
    .option("--out <dir>", "write a checkpoint (safetensors) per epoch and state.json here (locked while training)")
    .option(
      "--resume <dir>",
      "continue the run saved in <dir> with its settings (a flag given here overrides or is refused) up to --epochs",
    )
    .option("--force", "replace a run that --out already holds (its checkpoints and state.json are removed)", false)
    .option("--json", "print the final summary as one JSON object on stdout", false)
    .action((opts: TrainCommandOptions, cmd: Command) => runTrain(task, opts, (key) => cmd.getOptionValueSource(key)));
}

function addEvalCommand(evaluate: Command, task: AnyTask): void {
  const command = evaluate
    .command(task.name)
    .description(`${task.metrics.map((m) => m.name).join(", ")} of a saved ${task.title} run on one data file`)
    .requiredOption("--run <dir>", "a run saved with --out (its state.json and last checkpoint)")
    .requiredOption("--data <file>", `one file of ${task.data.noun} in the --data format of train`);
  addEngineOptions(command, "execution engine (one that cannot run forward passes is evaluated on another)")
    .option("--batch <n>", `${task.data.noun} per forward pass`, positiveInt("--batch"), 64)
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
    .option("--json", "print the plan as JSON", false)
    .action(async (opts: PlanCommandOptions) => {
      const { runPlan } = await import("./plan.js");
      runPlan(task, opts);
    });
}

/** Runs the CLI; user errors become one line on stderr and exit code 1 (2 for usage errors, from commander). */
export async function main(argv: string[]): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (e) {
    if (
      e instanceof CliError ||
      e instanceof DataError ||
      e instanceof TreeFormatError ||
      e instanceof EngineUnavailableError ||
      e instanceof ShapeError ||
      isRunError(e)
    ) {
      process.stderr.write(`vpps: ${e.message}\n`);
      process.exitCode = 1;
      return;
    }
    throw e;
  }
}
