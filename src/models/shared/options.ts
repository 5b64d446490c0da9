/** Model options shared by the SST models: the sizes, and restoring a saved run's options from its state.json. */
import { checkModelOption, type ModelOption } from "../task.js";

/** `--hidden` and `--embed`: the sizes that shape the weights (`vpps plan` takes them too). */
export const SIZE_OPTIONS: readonly ModelOption[] = [
  { key: "hidden", flag: "--hidden <n>", help: "hidden size", type: { kind: "positive-int" }, planLabel: "hidden" },
  {
    key: "embed",
    flag: "--embed <n>",
    help: "word embedding size",
    type: { kind: "positive-int" },
    planLabel: "embedding",
  },
];

/**
 * The options of a saved run: `keys` (each one of `options`) from `saved` (state.json's "options"), checked — a
 * malformed value throws naming it — and every other from `current` (the command line).
 */
export function restoreSavedOptions<O>(
  options: readonly ModelOption[],
  keys: readonly string[],
  saved: unknown,
  current: O,
): O {
  if (typeof saved !== "object" || saved === null) throw new Error(`"options" must be an object; got ${saved}`);
  const record = saved as Record<string, unknown>;
  const restored = { ...current } as Record<string, unknown>;
  for (const key of keys) {
    const why = checkModelOption(options.find((o) => o.key === key)!, record[key]);
    if (why !== null) throw new Error(`options.${key} ${why}`);
    restored[key] = record[key];
  }
  return restored as O;
}
