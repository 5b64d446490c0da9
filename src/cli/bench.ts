/**
 * `vpps bench`: the throughput suite per model (`vpps bench treelstm`: every engine, every batch size, one table, a
 * JSON result and an SVG plot) and diagnostics per engine (`vpps bench vpps timing|host|gap|…`, `vpps bench autobatch
 * batching|plan`, `vpps bench eager timing`, `vpps bench cpu timing|graph-build`), over the harness in src/bench/.
 * Results go to bench/results/<device>/ (`--out` elsewhere).
 *
 * A bad option value, an unknown option or suite prints one line and the usage and exits with status 2; a benchmark
 * that cannot run here (no GPU) or whose engine disagreed with the CPU engine exits with status 1.
 */
import { type Command, type CommanderError, Option } from "commander";
import { BenchError, BenchUsageError } from "../bench/errors.js";
import { BENCH_MODELS, benchModel } from "../bench/models/index.js";
import { choice, choiceList, existingPath, folder, numberList, treeFile, wholeNumber } from "../bench/options.js";
import { engineSpecs } from "../bench/throughput/engines.js";

/** What the results were made with, for the result files. */
const commandLine = (): string => `vpps ${process.argv.slice(2).join(" ")}`;

/** Commander's errors exit with status 2 here (help with 0); its default, 1, is the benchmarks' own failure. */
function exitOnUsageError(err: CommanderError): never {
  process.exit(err.exitCode === 0 ? 0 : 2);
}

/** `vpps bench vpps timing` */
function pathOf(cmd: Command): string {
  const path: string[] = [];
  for (let c: Command | null = cmd; c; c = c.parent) path.unshift(c.name());
  return path.join(" ");
}

function usageOf(cmd: Command): string {
  return `usage: ${pathOf(cmd)} ${cmd.usage()}  (--help lists the options)`;
}

/** A leaf command: errors print one line and its usage. */
function leaf(cmd: Command): Command {
  return cmd.showHelpAfterError(usageOf(cmd)).allowExcessArguments(false);
}

/** Runs a benchmark, turning its usage errors and failures into one line and an exit status. */
function run<A extends unknown[]>(cmd: () => Command, body: (...args: A) => Promise<number> | number) {
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

const dataOption = () =>
  new Option(
    "--data <file>",
    "SST train.txt (or a folder holding it); default: SST beside the repository, else the synthetic trees",
  ).argParser(treeFile("--data"));
const outOption = () =>
  new Option("--out <dir>", "results folder (default: bench/results/<device>/)").argParser(folder("--out"));
const quickOption = () => new Option("--quick", "a short run; writes no files unless --out is given").default(false);

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
  out?: string;
}

function addThroughputCommands(bench: Command): void {
  for (const model of BENCH_MODELS) {
    const ids = engineSpecs(model).map((s) => s.id);
    const sizes = model.sizes.map((s) => s.hidden).join(",");
    const cmd: Command = leaf(
      bench
        .command(model.name)
        .description(
          `${model.title} training throughput (${model.unit}/s) of every engine in one process, its first loss ` +
            "checked against the CPU engine; a table, <model>.json, .md and .svg",
        )
        .addOption(new Option("--data <path>", model.dataHelp).argParser(existingPath("--data")))
        .addOption(
          new Option("--engines <list>", `comma-separated, of: ${ids.join(", ")} (default: all)`).argParser(
            choiceList("--engines", ids),
          ),
        )
        .addOption(
          new Option("--batches <list>", "batch sizes (default: 1,8,32,128; --quick: 1,8,128)").argParser(
            numberList("--batches"),
          ),
        )
        .addOption(
          new Option(
            "--hidden <list>",
            `hidden sizes, the first every engine, the others the agenda engine with cuBLAS and VPPS at batch 1, 8, 128 (default: ${sizes})`,
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
        .addOption(outOption())
        .action(
          run(
            () => cmd,
            async (f: ThroughputFlags) => {
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
                out: f.out,
                command: commandLine(),
              });
            },
          ),
        ),
    );
  }
}

