"""The torch half of the PyTorch references, shared by every model script: parameters initialised with vpps's
distributions, index uploads, the optimisers (Adam as vpps and DyNet do it, or SGD) after clipping the global
gradient norm, the training loop, the throughput timing and the command line (`<model>.py train|bench`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import struct
import sys
import time
import warnings

import common as C

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as _e:
    sys.stderr.write(f"{sys.argv[0]}: PyTorch is not importable ({_e}); the references need python3 with torch\n")
    sys.exit(3)

__all__ = ["torch", "F", "nn"]

# ---------------------------------------------------------------------------------------------------------------
# Parameters, initialised as vpps's ParameterCollection does (same distributions, not the same numbers).


def matrix(rows, cols):
    """Glorot uniform, ±√(6 / (fan_in + fan_out))."""
    bound = math.sqrt(6.0 / (rows + cols))
    return nn.Parameter(torch.empty(rows, cols).uniform_(-bound, bound))


def stacked(*blocks):
    """Matrices of one input, each initialised as its own [rows, cols] matrix, stacked into one (one product)."""
    parts = []
    for rows, cols in blocks:
        bound = math.sqrt(6.0 / (rows + cols))
        parts.append(torch.empty(rows, cols).uniform_(-bound, bound))
    return nn.Parameter(torch.cat(parts, 0))


def vector(n):
    return nn.Parameter(torch.zeros(n))


def table(rows, dim):
    """A lookup table, uniform ±√(3 / dim)."""
    bound = math.sqrt(3.0 / dim)
    return nn.Parameter(torch.empty(rows, dim).uniform_(-bound, bound))


def lstm(input_size, hidden):
    """A bidirectional cuDNN LSTM initialised as vpps's: W_x [4H, in] and W_h [4H, H] Glorot, one zero bias per
    gate. nn.LSTM has two biases (b_ih + b_hh); b_hh stays zero and frozen, so that Adam moves one bias per gate as
    vpps's does (two biases with equal gradients would move the sum at twice the rate)."""
    layer = nn.LSTM(input_size, hidden, batch_first=True, bidirectional=True)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if name.startswith("weight"):
                bound = math.sqrt(6.0 / (p.shape[0] + p.shape[1]))
                p.uniform_(-bound, bound)
            else:
                p.zero_()
            if name.startswith("bias_hh"):
                p.requires_grad_(False)
    return layer


def torch_gates(w, hidden):
    """vpps's LSTM gate blocks [i; o; u; f] in nn.LSTM's order [i; f; g; o]."""
    h = hidden
    return torch.cat([w[0:h], w[3 * h : 4 * h], w[2 * h : 3 * h], w[h : 2 * h]], 0)


def upload(device, *lists):
    """Index lists as int64 tensors on `device` in one pinned, asynchronous copy (no wait for the GPU)."""
    flat = []
    bounds = []
    for xs in lists:
        bounds.append((len(flat), len(flat) + len(xs)))
        flat.extend(xs)
    t = torch.tensor(flat, dtype=torch.long)
    if device.type == "cuda":
        t = t.pin_memory().to(device, non_blocking=True)
    return [t[a:b] for a, b in bounds]


# ---------------------------------------------------------------------------------------------------------------
# vpps's weights (safetensors, as `saveParameters` writes them), for the first-loss check of `vpps bench --reference`.


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack("<Q", buf[:8])[0]
    header = json.loads(buf[8 : 8 + n].decode("utf-8"))
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] != "F32":
            raise C.DataError(f"{path}: tensor '{name}' has dtype {e['dtype']}; expected F32")
        b, end = e["data_offsets"]
        data = bytearray(buf[8 + n + b : 8 + n + end])
        out[name] = torch.frombuffer(data, dtype=torch.float32).reshape(e["shape"])
    return out


class Weights:
    """vpps's tensors by name, copied into the reference's parameters; a missing name or shape is one DataError."""

    def __init__(self, path):
        self.path = path
        self.tensors = read_safetensors(path)

    def __getitem__(self, name):
        t = self.tensors.get(name)
        if t is None:
            raise C.DataError(
                f"--init-from {self.path}: no tensor '{name}' (it has {', '.join(self.tensors)}); "
                "the reference's load_vpps must follow the model's parameter names"
            )
        return t

    @torch.no_grad()
    def set(self, param, value, name):
        if tuple(param.shape) != tuple(value.shape):
            raise C.DataError(
                f"--init-from {self.path}: '{name}' has shape {list(value.shape)}; the reference's parameter has "
                f"{list(param.shape)} (a different vocabulary or size?)"
            )
        param.copy_(value)


