/**
 * SST data for the sentence models: the splits of an SST-format directory (the Tree-LSTM's and the RvNN's examples
 * are its trees; the TD-RNN's and TD-LSTM's are sentences — the trees' words in order and the root's label), the
 * synthetic fallback (src/data/synthetic.ts), the word vocabulary (`<unk>`, then the training words in order of first
 * appearance) and root accuracy. One copy, shared by every SST model's task.
 */
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { readTrees } from "../../data/sst.js";
import { splitSynthetic } from "../../data/synthetic.js";
import { type TreeNode, treeWords } from "../../data/tree.js";
import { Vocabulary } from "../../data/vocab.js";
import { labelAccuracy } from "../metrics.js";
import { DataError, type Dataset, type Metric, type TaskData, type TaskVocabulary } from "../task.js";

/** An SST sentence as the pyramid models read it: the words of its tree, left to right, and the root's label. */
export interface Sentence {
  readonly words: readonly string[];
  readonly label: number;
}

/** The sentence of a tree: its preterminals' words in order and its root label. */
export function sentenceOf(tree: TreeNode): Sentence {
  return { words: treeWords(tree), label: tree.label };
}

/** Train and dev splits (test too when asked for) of an SST-format directory. */
export function readSstDirectory(data: string, opts: { maxTrain?: number; test?: boolean }): Dataset<TreeNode> {
  const dir = resolve(data);
  const files = opts.test ? ["train.txt", "dev.txt", "test.txt"] : ["train.txt", "dev.txt"];
  for (const f of files) {
    if (!existsSync(join(dir, f))) {
      const must = opts.test ? "train.txt, dev.txt and test.txt" : "train.txt and dev.txt";
      throw new DataError(`--data ${data}: no ${f} there; the directory must hold ${must} with one PTB tree per line`);
    }
  }
  const train = readTrees(join(dir, "train.txt"), opts.maxTrain ? { maxTrees: opts.maxTrain } : {});
  const dev = readTrees(join(dir, "dev.txt"));
  return { train, dev, ...(opts.test ? { test: readTrees(join(dir, "test.txt")) } : {}), source: dir };
}

const SST_HELP = "directory with train.txt and dev.txt (SST format: one PTB tree per line, labels 0-4)";

/** SST trees for `--data`, one tree file for `vpps eval`, the synthetic tree task otherwise. */
export const SST_TREES: TaskData<TreeNode> = {
  help: SST_HELP,
  noun: "trees",
  fromDirectory: readSstDirectory,
  fromFile: (path) => readTrees(path),
  synthetic: {
    description: "a small synthetic tree task",
    make: (seed) => ({ ...splitSynthetic(seed), source: "synthetic sentiment trees (no --data given)" }),
  },
};

function sentencesOf(data: Dataset<TreeNode>): Dataset<Sentence> {
  return {
    train: data.train.map(sentenceOf),
    dev: data.dev.map(sentenceOf),
    ...(data.test ? { test: data.test.map(sentenceOf) } : {}),
    source: data.source,
  };
}

/** The same data as `SST_TREES`, each tree read as its sentence (words and root label). */
export const SST_SENTENCES: TaskData<Sentence> = {
  help: `${SST_HELP}; each tree is read as its words in order and its root label`,
  noun: "sentences",
  fromDirectory: (dir, opts) => sentencesOf(readSstDirectory(dir, opts)),
  fromFile: (path) => readTrees(path).map(sentenceOf),
  synthetic: {
    description: "the sentences of a small synthetic tree task (label: the root's)",
    make: (seed) => ({
      ...sentencesOf({ ...splitSynthetic(seed), source: "" }),
      source: "synthetic sentiment sentences (no --data given)",
    }),
  },
};

/** Saving, restoring and describing a word vocabulary (state.json holds its word list). */
const WORD_LIST = {
  toJSON: (vocab: Vocabulary): unknown => vocab.toJSON(),
  fromJSON: (json: unknown): Vocabulary => Vocabulary.fromJSON(json as string[]),
  describe: (vocab: Vocabulary): string => `vocabulary ${vocab.size}`,
  size: (vocab: Vocabulary): number => vocab.size,
};

/** The word vocabulary of trees: `<unk>`, then every training word in order of first appearance. */
export const TREE_WORDS: TaskVocabulary<TreeNode, Vocabulary> = {
  build: (train) => Vocabulary.fromTrees(train as TreeNode[]),
  ...WORD_LIST,
};

/** The word vocabulary of sentences: the same list as `TREE_WORDS` gives for the sentences' trees. */
export const SENTENCE_WORDS: TaskVocabulary<Sentence, Vocabulary> = {
  build: (train) => Vocabulary.fromWords(wordsOf(train)),
  ...WORD_LIST,
};

function* wordsOf(sentences: readonly Sentence[]): Iterable<string> {
  for (const s of sentences) yield* s.words;
}

/** Root accuracy: the share of examples (trees or sentences) whose label is the class predicted at the root. */
export function rootAccuracy<E extends { readonly label: number }>(): Metric<E> {
  return labelAccuracy<E>("rootAccuracy", "root accuracy", (e) => e.label);
}
