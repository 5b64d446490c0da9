"""cuDNN's recurrent layers through PyTorch: the baseline of `vpps bench rnn` (docs/RNN.md).

    python3 bench/pytorch/rnn.py bench [--cells rnn-tanh,lstm,gru] [--hidden 512,1152,1792,2304] [--batch 1,4,16,64]
                                       [--steps 256] [--repeats 20] [--warmup 5] [--tf32 both|off|on] [--out FILE]
    python3 bench/pytorch/rnn.py golden --out test/golden/rnn-pytorch.json

`bench`: one layer, one direction, input size = hidden, T = --steps, every sequence of full length; per
(cell, hidden, batch, TF32 setting) the median of --repeats timings (CUDA events, after --warmup calls) of a whole
layer call — the input projection included, as vpps's ratios to cuDNN compare them — forward (no autograd state kept)
and forward+backward (dx, dh0 and every weight gradient). fp32 with torch.backends.cudnn.allow_tf32 = False, and
TF32 allowed as a second figure. One JSON line per configuration on stdout (and appended to --out): the ms, the
FLOPs of the recurrent product (2·G·H·H·B per step; 3× that for forward+backward: the forward product, the
transposed product for dh and the weight-gradient product) and their TFLOP/s, the device, torch and cuDNN versions.

`golden`: small float64 cases of nn.RNN (tanh, relu), nn.LSTM and nn.GRU on CPU — 2 bidirectional layers over a
packed batch of unsorted variable-length sequences, h0/c0 given — with their outputs and gradients, for
test/rnn-pytorch.test.ts to check vpps's reference against PyTorch's conventions (gate order, biases, packing).

Exit status 1 with one line for an option error, 3 when torch cannot be imported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import common as C

CELLS = {"rnn-tanh": 1, "rnn-relu": 1, "lstm": 4, "gru": 3}
DEFAULT_CELLS = ["rnn-tanh", "lstm", "gru"]
DEFAULT_HIDDEN = [512, 1152, 1792, 2304]
DEFAULT_BATCH = [1, 4, 16, 64]


class OptionError(Exception):
    """An option that cannot be used; printed as one line."""


def int_list(text):
    try:
        values = [int(v) for v in text.split(",") if v != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers; got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers; got {text!r}")
    return values


def cell_list(text):
    cells = [c for c in text.split(",") if c != ""]
    bad = [c for c in cells if c not in CELLS]
    if not cells or bad:
        raise argparse.ArgumentTypeError(f"cells must be among {', '.join(CELLS)}; got {text!r}")
    return cells


def parse_args(argv):
    p = argparse.ArgumentParser(prog="rnn.py", description="cuDNN recurrent layers through PyTorch")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench", help="time whole layer calls, forward and forward+backward")
    b.add_argument("--cells", type=cell_list, default=DEFAULT_CELLS)
    b.add_argument("--hidden", type=int_list, default=DEFAULT_HIDDEN)
    b.add_argument("--batch", type=int_list, default=DEFAULT_BATCH)
    b.add_argument("--steps", type=int, default=256)
    b.add_argument("--repeats", type=int, default=20)
    b.add_argument("--warmup", type=int, default=5)
    b.add_argument("--tf32", choices=["both", "off", "on"], default="both")
    b.add_argument("--device", default="cuda")
    b.add_argument("--out", help="also append the JSON lines to this file")
    g = sub.add_parser("golden", help="write float64 reference cases of nn.RNN/LSTM/GRU (CPU) as JSON")
    g.add_argument("--out", required=True)
    args = p.parse_args(argv)
    if args.command == "bench":
        if args.steps < 1:
            raise OptionError(f"--steps must be ≥ 1; got {args.steps}")
        if args.repeats < 20:
            raise OptionError(f"--repeats must be ≥ 20 (the median of at least 20 timings); got {args.repeats}")
        if args.warmup < 0:
            raise OptionError(f"--warmup must be ≥ 0; got {args.warmup}")
    return args


def configurations(args):
    """(cell, hidden, batch, tf32) in the order they run: the TF32 figure right after the fp32 one."""
    tf32 = {"both": [False, True], "off": [False], "on": [True]}[args.tf32]
    return [(c, h, b, t) for c in args.cells for h in args.hidden for b in args.batch for t in tf32]


def recurrent_flops(cell, hidden, batch, steps):
    """FLOPs of the recurrent product W_hh·h over a whole sequence: 2·G·H·H·B per step."""
    return 2 * CELLS[cell] * hidden * hidden * batch * steps


def module(torch, cell, input_size, hidden, layers=1, bidirectional=False, dtype=None):
    kw = dict(num_layers=layers, bidirectional=bidirectional, dtype=dtype)
    if cell == "lstm":
        return torch.nn.LSTM(input_size, hidden, **kw)
    if cell == "gru":
        return torch.nn.GRU(input_size, hidden, **kw)
    return torch.nn.RNN(input_size, hidden, nonlinearity=cell[4:], **kw)


def time_ms(torch, fn, warmup, repeats):
    return statistics.median(C.cuda_event_times(torch, fn, warmup, repeats))


def bench(torch, args, emit):
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device)
    for cell, hidden, batch, tf32 in configurations(args):
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.manual_seed(1)
        layer = module(torch, cell, hidden, hidden).to(device)
        x = torch.randn(args.steps, batch, hidden, device=device, requires_grad=True)

        def forward():
            with torch.no_grad():
                layer(x)

        def forward_backward():
            y, _ = layer(x)
            y.backward(torch.ones_like(y))

        fwd = time_ms(torch, forward, args.warmup, args.repeats)
        fb = time_ms(torch, forward_backward, args.warmup, args.repeats)
        flops = recurrent_flops(cell, hidden, batch, args.steps)
        emit(
            {
                "system": "cudnn",
                "cell": cell,
                "hidden": hidden,
                "inputSize": hidden,
                "batch": batch,
                "steps": args.steps,
                "precision": "tf32" if tf32 else "fp32",
                "forwardMs": fwd,
                "forwardBackwardMs": fb,
                "recurrentFlops": flops,
                "forwardTflops": flops / fwd / 1e9,
                "forwardBackwardTflops": 3 * flops / fb / 1e9,
                "device": name,
                "torch": torch.__version__,
                "cudnn": torch.backends.cudnn.version(),
                "repeats": args.repeats,
            }
        )
        del layer, x
        torch.cuda.empty_cache()


GOLDEN_LENGTHS = [2, 4, 1]
GOLDEN = dict(input_size=3, hidden=2, layers=2, bidirectional=True)


def golden(torch):
    """The cases: per cell, the parameters, inputs, outputs and gradients (all float64, nested lists)."""
    from torch.nn.utils.rnn import pack_sequence

    torch.manual_seed(7)
    cases = []
    for cell in CELLS:
        m = module(torch, cell, GOLDEN["input_size"], GOLDEN["hidden"], GOLDEN["layers"], True, torch.float64)
        seqs = [torch.randn(n, GOLDEN["input_size"], dtype=torch.float64, requires_grad=True) for n in GOLDEN_LENGTHS]
        k = GOLDEN["layers"] * 2
        h0 = torch.randn(k, len(seqs), GOLDEN["hidden"], dtype=torch.float64, requires_grad=True)
        c0 = torch.randn(k, len(seqs), GOLDEN["hidden"], dtype=torch.float64, requires_grad=True)
        packed = pack_sequence(seqs, enforce_sorted=False)
        if cell == "lstm":
            y, (hn, cn) = m(packed, (h0, c0))
        else:
            y, hn = m(packed, h0)
            cn = None
        dy = torch.randn_like(y.data)
        dhn = torch.randn_like(hn)
        loss = (y.data * dy).sum() + (hn * dhn).sum()
        dcn = None
        if cn is not None:
            dcn = torch.randn_like(cn)
            loss = loss + (cn * dcn).sum()
        loss.backward()
        cases.append(
            {
                "cell": cell,
                **GOLDEN,
                "lengths": GOLDEN_LENGTHS,
                "batchSizes": packed.batch_sizes.tolist(),
                "sortedIndices": packed.sorted_indices.tolist(),
                "parameters": {n: p.detach().flatten().tolist() for n, p in m.named_parameters()},
                "x": [s.detach().flatten().tolist() for s in seqs],
                "h0": h0.detach().flatten().tolist(),
                "c0": c0.detach().flatten().tolist() if cell == "lstm" else None,
                "y": y.data.detach().flatten().tolist(),
                "hn": hn.detach().flatten().tolist(),
                "cn": cn.detach().flatten().tolist() if cn is not None else None,
                "dy": dy.flatten().tolist(),
                "dhn": dhn.flatten().tolist(),
                "dcn": dcn.flatten().tolist() if dcn is not None else None,
                "gradients": {n: p.grad.flatten().tolist() for n, p in m.named_parameters()},
                "dx": [s.grad.flatten().tolist() for s in seqs],
                "dh0": h0.grad.flatten().tolist(),
                "dc0": c0.grad.flatten().tolist() if cell == "lstm" else None,
            }
        )
    return {"torch": torch.__version__, "cases": cases}


def main(argv=None):
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except OptionError as e:
        print(f"rnn.py: {e}", file=sys.stderr)
        return 1
    try:
        import torch
    except ImportError as e:
        print(f"rnn.py: torch cannot be imported ({e}); install PyTorch with CUDA", file=sys.stderr)
        return 3
    if args.command == "golden":
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(golden(torch), f)
            f.write("\n")
        return 0
    if not torch.cuda.is_available():
        print("rnn.py: no CUDA device is visible to torch; run it on the GPU machine", file=sys.stderr)
        return 1
    out = open(args.out, "a", encoding="utf-8") if args.out else None

    def emit(record):
        line = json.dumps(record)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    try:
        bench(torch, args, emit)
    finally:
        if out:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