# ---------------------------------------------------------------------------------------------------------------
# The optimisers.


class Optimizer:
    """Clips the global gradient norm, then Adam or SGD. Adam as vpps's AdamTrainer (and DyNet): every dense
    parameter every step (zero gradients kept, not None), a lookup table only in the rows the batch touched, with
    the global step count in the bias correction; torch.optim.Adam does the dense ones."""

    def __init__(self, model, kind, lr, clip):
        self.kind = kind
        self.lr = lr
        self.clip = clip
        self.tables = list(model.tables())
        table_ids = {id(t) for t in self.tables}
        self.dense = [p for p in model.parameters() if p.requires_grad and id(p) not in table_ids]
        self.params = self.dense + self.tables
        self.steps = 0
        if kind == "adam":
            for p in self.params:
                p.grad = torch.zeros_like(p)
            self.inner = torch.optim.Adam(self.dense, lr=lr, betas=(0.9, 0.999), eps=1e-8)
            self.m = [torch.zeros_like(t) for t in self.tables]
            self.v = [torch.zeros_like(t) for t in self.tables]
        else:
            self.inner = torch.optim.SGD(self.params, lr=lr)

    def zero_grad(self):
        if self.kind == "adam":
            for p in self.params:
                p.grad.zero_()
        else:
            self.inner.zero_grad(set_to_none=True)

    @torch.no_grad()
    def step(self, touched):
        """`touched`: per lookup table, the distinct rows this batch read (int64 on the device)."""
        if self.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.inner.step()
        if self.kind != "adam":
            return
        self.steps += 1
        b1, b2, eps = 0.9, 0.999, 1e-8
        c1 = 1 - b1**self.steps
        c2 = 1 - b2**self.steps
        for t, m, v, rows in zip(self.tables, self.m, self.v, touched):
            if rows.numel() == 0:
                continue
            g = t.grad.index_select(0, rows)
            mr = m.index_select(0, rows).mul_(b1).add_(g, alpha=1 - b1)
            vr = v.index_select(0, rows).mul_(b2).addcmul_(g, g, value=1 - b2)
            m.index_copy_(0, rows, mr)
            v.index_copy_(0, rows, vr)
            t.index_add_(0, rows, mr.div_(c1).div_(vr.div_(c2).sqrt_().add_(eps)).mul_(-self.lr))


# ---------------------------------------------------------------------------------------------------------------
# Devices and timing.


def pick_device(name):
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise C.DataError(f"--device {name}: torch sees no CUDA device here (use --device cpu)")
    device = torch.device(name)
    if device.type == "cuda":
        # vpps's engines multiply in FP32: no TF32 in cuBLAS or in cuDNN (the LSTMs)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = False
        except (AttributeError, RuntimeError) as e:
            sys.stderr.write(f"could not turn TF32 off ({e}); products may round to TF32\n")
    return device


def device_name(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model} ({os.cpu_count()} cores)"


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------------------------------------------------------
# A task: what a model script declares; the data, vocabulary, encoding and metrics come from its kind.


class Task:
    """`kind`: "trees" (SST trees), "sentences" (SST leaf words and root label) or "tagged". `create(vocab,
    options)` builds the nn.Module (tables(), batch_loss(examples) → (summed loss, touched rows per table),
    predict(examples) → classes per example, load_vpps(weights)); `units(example)` its loss terms."""

    def __init__(self, name, kind, options, create, units, vocabulary=None):
        self.name = name
        self.kind = kind
        self.options = options
        self.create = create
        self.units = units
        self._vocabulary = vocabulary

    def vocabulary(self, train, options):
        if self._vocabulary is not None:
            return self._vocabulary(train, options)
        if self.kind == "tagged":
            return C.TaggerVocab(train)
        return C.Vocab.from_trees(train)

    def encode(self, example, vocab):
        if self.kind == "trees":
            return C.flatten_tree(example, vocab)
        if self.kind == "sentences":
            return C.SentenceExample([vocab.index(w) for w in C.tree_words(example)], example.label)
        return vocab.encode(example)

    def metrics(self, examples, predicted, vocab):
        """Every metric, the first deciding the best epoch (vpps's first metric: `devAccuracy`)."""
        if self.kind == "tagged":
            gold = [[vocab.tags[t] for t in e.tags] for e in examples]
            pred = [[vocab.tags[t] for t in p] for p in predicted]
            return {"entityF1": C.entity_f1(gold, pred), "tokenAccuracy": C.token_accuracy(gold, pred)}
        gold = [e.labels[e.root] if self.kind == "trees" else e.label for e in examples]
        return {"rootAccuracy": C.root_accuracy(gold, [p[0] for p in predicted])}


