/**
 * Command line options generated from the registries: a model's own options (src/models/task.ts) and the engine
 * options (src/engines/registry.ts), with parsers that name the option and what it expects.
 */
import { type Command, Option } from "commander";
import { MAX_EAGER_STREAMS } from "../engines/eager/engine.js";
import { ENGINE_NAMES, ENGINE_OPTIONS, parseStreamsOption } from "../engines/registry.js";
import { checkModelSize } from "../model/parameters.js";
import type { AnyTask, ModelOption, ModelOptions } from "../models/task.js";
import { UsageError } from "../util/errors.js";
import { memoryLimit } from "../util/memory-limit.js";
import { quote } from "../util/text.js";
import { densityNumber, deviceSpec, nonNegativeNumber, oneOf, positiveInt } from "./options.js";

/** The flag of an option without its value placeholder: `--hidden`. */
function flagName(flag: string): string {
  return flag.split(" ")[0]!;
}

function modelOption(task: AnyTask, spec: ModelOption): Option {
  const name = flagName(spec.flag);
  const option = new Option(spec.flag, spec.help).default(task.defaults[spec.key]);
  const t = spec.type;
  if (t.kind === "positive-int") option.argParser(positiveInt(name));
  else if (t.kind === "fraction") option.argParser(nonNegativeNumber(name, 1));
  else if (t.kind === "density") option.argParser(densityNumber(name));
  else option.argParser(oneOf(name, t.choices));
  if (option.attributeName() !== spec.key) {
    throw new Error(
      `model ${task.name}: option ${spec.flag} has key '${spec.key}'; commander names it '${option.attributeName()}'`,
    );
  }
  return option;
}

/** Adds `task`'s options to `command`: the sizes (`planLabel`) or the others. */
export function addModelOptions(command: Command, task: AnyTask, which: "sizes" | "others"): Command {
  for (const spec of task.options) {
    if ((spec.planLabel !== undefined) === (which === "sizes")) command.addOption(modelOption(task, spec));
  }
  return command;
}

/** `--streams`: auto or 1 … 128, refused in one line naming the option otherwise. */
function streamsSpec(name: string): (v: string) => string {
  return (v) => {
    try {
      parseStreamsOption(v);
    } catch {
      throw new UsageError(`${name} must be auto or a whole number 1 … ${MAX_EAGER_STREAMS}; got ${quote(v)}`);
    }
    return v.trim();
  };
}

/** `--engine` and the engine options, from the engine registry. */
export function addEngineOptions(command: Command, help = "execution engine"): Command {
  command.addOption(
    new Option("--engine <name>", `${help}: ${ENGINE_NAMES.join(", ")}`)
      .argParser(oneOf("--engine", ENGINE_NAMES))
      .default("cpu"),
  );
  for (const o of ENGINE_OPTIONS) {
    const option = new Option(o.flag, o.choices ? `${o.help}: ${o.choices.join(", ")}` : o.help).default(o.default);
    if (o.choices) option.argParser(oneOf(flagName(o.flag), o.choices));
    else if (o.key === "device") option.argParser(deviceSpec(flagName(o.flag)));
    else if (o.key === "streams") option.argParser(streamsSpec(flagName(o.flag)));
    command.addOption(option);
  }
  return command;
}

/** The model's options out of a command's parsed options (every key of `task.options`). */
export function pickModelOptions(task: AnyTask, opts: Record<string, unknown>): ModelOptions {
  const out: Record<string, string | number> = {};
  for (const spec of task.options) out[spec.key] = (opts[spec.key] ?? task.defaults[spec.key]) as string | number;
  return out;
}

/**
 * Refuses, from the parameters' shapes alone (before anything is allocated or initialised), a model this machine
 * cannot hold: a parameter beyond the typed-array limit, or values, gradients and optimiser moments beyond its memory.
 * `advice` says where the sizes came from when not from the command line (a saved run's state.json).
 */
export function checkModelFits(
  task: AnyTask,
  options: ModelOptions,
  vocabSize: number,
  opts: { optimizer?: "sgd" | "adam"; advice?: string | undefined },
): void {
  const sizeOptions = task.options.filter((o) => o.planLabel !== undefined);
  const sizes = sizeOptions.map((o) => flagName(o.flag));
  const limit = memoryLimit();
  // a value and its gradient (4 bytes each); Adam keeps two moments per value
  const bytesPerValue = opts.optimizer === "adam" ? 16 : 8;
  const check = (o: ModelOptions, advice: string) =>
    checkModelSize(task.parameterShapes(o, vocabSize), {
      bytesPerValue,
      memoryBytes: limit.bytes,
      memorySource: limit.source,
      advice,
    });
  try {
    check(options, "");
  } catch (e) {
    if (opts.advice !== undefined) {
      check(options, opts.advice);
      return;
    }
    // the largest value of the first size option (--hidden) that fits with the others as given
    const first = sizeOptions[0];
    let fits = 0;
    if (first !== undefined) {
      const current = Number(options[first.key]);
      let lo = 0;
      let hi = Number.isFinite(current) ? current : 0;
      while (lo < hi) {
        const mid = Math.ceil((lo + hi) / 2);
        try {
          check({ ...options, [first.key]: mid }, "");
          lo = mid;
        } catch {
          hi = mid - 1;
        }
      }
      fits = lo;
    }
    const hint = first !== undefined && fits > 0 ? `; the largest ${flagName(first.flag)} that fits is ${fits}` : "";
    check(options, `lower ${sizes.join(" or ")}${hint}`);
    throw e;
  }
}
