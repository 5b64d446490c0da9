/**
 * The taggers' train/dev/test splits. `--data` names a directory with train.txt and dev.txt (used as they are,
 * test.txt too when present), or one file of tagged sentences — or a directory holding only dev.txt, as our WikiNER
 * copy does — which is split by a seeded rule that the PyTorch reference scripts implement too:
 *
 *   number the file's sentences (non-empty lines) i = 0, 1, 2, …; h = FNV-1a 32-bit of the UTF-8 bytes of
 *   `${splitSeed}:${i}`; r = h % 10; r = 0 → test, r = 1 → dev, otherwise train.
 *
 * Each sentence's part depends on its number and the seed alone, so the split does not depend on the file's other
 * lines, and about 80/10/10 % of the sentences go to train/dev/test.
 */
import { existsSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { checkTags, readTagged, type TaggedSentence, TagSet } from "./tagged.js";
import { DataError } from "./text-file.js";

const FNV_OFFSET_BASIS = 0x811c9dc5;
const FNV_PRIME = 0x01000193;
const utf8 = new TextEncoder();

/** FNV-1a, 32 bits, of the UTF-8 bytes of `s` (unsigned). */
export function fnv1a32(s: string): number {
  let h = FNV_OFFSET_BASIS;
  for (const byte of utf8.encode(s)) h = Math.imul(h ^ byte, FNV_PRIME) >>> 0;
  return h >>> 0;
}

export type SplitPart = "train" | "dev" | "test";

/** The part sentence `i` (0-based, counting non-empty lines) of a split file goes to under `splitSeed`. */
export function splitPart(splitSeed: number, i: number): SplitPart {
  const r = fnv1a32(`${splitSeed}:${i}`) % 10;
  return r === 0 ? "test" : r === 1 ? "dev" : "train";
}

/** `items` (a file's sentences in order) split by the seeded rule, each part in file order. */
export function splitBySeed<T>(items: readonly T[], splitSeed: number): { train: T[]; dev: T[]; test: T[] } {
  const parts = { train: [] as T[], dev: [] as T[], test: [] as T[] };
  items.forEach((item, i) => {
    parts[splitPart(splitSeed, i)].push(item);
  });
  return parts;
}

export interface TaggedSplits {
  readonly train: TaggedSentence[];
  readonly dev: TaggedSentence[];
  readonly test?: TaggedSentence[];
  /** Where they came from, with the split's sizes when the rule made them. */
  readonly source: string;
}

export interface LoadTaggedOptions {
  /** The seed of the split rule, when a file is split. */
  readonly splitSeed: number;
  /** Keep only the first n training sentences (tags of dev and test are checked against theirs). */
  readonly maxTrain?: number;
  /** The test split is required (a directory without test.txt is refused); it is returned whenever there is one. */
  readonly test?: boolean;
}

/**
 * The train, dev (and test) sentences of `path` (`--data`): a directory with train.txt and dev.txt, or a file or a
 * directory with only dev.txt, split by `splitSeed`. Dev and test tags must be training tags (else an error at the
 * tag's file:line:column).
 */
export function loadTaggedSplits(path: string, opts: LoadTaggedOptions): TaggedSplits {
  if (!existsSync(path)) throw new DataError(`--data ${path}: no such file or directory`);
  const at = resolve(path);
  let splits: TaggedSplits;
  if (statSync(path).isDirectory()) {
    const has = (f: string) => existsSync(join(at, f));
    if (has("train.txt")) {
      if (!has("dev.txt")) throw new DataError(`--data ${path}: it has train.txt but no dev.txt; give both`);
      if (opts.test && !has("test.txt")) throw new DataError(`--data ${path}: no test.txt there`);
      splits = {
        train: readTagged(join(at, "train.txt")),
        dev: readTagged(join(at, "dev.txt")),
        ...(has("test.txt") ? { test: readTagged(join(at, "test.txt")) } : {}),
        source: at,
      };
    } else if (has("dev.txt")) {
      splits = splitFile(join(at, "dev.txt"), opts.splitSeed);
    } else {
      throw new DataError(
        `--data ${path}: no train.txt and dev.txt there (nor a dev.txt alone to split by --split-seed); ` +
          "the files hold word|TAG tokens, one sentence per line",
      );
    }
  } else {
    splits = splitFile(at, opts.splitSeed);
  }
  const train = opts.maxTrain === undefined ? splits.train : splits.train.slice(0, opts.maxTrain);
  if (train.length === 0) {
    throw new DataError(`--data ${path}: the training split is empty (${splits.source}); use another --split-seed`);
  }
  const tags = TagSet.fromSentences(train);
  const of = opts.maxTrain === undefined ? "the training split" : `the first ${train.length} training sentences`;
  checkTags(splits.dev, tags, "the dev split", of);
  if (splits.test) checkTags(splits.test, tags, "the test split", of);
  return { ...splits, train };
}

function splitFile(file: string, splitSeed: number): TaggedSplits {
  const parts = splitBySeed(readTagged(file), splitSeed);
  const sizes = `train ${parts.train.length}, dev ${parts.dev.length}, test ${parts.test.length}`;
  return { ...parts, source: `${file} split by --split-seed ${splitSeed} (${sizes})` };
}
