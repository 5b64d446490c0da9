/**
 * The taggers' vocabulary: the word table's words (`<unk>` first), the tags, and for the character model the
 * characters — all from the training split, in order of first appearance — and how a sentence is encoded for the
 * network: word rows, tag indices (a tag outside the training tags is an error at its file:line:column) and, for the
 * character model, the characters of each word the table does not hold.
 */
import {
  characterVocabulary,
  type TaggedSentence,
  TagSet,
  taggedWordVocabulary,
  tagIndices,
} from "../../data/tagged.js";
import { Vocabulary } from "../../data/vocab.js";
import type { SpelledSentence } from "./model.js";

export class TaggerVocabulary {
  constructor(
    /** The word table's words, `<unk>` at 0. */
    readonly words: Vocabulary,
    readonly tags: TagSet,
    /** The character model's characters (the unknown character at 0), or null for the word-only tagger. */
    readonly chars: Vocabulary | null,
  ) {}

  /**
   * From the training sentences: every word (`minCount` 1) or the words seen at least `minCount` times, the tags,
   * and the characters when `withChars`.
   */
  static build(train: readonly TaggedSentence[], opts: { minCount?: number; withChars?: boolean } = {}) {
    return new TaggerVocabulary(
      taggedWordVocabulary(train, opts.minCount ?? 1),
      TagSet.fromSentences(train),
      opts.withChars ? characterVocabulary(train) : null,
    );
  }

  /** Rebuilds what `toJSON` saved; `withChars`: the character model's (with its characters). */
  static fromJSON(json: unknown, withChars: boolean): TaggerVocabulary {
    if (typeof json !== "object" || json === null || Array.isArray(json)) {
      throw new TypeError(`expected an object with words and tags${withChars ? " and chars" : ""}`);
    }
    const j = json as { words?: unknown; tags?: unknown; chars?: unknown };
    const words = Vocabulary.fromJSON(j.words as string[]);
    const tags = TagSet.fromJSON(j.tags);
    if (!withChars) return new TaggerVocabulary(words, tags, null);
    if (j.chars === undefined) throw new TypeError("the character model's vocabulary has no 'chars'");
    return new TaggerVocabulary(words, tags, Vocabulary.fromJSON(j.chars as string[]));
  }

  toJSON(): { words: string[]; tags: string[]; chars?: string[] } {
    return {
      words: this.words.toJSON(),
      tags: this.tags.toJSON(),
      ...(this.chars ? { chars: this.chars.toJSON() } : {}),
    };
  }

  /** Rows of the word table (what `vpps bench` reports as the vocabulary). */
  get size(): number {
    return this.words.size;
  }

  describe(): string {
    const chars = this.chars ? `, ${this.chars.size - 1} characters` : "";
    return `vocabulary ${this.words.size} words${chars}, ${this.tags.size} tags`;
  }

  /**
   * `s` as the networks read it. Words outside the table are `<unk>` (row 0); with characters, those words are
   * spelled (their code points; an unseen one is the unknown character 0) and only they.
   */
  encode(s: TaggedSentence, split?: string): SpelledSentence {
    const n = s.words.length;
    const words = new Int32Array(n);
    const spelled: (Int32Array | null)[] = [];
    for (let k = 0; k < n; k++) {
      const w = s.words[k]!;
      words[k] = this.words.index(w);
      if (this.chars !== null) spelled.push(words[k] === 0 ? this.spell(w) : null);
    }
    return { words, tags: tagIndices(s, this.tags, split), spelled };
  }

  private spell(word: string): Int32Array {
    const chars = this.chars!;
    const out: number[] = [];
    for (const ch of word) out.push(chars.index(ch));
    return Int32Array.from(out);
  }
}
