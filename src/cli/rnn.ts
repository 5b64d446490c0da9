/**
 * `vpps plan rnn` (how a persistent recurrent layer is laid out, and the largest that fits) and `vpps bench rnn`
 * (the persistent layers against cuDNN).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type Command, Option } from "commander";
import { BenchUsageError } from "../bench/errors.js";
import { choice, choiceList, folder, numberList, wholeNumber } from "../bench/options.js";
import { type DeviceModel, deviceModelOfCuda, H100_SXM, H200 } from "../cuda/hw/device-model.js";
import { CudaLibraryNotFoundError, openDevice } from "../cuda/index.js";
import {
  chooseRnnLaunch,
  clustered,
  largestPersistentHidden,
  pipelinedBackward,
  pipelinedForward,
  planRnnLayer,
  RNN_CELLS,
  RNN_PRECISIONS,
  type RnnCellName,
  type RnnKernelPlan,
  rnnLayouts,
  type WeightPrecision,
} from "../rnn/index.js";
import { commandLine, leaf, run } from "./bench-command.js";
import { CliError } from "./errors.js";
import { writeOut } from "./output.js";
import { densityOption, runPlanRnnSparse } from "./rnn-sparse.js";

function deviceModel(gpu: string): DeviceModel {
  if (gpu === "h100") return H100_SXM;
  if (gpu === "h200") return H200;
  try {
    const d = openDevice(0);
    const model = deviceModelOfCuda(d.props);
    d.close();
    return model;
  } catch (e) {
    const why = e instanceof CudaLibraryNotFoundError ? e.summary : (e as Error).message;
    throw new CliError(`--gpu device: no GPU can be opened here (${why}); use --gpu h100 or h200`);
  }
}

const describeKernel = (p: RnnKernelPlan): string =>
  `  ${p.kind.padEnd(8)} ${p.ctas} CTAs × ${p.threads} threads, ${p.unitsPerCta} units per CTA ` +
  `(${p.rows} rows × ${p.cols} columns of W_hh${p.kind === "backward" ? "ᵀ" : ""}), per thread ` +
  `${p.rowsPerThread} rows × ${4 * p.chunksPerThread} columns = ${p.weightRegisters} weight registers ` +
  `(≈ ${p.registersEstimate} of ${p.registerLimit})` +
  (clustered(p) ? "; clusters of 2 CTAs sharing each step's loads (multicast)" : "");

interface PlanFlags {
  cell?: RnnCellName;
  hidden?: number;
  gpu: string;
  /** fp32 when left out. */
  precision?: WeightPrecision;
  /** Sparse layers' kept fractions of W_hh: plan the sparse layouts (rnn-sparse.ts). */
  density?: number[];
  /** Sequences, for the sparse layouts (their batch tile and wide loads). */
  batch?: number;
  indexBits?: "16" | "32";
  json: boolean;
}

/** The --precision option of both commands: how the kernels store W_hh. */
const precisionOption = (what: string): Option =>
  new Option(
    "--precision <p>",
    `how the persistent kernels store W_hh in registers: fp32, or fp16 (two per register, about twice the hidden size fits; fp32 arithmetic either way)${what}`,
  )
    .argParser(choice("--precision", RNN_PRECISIONS))
    .default("fp32");