function addVppsDiagnostics(bench: Command): void {
  const vpps = bench
    .command("vpps")
    .description(
      "VPPS diagnostics: timing, host, gap, timeline, profile, trace, tiles, threads (Tree-LSTM, hidden 256)",
    );
  vpps.showHelpAfterError("(vpps bench vpps --help lists them)");

  const timing: Command = leaf(
    vpps
      .command("timing")
      .description("VPPS alone, batch 1…128: sentences/s, host time vs kernel time, JIT time, weight bytes; vpps.json")
      .addOption(dataOption())
      .addOption(quickOption())
      .addOption(
        new Option("--cell <which>", "fused, ops or both")
          .argParser(choice("--cell", ["fused", "ops", "both"] as const))
          .default("both"),
      )
      .addOption(
        new Option("--cache <dir>", "kernel cache folder (default: a new empty one)").argParser(folder("--cache")),
      )
      .addOption(
        new Option("--workers <n>", "schedule worker threads (0: inside fb)").argParser(wholeNumber("--workers", 0)),
      )
      .option("--profile-once", "profile the plan variants once on batches of 8, not again at each batch size", false)
      .addOption(outOption())
      .action(
        run(
          () => timing,
          async (f: {
            data?: string;
            quick: boolean;
            cell: "fused" | "ops" | "both";
            cache?: string;
            workers?: number;
            profileOnce: boolean;
            out?: string;
          }) => {
            const { runVppsTiming } = await import("../bench/diagnostics/vpps-timing.js");
            return runVppsTiming({
              dataFile: f.data,
              quick: f.quick,
              cell: f.cell,
              cacheDir: f.cache,
              workers: f.workers,
              profileOnce: f.profileOnce,
              out: f.out,
              command: commandLine(),
            });
          },
        ),
      ),
  );

  const host: Command = leaf(
    vpps
      .command("host")
      .description("schedule + encode ns per graph node, batch 1…128, on the CPU (H100 plan); vpps-host.json")
      .addOption(dataOption())
      .addOption(quickOption())
      .addOption(outOption())
      .action(
        run(
          () => host,
          async (f: { data?: string; quick: boolean; out?: string }) => {
            const { runVppsHost } = await import("../bench/diagnostics/vpps-host.js");
            return runVppsHost({ dataFile: f.data, quick: f.quick, out: f.out, command: commandLine() });
          },
        ),
      ),
  );

  const gap: Command = leaf(
    vpps
      .command("gap")
      .description(
        "GPU time between kernels: one scheduled batch submitted back to back, wall vs kernel time (prints only)",
      )
      .argument("[train]", "SST train.txt (as --data)", treeFile("train"))
      .addOption(dataOption())
      .action(
        run(
          () => gap,
          async (train: string | undefined, f: { data?: string }) => {
            const { runVppsGap } = await import("../bench/diagnostics/vpps-gap.js");
            return runVppsGap({ dataFile: f.data ?? train });
          },
        ),
      ),
  );

  const timeline: Command = leaf(
    vpps
      .command("timeline")
      .description("per batch: kernel time, the GPU's idle time before it, the main thread's work; vpps-timeline.json")
      .addOption(dataOption())
      .addOption(new Option("--batch <n>", "trees per batch").argParser(wholeNumber("--batch")).default(1))
      .addOption(new Option("--batches <n>", "batches per pass").argParser(wholeNumber("--batches")).default(3000))
      .addOption(
        new Option("--passes <n>", "passes over the same batches").argParser(wholeNumber("--passes")).default(3),
      )
      .addOption(
        new Option("--workers <n>", "schedule worker threads (0: inside fb)").argParser(wholeNumber("--workers", 0)),
      )
      .addOption(outOption())
      .action(
        run(
          () => timeline,
          async (f: {
            data?: string;
            batch: number;
            batches: number;
            passes: number;
            workers?: number;
            out?: string;
          }) => {
            const { runVppsTimeline } = await import("../bench/diagnostics/vpps-timeline.js");
            return runVppsTimeline({ dataFile: f.data, ...f, command: commandLine() });
          },
        ),
      ),
  );

  const profile: Command = leaf(
    vpps
      .command("profile")
      .description(
        "where the kernel's cycles go (barrier waits, matrix instructions, the rest) per batch, rpw and cell",
      )
      .addOption(dataOption())
      .addOption(quickOption())
      .addOption(outOption())
      .action(
        run(
          () => profile,
          async (f: { data?: string; quick: boolean; out?: string }) => {
            const { runVppsProfile } = await import("../bench/diagnostics/vpps-profile.js");
            return runVppsProfile({ dataFile: f.data, quick: f.quick, out: f.out, command: commandLine() });
          },
        ),
      ),
  );

  const trace: Command = leaf(
    vpps
      .command("trace")
      .description("the critical path of single launches (instructions and barrier hops), per batch size")
      .addOption(dataOption())
      .addOption(quickOption())
      .addOption(
        new Option("--ctas-per-sm <n>", "one plan variant: 1 or 2 CTAs per SM").argParser(
          (v) => Number(choice("--ctas-per-sm", ["1", "2"] as const)(v)) as 1 | 2,
        ),
      )
      .addOption(new Option("--rpw <n>", "rows per warp of that variant (default 1)").argParser(wholeNumber("--rpw")))
      .addOption(new Option("--batches <list>", "batch sizes (default 1,8,32,128)").argParser(numberList("--batches")))
      .option("--transposed", "plans with transposed copies", false)
      .addOption(outOption())
      .action(
        run(
          () => trace,
          async (f: {
            data?: string;
            quick: boolean;
            ctasPerSm?: 1 | 2;
            rpw?: number;
            batches?: number[];
            transposed: boolean;
            out?: string;
          }) => {
            const { runVppsTrace } = await import("../bench/diagnostics/vpps-trace.js");
            return runVppsTrace({
              dataFile: f.data,
              quick: f.quick,
              ctasPerSm: f.ctasPerSm,
              rowsPerWarp: f.rpw,
              batches: f.batches,
              transposed: f.transposed,
              out: f.out,
              command: commandLine(),
            });
          },
        ),
      ),
  );

  const tiles: Command = leaf(
    vpps
      .command("tiles")
      .description("kernel ms and sentences/s per tileEntries threshold, settings interleaved; vpps-tiles.json")
      .addOption(dataOption())
      .addOption(quickOption())
      .addOption(
        new Option("--ctas-per-sm <n>", "1 or 2")
          .argParser((v) => Number(choice("--ctas-per-sm", ["1", "2"] as const)(v)) as 1 | 2)
          .default(1),
      )
      .addOption(new Option("--rpw <n>", "rows per warp").argParser(wholeNumber("--rpw")).default(2))
      .addOption(
        new Option("--rounds <n>", "rounds over every setting (default 3; --quick 1)").argParser(
          wholeNumber("--rounds"),
        ),
      )
      .addOption(
        new Option("--settings <list>", "tileEntries thresholds (default 0,16,32,<default>,96,192)").argParser(
          numberList("--settings", 0),
        ),
      )
      .addOption(outOption())
      .action(
        run(
          () => tiles,
          async (f: {
            data?: string;
            quick: boolean;
            ctasPerSm: 1 | 2;
            rpw: number;
            rounds?: number;
            settings?: number[];
            out?: string;
          }) => {
            const { runVppsTiles } = await import("../bench/diagnostics/vpps-tiles.js");
            return runVppsTiles({
              dataFile: f.data,
              quick: f.quick,
              ctasPerSm: f.ctasPerSm,
              rowsPerWarp: f.rpw,
              rounds: f.rounds,
              settings: f.settings,
              out: f.out,
              command: commandLine(),
            });
          },
        ),
      ),
  );

  const threads: Command = leaf(
    vpps
      .command("threads")
      .description("the host pipeline without a GPU: graph build and worker scheduling per worker count (prints only)")
      .addOption(dataOption())
      .addOption(
        new Option("--workers <list>", "worker counts").argParser(numberList("--workers", 0)).default([0, 1, 2, 4, 8]),
      )
      .addOption(new Option("--batches <list>", "batch sizes").argParser(numberList("--batches")).default([1, 8, 128]))
      .action(
        run(
          () => threads,
          async (f: { data?: string; workers: number[]; batches: number[] }) => {
            const { runVppsThreads } = await import("../bench/diagnostics/vpps-threads.js");
            return runVppsThreads({ dataFile: f.data, workers: f.workers, batches: f.batches });
          },
        ),
      ),
  );
}

