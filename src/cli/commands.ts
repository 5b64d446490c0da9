/**
 * Command line options generated from the registries: a model's own options (src/models/task.ts) and the engine
 * options (src/engines/registry.ts), with parsers that name the option and what it expects.
 */
import { type Command, Option } from "commander";
import { ENGINE_NAMES, ENGINE_OPTIONS } from "../engines/registry.js";
import type { AnyTask, ModelOption, ModelOptions } from "../models/task.js";
import { nonNegativeNumber, oneOf, positiveInt } from "./options.js";

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

/** `--engine` and the engine options, from the engine registry. */
export function addEngineOptions(command: Command, help = "execution engine"): Command {
  command.addOption(new Option("--engine <name>", help).argParser(oneOf("--engine", ENGINE_NAMES)).default("cpu"));
  for (const o of ENGINE_OPTIONS) {
    const option = new Option(o.flag, o.help).default(o.default);
    if (o.choices) option.argParser(oneOf(flagName(o.flag), o.choices));
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
