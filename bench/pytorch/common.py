"""The pure-Python half of the PyTorch references (no torch here, so that it is unit-tested anywhere): the data
readers (SST trees, tagged sentences and the seeded split of /work/tools/MODELS16.md), vocabularies exactly as
vpps builds them, the metrics (root accuracy, entity F1, token accuracy) and the index plans of level-batched
trees and pyramids. torch_common.py (the training loop, timing, the command line) and the model scripts build on it.
"""

from __future__ import annotations

import os
import re

UNK = "<unk>"
SST_LABELS = 5


class DataError(Exception):
    """A data file or option that cannot be used; the command line prints it as one line."""


def read_text(path, what="data file"):
    """The text of `path` as strict UTF-8 (a byte-order mark dropped); a failure is one DataError naming the file."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise DataError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise DataError(f"{what} {path} is a directory, not a file") from None
    except OSError as e:
        raise DataError(f"{what} {path} cannot be read ({e.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DataError(f"{what} {path}:{line}: invalid UTF-8; save the file as UTF-8") from None
    return text[1:] if text.startswith("\ufeff") else text


# ---------------------------------------------------------------------------------------------------------------
# SST trees: one binarized tree per line, `(3 (2 (2 The) (2 Rock)) (4 ...))`, a label on every node, every word in a
# one-child preterminal (src/data/sst.ts). Whitespace is space, tab and CR, as there.


class Tree:
    __slots__ = ("label", "word", "children")

    def __init__(self, label, word=None, children=None):
        self.label = label
        self.word = word
        self.children = children if children is not None else []


_SST_TOKEN = re.compile(r"\(|\)|[^ \t\r()]+")
_LABEL = re.compile(r"[0-9]+")


def parse_trees(text, file="<input>", max_trees=None):
    trees = []
    text = text[1:] if text.startswith("\ufeff") else text
    for line_no, line in enumerate(text.split("\n"), 1):
        if max_trees is not None and len(trees) >= max_trees:
            break
        if line.strip(" \t\r") == "":
            continue
        trees.append(_parse_tree_line(line, file, line_no))
    if not trees:
        raise DataError(f"{file}:1:1: no trees found: expected one tree per line, e.g. '(3 (2 a) (2 b))'")
    return trees


def read_trees(path, max_trees=None):
    return parse_trees(read_text(path, "tree file"), path, max_trees)


def _parse_tree_line(line, file, line_no):
    toks = [(m.group(), m.start()) for m in _SST_TOKEN.finditer(line)]

    def fail(pos, detail):
        raise DataError(f"{file}:{line_no}:{pos + 1}: {detail}")

    stack = []
    root = None
    i = 0
    n = len(toks)
    while i < n:
        tok, pos = toks[i]
        if tok == "(":
            if root is not None and not stack:
                fail(pos, "expected end of line after the tree, found '('")
            if i + 1 >= n or not _LABEL.fullmatch(toks[i + 1][0]):
                found = toks[i + 1][0] if i + 1 < n else "end of line"
                fail(toks[i + 1][1] if i + 1 < n else len(line), f"expected an integer label 0..4, found '{found}'")
            label = int(toks[i + 1][0])
            if label >= SST_LABELS:
                fail(toks[i + 1][1], f"label {label} is out of range: expected 0..{SST_LABELS - 1}")
            node = Tree(label)
            if stack:
                parent = stack[-1]
                if len(parent.children) == 2:
                    fail(pos, "non-binary node: a third child; expected exactly two")
                parent.children.append(node)
            else:
                root = node
            if i + 2 < n and toks[i + 2][0] not in ("(", ")"):
                node.word = toks[i + 2][0]
                if i + 3 >= n or toks[i + 3][0] != ")":
                    fail(toks[i + 3][1] if i + 3 < n else len(line), f"expected ')' after the word '{node.word}'")
                i += 4
            else:
                stack.append(node)
                i += 2
        elif tok == ")":
            if not stack:
                fail(pos, "unbalanced parentheses: found ')' with no open '(' to close")
            node = stack.pop()
            if len(node.children) != 2:
                fail(pos, "non-binary node: expected a word or two subtrees")
            i += 1
        else:
            fail(pos, f"expected '(' or ')', found '{tok}'")
    if stack:
        fail(len(line), "unbalanced parentheses: expected ')', found end of line")
    return root


def tree_words(tree):
    """The words at the preterminals, left to right (an explicit stack: trees can be deep)."""
    words = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if node.word is not None:
            words.append(node.word)
        else:
            stack.extend(reversed(node.children))
    return words


def tree_size(tree):
    count = 0
    stack = [tree]
    while stack:
        node = stack.pop()
        count += 1
        stack.extend(node.children)
    return count


# ---------------------------------------------------------------------------------------------------------------
# Tagged sentences: `word|TAG` tokens separated by runs of whitespace, one sentence per line, empty lines skipped.


class TaggedSentence:
    __slots__ = ("words", "tags", "file", "line", "tag_columns")

    def __init__(self, words, tags, file, line, tag_columns):
        self.words = words
        self.tags = tags
        self.file = file
        self.line = line
        self.tag_columns = tag_columns


_WS_TOKEN = re.compile(r"[^ \t\r]+")  # separators: space, tab, CR (src/data/tagged.ts)


def parse_tagged(text, file="<input>"):
    """Every sentence of `text`; a token is split at its last '|' (a word may hold '|', a tag may not)."""
    sentences = []
    text = text[1:] if text.startswith("\ufeff") else text
    for line_no, line in enumerate(text.split("\n"), 1):
        words, tags, columns = [], [], []
        for m in _WS_TOKEN.finditer(line):
            token = m.group()
            bar = token.rfind("|")
            where = f"{file}:{line_no}:{m.start() + 1}"
            if bar < 0:
                raise DataError(f"{where}: token '{token}' has no '|': expected word|TAG")
            if bar == 0:
                raise DataError(f"{where}: token '{token}' has an empty word: expected word|TAG")
            if bar == len(token) - 1:
                # at the column where the tag should start, as src/data/tagged.ts reports it
                tag_at = f"{file}:{line_no}:{m.start() + bar + 2}"
                raise DataError(f"{tag_at}: token '{token}' has an empty tag: expected word|TAG")
            words.append(token[:bar])
            tags.append(token[bar + 1 :])
            columns.append(m.start() + bar + 2)
        if words:
            sentences.append(TaggedSentence(words, tags, file, line_no, columns))
    if not sentences:
        raise DataError(f"{file}:1:1: no sentences found: expected word|TAG tokens, one sentence per line")
    return sentences


def read_tagged(path):
    return parse_tagged(read_text(path, "tagged file"), path)


def fnv1a32(text):
    """FNV-1a, 32 bits, of the UTF-8 bytes of `text`."""
    h = 0x811C9DC5
    for byte in text.encode("utf-8"):
        h ^= byte
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def split_of(index, split_seed=1):
    """Sentence `index` (0-based, non-empty lines) of a file split by the seeded rule: 'test', 'dev' or 'train'."""
    r = fnv1a32(f"{split_seed}:{index}") % 10
    return "test" if r == 0 else "dev" if r == 1 else "train"


def split_tagged(sentences, split_seed=1):
    out = {"train": [], "dev": [], "test": []}
    for i, s in enumerate(sentences):
        out[split_of(i, split_seed)].append(s)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Vocabularies (src/data/vocab.ts): `<unk>` at index 0, then words in order of first appearance.


class Vocab:
    def __init__(self, words):
        self.words = [UNK]
        self.indices = {UNK: 0}
        for w in words:
            if w not in self.indices:
                self.indices[w] = len(self.words)
                self.words.append(w)

    @property
    def size(self):
        return len(self.words)

    def index(self, word):
        return self.indices.get(word, 0)

    @classmethod
    def from_trees(cls, trees):
        return cls(w for t in trees for w in tree_words(t))

    @classmethod
    def counted(cls, word_lists, min_count=1):
        """The words seen at least `min_count` times, in order of first appearance."""
        counts = {}
        for words in word_lists:
            for w in words:
                counts[w] = counts.get(w, 0) + 1
        return cls(w for w, c in counts.items() if c >= min_count)


class TaggerVocab:
    """Words (those seen ≥ min_count times in training), tags and characters (0: unknown) of the training split."""

    def __init__(self, train, min_count=1):
        self.words = Vocab.counted((s.words for s in train), min_count)
        self.tags = []
        self.tag_index = {}
        self.chars = {}
        for s in train:
            for t in s.tags:
                if t not in self.tag_index:
                    self.tag_index[t] = len(self.tags)
                    self.tags.append(t)
            for w in s.words:
                for ch in w:
                    if ch not in self.chars:
                        self.chars[ch] = len(self.chars) + 1

    @property
    def size(self):
        return self.words.size

    def encode(self, s):
        tags = []
        for tag, col in zip(s.tags, s.tag_columns):
            k = self.tag_index.get(tag)
            if k is None:
                raise DataError(
                    f"{s.file}:{s.line}:{col}: tag '{tag}' does not occur in the training split "
                    f"(known: {', '.join(self.tags)})"
                )
            tags.append(k)
        ids = [self.words.index(w) for w in s.words]
        chars = [tuple(self.chars.get(ch, 0) for ch in w) for w in s.words]
        return TaggedExample(ids, chars, tags)


class TaggedExample:
    """A sentence as the taggers read it: table indices (0: not in the table), character indices, tag indices."""

    __slots__ = ("ids", "chars", "tags")

    def __init__(self, ids, chars, tags):
        self.ids = ids
        self.chars = chars
        self.tags = tags


class SentenceExample:
    """An SST sentence for the pyramid models: its word indices and its root label."""

    __slots__ = ("ids", "label")

    def __init__(self, ids, label):
        self.ids = ids
        self.label = label


# ---------------------------------------------------------------------------------------------------------------
# Metrics, in [0, 1] as vpps reports them.


def root_accuracy(gold, predicted):
    if not gold:
        return 0.0
    return sum(1 for g, p in zip(gold, predicted) if g == p) / len(gold)


def entities(tags):
    """The entities of one sentence's IOB1 tags as (start, end exclusive, type): a maximal run of one type, a
    `B-X` starting a new one; a tag without an `I-`/`B-` prefix is its own type (continuing like `I-`)."""
    out = set()
    start = None
    kind = None
    for i, tag in enumerate(list(tags) + ["O"]):
        if tag == "O":
            if start is not None:
                out.add((start, i, kind))
            start = None
            continue
        prefix, t = (tag[0], tag[2:]) if tag[:2] in ("I-", "B-") else ("I", tag)
        if start is not None and t == kind and prefix == "I":
            continue
        if start is not None:
            out.add((start, i, kind))
        start, kind = i, t
    return out


def entity_counts(gold_seqs, pred_seqs):
    """(correct, predicted, gold) entity counts over sentences."""
    correct = predicted = gold = 0
    for g, p in zip(gold_seqs, pred_seqs):
        eg, ep = entities(g), entities(p)
        correct += len(eg & ep)
        predicted += len(ep)
        gold += len(eg)
    return correct, predicted, gold


def entity_f1(gold_seqs, pred_seqs):
    """CoNLL entity F1 over exact (start, end, type) matches; 0 when nothing is predicted, present or right."""
    correct, predicted, gold = entity_counts(gold_seqs, pred_seqs)
    if correct == 0 or predicted == 0 or gold == 0:
        return 0.0
    p = correct / predicted
    r = correct / gold
    return 2 * p * r / (p + r)


def token_accuracy(gold_seqs, pred_seqs):
    total = right = 0
    for g, p in zip(gold_seqs, pred_seqs):
        total += len(g)
        right += sum(1 for a, b in zip(g, p) if a == b)
    return right / total if total else 0.0


# ---------------------------------------------------------------------------------------------------------------
# Level-batched trees: all nodes of one height of a batch's trees in one batched op.


class FlatTree:
    """A tree in post-order: per node its word index (-1 inside), children (-1 at a leaf), label and height
    (preterminals 0); `by_height[h]` the nodes of height h."""

    __slots__ = ("words", "left", "right", "labels", "height", "root", "by_height")

    def __init__(self, words, left, right, labels, height, root):
        self.words = words
        self.left = left
        self.right = right
        self.labels = labels
        self.height = height
        self.root = root
        self.by_height = [[] for _ in range(height[root] + 1)]
        for j, h in enumerate(height):
            self.by_height[h].append(j)

    @property
    def size(self):
        return len(self.labels)


def flatten_tree(tree, vocab):
    words, left, right, labels, height = [], [], [], [], []
    built = []  # the ids of built subtrees, left before right
    stack = [(tree, False)]
    while stack:
        node, expanded = stack.pop()
        if node.word is None and not expanded:
            stack.append((node, True))
            stack.append((node.children[1], False))
            stack.append((node.children[0], False))
            continue
        j = len(labels)
        if node.word is not None:
            words.append(vocab.index(node.word))
            left.append(-1)
            right.append(-1)
            height.append(0)
        else:
            r = built.pop()
            lf = built.pop()
            words.append(-1)
            left.append(lf)
            right.append(r)
            height.append(1 + max(height[lf], height[r]))
        labels.append(node.label)
        built.append(j)
    return FlatTree(words, left, right, labels, height, built.pop())


class TreePlan:
    """A batch of trees, numbered by height (all leaves first, then every node of height 1, …): `leaf_words` the
    leaves' word indices; `levels[k]` = (left, right) child numbers of the nodes of height k + 1, all below that
    level's first number; `labels` every node's label in this numbering; `roots` the trees' root numbers."""

    __slots__ = ("leaf_words", "levels", "labels", "roots", "root_labels", "nodes")

    def __init__(self, leaf_words, levels, labels, roots, root_labels, nodes):
        self.leaf_words = leaf_words
        self.levels = levels
        self.labels = labels
        self.roots = roots
        self.root_labels = root_labels
        self.nodes = nodes