function addEngineDiagnostics(bench: Command): void {
  const autobatch = bench.command("autobatch").description("autobatch diagnostics: batching, plan");
  autobatch.showHelpAfterError("(vpps bench autobatch --help lists them)");
  const batching: Command = leaf(
    autobatch
      .command("batching")
      .description(
        "eager vs autobatch depth vs agenda (tiled GEMM, cuBLAS), batch 1…128, repeats alternating; batching.json",
      )
      .addOption(dataOption())
      .addOption(quickOption())
      .addOption(outOption())
      .action(
        run(
          () => batching,
          async (f: { data?: string; quick: boolean; out?: string }) => {
            const { runBatching } = await import("../bench/diagnostics/batching.js");
            return runBatching({ dataFile: f.data, quick: f.quick, out: f.out, command: commandLine() });
          },
        ),
      ),
  );
  const plan: Command = leaf(
    autobatch
      .command("plan")
      .description("planning ns per node and batches per strategy, on the CPU; autobatch-plan.json")
      .addOption(quickOption())
      .addOption(outOption())
      .action(
        run(
          () => plan,
          async (f: { quick: boolean; out?: string }) => {
            const { runAutobatchPlan } = await import("../bench/diagnostics/autobatch-plan.js");
            return runAutobatchPlan({ quick: f.quick, out: f.out, command: commandLine() });
          },
        ),
      ),
  );

  const eager = bench.command("eager").description("eager diagnostics: timing");
  eager.showHelpAfterError("(vpps bench eager --help lists them)");
  const eagerTiming: Command = leaf(
    eager
      .command("timing")
      .description("eager Tree-LSTM training sentences/s and launches at batch 1, 8, 128; eager.json")
      .addOption(dataOption())
      .addOption(quickOption())
      .addOption(outOption())
      .action(
        run(
          () => eagerTiming,
          async (f: { data?: string; quick: boolean; out?: string }) => {
            const { runEagerTiming } = await import("../bench/diagnostics/eager-timing.js");
            return runEagerTiming({ dataFile: f.data, quick: f.quick, out: f.out, command: commandLine() });
          },
        ),
      ),
  );

  const cpu = bench.command("cpu").description("CPU diagnostics: timing, graph-build");
  cpu.showHelpAfterError("(vpps bench cpu --help lists them)");
  const cpuTiming: Command = leaf(
    cpu
      .command("timing")
      .description("graph construction ns per node and CPU engine sentences/s; cpu.json")
      .addOption(dataOption())
      .addOption(quickOption())
      .addOption(outOption())
      .action(
        run(
          () => cpuTiming,
          async (f: { data?: string; quick: boolean; out?: string }) => {
            const { runCpuTiming } = await import("../bench/diagnostics/cpu-timing.js");
            return runCpuTiming({ dataFile: f.data, quick: f.quick, out: f.out, command: commandLine() });
          },
        ),
      ),
  );
  const graphBuild: Command = leaf(
    cpu
      .command("graph-build")
      .description("graph construction ns per node, fused and ops cell, batch 1…128; graph-build.json")
      .addOption(dataOption())
      .addOption(quickOption())
      .option("--machine <name>", "the results folder's name (default: cpu-<model>-<cores>c)")
      .addOption(outOption())
      .action(
        run(
          () => graphBuild,
          async (f: { data?: string; quick: boolean; machine?: string; out?: string }) => {
            const { runGraphBuild } = await import("../bench/diagnostics/graph-build.js");
            return runGraphBuild({
              dataFile: f.data,
              quick: f.quick,
              machine: f.machine,
              out: f.out,
              command: commandLine(),
            });
          },
        ),
      ),
  );
}

/** Registers `vpps bench` and its suites on the program. */
export function addBenchCommand(program: Command): void {
  const bench = program
    .command("bench")
    .description(
      "benchmarks: every engine's throughput per model, and diagnostics per engine (bench/results/<device>/)",
    )
    .exitOverride(exitOnUsageError);
  bench.showHelpAfterError("(vpps bench --help lists the suites)");
  addThroughputCommands(bench);
  addVppsDiagnostics(bench);
  addEngineDiagnostics(bench);
  const models = BENCH_MODELS.map((m) => m.name);
  const plot: Command = leaf(
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
        run(
          () => plot,
          async (device: string, f: { model: string }) => {
            const { runPlot } = await import("../bench/diagnostics/plot.js");
            return runPlot(benchModel(f.model), { device });
          },
        ),
      ),
  );
}
