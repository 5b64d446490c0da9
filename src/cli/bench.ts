/**
 * `vpps bench`: the throughput suite per model (`vpps bench treelstm`: every engine, every batch size, one table, a
 * JSON result and an SVG plot) and diagnostics per engine (`vpps bench vpps timing|host|gap|…`, `vpps bench autobatch
 * batching|plan`, `vpps bench eager timing`, `vpps bench cpu timing|graph-build`), over the harness in src/bench/.
 * Results go to bench/results/<device>/ (`--out` elsewhere).
 *
 * A bad option value, an unknown option or suite prints one line (with where the help is) and exits with status 2; a benchmark
 * that cannot run here (no GPU) or whose engine disagreed with the CPU engine exits with status 1.
 */
import { type Command, Option } from "commander";
import { LAYER_CHOICES } from "../bench/glp4nn/layers.js";
import { BENCH_MODELS, benchModel } from "../bench/models/index.js";
import { choice, choiceList, existingPath, folder, numberList, wholeNumber } from "../bench/options.js";
import { engineSpecs } from "../bench/throughput/engines.js";
import { commandLine, leaf, outOption, quickOption, run } from "./bench-command.js";
import { addEngineDiagnostics, addVppsDiagnostics } from "./bench-diagnostics.js";
import { densityNumber } from "./options.js";

interface ThroughputFlags {
  data?: string;
  engines?: string[];
  batches?: number[];
  hidden?: number[];
  sentences?: number;
  vppsSentences?: number;
  vppsWarm?: number;
  quick: boolean;
  workers?: number;
  cache?: string;
  reference: boolean;
  out?: string;
  /** The model's choices (`--rnn`), by name. */
  [choice: string]: unknown;
}

function addThroughputCommands(bench: Command): void {
  for (const model of BENCH_MODELS) {
    const ids = engineSpecs(model).map((s) => s.id);
    const sizes = model.sizes.map((s) => s.hidden).join(",");
    const command = bench.command(model.name);
    for (const c of model.choices) {
      const parse: (v: string) => string | number =
        c.values === "density" ? densityNumber(`--${c.name}`) : choice(`--${c.name}`, c.values);
      command.addOption(new Option(`--${c.name} <value>`, `${c.help} (default: ${c.defaultValue})`).argParser(parse));
    }
    leaf(
      command
        .description(
          `${model.title} training throughput (${model.unit}/s) of every engine in one process, its first loss ` +
            "checked against the CPU engine; a table, <model>.json, .md and .svg",
        )
        .addOption(new Option("--data <path>", model.dataHelp).argParser(existingPath("--data")))
        .addOption(
          new Option(
            "--engines <list>",
            `comma-separated, of: ${ids.join(", ")} (default: all but vpps-offchip, every matrix off chip)`,
          ).argParser(choiceList("--engines", ids)),
        )
        .addOption(
          new Option("--batches <list>", "batch sizes (default: 1,8,32,128; --quick: 1,8,128)").argParser(
            numberList("--batches"),
          ),
        )
        .addOption(
          new Option(
            "--hidden <list>",
            `hidden sizes, the first every engine, the others the agenda engine with cuBLAS and VPPS at batch 1, 8, 128, ` +
              `or the engines and batch sizes given by --engines and --batches (default: ${sizes})`,
          ).argParser((v) => {
            // the order matters (the first is the main size): not sorted
            const xs = v.split(",").map((x) => x.trim());
            return [...new Set(xs.map((x) => wholeNumber("--hidden")(x)))];
          }),
        )
        .addOption(
          new Option(
            "--sentences <n>",
            "sentences per timed repeat, engines other than VPPS (default: 64 GPU, 16 CPU)",
          ).argParser(wholeNumber("--sentences")),
        )
        .addOption(
          new Option("--vpps-sentences <n>", "VPPS: sentences timed per batch size (default: 4096)").argParser(
            wholeNumber("--vpps-sentences"),
          ),
        )
        .addOption(
          new Option("--vpps-warm <n>", "VPPS: sentences trained untimed first (default: 2048)").argParser(
            wholeNumber("--vpps-warm", 0),
          ),
        )
        .addOption(quickOption())
        .addOption(
          new Option(
            "--workers <n>",
            "VPPS schedule worker threads (0: schedule inside fb; default: the engine's)",
          ).argParser(wholeNumber("--workers", 0)),
        )
        .addOption(
          new Option(
            "--cache <dir>",
            "VPPS kernel cache folder (default: a new empty one, so the first create is a real JIT)",
          ).argParser(folder("--cache")),
        )
        .addOption(
          new Option(
            "--reference",
            `also time the PyTorch reference, bench/pytorch/${model.name}.py (needs python3 with torch, or ` +
              "VPPS_REFERENCE_PYTHON; skipped with one line otherwise), its first loss checked with vpps's weights",
          ).default(false),
        )
        .addOption(outOption())
        .action(
          run(async (f: ThroughputFlags) => {
            const { runThroughput } = await import("../bench/throughput/suite.js");
            return runThroughput(model, {
              dataFile: f.data,
              engines: f.engines,
              batches: f.batches,
              hidden: f.hidden,
              sentences: f.sentences,
              vppsSentences: f.vppsSentences,
              vppsWarm: f.vppsWarm,
              quick: f.quick,
              workers: f.workers,
              cacheDir: f.cache,
              reference: f.reference,
              out: f.out,
              modelOptions: Object.fromEntries(
                model.choices.flatMap((c) => {
                  const v = (f[c.name] as string | number | undefined) ?? c.defaultValue;
                  // a density of 1 (unpruned) is the model as it is: not recorded
                  return c.values === "density" && v === 1 ? [] : [[c.name, v]];
                }),
              ),
              command: commandLine(),
            });
          }),
        ),
    );
  }
}

