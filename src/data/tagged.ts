/**
 * Tagged sentences (the taggers' data): one sentence per line, tokens `word|TAG` separated by spaces or tabs, empty
 * lines skipped — the format of the DyNet benchmark's WikiNER files. The tag is what follows the LAST `|` of a token,
 * so words may contain `|`. Also the tag set and the word and character vocabularies built from a training split.
 *
 * Every sentence remembers where it came from (file, line, and each tag's column), so that a tag checked later
 * against a training split's tags (dev, test, `vpps eval`'s file) is reported at its `file:line:column`.
 */
import { DataError, readTextFile } from "./text-file.js";
import { Vocabulary } from "./vocab.js";

export interface TaggedSentence {
  readonly words: readonly string[];
  readonly tags: readonly string[];
  /** Where the sentence came from: its file (or what generated it), for messages. */
  readonly file: string;
  /** Its 1-based line in `file`. */
  readonly line: number;
  /** The 1-based column (in code points) of each token's tag. */
  readonly tagColumns: readonly number[];
}

/** A malformed tagged file, or a tag outside the training split's: `file:line:column: what was expected`. */
export class TaggedFormatError extends DataError {
  constructor(
    readonly file: string,
    readonly line: number,
    readonly column: number,
    detail: string,
  ) {
    super(`${file}:${line}:${column}: ${detail}`);
    this.name = "TaggedFormatError";
  }
}

/** Tokens echoed in messages are cut to this many code points (and "…"), so one long token cannot flood a line. */
const ECHO_LIMIT = 40;

/** `s` as messages echo it: at most ECHO_LIMIT code points, then "…". */
export function cutForMessage(s: string): string {
  if (s.length <= ECHO_LIMIT) return s; // code points ≤ code units
  const cps = Array.from(s);
  return cps.length <= ECHO_LIMIT ? s : `${cps.slice(0, ECHO_LIMIT).join("")}…`;
}

const SPACE = 0x20;
const TAB = 0x09;
const CR = 0x0d; // as a separator anywhere, so that Windows line endings need no special case
const BAR = 0x7c; // |

function isSeparator(c: number): boolean {
  return c === SPACE || c === TAB || c === CR;
}

/** The second half of a surrogate pair: not a code point of its own, so not counted in columns. */
function isLowSurrogate(c: number): boolean {
  return c >= 0xdc00 && c <= 0xdfff;
}

/** Parses every sentence of `text`; `file` names it in messages. An empty file (no sentence) is an error. */
export function parseTagged(text: string, file = "<input>"): TaggedSentence[] {
  const sentences: TaggedSentence[] = [];
  const n = text.length;
  let pos = text.charCodeAt(0) === 0xfeff ? 1 : 0; // a byte-order mark is not part of the first word
  let lineNo = 1;
  while (pos < n) {
    const newline = text.indexOf("\n", pos);
    const lineEnd = newline < 0 ? n : newline;
    const lineStart = pos;
    // the column of offset p is p − lineStart − (low surrogates before p) + 1
    let surrogates = 0;
    let words: string[] | null = null;
    let tags: string[] | null = null;
    let columns: number[] | null = null;
    let p = pos;
    while (p < lineEnd) {
      let c = text.charCodeAt(p);
      if (isSeparator(c)) {
        p++;
        continue;
      }
      const start = p;
      const startColumn = start - lineStart - surrogates + 1;
      let bar = -1;
      let barSurrogates = 0;
      while (p < lineEnd && !isSeparator(c)) {
        if (c === BAR) {
          bar = p;
          barSurrogates = surrogates;
        } else if (isLowSurrogate(c)) surrogates++;
        c = text.charCodeAt(++p);
      }
      const token = (): string => cutForMessage(text.slice(start, p));
      if (bar < 0)
        throw new TaggedFormatError(file, lineNo, startColumn, `expected word|TAG, found '${token()}' (no '|')`);
      if (bar === start) {
        throw new TaggedFormatError(file, lineNo, startColumn, `empty word: expected word|TAG, found '${token()}'`);
      }
      const tagColumn = bar + 1 - lineStart - barSurrogates + 1;
      if (bar === p - 1) {
        throw new TaggedFormatError(file, lineNo, tagColumn, `empty tag: expected word|TAG, found '${token()}'`);
      }
      if (words === null) {
        words = [];
        tags = [];
        columns = [];
      }
      words.push(text.slice(start, bar));
      tags!.push(text.slice(bar + 1, p));
      columns!.push(tagColumn);
    }
    if (words !== null) sentences.push({ words, tags: tags!, file, line: lineNo, tagColumns: columns! });
    pos = lineEnd + 1;
    lineNo++;
  }
  if (sentences.length === 0) {
    throw new TaggedFormatError(
      file,
      1,
      1,
      "no sentences: expected one sentence per line of word|TAG tokens separated by spaces, e.g. 'Paris|I-LOC is|O'",
    );
  }
  return sentences;
}

