import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { parseTrees, readTrees, TreeFormatError } from "../src/data/sst.js";
import { splitSynthetic, syntheticTrees } from "../src/data/synthetic.js";
import { formatTree, type TreeNode, treeHeight, treeSize, treeWords } from "../src/data/tree.js";
import { Vocabulary } from "../src/data/vocab.js";

// The shared data sits beside the repository root: <root>/../shared/data/sst.
const SST_DIR = fileURLToPath(new URL("../../shared/data/sst/", import.meta.url));
const TRAIN = join(SST_DIR, "train.txt");
const DEV = join(SST_DIR, "dev.txt");
const noTrain = existsSync(TRAIN) ? false : `SST training file not found at ${TRAIN}`;
const noSst = existsSync(TRAIN) && existsSync(DEV) ? false : `SST files not found in ${SST_DIR}`;

function allNodes(t: TreeNode): TreeNode[] {
  const out: TreeNode[] = [];
  const stack = [t];
  while (stack.length > 0) {
    const n = stack.pop()!;
    out.push(n);
    stack.push(...n.children);
  }
  return out;
}

/** Asserts that parsing `text` throws a TreeFormatError at exactly `line`:`column` whose message contains `what`. */
function assertFormatError(text: string, line: number, column: number, what: string, numLabels?: number): void {
  assert.throws(
    () => parseTrees(text, "bad.txt", numLabels === undefined ? undefined : { numLabels }),
    (err: unknown) => {
      assert.ok(err instanceof TreeFormatError, `expected a TreeFormatError, got ${String(err)}`);
      assert.equal(err.file, "bad.txt");
      assert.equal(err.line, line, `line of: ${err.message}`);
      assert.equal(err.column, column, `column of: ${err.message}`);
      assert.ok(err.message.startsWith(`bad.txt:${line}:${column}: `), err.message);
      assert.ok(err.message.includes(what), `expected the message to contain ${JSON.stringify(what)}: ${err.message}`);
      return true;
    },
  );
}

describe("tree helpers and parseTrees", () => {
  test("parses a small tree: labels, words, shape", () => {
    const [t, ...rest] = parseTrees("(3 (2 (2 The) (2 Rock)) (4 (3 is) (2 .)))");
    assert.equal(rest.length, 0);
    assert.ok(t);
    assert.equal(t.label, 3);
    assert.equal(t.word, null);
    assert.equal(t.children.length, 2);
    const [left, right] = t.children as [TreeNode, TreeNode];
    assert.deepEqual(
      left.children.map((c) => [c.label, c.word, c.children.length]),
      [
        [2, "The", 0],
        [2, "Rock", 0],
      ],
    );
    assert.equal(right.label, 4);
    assert.deepEqual(
      right.children.map((c) => c.label),
      [3, 2],
    );
    assert.deepEqual(treeWords(t), ["The", "Rock", "is", "."]);
    assert.equal(treeSize(t), 7);
    assert.equal(treeHeight(t), 2);
    assert.equal(formatTree(t), "(3 (2 (2 The) (2 Rock)) (4 (3 is) (2 .)))");
  });

  test("a lone preterminal is a tree of height 0", () => {
    const [t] = parseTrees("(1 word)");
    assert.deepEqual(t, { label: 1, word: "word", children: [] });
    assert.equal(treeHeight(t!), 0);
    assert.equal(treeSize(t!), 1);
  });

  test("skips blank lines, tolerates CRLF, a BOM and extra spaces", () => {
    const trees = parseTrees("\uFEFF\r\n(2 a)\r\n\r\n  \t\n  (1  (2 b)\t(0 c) )  \r\n");
    assert.deepEqual(trees.map(formatTree), ["(2 a)", "(1 (2 b) (0 c))"]);
  });

  test("numLabels widens the label range", () => {
    const [t] = parseTrees("(10 (0 a) (9 b))", "x", { numLabels: 11 });
    assert.deepEqual(
      allNodes(t!).map((n) => n.label),
      [10, 9, 0],
    );
  });

  test("deep trees parse without recursion (depth 10,000)", () => {
    const depth = 10_000;
    const text = `${"(1 (2 w) ".repeat(depth)}(3 end)${")".repeat(depth)}`;
    const [t] = parseTrees(text);
    assert.equal(treeHeight(t!), depth);
    assert.equal(treeSize(t!), 2 * depth + 1);
    assert.equal(treeWords(t!).length, depth + 1);
    assert.equal(formatTree(t!), text);
  });
});

