import { Command, Option } from "commander";
import { TreeFormatError } from "../data/sst.js";
import { EngineUnavailableError } from "../engines/index.js";
import { ShapeError } from "../graph/graph.js";
import { addBenchCommand } from "./bench.js";
import { integer, nonNegativeNumber, oneOf, positiveInt, positiveNumber } from "./options.js";
import type { PlanCommandOptions } from "./plan.js";
import { CliError, runTrainTreeLstm, type TrainCommandOptions } from "./train.js";

const ENGINES = ["cpu", "eager", "autobatch", "vpps"] as const;

export function buildProgram(): Command {
  const program = new Command("vpps")
    .description(
      "Train dynamic neural networks (trees, sequences) fast at small batches by keeping weights on chip.\n" +
        "Engines: cpu (reference), eager, autobatch (DyNet-style), vpps (persistent kernel).",
    )
    .showHelpAfterError("(run with --help for usage)");

  const train = program.command("train").description("train a model");
  train
    .command("treelstm")
    .description(
      "train the Tree-LSTM sentiment model (DyNet benchmark 'treenn'); without --data, a small synthetic tree task",
    )
    .option("--data <dir>", "directory with train.txt and dev.txt (SST format: one PTB tree per line, labels 0-4)")
    .option("--epochs <n>", "passes over the training set", positiveInt("--epochs"), 3)
    .option("--batch <n>", "trees per batch (one graph, one update)", positiveInt("--batch"), 16)
    .option("--hidden <n>", "hidden size", positiveInt("--hidden"), 256)
    .option("--embed <n>", "word embedding size", positiveInt("--embed"), 256)
    .option("--lr <x>", "learning rate (default: 0.001 for adam, 0.1 for sgd)", positiveNumber("--lr"))
    .addOption(
      new Option("--optimizer <name>", "sgd or adam (default: adam)").argParser(oneOf("--optimizer", ["sgd", "adam"])),
    )
    .option("--seed <n>", "seed for initialisation, shuffling and dropout (same seed, same run)", integer("--seed"), 1)
    .addOption(new Option("--engine <name>", "execution engine").argParser(oneOf("--engine", ENGINES)).default("cpu"))
    .addOption(
      new Option("--batching <strategy>", "autobatch strategy")
        .argParser(oneOf("--batching", ["depth", "agenda"]))
        .default("agenda"),
    )
    .option("--device <spec>", "auto, cpu or cuda:N", "auto")
    .option("--max-sentences <n>", "use only the first n training trees", positiveInt("--max-sentences"))
    .addOption(
      new Option("--cell <kind>", "fused: one lstmCell op per node; ops: the same function from plain ops")
        .argParser(oneOf("--cell", ["fused", "ops"]))
        .default("fused"),
    )
    .option("--clip <x>", "gradient clipping threshold on the global norm (0 = off)", nonNegativeNumber("--clip"), 5)
    .option("--dropout <p>", "dropout on word embeddings while training", nonNegativeNumber("--dropout", 1), 0)
    .option("--out <dir>", "write a checkpoint (safetensors) per epoch and state.json here")
    .option("--resume <dir>", "continue the run saved in <dir> (its state.json and last checkpoint) up to --epochs")
    .option("--json", "print the final summary as one JSON object on stdout", false)
    .action((opts: TrainCommandOptions) => runTrainTreeLstm(opts));

  const plan = program.command("plan").description("show how VPPS spreads a model's weights over GPU registers");
  plan
    .command("treelstm")
    .description("the VPPS weight distribution for the Tree-LSTM model (no GPU needed with --gpu h100|h200)")
    .option("--hidden <n>", "hidden size", positiveInt("--hidden"), 256)
    .option("--embed <n>", "word embedding size", positiveInt("--embed"), 256)
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
      const { runPlanTreeLstm } = await import("./plan.js");
      runPlanTreeLstm(opts);
    });

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

/** Runs the CLI; user errors become one line on stderr and exit code 1 (2 for usage errors, from commander). */
export async function main(argv: string[]): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (e) {
    if (
      e instanceof CliError ||
      e instanceof TreeFormatError ||
      e instanceof EngineUnavailableError ||
      e instanceof ShapeError
    ) {
      process.stderr.write(`vpps: ${e.message}\n`);
      process.exitCode = 1;
      return;
    }
    throw e;
  }
}