def tree_batch_plan(flats):
    heights = max(len(f.by_height) for f in flats)
    number = [[0] * f.size for f in flats]
    n = 0
    labels, leaf_words, levels = [], [], []
    for h in range(heights):
        left, right = [], []
        for t, f in enumerate(flats):
            if h >= len(f.by_height):
                continue
            g = number[t]
            for j in f.by_height[h]:
                g[j] = n
                n += 1
                labels.append(f.labels[j])
                if h == 0:
                    leaf_words.append(f.words[j])
                else:
                    left.append(g[f.left[j]])
                    right.append(g[f.right[j]])
        if h > 0:
            levels.append((left, right))
    roots = [number[t][f.root] for t, f in enumerate(flats)]
    root_labels = [f.labels[f.root] for f in flats]
    return TreePlan(leaf_words, levels, labels, roots, root_labels, n)


# ---------------------------------------------------------------------------------------------------------------
# Level-batched pyramids: level k of every sentence of a batch as one batched op.


class PyramidPlan:
    """Level k of a batch holds, for each sentence of n > k words in batch order, its n − k nodes in a row.
    `levels[k]` = (left, right): for each node of level k + 1, its two inputs' rows in level k. `root_rows[k]`: the
    rows of level k that are roots (their sentences' one node), `root_order` the sentences of those roots, level by
    level, and `root_perm[s]` where sentence s's root is in that order (so that gathering puts them in batch order)."""

    __slots__ = ("levels", "root_rows", "root_order", "root_perm", "compositions")

    def __init__(self, levels, root_rows, root_order, root_perm, compositions):
        self.levels = levels
        self.root_rows = root_rows
        self.root_order = root_order
        self.root_perm = root_perm
        self.compositions = compositions