const PARALLEL_CONFIG_IDS = ["treelstm-vpps", "treelstm-autobatch", "bilstm-autobatch"] as const;

interface ParallelFlags {
  configs?: string[];
  gpus?: number[];
  batches?: number[];
  repeats?: number;
  dataTreelstm?: string;
  dataBilstm?: string;
  hidden?: number;
  shuffle: "examples" | "batches";
  quick: boolean;
  out?: string;
}

function addParallelCommand(bench: Command): void {
  leaf(
    bench
      .command("parallel")
      .description(
        "data-parallel scaling: sentences/s of `vpps train --gpus N` on 1, 2, 4, 8 GPUs (as many as present), per-GPU " +
          "batch 32 and 128, efficiency against the fastest one-GPU run, the all-reduce's share; parallel.json and .md",
      )
      .addOption(
        new Option(
          "--configs <list>",
          `comma-separated, of: ${PARALLEL_CONFIG_IDS.join(", ")} (default: all)`,
        ).argParser(choiceList("--configs", PARALLEL_CONFIG_IDS)),
      )
      .addOption(
        new Option("--gpus <list>", "GPU counts (default: 1,2,4,8 up to the GPUs present)").argParser(
          numberList("--gpus"),
        ),
      )
      .addOption(
        new Option("--batches <list>", "per-GPU batch sizes (default: 32,128)").argParser(numberList("--batches")),
      )
      .addOption(
        new Option(
          "--repeats <n>",
          "timed epochs after the warm-up epoch; the median is reported (default: 3)",
        ).argParser(wholeNumber("--repeats")),
      )
      .addOption(
        new Option("--data-treelstm <dir>", "SST data folder (default: the synthetic trees)").argParser(
          existingPath("--data-treelstm"),
        ),
      )
      .addOption(
        new Option("--data-bilstm <dir>", "tagged data folder (default: the synthetic task)").argParser(
          existingPath("--data-bilstm"),
        ),
      )
      .addOption(
        new Option("--hidden <n>", "hidden size of every model (default: the models')").argParser(
          wholeNumber("--hidden"),
        ),
      )
      .addOption(
        new Option(
          "--shuffle <what>",
          "vpps train's --shuffle for every run: examples (new batches every epoch) or batches (fixed batches: VPPS " +
            "reuses each batch's script after the first epoch)",
        )
          .argParser(choice("--shuffle", ["examples", "batches"] as const))
          .default("examples"),
      )
      .addOption(quickOption())
      .addOption(outOption())
      .action(
        run(async (f: ParallelFlags) => {
          const { runParallelBench } = await import("../bench/parallel.js");
          return runParallelBench({
            configs: f.configs,
            gpus: f.gpus,
            batches: f.batches,
            repeats: f.repeats,
            data: { treelstm: f.dataTreelstm, bilstm: f.dataBilstm },
            trainArgs: [...(f.hidden === undefined ? [] : ["--hidden", String(f.hidden)]), "--shuffle", f.shuffle],
            quick: f.quick,
            out: f.out,
            command: commandLine(),
          });
        }),
      ),
  );
}

