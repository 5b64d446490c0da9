// The tagged-sentence reader (src/data/tagged.ts): every malformed-input error at its file:line:column, the seeded
// train/dev/test split of one file (src/data/tagged-split.ts) and its sizes on our WikiNER copy, the directories
// --data accepts, the vocabularies, and the synthetic named-entity task.

import assert from "node:assert/strict";
import { existsSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { splitSyntheticTagged, syntheticTaggedSentences } from "../src/data/synthetic-tagged.js";
import {
  characterVocabulary,
  cutForMessage,
  parseTagged,
  readTagged,
  TaggedFormatError,
  TagSet,
  taggedWordVocabulary,
  tagIndices,
} from "../src/data/tagged.js";
import { fnv1a32, loadTaggedSplits, splitBySeed, splitPart } from "../src/data/tagged-split.js";
import { DataError } from "../src/data/text-file.js";

const WIKINER_DIR = fileURLToPath(new URL("../../shared/data/wikiner/", import.meta.url));
const noWikiner = existsSync(join(WIKINER_DIR, "dev.txt")) ? false : `WikiNER not found in ${WIKINER_DIR}`;

/** Asserts that `run` throws a TaggedFormatError at exactly file:line:column whose message contains `what`. */
function assertAt(run: () => unknown, file: string, line: number, column: number, what: string | RegExp): void {
  assert.throws(run, (err: unknown) => {
    assert.ok(err instanceof TaggedFormatError, `expected a TaggedFormatError, got ${String(err)}`);
    assert.ok(err instanceof DataError, "the command line prints it as one line");
    assert.deepEqual([err.file, err.line, err.column], [file, line, column], err.message);
    assert.ok(err.message.startsWith(`${file}:${line}:${column}: `), err.message);
    if (typeof what === "string") assert.ok(err.message.includes(what), `${JSON.stringify(what)} in: ${err.message}`);
    else assert.match(err.message, what);
    assert.equal(err.message.split("\n").length, 1, "one line");
    return true;
  });
}

const parseError = (text: string, line: number, column: number, what: string | RegExp) =>
  assertAt(() => parseTagged(text, "bad.txt"), "bad.txt", line, column, what);

function tempFile(text: string | Buffer, name = "data.txt"): string {
  const file = join(mkdtempSync(join(tmpdir(), "vpps-tagged-")), name);
  writeFileSync(file, text);
  return file;
}

describe("parseTagged", () => {
  test("words, tags, lines and tag columns; runs of spaces and tabs, blank lines, CRLF and a BOM", () => {
    const s = parseTagged("\ufeffParis|I-LOC  is|O\r\n\n \t\nbig|O\t.|O \n", "f.txt");
    assert.equal(s.length, 2);
    assert.deepEqual(s[0], {
      words: ["Paris", "is"],
      tags: ["I-LOC", "O"],
      file: "f.txt",
      line: 1,
      tagColumns: [7, 17],
    });
    assert.deepEqual(s[1], { words: ["big", "."], tags: ["O", "O"], file: "f.txt", line: 4, tagColumns: [5, 9] });
  });

  test("the tag follows the last '|': words may contain '|'", () => {
    const [s] = parseTagged("a|b|O ||O x|I-PER");
    assert.deepEqual(s!.words, ["a|b", "|", "x"]);
    assert.deepEqual(s!.tags, ["O", "O", "I-PER"]);
  });

  test("columns count code points (a character outside the BMP is one column)", () => {
    const [s] = parseTagged("𝄞x|O é|O");
    assert.deepEqual(s!.tagColumns, [4, 8]);
    parseError("𝄞|O 𝄞𝄞", 1, 5, "found '𝄞𝄞' (no '|')");
  });

  test("a token without '|' is refused at its column, saying what was expected", () => {
    parseError("a|O b|O\nc|O word d|O", 2, 5, "expected word|TAG, found 'word' (no '|')");
  });

  test("an empty word and an empty tag are refused at their columns", () => {
    parseError("a|O |O", 1, 5, "empty word: expected word|TAG, found '|O'");
    parseError("a|O\n\nab| c|O", 3, 4, "empty tag: expected word|TAG, found 'ab|'");
    parseError("a|b|", 1, 5, "empty tag");
  });

  test("an empty file, or one of blank lines, has no sentence", () => {
    for (const text of ["", "\n \n\t\r\n", "\ufeff"])
      parseError(text, 1, 1, "no sentences: expected one sentence per line");
  });

  test("a long token is echoed cut to 40 characters and '…'", () => {
    const long = "x".repeat(100);
    parseError(`${long} a|O`, 1, 1, `found '${"x".repeat(40)}…' (no '|')`);
    assert.equal(cutForMessage("é".repeat(40)), "é".repeat(40));
    assert.equal(cutForMessage("𝄞".repeat(41)), `${"𝄞".repeat(40)}…`);
  });

  test("readTagged reads through readTextFile: a missing file and invalid UTF-8 are one DataError naming the file", () => {
    assert.equal(readTagged(tempFile("a|O\n")).length, 1);
    assert.throws(
      () => readTagged("/no/such/file.txt"),
      (e: unknown) => {
        assert.ok(e instanceof DataError);
        assert.equal(e.message, "tagged file /no/such/file.txt does not exist");
        return true;
      },
    );
    const bad = tempFile(Buffer.from([0x61, 0x7c, 0x4f, 0x0a, 0x62, 0xff, 0x7c, 0x4f, 0x0a]));
    assert.throws(() => readTagged(bad), /tagged file .*data\.txt:2: invalid UTF-8/);
    const malformed = tempFile("a|O |O\n");
    assertAt(() => readTagged(malformed), malformed, 1, 5, "empty word");
  });
});

describe("tags", () => {
  const train = parseTagged("a|O b|I-PER\nc|I-LOC a|O", "train.txt");

  test("the tag set: order of first appearance; saved and restored, checked", () => {
    const tags = TagSet.fromSentences(train);
    assert.deepEqual(tags.toJSON(), ["O", "I-PER", "I-LOC"]);
    assert.equal(tags.index("I-LOC"), 2);
    assert.equal(tags.index("B-LOC"), -1);
    assert.equal(TagSet.fromJSON(tags.toJSON()).name(1), "I-PER");
    assert.throws(() => TagSet.fromJSON(["O", "O"]), /entry 1 "O" is a duplicate/);
    assert.throws(() => TagSet.fromJSON([]), /non-empty array/);
    assert.throws(() => TagSet.fromJSON(["O", 3]), /entry 1 must be a non-empty string/);
  });

  test("a tag outside the training tags is refused at its file:line:column, naming the known tags", () => {
    const tags = TagSet.fromSentences(train);
    const [dev] = parseTagged("x|O\ny|O z|I-MISC", "dev.txt").slice(1);
    assertAt(
      () => tagIndices(dev!, tags, "the dev split"),
      "dev.txt",
      2,
      7,
      "unknown tag 'I-MISC' in the dev split: expected one of the tags of the training split (O, I-PER, I-LOC)",
    );
    assert.deepEqual([...tagIndices(train[1]!, tags)], [2, 0]);
  });
});

describe("the seeded split", () => {
  test("FNV-1a 32-bit of the UTF-8 bytes (published test vectors)", () => {
    assert.equal(fnv1a32(""), 0x811c9dc5);
    assert.equal(fnv1a32("a"), 0xe40c292c);
    assert.equal(fnv1a32("foobar"), 0xbf9cf968);
    // a code point of two UTF-8 bytes hashes its bytes, not its UTF-16 unit
    assert.equal(fnv1a32("é"), fnv1a32Bytes([0xc3, 0xa9]));
  });

  test("r = h % 10: 0 → test, 1 → dev, else train; a pure function of (seed, i)", () => {
    for (let i = 0; i < 200; i++) {
      const r = fnv1a32(`7:${i}`) % 10;
      assert.equal(splitPart(7, i), r === 0 ? "test" : r === 1 ? "dev" : "train");
    }
    const items = Array.from({ length: 1000 }, (_, i) => i);
    const a = splitBySeed(items, 3);
    assert.deepEqual(splitBySeed(items, 3), a, "deterministic");
    assert.notDeepEqual(splitBySeed(items, 4).dev, a.dev, "another seed, another split");
    assert.equal(a.train.length + a.dev.length + a.test.length, 1000);
    assert.deepEqual(
      [...a.train, ...a.dev, ...a.test].sort((x, y) => x - y),
      items,
      "a partition",
    );
    assert.ok(a.dev.length > 60 && a.dev.length < 140 && a.test.length > 60 && a.test.length < 140);
  });

  test("our WikiNER copy, seed 1: 1,343 / 178 / 175 sentences (docs/CLI.md's numbers)", { skip: noWikiner }, () => {
    const s = loadTaggedSplits(WIKINER_DIR, { splitSeed: 1 });
    assert.deepEqual([s.train.length, s.dev.length, s.test?.length], [1343, 178, 175]);
    assert.match(s.source, /dev\.txt split by --split-seed 1 \(train 1343, dev 178, test 175\)$/);
    const file = loadTaggedSplits(join(WIKINER_DIR, "dev.txt"), { splitSeed: 1, maxTrain: 10 });
    assert.equal(file.train.length, 10);
    assert.deepEqual(file.train, s.train.slice(0, 10), "the file itself splits the same way");
    assert.deepEqual(TagSet.fromSentences(s.train).toJSON(), ["I-MISC", "O", "I-ORG", "I-LOC", "I-PER"]);
  });

  test("--data: a directory with train.txt and dev.txt as they are, test.txt when present; errors name what is missing", () => {
    const dir = mkdtempSync(join(tmpdir(), "vpps-tagged-dir-"));
    const at = (f: string) => join(dir, f);
    assert.throws(() => loadTaggedSplits(dir, { splitSeed: 1 }), /no train\.txt and dev\.txt there/);
    writeFileSync(at("train.txt"), "a|O b|I-PER\n");
    assert.throws(() => loadTaggedSplits(dir, { splitSeed: 1 }), /it has train\.txt but no dev\.txt/);
    writeFileSync(at("dev.txt"), "b|I-PER\n");
    const s = loadTaggedSplits(dir, { splitSeed: 1 });
    assert.deepEqual([s.train.length, s.dev.length, s.test], [1, 1, undefined]);
    assert.throws(() => loadTaggedSplits(dir, { splitSeed: 1, test: true }), /no test\.txt there/);
    writeFileSync(at("test.txt"), "a|O\nb|O c|I-ORG\n");
    assertAt(
      () => loadTaggedSplits(dir, { splitSeed: 1 }),
      at("test.txt"),
      2,
      7,
      "unknown tag 'I-ORG' in the test split",
    );
    assert.throws(() => loadTaggedSplits(at("none"), { splitSeed: 1 }), /--data .*none: no such file or directory/);
  });

  test("tags of the dev split are checked against the (first --max-sentences) training sentences", () => {
    // sentence i = 2 of seed 1 is the first dev sentence, i = 0 a training one; I-PER first appears in training at t
    const dev = Array.from({ length: 60 }, (_, i) => i).find((i) => splitPart(1, i) === "dev")!;
    const t = Array.from({ length: 60 }, (_, i) => i).find((i) => i > 0 && splitPart(1, i) === "train")!;
    const lines = Array.from({ length: 60 }, (_, i) => (i === dev ? "x|O z|I-PER" : i === t ? "y|I-PER" : `w${i}|O`));
    const file = tempFile(`${lines.join("\n")}\n`);
    assert.equal(loadTaggedSplits(file, { splitSeed: 1 }).dev[0]!.line, dev + 1);
    assertAt(
      () => loadTaggedSplits(file, { splitSeed: 1, maxTrain: 1 }),
      file,
      dev + 1,
      7,
      "unknown tag 'I-PER' in the dev split: expected one of the tags of the first 1 training sentences (O)",
    );
  });
});

describe("vocabularies and the synthetic task", () => {
  const train = parseTagged("the|O Zoë|I-PER the|O\nthe|O Bo|I-PER Zoë|I-PER", "t.txt");

  test("words: <unk> first, then every training word (or those seen minCount times) in order of first appearance", () => {
    assert.deepEqual(taggedWordVocabulary(train).toJSON(), ["<unk>", "the", "Zoë", "Bo"]);
    assert.deepEqual(taggedWordVocabulary(train, 2).toJSON(), ["<unk>", "the", "Zoë"]);
    assert.equal(taggedWordVocabulary(train).index("unseen"), 0);
    assert.throws(() => taggedWordVocabulary(train, 0), /'minCount' must be an integer >= 1/);
  });

  test("characters: code points in order of first appearance after the unknown character 0", () => {
    const chars = characterVocabulary(parseTagged("a𝄞b|O ba|O"));
    assert.deepEqual(chars.toJSON(), ["<unk>", "a", "𝄞", "b"]);
    assert.equal(chars.index("q"), 0);
  });

  test("the synthetic task is a pure function of the seed, in IOB1 with three types and many rare names", () => {
    const a = splitSyntheticTagged(5);
    assert.deepEqual(splitSyntheticTagged(5), a);
    assert.notDeepEqual(splitSyntheticTagged(6).train[0], a.train[0]);
    assert.deepEqual([a.train.length, a.dev.length], [1500, 300]);
    assert.deepEqual(TagSet.fromSentences(a.train).toJSON().sort(), ["I-LOC", "I-ORG", "I-PER", "O"]);
    const frequent = new Set(taggedWordVocabulary(a.train, 5).toJSON());
    const rare = taggedWordVocabulary(a.train)
      .toJSON()
      .filter((w) => !frequent.has(w));
    assert.ok(rare.length > 100, `${rare.length} words seen fewer than 5 times`);
    // the recorded columns are those of the sentence written as a line of a file
    const s = syntheticTaggedSentences(3, 9)[2]!;
    const line = s.words.map((w, k) => `${w}|${s.tags[k]}`).join(" ");
    assert.deepEqual(parseTagged(`\n\n${line}`, s.file)[0], s);
  });
});

function fnv1a32Bytes(bytes: readonly number[]): number {
  let h = 0x811c9dc5;
  for (const b of bytes) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return h;
}
