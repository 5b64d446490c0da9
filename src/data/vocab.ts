/**
 * Word vocabularies: words ↔ dense indices for embedding lookups. Index 0 is always the unknown word, so a word
 * never seen in training (or dropped by `minCount`) still has a row to look up.
 */

import { showValue } from "../util/text.js";
import type { TreeNode } from "./tree.js";
import { treeWords } from "./tree.js";

/** The unknown-word entry, at index 0 of every vocabulary. */
export const UNK = "<unk>";

export class Vocabulary {
  private readonly words: string[];
  private readonly indices: Map<string, number>;

  private constructor(words: string[], indices: Map<string, number>) {
    this.words = words;
    this.indices = indices;
  }

  /** Words of the trees in order of first appearance, keeping those seen at least `minCount` times (default 1). */
  static fromTrees(trees: TreeNode[], opts?: { minCount?: number }): Vocabulary {
    const minCount = opts?.minCount ?? 1;
    if (!Number.isInteger(minCount) || minCount < 1) {
      throw new RangeError(`Vocabulary.fromTrees: option 'minCount' must be an integer >= 1; got ${minCount}`);
    }
    // A Map iterates in insertion order, which keeps the result independent of counts and hashing.
    const counts = new Map<string, number>();
    for (const tree of trees) {
      for (const w of treeWords(tree)) counts.set(w, (counts.get(w) ?? 0) + 1);
    }
    const kept: string[] = [];
    for (const [w, c] of counts) if (c >= minCount) kept.push(w);
    return Vocabulary.fromWords(kept);
  }

  /** `<unk>` followed by the distinct words in order; repeats and `<unk>` itself are skipped. */
  static fromWords(words: Iterable<string>): Vocabulary {
    const list = [UNK];
    const indices = new Map<string, number>([[UNK, 0]]);
    for (const w of words) {
      if (indices.has(w)) continue;
      indices.set(w, list.length);
      list.push(w);
    }
    return new Vocabulary(list, indices);
  }

  /** Rebuilds a vocabulary saved with `toJSON`, checking that it is one. */
  static fromJSON(words: string[]): Vocabulary {
    if (!Array.isArray(words)) {
      throw new TypeError(`Vocabulary.fromJSON: expected an array of words; got ${typeof words}`);
    }
    if (words[0] !== UNK) {
      throw new Error(`Vocabulary.fromJSON: entry 0 must be '${UNK}'; got ${showValue(words[0])}`);
    }
    const indices = new Map<string, number>();
    for (let i = 0; i < words.length; i++) {
      const w = words[i];
      if (typeof w !== "string") {
        throw new TypeError(`Vocabulary.fromJSON: entry ${i} must be a string; got ${typeof w}`);
      }
      const first = indices.get(w);
      if (first !== undefined) {
        throw new Error(`Vocabulary.fromJSON: entry ${i} ${showValue(w)} duplicates entry ${first}`);
      }
      indices.set(w, i);
    }
    return new Vocabulary(words.slice(), indices);
  }

  /** Index of `word`, or 0 (`<unk>`) if it is not in the vocabulary. */
  index(word: string): number {
    return this.indices.get(word) ?? 0;
  }

  /** The word at index `i`. */
  word(i: number): string {
    const w = Number.isInteger(i) ? this.words[i] : undefined;
    if (w === undefined) {
      throw new RangeError(`Vocabulary.word: index ${i} is out of range 0..${this.words.length - 1}`);
    }
    return w;
  }

  /** Number of entries, `<unk>` included. */
  get size(): number {
    return this.words.length;
  }

  /** The words by index, `<unk>` first; `JSON.stringify(vocab)` writes this list. */
  toJSON(): string[] {
    return this.words.slice();
  }
}