interface Glp4nnFlags {
  layers?: string[];
  pools?: number[];
  modes?: ("direct" | "graph")[];
  repeats?: number;
  treeBatches?: number[];
  cnnBatches?: number[];
  treeSentences?: number;
  data?: string;
  explain: boolean;
  quick: boolean;
  out?: string;
}

function addGlp4nnCommand(bench: Command, layerChoices: readonly string[]): void {
  leaf(
    bench
      .command("glp4nn")
      .description(
        "GLP4NN: the 16 conv layers of the paper's Table 5, forward + backward, direct launches and one CUDA graph " +
          "per iteration, on one stream, GLP4NN's choice and every fixed pool size; eager Tree-LSTM with and without " +
          "the pool; glp4nn.json, .md, -explain.txt and an SVG per network",
      )
      .addOption(
        new Option(
          "--layers <list>",
          `comma-separated nets or layers, of: ${layerChoices.join(", ")} (default: all)`,
        ).argParser(choiceList("--layers", layerChoices as string[])),
      )
      .addOption(
        new Option(
          "--pools <list>",
          "fixed pool sizes 2 … 32 to time besides one stream (default: all; --quick: 2,4,8,16,32)",
        ).argParser(numberList("--pools", 2)),
      )
      .addOption(
        new Option("--modes <list>", "direct, graph (default: both)").argParser(
          choiceList("--modes", ["direct", "graph"] as const),
        ),
      )
      .addOption(
        new Option("--repeats <n>", "timed iterations per configuration (default 5; --quick 2)").argParser(
          wholeNumber("--repeats"),
        ),
      )
      .addOption(
        new Option(
          "--tree-batches <list>",
          "Tree-LSTM batch sizes, 0 for none (default: 1,8,32,128; --quick: 1,32)",
        ).argParser((v) => numberList("--tree-batches", 0)(v).filter((b) => b > 0)),
      )
      .addOption(
        new Option(
          "--cnn-batches <list>",
          "LeNet batch sizes for the whole training iteration, one stream against --streams auto, 0 for none (default 64)",
        ).argParser((v) => numberList("--cnn-batches", 0)(v).filter((b) => b > 0)),
      )
      .addOption(
        new Option("--tree-sentences <n>", "Tree-LSTM sentences per timed repeat (default 256; --quick 32)").argParser(
          wholeNumber("--tree-sentences"),
        ),
      )
      .addOption(
        new Option(
          "--data <path>",
          "SST train.txt for the Tree-LSTM (default: SST beside the repository, else synthetic trees)",
        ).argParser(existingPath("--data")),
      )
      .addOption(
        new Option(
          "--explain",
          "print every choice of the analyser and why (also written to glp4nn-explain.txt)",
        ).default(false),
      )
      .addOption(quickOption())
      .addOption(outOption())
      .action(
        run(async (f: Glp4nnFlags) => {
          const { runGlp4nn } = await import("../bench/glp4nn/suite.js");
          return runGlp4nn({
            layers: f.layers,
            pools: f.pools,
            modes: f.modes,
            repeats: f.repeats,
            treeBatches: f.treeBatches,
            cnnBatches: f.cnnBatches,
            treeSentences: f.treeSentences,
            dataFile: f.data,
            explain: f.explain,
            quick: f.quick,
            out: f.out,
            command: commandLine(),
          });
        }),
      ),
  );
}

/** Registers `vpps bench` and its suites on the program. */
export function addBenchCommand(program: Command): Command {
  const bench = program
    .command("bench")
    .description(
      "benchmarks: every engine's throughput per model, and diagnostics per engine (bench/results/<device>/)",
    );
  addThroughputCommands(bench);
  addParallelCommand(bench);
  addGlp4nnCommand(bench, LAYER_CHOICES);
  addVppsDiagnostics(bench);
  addEngineDiagnostics(bench);
  const models = BENCH_MODELS.map((m) => m.name);
  leaf(
    bench
      .command("plot")
      .description("redraw <model>.svg from the results of a device (sentences/s against batch size)")
      .argument("[device]", "the results folder under bench/results/", "h100")
      .addOption(
        new Option("--model <name>", `one of ${models.join(", ")}`)
          .argParser(choice("--model", models))
          .default(models[0]),
      )
      .action(
        run(async (device: string, f: { model: string }) => {
          const { runPlot } = await import("../bench/diagnostics/plot.js");
          return runPlot(benchModel(f.model), { device });
        }),
      ),
  );
  return bench;
}