def pyramid_plan(lengths):
    if any(n < 1 for n in lengths):
        raise ValueError(f"pyramid_plan: every sentence needs a word; got lengths {list(lengths)}")
    offsets = {}
    pos = 0
    for s, n in enumerate(lengths):
        offsets[s] = pos
        pos += n
    active = list(range(len(lengths)))
    root_rows = [[offsets[s] for s in active if lengths[s] == 1]]
    root_order = [s for s in active if lengths[s] == 1]
    levels = []
    compositions = 0
    k = 0
    while True:
        nxt = [s for s in active if lengths[s] - k >= 2]
        if not nxt:
            break
        left, right, new_offsets, pos = [], [], {}, 0
        for s in nxt:
            count = lengths[s] - k - 1
            base = offsets[s]
            new_offsets[s] = pos
            left.extend(range(base, base + count))
            right.extend(range(base + 1, base + count + 1))
            pos += count
        compositions += pos
        k += 1
        levels.append((left, right))
        done = [s for s in nxt if lengths[s] - k == 1]
        root_rows.append([new_offsets[s] for s in done])
        root_order.extend(done)
        active, offsets = nxt, new_offsets
    perm = [0] * len(lengths)
    for i, s in enumerate(root_order):
        perm[s] = i
    return PyramidPlan(levels, root_rows, root_order, perm, compositions)