/** Reads a file of tagged sentences (strict UTF-8; a missing or unreadable file is one DataError naming it). */
export function readTagged(path: string): TaggedSentence[] {
  return parseTagged(readTextFile(path, "tagged file"), path);
}

/** Tags by index, in order of first appearance in the training split (no unknown entry: a tag must be known). */
export class TagSet {
  private readonly indices: Map<string, number>;

  private constructor(private readonly tags: readonly string[]) {
    this.indices = new Map(tags.map((t, i) => [t, i]));
  }

  static fromSentences(sentences: readonly TaggedSentence[]): TagSet {
    const seen = new Set<string>();
    for (const s of sentences) for (const t of s.tags) seen.add(t);
    return new TagSet([...seen]);
  }

  /** Rebuilds a tag set saved with `toJSON`, checking that it is one. */
  static fromJSON(json: unknown): TagSet {
    if (!Array.isArray(json) || json.length === 0) {
      throw new TypeError(`TagSet.fromJSON: expected a non-empty array of tags; got ${JSON.stringify(json)}`);
    }
    const seen = new Set<string>();
    json.forEach((t, i) => {
      if (typeof t !== "string" || t === "")
        throw new TypeError(`TagSet.fromJSON: entry ${i} must be a non-empty string`);
      if (seen.has(t)) throw new Error(`TagSet.fromJSON: entry ${i} ${JSON.stringify(t)} is a duplicate`);
      seen.add(t);
    });
    return new TagSet(json as string[]);
  }

  /** The index of `tag`, or -1 when the training split did not have it. */
  index(tag: string): number {
    return this.indices.get(tag) ?? -1;
  }

  /** The tag at index `i`. */
  name(i: number): string {
    const t = this.tags[i];
    if (t === undefined) throw new RangeError(`TagSet.name: index ${i} is out of range 0..${this.tags.length - 1}`);
    return t;
  }

  get size(): number {
    return this.tags.length;
  }

  toJSON(): string[] {
    return this.tags.slice();
  }

  /** For messages: the tags, the first dozen of a long list. */
  describe(): string {
    const shown = this.tags.slice(0, 12).map(cutForMessage).join(", ");
    return this.tags.length > 12 ? `${shown}, … (${this.tags.length} in all)` : shown;
  }
}

/**
 * The tag indices of `s` in `tags`; a tag outside them is an error at its file:line:column. `split` names the data
 * in the message when given ("the dev split"), `of` the sentences the tags came from ("the training split").
 */
export function tagIndices(s: TaggedSentence, tags: TagSet, split?: string, of = "the training split"): Int32Array {
  const out = new Int32Array(s.tags.length);
  for (let k = 0; k < out.length; k++) {
    const i = tags.index(s.tags[k]!);
    if (i < 0) {
      throw new TaggedFormatError(
        s.file,
        s.line,
        s.tagColumns[k]!,
        `unknown tag '${cutForMessage(s.tags[k]!)}'${split ? ` in ${split}` : ""}: expected one of the tags of ${of} (${tags.describe()})`,
      );
    }
    out[k] = i;
  }
  return out;
}

/** Checks every tag of `sentences` against the training tags (see tagIndices). */
export function checkTags(sentences: readonly TaggedSentence[], tags: TagSet, split: string, of?: string): void {
  for (const s of sentences) tagIndices(s, tags, split, of);
}

/** How often each word occurs, in order of first appearance. */
export function wordCounts(sentences: readonly TaggedSentence[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const s of sentences) for (const w of s.words) counts.set(w, (counts.get(w) ?? 0) + 1);
  return counts;
}

/**
 * `<unk>` and the words of `sentences` seen at least `minCount` times (default 1: every word), in order of first
 * appearance.
 */
export function taggedWordVocabulary(sentences: readonly TaggedSentence[], minCount = 1): Vocabulary {
  if (!Number.isInteger(minCount) || minCount < 1) {
    throw new RangeError(`taggedWordVocabulary: 'minCount' must be an integer >= 1; got ${minCount}`);
  }
  const kept: string[] = [];
  for (const [w, c] of wordCounts(sentences)) if (c >= minCount) kept.push(w);
  return Vocabulary.fromWords(kept);
}

/**
 * The characters (Unicode code points) of the words of `sentences`, in order of first appearance, after the
 * unknown character at index 0 (a `Vocabulary` whose `<unk>` entry is the unknown character: no code point is
 * spelled `<unk>`).
 */
export function characterVocabulary(sentences: readonly TaggedSentence[]): Vocabulary {
  const seen = new Set<string>();
  for (const s of sentences) for (const w of s.words) for (const ch of w) seen.add(ch);
  return Vocabulary.fromWords(seen);
}