/** `vpps plan rnn`: one layer's plan, or the largest layer of every cell. */
export function runPlanRnn(f: PlanFlags): void {
  if (f.density === undefined) {
    for (const [flag, given] of [
      ["--batch", f.batch],
      ["--index-bits", f.indexBits],
    ] as const) {
      if (given !== undefined) {
        throw new BenchUsageError(
          `${flag}: applies to sparse layouts, with --density (dense layouts print every batch)`,
        );
      }
    }
  } else if ((f.precision ?? "fp32") !== "fp32") {
    throw new BenchUsageError("--precision: sparse layouts hold fp32 values; leave --precision out with --density");
  }
  const device = deviceModel(f.gpu);
  const precision = f.precision ?? "fp32";
  const cells = f.cell ? [f.cell] : RNN_CELLS;
  if (f.density !== undefined) {
    runPlanRnnSparse(
      {
        cells,
        hidden: f.hidden,
        densities: f.density,
        batch: f.batch ?? 4,
        indexBits: f.indexBits === undefined ? undefined : f.indexBits === "16" ? 16 : 32,
        json: f.json,
      },
      device,
    );
    return;
  }
  const largest = Object.fromEntries(cells.map((c) => [c, largestPersistentHidden(c, device, precision)]));
  if (f.hidden === undefined) {
    if (f.json) {
      writeOut(`${JSON.stringify({ device: device.name, precision, largest })}\n`);
      return;
    }
    writeOut(
      `largest persistent layer on ${device.name} (${device.smCount} SMs, ${device.regsPerSm} registers per SM), ${precision} weights:\n` +
        cells.map((c) => `  ${c.padEnd(8)} hidden ${largest[c]}`).join("\n") +
        "\n",
    );
    return;
  }
  const batches = [1, 4, 16, 64, 128];
  const out = cells.map((cell) => {
    const layouts = rnnLayouts(cell, f.hidden!, device, precision);
    const launches = layouts.length
      ? batches.map((batch) => {
          const c = chooseRnnLaunch(layouts, batch);
          return {
            batch,
            ctas: c.layout.forward.ctas,
            unitsPerCta: c.layout.forward.unitsPerCta,
            replicas: c.replicas,
            pipelinedForward: pipelinedForward(c.replicas, Math.ceil(batch / c.replicas)),
            pipelinedBackward: pipelinedBackward(c.replicas, Math.ceil(batch / c.replicas)),
          };
        })
      : [];
    return { cell, plan: planRnnLayer(cell, f.hidden!, device, precision), launches };
  });
  if (f.json) {
    writeOut(`${JSON.stringify({ device: device.name, precision, hidden: f.hidden, plans: out, largest })}\n`);
    return;
  }
  for (const { cell, plan, launches } of out) {
    if (plan.fits) {
      writeOut(
        `${cell}, hidden ${f.hidden}, ${precision} weights on ${device.name}: fits (largest: ${largest[cell]})\n` +
          `${describeKernel(plan.forward)}\n${describeKernel(plan.backward)}\n` +
          "  per batch (replicas run side by side, each on its share of the sequences with its own copy of the " +
          "weights):\n" +
          launches
            .map(
              (l) =>
                `    batch ${String(l.batch).padStart(3)}: ${l.replicas} × ${l.ctas} CTAs, ${l.unitsPerCta} units per CTA` +
                (l.pipelinedForward ? "; forward: pipelined tile loop" : "") +
                (l.pipelinedBackward ? "; backward: pipelined tile loop" : ""),
            )
            .join("\n") +
          "\n",
      );
    } else {
      // an fp32 layer that fits with fp16 weights: say so, with the option that gets it
      const fp16 =
        precision === "fp32" && planRnnLayer(cell, f.hidden!, device, "fp16").fits
          ? `; it fits with fp16 weights (--precision fp16, largest ${largestPersistentHidden(cell, device, "fp16")})`
          : "";
      writeOut(
        `${cell}, hidden ${f.hidden}, ${precision} weights on ${device.name}: does not fit — ${plan.reason}; the largest ` +
          `that fits is hidden ${largest[cell]}${fp16}\n`,
      );
    }
  }
}

interface BenchFlags {
  cells: RnnCellName[];
  precision: WeightPrecision;
  hidden: number[];
  batch: number[];
  steps: number;
  repeats: number;
  reference?: string;
  phases: boolean;
  out?: string;
  density?: number[];
  ladder: boolean;
  largest: boolean;
  backward: boolean;
  torch?: string;
}