# ---------------------------------------------------------------------------------------------------------------
# Data sets as `vpps train <model> --data` and `vpps bench <model> --data` read them.


def load_split(kind, data, max_train=None, split_seed=1):
    """(train, dev, source) of `--data`. SST (kind trees/sentences): a directory with train.txt and dev.txt.
    Tagged: a directory with train.txt and dev.txt as they are; one with only dev.txt, or a file, split by the seeded
    rule. The first `max_train` training examples when given."""
    if kind == "tagged":
        train_file = os.path.join(data, "train.txt")
        dev_file = os.path.join(data, "dev.txt")
        if os.path.isdir(data) and os.path.exists(train_file) and os.path.exists(dev_file):
            train, dev = read_tagged(train_file), read_tagged(dev_file)
            source = data
        else:
            whole = dev_file if os.path.isdir(data) else data
            if os.path.isdir(data) and not os.path.exists(whole):
                raise DataError(f"--data {data}: no dev.txt there; give train.txt and dev.txt, or one file to split")
            parts = split_tagged(read_tagged(whole), split_seed)
            train, dev = parts["train"], parts["dev"]
            source = f"{whole} (split seed {split_seed}: {len(train)} train, {len(dev)} dev, {len(parts['test'])} test)"
    else:
        for name in ("train.txt", "dev.txt"):
            if not os.path.exists(os.path.join(data, name)):
                raise DataError(f"--data {data}: no {name} there; the directory must hold train.txt and dev.txt")
        train = read_trees(os.path.join(data, "train.txt"), max_train)
        dev = read_trees(os.path.join(data, "dev.txt"))
        source = data
    if max_train is not None:
        train = train[:max_train]
    return train, dev, source


def load_bench_items(kind, data, max_items, split_seed=1):
    """What `vpps bench <model> --data` trains on: a directory's training split, or every example of one file; the
    first `max_items`."""
    if os.path.isdir(data):
        return load_split(kind, data, max_items, split_seed)[0]
    items = read_tagged(data) if kind == "tagged" else read_trees(data, max_items)
    return items[:max_items]


def batch_at(items, size, k):
    """Batch k of `size` consecutive items, wrapping around (src/bench/trees.ts: every engine sees these batches)."""
    start = (k * size) % max(1, len(items) - size)
    return items[start : start + size]


def cuda_event_times(torch, fn, warmup, repeats):
    """Milliseconds of `repeats` calls of fn, each between two CUDA events, after `warmup` untimed calls (the torch
    module is passed in: this file stays importable without torch)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times