# ---------------------------------------------------------------------------------------------------------------
# Training and evaluation.


@torch.no_grad()
def evaluate(model, task, examples, vocab, batch=256):
    model.eval()
    predicted = []
    for start in range(0, len(examples), batch):
        predicted.extend(model.predict(examples[start : start + batch]))
    model.train()
    return task.metrics(examples, predicted, vocab)


def train(task, args, log):
    device = pick_device(args.device)
    torch.manual_seed(args.seed)
    raw_train, raw_dev, source = C.load_split(task.kind, args.data, args.max_sentences, args.split_seed)
    options = model_options(task, args)
    vocab = task.vocabulary(raw_train, options)
    train_set = [task.encode(x, vocab) for x in raw_train]
    dev_set = [task.encode(x, vocab) for x in raw_dev]
    model = task.create(vocab, options).to(device)
    opt = Optimizer(model, "adam", args.lr, args.clip)
    log(f"data: {source}: {len(train_set)} training, {len(dev_set)} dev, vocabulary {vocab.size}")
    log(f"model: {task.name} {options}; adam lr {args.lr}, batch {args.batch}, clip {args.clip}, seed {args.seed}, "
        f"{device_name(device)}")
    t_start = time.perf_counter()
    epochs = []
    for epoch in range(1, args.epochs + 1):
        order = list(range(len(train_set)))
        random.Random(args.seed * 1_000_003 + epoch).shuffle(order)
        model.train()
        sync(device)
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        units = 0
        for start in range(0, len(order), args.batch):
            batch = [train_set[i] for i in order[start : start + args.batch]]
            opt.zero_grad()
            loss, touched = model.batch_loss(batch)
            loss.backward()
            opt.step(touched)
            loss_sum += loss.detach()
            units += sum(task.units(e) for e in batch)
        sync(device)
        seconds = time.perf_counter() - t0
        train_loss = loss_sum.item() / max(units, 1)
        if not math.isfinite(train_loss):
            raise C.DataError(f"training diverged: the loss became {train_loss} in epoch {epoch}; lower --lr")
        dev = evaluate(model, task, dev_set, vocab)
        first = next(iter(dev.values()))
        epochs.append({"epoch": epoch, "trainLoss": train_loss, "devAccuracy": first, "devMetrics": dev,
                       "seconds": seconds, "sentencesPerSecond": len(order) / seconds})
        shown = "  ".join(f"{k} {100 * v:.2f}%" for k, v in dev.items())
        speed = len(order) / seconds
        log(f"epoch {epoch}: train loss {train_loss:.4f}  dev {shown}  {speed:.1f} sent/s  {seconds:.1f} s")
    best = max(epochs, key=lambda e: e["devAccuracy"])
    return {
        "model": task.name, "reference": "pytorch", "seed": args.seed, "epochs": args.epochs, "data": source,
        "train": len(train_set), "dev": len(dev_set), "vocabulary": vocab.size, "options": options,
        "optimizer": "adam", "learningRate": args.lr, "batch": args.batch, "clip": args.clip,
        "maxSentences": args.max_sentences, "device": device_name(device), "torch": torch.__version__,
        "perEpoch": epochs, "best": {"epoch": best["epoch"], "devAccuracy": best["devAccuracy"],
                                     "devMetrics": best["devMetrics"]},
        "bestDevAccuracy": best["devAccuracy"], "seconds": time.perf_counter() - t_start,
    }


# ---------------------------------------------------------------------------------------------------------------
# Throughput: training sentences/s (forward + backward + update) per batch size.


