/**
 * The diagnostics of `vpps bench`, one subcommand each, grouped by the engine they look into: `vpps bench vpps
 * timing|host|gap|timeline|profile|trace|tiles|threads`, `vpps bench autobatch batching|plan`, `vpps bench eager
 * timing`, `vpps bench cpu timing|graph-build` (the Tree-LSTM at hidden 256, as the scripts they replace measured).
 */
import { type Command, Option } from "commander";
import { choice, folder, numberList, treeFile, wholeNumber } from "../bench/options.js";
import { MODELS } from "../models/registry.js";
import { commandLine, dataOption, leaf, outOption, quickOption, run } from "./bench-command.js";

export function addVppsDiagnostics(bench: Command): void {
  const vpps = bench
    .command("vpps")
    .description(
      "VPPS diagnostics: timing, host, gap, timeline, profile, trace, tiles, threads (Tree-LSTM, hidden 256)",
    );

  leaf(
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

  leaf(
    vpps
      .command("host")
      .description("schedule + encode ns per graph node, batch 1…128, on the CPU (H100 plan); vpps-host.json")
      .addOption(dataOption())
      .addOption(quickOption())
      .addOption(outOption())
      .action(
        run(async (f: { data?: string; quick: boolean; out?: string }) => {
          const { runVppsHost } = await import("../bench/diagnostics/vpps-host.js");
          return runVppsHost({ dataFile: f.data, quick: f.quick, out: f.out, command: commandLine() });
        }),
      ),
  );

  leaf(
    vpps
      .command("gap")
      .description(
        "GPU time between kernels: one scheduled batch submitted back to back, wall vs kernel time (prints only)",
      )
      .argument("[train]", "SST train.txt (as --data)", treeFile("train"))
      .addOption(dataOption())
      .action(
        run(async (train: string | undefined, f: { data?: string }) => {
          const { runVppsGap } = await import("../bench/diagnostics/vpps-gap.js");
          return runVppsGap({ dataFile: f.data ?? train });
        }),
      ),
  );

  leaf(
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

  leaf(
    vpps
      .command("profile")
      .description(
        "where the kernel's cycles go (barrier waits, matrix instructions, the rest) per batch, rpw and cell; " +
          "with --model, per batch and formulation of that model",
      )
      .addOption(
        new Option(
          "--model <name>",
          "a registered model at its default size and data, each formulation at rpw 1 (default: the Tree-LSTM " +
            "sweep of cells and rpw 1-3); --data as for `vpps bench <model>`",
        ).argParser(
          choice(
            "--model",
            // LeNet's convolutions are not VPPS instructions: the six dynamic models only
            MODELS.map((t) => t.name).filter((n) => n !== "cnn"),
          ),
        ),
      )
      .addOption(dataOption())
      .addOption(quickOption())
      .addOption(outOption())
      .action(
        run(async (f: { model?: string; data?: string; quick: boolean; out?: string }) => {
          const { runVppsProfile } = await import("../bench/diagnostics/vpps-profile.js");
          return runVppsProfile({
            model: f.model,
            dataFile: f.data,
            quick: f.quick,
            out: f.out,
            command: commandLine(),
          });
        }),
      ),
  );

  leaf(
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

  leaf(
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

  leaf(
    vpps
      .command("threads")
      .description("the host pipeline without a GPU: graph build and worker scheduling per worker count (prints only)")
      .addOption(dataOption())
      .addOption(
        new Option("--workers <list>", "worker counts").argParser(numberList("--workers", 0)).default([0, 1, 2, 4, 8]),
      )
      .addOption(new Option("--batches <list>", "batch sizes").argParser(numberList("--batches")).default([1, 8, 128]))
      .action(
        run(async (f: { data?: string; workers: number[]; batches: number[] }) => {
          const { runVppsThreads } = await import("../bench/diagnostics/vpps-threads.js");
          return runVppsThreads({ dataFile: f.data, workers: f.workers, batches: f.batches });
        }),
      ),
  );
}

export function addEngineDiagnostics(bench: Command): void {
  const autobatch = bench.command("autobatch").description("autobatch diagnostics: batching, plan");
  leaf(
    autobatch
      .command("batching")
      .description(
        "eager vs autobatch depth vs agenda (tiled GEMM, cuBLAS), batch 1…128, repeats alternating; batching.json",
      )
      .addOption(dataOption())
      .addOption(quickOption())
      .addOption(outOption())
      .action(
        run(async (f: { data?: string; quick: boolean; out?: string }) => {
          const { runBatching } = await import("../bench/diagnostics/batching.js");
          return runBatching({ dataFile: f.data, quick: f.quick, out: f.out, command: commandLine() });
        }),
      ),
  );
  leaf(
    autobatch
      .command("plan")
      .description("planning ns per node and batches per strategy, on the CPU; autobatch-plan.json")
      .addOption(quickOption())
      .addOption(outOption())
      .action(
        run(async (f: { quick: boolean; out?: string }) => {
          const { runAutobatchPlan } = await import("../bench/diagnostics/autobatch-plan.js");
          return runAutobatchPlan({ quick: f.quick, out: f.out, command: commandLine() });
        }),
      ),
  );

  const eager = bench.command("eager").description("eager diagnostics: timing");
  leaf(
    eager
      .command("timing")
      .description("eager Tree-LSTM training sentences/s and launches at batch 1, 8, 128; eager.json")
      .addOption(dataOption())
      .addOption(quickOption())
      .addOption(outOption())
      .action(
        run(async (f: { data?: string; quick: boolean; out?: string }) => {
          const { runEagerTiming } = await import("../bench/diagnostics/eager-timing.js");
          return runEagerTiming({ dataFile: f.data, quick: f.quick, out: f.out, command: commandLine() });
        }),
      ),
  );

  const cpu = bench.command("cpu").description("CPU diagnostics: timing, graph-build");
  leaf(
    cpu
      .command("timing")
      .description("graph construction ns per node and CPU engine sentences/s; cpu.json")
      .addOption(dataOption())
      .addOption(quickOption())
      .addOption(outOption())
      .action(
        run(async (f: { data?: string; quick: boolean; out?: string }) => {
          const { runCpuTiming } = await import("../bench/diagnostics/cpu-timing.js");
          return runCpuTiming({ dataFile: f.data, quick: f.quick, out: f.out, command: commandLine() });
        }),
      ),
  );
  leaf(
    cpu
      .command("graph-build")
      .description(
        "graph construction ns per node, batch 1…128: the Tree-LSTM's fused and ops cell (graph-build.json), or " +
          "--model's (graph-build-<model>.json)",
      )
      .addOption(
        new Option("--model <name>", "a registered model at its default sizes (default: treelstm)").argParser(
          choice(
            "--model",
            MODELS.map((t) => t.name),
          ),
        ),
      )
      .addOption(dataOption())
      .addOption(quickOption())
      .option("--machine <name>", "the results folder's name (default: cpu-<model>-<cores>c)")
      .addOption(outOption())
      .action(
        run(async (f: { model?: string; data?: string; quick: boolean; machine?: string; out?: string }) => {
          const { runGraphBuild } = await import("../bench/diagnostics/graph-build.js");
          return runGraphBuild({
            model: f.model,
            dataFile: f.data,
            quick: f.quick,
            machine: f.machine,
            out: f.out,
            command: commandLine(),
          });
        }),
      ),
  );
}
