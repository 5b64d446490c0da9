"""Unit tests of the references' pure-Python half (no torch): `python3 -m unittest discover -s bench/pytorch`.
The golden split and F1 values are shared with test/pytorch-reference.test.ts, which checks the TypeScript side."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common as C  # noqa: E402

# seeded split of sentences 0..39 (t train, D dev, T test); from an independent Node implementation (Math.imul)
SPLIT_GOLDEN = {
    1: "ttTtttttTtDttTtttttTtttttttDTttttTtttttT",
    7: "tDTttttttttttttttTttTttDtttttDtTttttDtDt",
}


def write(text):
    fd, path = tempfile.mkstemp(suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return path


class SplitRule(unittest.TestCase):
    def test_fnv1a_published_vectors(self):
        self.assertEqual(C.fnv1a32(""), 0x811C9DC5)
        self.assertEqual(C.fnv1a32("a"), 0xE40C292C)
        self.assertEqual(C.fnv1a32("foobar"), 0xBF9CF968)
        self.assertEqual(C.fnv1a32("1:0"), 1663353798)
        self.assertEqual(C.fnv1a32("7:123"), 2820921564)

    def test_split_golden(self):
        letter = {"train": "t", "dev": "D", "test": "T"}
        for seed, want in SPLIT_GOLDEN.items():
            got = "".join(letter[C.split_of(i, seed)] for i in range(len(want)))
            self.assertEqual(got, want, f"split seed {seed}")

    def test_split_proportions(self):
        parts = [C.split_of(i, 1) for i in range(20000)]
        self.assertAlmostEqual(parts.count("test") / 20000, 0.1, delta=0.01)
        self.assertAlmostEqual(parts.count("dev") / 20000, 0.1, delta=0.01)

    def test_split_numbers_non_empty_lines(self):
        text = "a|O\n\n  \nb|O\nc|O\n"
        sentences = C.parse_tagged(text, "x.txt")
        self.assertEqual([s.words[0] for s in sentences], ["a", "b", "c"])
        self.assertEqual([s.line for s in sentences], [1, 4, 5])
        parts = C.split_tagged(sentences, 1)
        self.assertEqual([s.words[0] for s in parts["train"]], ["a", "b"])
        self.assertEqual([s.words[0] for s in parts["test"]], ["c"])


class TaggedReader(unittest.TestCase):
    def test_tokens_and_whitespace(self):
        [s] = C.parse_tagged("\ufeffThe|O  Mad|I-ORG\tCapsule|I-ORG a|b|O\r\n", "f")
        self.assertEqual(s.words, ["The", "Mad", "Capsule", "a|b"])
        self.assertEqual(s.tags, ["O", "I-ORG", "I-ORG", "O"])

    def test_errors_name_file_line_column(self):
        cases = [
            ("a|O\nb|O cO\n", r"^f:2:5: token 'cO' has no '\|'"),
            ("a|O b|\n", r"^f:1:7: token 'b\|' has an empty tag"),
            ("|O\n", r"^f:1:1: token '\|O' has an empty word"),
            ("\n \n", r"^f:1:1: no sentences found"),
        ]
        for text, message in cases:
            with self.assertRaisesRegex(C.DataError, message):
                C.parse_tagged(text, "f")

    def test_unknown_dev_tag(self):
        vocab = C.TaggerVocab(C.parse_tagged("a|O b|I-PER\n", "train"))
        [dev] = C.parse_tagged("ä|O b|I-XYZ\n", "dev")
        with self.assertRaisesRegex(C.DataError, r"^dev:1:7: tag 'I-XYZ' does not occur in the training split"):
            vocab.encode(dev)

    def test_vocabularies(self):
        train = C.parse_tagged("b|O a|I-PER b|O\nc|I-LOC b|O a|O\n", "t")
        v = C.TaggerVocab(train)
        self.assertEqual(v.words.words, ["<unk>", "b", "a", "c"])
        self.assertEqual(v.tags, ["O", "I-PER", "I-LOC"])
        self.assertEqual(v.chars, {"b": 1, "a": 2, "c": 3})
        two = C.TaggerVocab(train, min_count=2)
        self.assertEqual(two.words.words, ["<unk>", "b", "a"])
        [x] = C.parse_tagged("a|O zc|I-LOC\n", "d")
        e = two.encode(x)
        self.assertEqual(e.ids, [2, 0])
        self.assertEqual(e.chars, [(2,), (0, 3)])
        self.assertEqual(e.tags, [0, 2])

    def test_load_split_of_one_file(self):
        lines = [f"w{i}|O" for i in range(40)]
        path = write("\n".join(lines) + "\n")
        train, dev, source = C.load_split("tagged", path, None, 7)
        want = SPLIT_GOLDEN[7]
        self.assertEqual([s.words[0] for s in dev], [f"w{i}" for i in range(40) if want[i] == "D"])
        self.assertEqual(len(train), want.count("t"))
        self.assertIn("split seed 7", source)
        self.assertEqual(len(C.load_split("tagged", path, 5, 7)[0]), 5)


class Metrics(unittest.TestCase):
    def test_entities(self):
        self.assertEqual(C.entities(["I-PER", "I-PER", "O", "I-LOC"]), {(0, 2, "PER"), (3, 4, "LOC")})
        self.assertEqual(C.entities(["I-PER", "B-PER", "O"]), {(0, 1, "PER"), (1, 2, "PER")})
        self.assertEqual(C.entities(["I-PER", "I-LOC"]), {(0, 1, "PER"), (1, 2, "LOC")})
        self.assertEqual(C.entities(["B-ORG", "I-ORG"]), {(0, 2, "ORG")})
        self.assertEqual(C.entities(["O", "O"]), set())

    def test_f1_and_token_accuracy_golden(self):
        gold = [["I-PER", "I-PER", "O", "I-LOC"], ["I-MISC", "B-MISC", "O"], ["O", "O"]]
        pred = [["I-PER", "I-PER", "O", "I-ORG"], ["I-MISC", "B-MISC", "O"], ["I-ORG", "O"]]
        # 3 right of 5 predicted and 4 gold: P 0.6, R 0.75
        self.assertEqual(C.entity_counts(gold, pred), (3, 5, 4))
        self.assertAlmostEqual(C.entity_f1(gold, pred), 2 / 3)
        self.assertAlmostEqual(C.token_accuracy(gold, pred), 7 / 9)
        self.assertEqual(C.entity_f1([["O"]], [["O"]]), 0.0)
        self.assertEqual(C.entity_f1([["I-PER"]], [["O"]]), 0.0)
        self.assertEqual(C.entity_f1([["O"]], [["I-PER"]]), 0.0)

    def test_root_accuracy(self):
        self.assertEqual(C.root_accuracy([1, 2, 3, 4], [1, 0, 3, 0]), 0.5)
        self.assertEqual(C.root_accuracy([], []), 0.0)


TREES = "(3 (2 (2 The) (2 Rock)) (4 (3 (2 is) (4 destined)) (2 .)))\n\n(1 (2 not) (1 (0 awful) (2 .)))\n(2 word)\n"


class Trees(unittest.TestCase):
    def test_read(self):
        trees = C.parse_trees(TREES, "f")
        self.assertEqual(len(trees), 3)
        self.assertEqual(C.tree_words(trees[0]), ["The", "Rock", "is", "destined", "."])
        self.assertEqual([C.tree_size(t) for t in trees], [9, 5, 1])
        self.assertEqual(len(C.parse_trees(TREES, "f", max_trees=2)), 2)
        self.assertEqual(C.Vocab.from_trees(trees).words, ["<unk>", "The", "Rock", "is", "destined", ".", "not", "awful",
                                                         "word"])

    def test_errors(self):
        cases = [
            ("(3 (2 a) (2 b)\n", r"^f:1:15: unbalanced"),
            ("(3 (2 a))\n", r"^f:1:9: non-binary"),
            ("(7 a)\n", r"^f:1:2: label 7 is out of range"),
            ("(x a)\n", r"^f:1:2: expected an integer label"),
            ("(2 a) b\n", r"^f:1:7: expected '\(' or '\)'"),
            ("", r"^f:1:1: no trees found"),
        ]
        for text, message in cases:
            with self.assertRaisesRegex(C.DataError, message):
                C.parse_trees(text, "f")

    def test_plan_computes_every_tree_as_recursion_does(self):
        trees = C.parse_trees(TREES, "f")
        vocab = C.Vocab.from_trees(trees)
        flats = [C.flatten_tree(t, vocab) for t in trees]
        plan = C.tree_batch_plan(flats)
        self.assertEqual(plan.nodes, 15)
        self.assertEqual(len(plan.labels), 15)
        self.assertEqual(plan.root_labels, [3, 1, 2])
        # symbolic evaluation: a leaf is its word index, a node the pair of its children
        values = list(plan.leaf_words)
        start = len(values)
        for left, right in plan.levels:
            self.assertTrue(all(x < start for x in left + right), "children are numbered before their level")
            values.extend((values[a], values[b]) for a, b in zip(left, right))
            start = len(values)

        def naive(t):
            return vocab.index(t.word) if t.word is not None else (naive(t.children[0]), naive(t.children[1]))

        self.assertEqual([values[r] for r in plan.roots], [naive(t) for t in trees])
        labels_by_value = {}
        for v, lab in zip(values, plan.labels):
            labels_by_value.setdefault(v, lab)
        self.assertEqual(labels_by_value[values[plan.roots[0]]], 3)


class Pyramids(unittest.TestCase):
    def test_plan_computes_every_pyramid(self):
        lengths = [3, 1, 5, 2, 1, 4]
        plan = C.pyramid_plan(lengths)
        self.assertEqual(plan.compositions, sum(n * (n - 1) // 2 for n in lengths))
        level = [(s, i) for s, n in enumerate(lengths) for i in range(n)]
        roots = [level[r] for r in plan.root_rows[0]]
        for (left, right), rows in zip(plan.levels, plan.root_rows[1:]):
            level = [(level[a], level[b]) for a, b in zip(left, right)]
            roots.extend(level[r] for r in rows)
        in_batch_order = [roots[plan.root_perm[s]] for s in range(len(lengths))]

        def naive(s, n):
            xs = [(s, i) for i in range(n)]
            while len(xs) > 1:
                xs = [(xs[i], xs[i + 1]) for i in range(len(xs) - 1)]
            return xs[0]

        self.assertEqual(in_batch_order, [naive(s, n) for s, n in enumerate(lengths)])
        self.assertEqual(sorted(plan.root_order), list(range(len(lengths))))

    def test_refuses_an_empty_sentence(self):
        with self.assertRaises(ValueError):
            C.pyramid_plan([2, 0])


class Batches(unittest.TestCase):
    def test_batch_at_wraps_as_the_bench_does(self):
        items = list(range(10))
        self.assertEqual(C.batch_at(items, 4, 0), [0, 1, 2, 3])
        self.assertEqual(C.batch_at(items, 4, 1), [4, 5, 6, 7])
        self.assertEqual(C.batch_at(items, 4, 2), [2, 3, 4, 5])  # (2·4) mod (10 − 4)
        self.assertEqual(C.batch_at(items, 16, 3), items)


def load_harness():
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compare-accuracy.py")
    spec = importlib.util.spec_from_file_location("compare_accuracy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class AccuracyHarness(unittest.TestCase):
    def test_device_folder_as_the_bench_names_it(self):
        h = load_harness()
        self.assertEqual(h.device_slug("NVIDIA H100 80GB HBM3"), "h100")
        self.assertEqual(h.device_slug("NVIDIA H200"), "h200")
        self.assertEqual(h.device_slug("Intel(R) Xeon(R) Processor @ 2.50GHz (2 cores)"), "cpu-intel-xeon-2c")

    def test_bound_uses_the_larger_seed_std(self):
        h = load_harness()
        side = lambda xs: {"runs": [{}] * len(xs), "errors": [], "mean": h.stats(xs)[0], "std": h.stats(xs)[1]}  # noqa: E731
        self.assertEqual(h.stats([1.0, 2.0, 3.0]), (2.0, 1.0))  # sample std (n − 1)
        v = h.verdict("treelstm", side([48.0, 49.0, 50.0]), side([47.0, 47.5, 48.0]))
        self.assertEqual((v["sigma"], v["bound"], v["difference"], v["pass"]), (1.0, 2.0, 1.5, True))
        v = h.verdict("treelstm", side([48.0, 48.0, 48.0]), side([46.0, 46.0, 46.0]))
        self.assertEqual((v["bound"], v["pass"]), (1.5, False))  # the floor: max(1.5, 2σ) with σ = 0
        v = h.verdict("bilstm", side([80.0, 80.0, 80.0]), side([78.5, 78.5, 78.5]))
        self.assertEqual((v["bound"], v["pass"]), (2.0, True))  # taggers: max(2, 2σ)
        failed = side([48.0])
        failed["errors"] = ["seed 2: exit status 1"]
        self.assertIsNone(h.verdict("rvnn", failed, side([48.0, 49.0]))["pass"])


if __name__ == "__main__":
    unittest.main()
