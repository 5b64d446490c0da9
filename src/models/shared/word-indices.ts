/**
 * Vocabulary indices of each example's words, remembered from its last build: a Map lookup of a word costs as much
 * as building a few graph nodes (cache misses in a table of 18k strings for SST: 120–260 ns a word on the 2-core
 * development machine), and an example is built once per epoch. Shared by the models whose examples are trees or
 * sentences of words.
 */
import type { Vocabulary } from "../../data/vocab.js";

/**
 * The vocabulary index of each word of one example, by position left to right, remembered from its last build with
 * `vocab`. Each use compares the word with the one remembered at that position (the same string object unless the
 * example was changed since: one pointer comparison), so a changed example reads the vocabulary again and gets what
 * `vocab.index(word)` gives.
 */
export class LeafWords {
  private readonly words: string[] = [];
  private readonly indices: number[] = [];
  constructor(readonly vocab: Vocabulary) {}

  /** `this.vocab.index(word)` for `word`, the k-th word of the example (k counts from 0, in order). */
  index(k: number, word: string): number {
    if (k < this.words.length && this.words[k] === word) return this.indices[k]!;
    const i = this.vocab.index(word);
    // positions are visited in order, so k is at most the current length
    this.words[k] = word;
    this.indices[k] = i;
    return i;
  }
}

/** The `LeafWords` of every example a model has built, kept as long as the example lives. */
export class WordIndexCache<K extends object> {
  private readonly byExample = new WeakMap<K, LeafWords>();

  /** The remembered indices of `example`'s words in `vocab` (a new, empty record for a new example or vocabulary). */
  of(example: K, vocab: Vocabulary): LeafWords {
    let w = this.byExample.get(example);
    if (w === undefined || w.vocab !== vocab) {
      w = new LeafWords(vocab);
      this.byExample.set(example, w);
    }
    return w;
  }
}
