/**
 * A registered model (src/models/registry.ts) as the throughput suite runs it: its data reader, vocabulary and
 * `create` from the task; what the task does not say (a sweep of sizes, the formulations VPPS runs one by one, the
 * data used when --data is absent) from the model's bench extras, when it has any.
 */
import { statSync } from "node:fs";
import type { AnyTask } from "../../models/task.js";
import type { BenchChoice, BenchModel, BenchSize, BenchTask } from "../model.js";
import { batchAt, batchIndices } from "../trees.js";

export interface BenchExtras {
  /** The sizes the suite runs: the first every engine, the others a sweep (default: the task's hidden/embed). */
  readonly sizes?: readonly BenchSize[];
  /** The embedding size for a hidden size given with --hidden (default: the hidden size). */
  embedFor?(hidden: number): number;
  /** A model option whose values are formulations of the same function: the engines train the first, VPPS each. */
  readonly variants?: { readonly option: string; readonly values: readonly { name: string; label: string }[] };
  /** The data when --data is absent, if it exists (else the task's synthetic data). */
  defaultData?(): string | undefined;
  /** What the data is called in tables and the result file, from the path read (undefined: the synthetic task). */
  describeData?(path: string | undefined, isDefault: boolean): string;
  readonly targets?: Readonly<Record<string, number>>;
  /** Model options the command takes (the taggers' --rnn). */
  readonly choices?: readonly BenchChoice[];
  plotTitle?(device: string, source: string | undefined, hidden: number): string;
}

/** Sentences loaded at most (the benchmark cycles through them). */
const MAX_ITEMS = 8192;

export function benchModelOf(task: AnyTask, extras: BenchExtras = {}): BenchModel<unknown> {
  const defaults = task.defaults as Readonly<Record<string, string | number>>;
  const hidden = typeof defaults.hidden === "number" ? defaults.hidden : undefined;
  const embed = typeof defaults.embed === "number" ? defaults.embed : hidden;
  const sizes = extras.sizes ?? (hidden === undefined ? [] : [{ hidden, embed: embed ?? hidden }]);
  if (sizes.length === 0) {
    throw new Error(`bench: the model '${task.name}' has no numeric 'hidden' option and no bench sizes`);
  }
  const variants = extras.variants?.values ?? [
    { name: String(defaults[extras.variants?.option ?? ""] ?? "default"), label: task.title },
  ];
  const variantOption = extras.variants?.option;
  return {
    name: task.name,
    title: task.title,
    dataHelp:
      `a file of ${task.data.noun}, or a directory as \`vpps train ${task.name} --data\` takes (its training split); ` +
      `default: ${extras.defaultData ? "the data set beside the repository when present, else " : ""}` +
      task.data.synthetic.description,
    sizes,
    embedFor: (h) => extras.embedFor?.(h) ?? h,
    variants,
    choices: extras.choices ?? [],
    maxItems: MAX_ITEMS,
    unit: "sentences",
    batchUnit: task.data.noun,
    ...(extras.targets ? { targets: extras.targets } : {}),
    load(dataFile, maxItems): BenchTask<unknown> {
      const path = dataFile ?? extras.defaultData?.();
      let items: unknown[];
      let source: string;
      if (path === undefined) {
        const data = task.data.synthetic.make(1);
        items = data.train.slice(0, maxItems);
        source = extras.describeData?.(undefined, true) ?? data.source;
      } else {
        items = statSync(path).isDirectory()
          ? task.data.fromDirectory(path, { maxTrain: maxItems }).train
          : task.data.fromFile(path).slice(0, maxItems);
        source = extras.describeData?.(path, dataFile === undefined) ?? path;
      }
      const vocab = task.vocabulary.build(items, defaults);
      const size = (vocab as { size?: unknown }).size;
      return {
        source,
        ...(path === undefined ? {} : { path }),
        items: items.length,
        vocabulary: typeof size === "number" ? size : undefined,
        batch: (n, k) => batchAt(items, n, k),
        indices: (n, k) => batchIndices(items.length, n, k),
        net(s, variant, chosen = {}) {
          const options = {
            ...defaults,
            ...chosen,
            ...(hidden === undefined ? {} : { hidden: s.hidden, embed: s.embed }),
            ...(variantOption === undefined ? {} : { [variantOption]: variant }),
          };
          const model = task.create(options, vocab, 1);
          const builder = model.workerBuilder?.bind(model);
          return {
            params: model.params,
            batchLoss: (cg, batch) => model.buildBatchLoss(cg, batch),
            ...(builder ? { workerBuilder: () => builder(items) } : {}),
          };
        },
      };
    },
    plotTitle: (device, source, h) =>
      extras.plotTitle?.(device, source, h) ?? `${task.title} training, hidden ${h} — ${device}`,
  };
}