def bench(task, args, log):
    device = pick_device(args.device)
    torch.manual_seed(args.seed)
    raw = C.load_bench_items(task.kind, args.data, args.max_items, args.split_seed)
    options = model_options(task, args)
    vocab = task.vocabulary(raw, options)
    items = [task.encode(x, vocab) for x in raw]
    model = task.create(vocab, options).to(device)
    first_loss = None
    if args.init_from:
        model.load_vpps(Weights(args.init_from))
        with torch.no_grad():
            first_loss = model.batch_loss(C.batch_at(items, 8, 0))[0].item()
        log(f"first batch of 8 with vpps's initial weights: loss {first_loss:.6f}")
    opt = Optimizer(model, args.optimizer, args.lr, args.clip)
    name = device_name(device)
    log(f"{task.name} reference on {name}: {len(items)} examples, vocabulary {vocab.size}, {options}; "
        f"{args.optimizer} lr {args.lr}")
    rows = []
    k = 1  # as vpps's engines: batch 0 is the first-loss check's
    for size in args.batches:
        steps = max(1, round(args.sentences / size))
        warm = min(3, steps) + 1
        total = torch.zeros((), device=device)

        def step(size=size):
            nonlocal k, total
            opt.zero_grad()
            loss, touched = model.batch_loss(C.batch_at(items, size, k))
            k += 1
            loss.backward()
            opt.step(touched)
            total = total + loss.detach()

        for _ in range(warm):
            step()
        times = []
        for _ in range(args.repeats):
            sync(device)
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            sync(device)
            times.append(1000 * (time.perf_counter() - t0) / steps)
        if not math.isfinite(total.item()):
            raise C.DataError(f"the loss became {total.item()} at batch size {size}; lower --lr")
        ms = statistics.median(times)
        rows.append({"batch": size, "sentencesPerSecond": 1000 * size / ms, "msPerBatch": ms, "repeats": times,
                     "stepsPerRepeat": steps, "warmSteps": warm})
        log(f"pytorch batch {size:>3}: {1000 * size / ms:9.1f} sent/s, {ms:.2f} ms/batch (median of {args.repeats})")
    return {
        "model": task.name, "reference": "pytorch", "device": name, "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None, "data": args.data,
        "items": len(items), "vocabulary": vocab.size, "options": options, "optimizer": args.optimizer,
        "learningRate": args.lr, "clip": args.clip, "firstBatchLoss": first_loss, "rows": rows,
    }


# ---------------------------------------------------------------------------------------------------------------
# The command line.


def model_options(task, args):
    return {k: getattr(args, k) for k in task.options}


def positive_int(v):
    n = int(v)
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 1; got '{v}'")
    return n


def int_list(v):
    try:
        return sorted({positive_int(x) for x in v.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers ≥ 1; got '{v}'") from None


def parser_for(task):
    p = argparse.ArgumentParser(prog=f"{task.name}.py", description=f"PyTorch reference of vpps's {task.name}")
    sub = p.add_subparsers(dest="command", required=True)
    tr = sub.add_parser("train", help="train and report dev metrics per epoch")
    be = sub.add_parser("bench", help="training sentences/s per batch size")
    for q in (tr, be):
        q.add_argument("--data", required=True, help="SST directory (train.txt, dev.txt) or tagged data dir/file")
        q.add_argument("--seed", type=int, default=1)
        q.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
        q.add_argument("--clip", type=float, default=5.0)
        q.add_argument("--split-seed", type=int, default=1, help="the tagged data's seeded split")
        q.add_argument("--threads", type=positive_int, help="torch CPU threads")
        q.add_argument("--json", action="store_true", help="one JSON line on stdout (progress on stderr)")
        for key, default in task.options.items():
            q.add_argument(f"--{key.replace('_', '-')}", dest=key, type=positive_int, default=default)
    tr.add_argument("--epochs", type=positive_int, default=3)
    tr.add_argument("--batch", type=positive_int, default=16)
    tr.add_argument("--lr", type=float, default=0.001)
    tr.add_argument("--max-sentences", type=positive_int)
    be.add_argument("--batches", type=int_list, default=[1, 8, 32, 128])
    be.add_argument("--sentences", type=positive_int, default=256, help="sentences per timed repeat")
    be.add_argument("--repeats", type=positive_int, default=3)
    be.add_argument("--max-items", type=positive_int, default=8192, help="examples loaded (batches wrap around)")
    be.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    be.add_argument("--lr", type=float, default=0.05)
    be.add_argument("--init-from", help="vpps's initial weights (safetensors): print the first batch of 8's loss")
    return p


def run_cli(task, argv=None):
    args = parser_for(task).parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = sys.stdout

    def log(line):
        print(line, file=sys.stderr if args.json else out, flush=True)

    try:
        result = (train if args.command == "train" else bench)(task, args, log)
    except C.DataError as e:
        print(f"{task.name}.py: {e}", file=sys.stderr)
        sys.exit(1)
    if args.json:
        print(json.dumps(result), file=out, flush=True)