describe("parseTrees rejects malformed input with file:line:column", () => {
  test("missing ')' at end of line", () => {
    assertFormatError("(2 (2 a) (2 b))\n(3 (2 a) (2 b)\n", 2, 15, "expected ')' to close the node opened at column 1");
    assertFormatError("(3 (2 a) (2 b)", 1, 15, "found end of line");
  });

  test("missing ')' at end of a CRLF line: the CR is not a column", () => {
    assertFormatError("(2 x)\r\n(3 (2 a) (2 b\r\n", 2, 14, "expected ')' to close the node opened at column 10");
  });

  test("an extra ')'", () => {
    assertFormatError("(3 (2 a) (2 b)))", 1, 16, "unbalanced parentheses: found ')' with no open '('");
    assertFormatError("(2 a)\n)\n", 2, 1, "unbalanced parentheses: found ')' with no open '('");
  });

  test("a missing label before a subtree", () => {
    assertFormatError("((2 a) (2 b))", 1, 2, "missing label: expected an integer label 0..4 after '(', found '('");
  });

  test("a missing label followed by a space", () => {
    assertFormatError("( (2 a))", 1, 3, "missing label: expected an integer label 0..4 after '(', found '('");
  });

  test("a non-numeric label", () => {
    assertFormatError("(x (2 a) (2 b))", 1, 2, "expected an integer label 0..4, found 'x'");
    assertFormatError("(2 (2 a) (-1 b))", 1, 11, "expected an integer label 0..4, found '-1'");
  });

  test("a label out of range", () => {
    assertFormatError("(3 (5 a) (2 b))", 1, 5, "label 5 is out of range: expected 0..4");
    assertFormatError("(2 (1 a) (0 b))", 1, 2, "label 2 is out of range: expected 0..1", 2);
  });

  test("a node with three children", () => {
    assertFormatError("(3 (2 a) (2 b) (2 c))", 1, 16, "non-binary node: the node opened at column 1 has a third child");
  });

  test("a node whose only child is a subtree", () => {
    assertFormatError(
      "(3 (2 a))",
      1,
      9,
      "non-binary node: the node opened at column 1 has one child that is a subtree",
    );
    assertFormatError("(3 (2 (2 a)) (2 b))", 1, 12, "the node opened at column 4 has one child that is a subtree");
  });

  test("text after the tree on the same line", () => {
    assertFormatError("(3 (2 a) (2 b)) x", 1, 17, "expected end of line after the tree, found 'x'");
    assertFormatError("(2 a) (2 b)", 1, 7, "expected end of line after the tree, found '('");
  });

  test("an empty preterminal", () => {
    assertFormatError("(3 (2 a) (2 ))", 1, 13, "empty preterminal: expected a word or two subtrees after label 2");
    assertFormatError("(2 )", 1, 4, "found ')'");
  });

  test("a preterminal with two words, or a word then a subtree", () => {
    assertFormatError("(2 a b)", 1, 6, "expected ')' after the word 'a' of a preterminal, found 'b'");
    assertFormatError("(2 a (2 b))", 1, 6, "expected ')' after the word 'a' of a preterminal, found '('");
    assertFormatError("(2 (2 a) b)", 1, 10, "expected '(' or ')' after a subtree, found 'b'");
  });

  test("a line that does not start with '('", () => {
    assertFormatError("(2 a)\n\n  hello (2 a)", 3, 3, "expected '(' to start a tree, found 'hello'");
  });

  test("columns count code points, not UTF-16 units", () => {
    assertFormatError("(2 (2 😀) (2 b) (2 c))", 1, 16, "has a third child");
  });

  test("an empty file names the file at line 1", () => {
    assertFormatError("", 1, 1, "no trees found");
    assertFormatError("\n  \r\n\n", 1, 1, "no trees found");
    const dir = mkdtempSync(join(tmpdir(), "vpps-data-"));
    try {
      const path = join(dir, "empty.txt");
      writeFileSync(path, "\n");
      assert.throws(
        () => readTrees(path),
        (err: unknown) => err instanceof TreeFormatError && err.message.startsWith(`${path}:1:1: no trees found`),
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("readTrees", () => {
  test("maxTrees stops before a malformed line", () => {
    const dir = mkdtempSync(join(tmpdir(), "vpps-data-"));
    try {
      const path = join(dir, "trees.txt");
      writeFileSync(path, "(2 a)\n(3 (2 b) (4 c))\n(oops\n");
      assert.deepEqual(readTrees(path, { maxTrees: 2 }).map(formatTree), ["(2 a)", "(3 (2 b) (4 c))"]);
      assert.throws(() => readTrees(path), /trees\.txt:3:2: expected an integer label 0\.\.4, found 'oops'/);
      assert.throws(() => readTrees(path, { maxTrees: 0 }), /'maxTrees' must be an integer >= 1; got 0/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("round trip formatTree(parse(line)) on the first 200 SST training lines", { skip: noTrain }, () => {
    const lines = readFileSync(TRAIN, "utf8").split("\n").slice(0, 200);
    const trees = readTrees(TRAIN, { maxTrees: 200 });
    assert.equal(trees.length, 200);
    for (let i = 0; i < 200; i++) assert.equal(formatTree(trees[i]!), lines[i]!.trimEnd(), `line ${i + 1}`);
  });

  test("counts on the real SST files", { skip: noSst }, () => {
    const train = readTrees(TRAIN);
    const dev = readTrees(DEV);
    assert.equal(train.length, 8544);
    assert.equal(dev.length, 1101);
    assert.equal(
      train.reduce((sum, t) => sum + treeSize(t), 0),
      318_582,
    );
    assert.equal(Math.max(...train.map(treeHeight)), 29);
    assert.equal(Vocabulary.fromTrees(train).size, 18_280 + 1);
  });
});

describe("Vocabulary", () => {
  const trees = parseTrees("(3 (2 the) (3 (3 good) (2 the)))\n(1 (2 a) (1 bad))\n");

  test("unknown words map to 0, known words to dense indices in order of first appearance", () => {
    const v = Vocabulary.fromTrees(trees);
    assert.equal(v.size, 5);
    assert.deepEqual(v.toJSON(), ["<unk>", "the", "good", "a", "bad"]);
    assert.equal(v.index("the"), 1);
    assert.equal(v.index("bad"), 4);
    assert.equal(v.index("never-seen"), 0);
    assert.equal(v.word(0), "<unk>");
    assert.equal(v.word(2), "good");
    assert.throws(() => v.word(5), /index 5 is out of range 0\.\.4/);
  });

  test("minCount drops rare words", () => {
    const v = Vocabulary.fromTrees(trees, { minCount: 2 });
    assert.deepEqual(v.toJSON(), ["<unk>", "the"]);
    assert.equal(v.index("good"), 0);
  });

  test("fromWords skips repeats and <unk>", () => {
    const v = Vocabulary.fromWords(["b", "a", "b", "<unk>", "c"]);
    assert.deepEqual(v.toJSON(), ["<unk>", "b", "a", "c"]);
  });

  test("round trip through JSON", () => {
    const v = Vocabulary.fromTrees(trees);
    const back = Vocabulary.fromJSON(JSON.parse(JSON.stringify(v)) as string[]);
    assert.deepEqual(back.toJSON(), v.toJSON());
    assert.equal(back.index("bad"), v.index("bad"));
    assert.equal(back.size, v.size);
  });

  test("fromJSON rejects a list without <unk> first, or with duplicates", () => {
    assert.throws(() => Vocabulary.fromJSON(["the", "<unk>"]), /entry 0 must be '<unk>'; got "the"/);
    assert.throws(() => Vocabulary.fromJSON([]), /entry 0 must be '<unk>'; got undefined/);
    assert.throws(() => Vocabulary.fromJSON(["<unk>", "a", "b", "a"]), /entry 3 "a" duplicates entry 1/);
    assert.throws(() => Vocabulary.fromJSON(["<unk>", 3 as unknown as string]), /entry 1 must be a string/);
  });
});

describe("synthetic sentiment trees", () => {
  test("the same seed gives identical trees; another seed gives others", () => {
    const a = syntheticTrees(200, 42).map(formatTree);
    const b = syntheticTrees(200, 42).map(formatTree);
    const c = syntheticTrees(200, 43).map(formatTree);
    assert.deepEqual(a, b);
    assert.notDeepEqual(a, c);
  });

  test("trees are binary, sized as asked, labelled 0..4, and their text parses back", () => {
    const trees = syntheticTrees(300, 7, { minWords: 2, maxWords: 6 });
    const lengths = new Set<number>();
    for (const t of trees) {
      const n = treeWords(t).length;
      assert.ok(n >= 2 && n <= 6, `tree with ${n} words`);
      lengths.add(n);
      for (const node of allNodes(t)) {
        assert.ok(Number.isInteger(node.label) && node.label >= 0 && node.label <= 4, `label ${node.label}`);
        assert.equal(node.children.length, node.word === null ? 2 : 0);
      }
    }
    assert.deepEqual([...lengths].sort(), [2, 3, 4, 5, 6]);
    const text = trees.map(formatTree).join("\n");
    assert.deepEqual(parseTrees(text).map(formatTree), trees.map(formatTree));
  });

  test("labels follow the composition rule: clamped sum, and 'not' flips its sibling", () => {
    let negations = 0;
    for (const t of syntheticTrees(500, 3)) {
      for (const node of allNodes(t)) {
        if (node.word !== null) continue;
        const [l, r] = node.children as [TreeNode, TreeNode];
        let expected: number;
        if (l.word === "not") expected = 4 - r.label;
        else if (r.word === "not") expected = 4 - l.label;
        else expected = Math.max(0, Math.min(4, l.label + r.label - 2));
        if (l.word === "not" || r.word === "not") negations++;
        assert.equal(node.label, expected, formatTree(node));
      }
    }
    assert.ok(negations > 100, `only ${negations} negations`);
  });

  test("labels are spread over all classes, at the root and over all nodes", () => {
    const { train } = splitSynthetic(1);
    const root = [0, 0, 0, 0, 0];
    const all = [0, 0, 0, 0, 0];
    for (const t of train) {
      root[t.label]!++;
      for (const node of allNodes(t)) all[node.label]!++;
    }
    // No class is missing, and none takes more than half: chance accuracy is well below what a model can reach.
    for (const counts of [root, all]) {
      const total = counts.reduce((a, b) => a + b, 0);
      for (const c of counts) assert.ok(c > 0.05 * total && c < 0.5 * total, `class counts ${counts}`);
    }
  });

  test("splitSynthetic: 2,000 train and 300 dev trees over a ~40-word vocabulary", () => {
    const { train, dev } = splitSynthetic(5);
    assert.equal(train.length, 2000);
    assert.equal(dev.length, 300);
    assert.deepEqual(train.map(formatTree), syntheticTrees(2000, 5).map(formatTree));
    const size = Vocabulary.fromTrees([...train, ...dev]).size - 1;
    assert.ok(size >= 35 && size <= 40, `vocabulary of ${size} words`);
  });

  test("rejects bad options", () => {
    assert.throws(() => syntheticTrees(-1, 0), /'count' must be an integer >= 0; got -1/);
    assert.throws(
      () => syntheticTrees(1, 0, { minWords: 5, maxWords: 4 }),
      /'maxWords' must be an integer >= 5; got 4/,
    );
  });
});