/** Registers `vpps plan rnn` under `plan` and `vpps bench rnn` under `bench`. */
export function addRnnCommands(plan: Command, bench: Command): void {
  leaf(
    plan
      .command("rnn")
      .description("how a persistent recurrent layer spreads W_hh over the GPU's registers, and the largest that fits")
      .addOption(
        new Option("--cell <cell>", `one of ${RNN_CELLS.join(", ")} (default: all)`).argParser(
          choice("--cell", RNN_CELLS),
        ),
      )
      .addOption(
        new Option("--hidden <n>", "the layer's hidden size (default: print the largest per cell)").argParser(
          wholeNumber("--hidden"),
        ),
      )
      .addOption(
        new Option("--gpu <kind>", "device model: h100, h200, or device (the GPU of this machine)")
          .argParser(choice("--gpu", ["h100", "h200", "device"]))
          .default("h100"),
      )
      .addOption(precisionOption("; the sizes and layouts printed are for it"))
      .addOption(
        new Option(
          "--density <d>",
          "plan sparse layers instead: the kept fraction of W_hh in (0, 1] (0.1 or 10%; a comma-separated list for several), as ⟨index, value⟩ pairs in registers",
        ).argParser(densityOption),
      )
      .addOption(
        new Option(
          "--batch <n>",
          "with --density: sequences per launch (the batch tile and wide loads; default 4)",
        ).argParser(wholeNumber("--batch")),
      )
      .addOption(
        new Option(
          "--index-bits <b>",
          "with --density: 16 or 32-bit pair indices (default: 16 where they reach)",
        ).argParser(choice("--index-bits", ["16", "32"] as const)),
      )
      .option("--json", "print as JSON", false)
      .action((f: PlanFlags) => runPlanRnn(f)),
  );
  leaf(
    bench
      .command("rnn")
      .description("persistent RNN/LSTM/GRU layers on the GPU: ms, µs per step and TFLOP/s, beside cuDNN (--reference)")
      .addOption(
        new Option("--cells <list>", "cells")
          .argParser(choiceList("--cells", RNN_CELLS))
          .default(["rnn-tanh", "lstm", "gru"]),
      )
      .addOption(
        new Option("--hidden <list>", "hidden sizes")
          .argParser(numberList("--hidden"))
          .default([512, 1152, 1792, 2304]),
      )
      .addOption(new Option("--batch <list>", "batch sizes").argParser(numberList("--batch")).default([1, 4, 16, 64]))
      .addOption(new Option("--steps <n>", "sequence length").argParser(wholeNumber("--steps")).default(256))
      .addOption(
        new Option("--repeats <n>", "timed runs per configuration (median)")
          .argParser(wholeNumber("--repeats"))
          .default(20),
      )
      .addOption(precisionOption(", for every layer timed"))
      .option("--reference <file>", "cuDNN's results: the JSON lines of python3 bench/pytorch/rnn.py bench --out FILE")
      .option(
        "--phases",
        "also an instrumented build's clock cycles per step in each kernel phase (sync, poll, matvec, cell), for kernel work",
        false,
      )
      .addOption(
        new Option(
          "--density <d>",
          "sparse layers instead, beside the dense ones: kept fractions of W_hh (a list: 1%,5%,10%,20%,30%)",
        ).argParser(densityOption),
      )
      .option(
        "--ladder",
        "with --density: time each rung of the ladder (naive, wide loads, bank-aware, Lamport)",
        false,
      )
      .option("--largest", "with --density: add the largest sparse layer of each density to --hidden", false)
      .option("--backward", "with --density: time the sparse recurrent backward too", false)
      .option("--torch <file>", "with --density: the JSON lines of bench/pytorch/sparse_rnn.py (cuBLAS, cuSPARSE)")
      .addOption(
        new Option("--out <dir>", "write rnn.json and rnn.md there (rnn-sparse.* with --density)").argParser(
          folder("--out"),
        ),
      )
      .action(
        run(async (f: BenchFlags) => {
          if (f.density) return runSparseBench(f, f.density);
          if (f.ladder || f.torch || f.largest || f.backward) {
            throw new BenchUsageError("--ladder, --largest, --backward and --torch apply with --density");
          }
          const { runRnnBench } = await import("../bench/rnn.js");
          const { readCudnnRows, rnnBenchMarkdown } = await import("../bench/rnn-report.js");
          const { requireGpu } = await import("../bench/device.js");
          const cudnn = f.reference ? readCudnnRows(f.reference) : [];
          requireGpu("vpps bench rnn");
          const res = runRnnBench(
            {
              cells: f.cells,
              hiddens: f.hidden,
              batches: f.batch,
              steps: f.steps,
              repeats: f.repeats,
              precision: f.precision,
              device: 0,
              phases: f.phases,
            },
            (line) => process.stderr.write(`${line}\n`),
          );
          const md = rnnBenchMarkdown(res.device, res.rows, cudnn, f.precision);
          writeOut(md);
          if (f.out) {
            mkdirSync(f.out, { recursive: true });
            const json = {
              device: res.device,
              command: commandLine(),
              precision: f.precision,
              largest: res.largest,
              rows: res.rows,
              cudnn,
            };
            writeFileSync(join(f.out, "rnn.json"), `${JSON.stringify(json, null, 1)}\n`);
            writeFileSync(join(f.out, "rnn.md"), md);
          }
          return 0;
        }),
      ),
  );
}

/** `vpps bench rnn --density …`: the sparse layers beside the dense ones (src/bench/rnn-sparse.ts). */
async function runSparseBench(f: BenchFlags, densities: number[]): Promise<number> {
  const { parseTorchSparseRows, runSparseRnnBench, sparseRnnBenchMarkdown } = await import("../bench/rnn-sparse.js");
  const { requireGpu } = await import("../bench/device.js");
  const { readFileSync } = await import("node:fs");
  if (f.precision !== "fp32") throw new BenchUsageError("--precision: sparse layers hold fp32 values");
  if (f.reference || f.phases)
    throw new BenchUsageError("--reference and --phases apply to dense layers (no --density)");
  const torch = f.torch ? parseTorchSparseRows(readFileSync(f.torch, "utf8")) : [];
  requireGpu("vpps bench rnn");
  const res = runSparseRnnBench(
    {
      cells: f.cells,
      hiddens: f.hidden,
      batches: f.batch,
      densities,
      steps: f.steps,
      repeats: f.repeats,
      ladder: f.ladder,
      largest: f.largest,
      backward: f.backward,
      device: 0,
    },
    (line) => process.stderr.write(`${line}\n`),
  );
  const md = sparseRnnBenchMarkdown(res.device, res.rows, torch, res.largest);
  writeOut(md);
  if (f.out) {
    mkdirSync(f.out, { recursive: true });
    const json = { device: res.device, command: commandLine(), largest: res.largest, rows: res.rows, torch };
    writeFileSync(join(f.out, "rnn-sparse.json"), `${JSON.stringify(json, null, 1)}\n`);
    writeFileSync(join(f.out, "rnn-sparse.md"), md);
  }
  return 0;
}
