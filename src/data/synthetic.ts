/**
 * A small synthetic sentiment-tree task generated in code, so that training and tests run on a fresh machine with
 * no data files.
 *
 * Every word has a polarity in -2..2, except "not", which flips the polarity of its sibling subtree. A node's score
 * is its children's scores summed and clamped to -2..2 (or minus the sibling's score next to "not"), and its label
 * is score + 2, so labels are 0..4 as in SST. Because the score is clamped at every node, a node's label is a
 * function of its children's labels alone: a five-state composition a Tree-LSTM can learn exactly, while a bag of
 * words cannot (what "not" flips depends on the bracketing).
 */

import type { TreeNode } from "./tree.js";

const NEGATOR = "not";

/** Word classes (40 words in all): their polarity, and how likely a sampled word is to come from the class. */
const WORD_CLASSES: readonly { polarity: number; weight: number; words: readonly string[] }[] = [
  { polarity: 2, weight: 0.07, words: ["excellent", "brilliant", "superb", "wonderful", "masterful"] },
  { polarity: 1, weight: 0.13, words: ["good", "nice", "pleasant", "fun", "charming", "solid"] },
  {
    polarity: 0,
    weight: 0.45,
    words: ["the", "a", "film", "movie", "plot", "story", "actors", "is", "was", "and", "this", "it", "with"].concat([
      "ending",
      "script",
      "director",
      "scene",
    ]),
  },
  { polarity: -1, weight: 0.13, words: ["bad", "dull", "boring", "weak", "bland", "messy"] },
  { polarity: -2, weight: 0.07, words: ["awful", "terrible", "dreadful", "horrible", "atrocious"] },
  { polarity: 0, weight: 0.15, words: [NEGATOR] },
];

const TRAIN_TREES = 2000;
const DEV_TREES = 300;

/** 32-bit hash of (seed, counter): murmur3's finaliser over both, so every draw is a pure function of its index. */
function hash32(seed: number, counter: number): number {
  let h = Math.imul(seed, 0x9e3779b1) ^ fmix32(counter + 0x7f4a7c15);
  h = fmix32(h);
  return h >>> 0;
}

function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h;
}

/** Deterministic random draws: the n-th draw of a seed is hash32(seed, n), independent of the platform. */
class Draws {
  private counter = 0;
  constructor(private readonly seed: number) {}

  /** Uniform in [0, 1). */
  next(): number {
    return hash32(this.seed, this.counter++) / 0x1_0000_0000;
  }

  /** Uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
}

function sampleWord(draws: Draws): { word: string; polarity: number } {
  let u = draws.next();
  for (const cls of WORD_CLASSES) {
    if (u < cls.weight) return { word: cls.words[draws.int(cls.words.length)]!, polarity: cls.polarity };
    u -= cls.weight;
  }
  // Only reachable through rounding of the weights' sum; the last class absorbs it.
  const last = WORD_CLASSES[WORD_CLASSES.length - 1]!;
  return { word: last.words[0]!, polarity: last.polarity };
}

/** A subtree being built, with its score (label - 2). */
interface Part {
  node: TreeNode;
  score: number;
}

function isNegator(p: Part): boolean {
  return p.node.word === NEGATOR;
}

function combine(left: Part, right: Part): Part {
  let score: number;
  if (isNegator(left)) score = -right.score;
  else if (isNegator(right)) score = -left.score;
  else score = Math.max(-2, Math.min(2, left.score + right.score));
  score += 0; // turns -0 into 0
  return { node: { label: score + 2, word: null, children: [left.node, right.node] }, score };
}

function checkInteger(name: string, value: number, min: number): void {
  if (!Number.isInteger(value) || value < min) {
    throw new RangeError(`syntheticTrees: '${name}' must be an integer >= ${min}; got ${value}`);
  }
}

/**
 * `count` trees of minWords..maxWords words (default 3..12), each bracketed at random (repeatedly merging a random
 * adjacent pair). The same seed gives the same trees.
 */
export function syntheticTrees(
  count: number,
  seed: number,
  opts?: { minWords?: number; maxWords?: number },
): TreeNode[] {
  const minWords = opts?.minWords ?? 3;
  const maxWords = opts?.maxWords ?? 12;
  checkInteger("count", count, 0);
  checkInteger("seed", seed, Number.MIN_SAFE_INTEGER);
  checkInteger("minWords", minWords, 1);
  checkInteger("maxWords", maxWords, minWords);

  const draws = new Draws(seed | 0);
  const trees: TreeNode[] = [];
  for (let t = 0; t < count; t++) {
    const length = minWords + draws.int(maxWords - minWords + 1);
    const parts: Part[] = [];
    for (let i = 0; i < length; i++) {
      const { word, polarity } = sampleWord(draws);
      parts.push({ node: { label: polarity + 2, word, children: [] }, score: polarity });
    }
    while (parts.length > 1) {
      const i = draws.int(parts.length - 1);
      parts.splice(i, 2, combine(parts[i]!, parts[i + 1]!));
    }
    trees.push(parts[0]!.node);
  }
  return trees;
}

/** The standard split of the synthetic task: 2,000 training and 300 dev trees from one seed, no overlap in draws. */
export function splitSynthetic(seed: number): { train: TreeNode[]; dev: TreeNode[] } {
  // One stream cut in two, so that the training set is exactly syntheticTrees(2000, seed).
  const all = syntheticTrees(TRAIN_TREES + DEV_TREES, seed);
  return { train: all.slice(0, TRAIN_TREES), dev: all.slice(TRAIN_TREES) };
}
