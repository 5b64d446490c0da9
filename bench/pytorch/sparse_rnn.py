"""The GEMM-per-step and SpMM-per-step baselines of the sparse persistent RNN (`vpps bench rnn --density`, docs/RNN.md).

    python3 bench/pytorch/sparse_rnn.py [--hidden 1152,1792,2304,5760] [--batch 1,2,4,8,16]
                                        [--density 1,5,10,20,30] [--steps 256] [--repeats 20] [--warmup 3]
                                        [--out FILE]

The recurrent part of a vanilla tanh RNN layer (what `vpps bench rnn` times as the recurrent forward: the input
projection xw = x·W_ihᵀ + b is done before), fp32, TF32 off: per step h = tanh(xw[t] + h·W_hhᵀ), over --steps steps,
either as
- `cublas`: one dense GEMM per step (torch.addmm), the dense W_hh;
- `cusparse`: one sparse × dense product per step (torch.sparse.mm with W_hh in CSR, a random row-balanced mask:
  round(d·H) kept per row, as the vpps benchmark's), then the add and the tanh;
each whole sequence captured in one CUDA graph (torch.cuda.graph) and replayed, so that no launch overhead of Python
is timed; the median of --repeats replays (CUDA events) after --warmup. One JSON line per configuration on stdout
(and appended to --out), the rows `vpps bench rnn --density … --torch FILE` merges:
{"hidden", "batch", "steps", "density" (null for cublas), "impl", "ms", "graph" (false where the capture failed and
the loop was timed without a graph), "device", "torch"}.

Exit status 1 with one line for an option error, 3 when torch cannot be imported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys


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


def percent_list(text):
    try:
        values = [float(v.rstrip("%")) / 100 for v in text.split(",") if v != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated percentages (1,5,10 or 1%,5%); got {text!r}") from None
    if not values or any(not 0 < v <= 1 for v in values):
        raise argparse.ArgumentTypeError(f"densities must be in (0, 100]%; got {text!r}")
    return values


def parse_args(argv):
    p = argparse.ArgumentParser(prog="sparse_rnn.py", description="cuBLAS / cuSPARSE per step, in CUDA graphs")
    p.add_argument("--hidden", type=int_list, default=[1152, 1792, 2304, 5760])
    p.add_argument("--batch", type=int_list, default=[1, 2, 4, 8, 16])
    p.add_argument("--density", type=percent_list, default=[0.01, 0.05, 0.1, 0.2, 0.3])
    p.add_argument("--steps", type=int, default=256)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", help="also append the JSON lines to this file")
    args = p.parse_args(argv)
    if args.steps < 1:
        raise OptionError(f"--steps must be ≥ 1; got {args.steps}")
    if args.repeats < 1:
        raise OptionError(f"--repeats must be ≥ 1; got {args.repeats}")
    if args.warmup < 0:
        raise OptionError(f"--warmup must be ≥ 0; got {args.warmup}")
    return args


def row_balanced_csr(torch, hidden, density, device, seed=17):
    """W_hh [H, H] with round(d·H) kept per row at random columns, values ~ N(0, 1/k), as a CSR tensor."""
    k = max(1, round(density * hidden))
    g = torch.Generator(device="cpu").manual_seed(seed)
    cols = torch.argsort(torch.rand(hidden, hidden, generator=g), dim=1)[:, :k].sort(dim=1).values
    crow = torch.arange(0, (hidden + 1) * k, k, dtype=torch.int64)
    values = torch.randn(hidden * k, generator=g) / k**0.5
    return torch.sparse_csr_tensor(crow, cols.reshape(-1), values, size=(hidden, hidden)).to(device)


def event_ms(torch, run, warmup, repeats):
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def graph_ms(torch, body, warmup, repeats):
    """(ms, graphed): body() captured in one CUDA graph, the median of `repeats` replays after `warmup`; where the
    capture fails (a library call that cannot be captured), body() itself, graphed = False."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()  # warm-up outside the capture (workspaces, cuSPARSE descriptors)
    torch.cuda.current_stream().wait_stream(s)
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            body()
    except RuntimeError as e:
        print(f"sparse_rnn.py: CUDA graph capture failed ({str(e).splitlines()[0]}); timing without a graph", file=sys.stderr)
        torch.cuda.synchronize()
        return event_ms(torch, body, warmup, repeats), False
    return event_ms(torch, graph.replay, warmup, repeats), True


def bench(torch, args, emit):
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for hidden in args.hidden:
        torch.manual_seed(1)
        dense = torch.randn(hidden, hidden, device=device) / hidden**0.5
        sparse = {d: row_balanced_csr(torch, hidden, d, device) for d in args.density}
        for batch in args.batch:
            xw = torch.randn(args.steps, batch, hidden, device=device) * 0.1
            h0 = torch.zeros(batch, hidden, device=device)
            y = torch.empty(args.steps, batch, hidden, device=device)

            def run_dense():
                h = h0
                for t in range(args.steps):
                    h = torch.tanh(torch.addmm(xw[t], h, dense.t()))
                    y[t].copy_(h)

            base = {"hidden": hidden, "batch": batch, "steps": args.steps, "device": name, "torch": torch.__version__}
            ms, graphed = graph_ms(torch, run_dense, args.warmup, args.repeats)
            emit({**base, "density": None, "impl": "cublas", "ms": ms, "graph": graphed})
            for d, w in sparse.items():
                # [H, B] column-major activations: W (CSR) · hᵀ is cuSPARSE's SpMM
                xwt = xw.transpose(1, 2).contiguous()
                ht0 = h0.t().contiguous()
                yt = torch.empty(args.steps, hidden, batch, device=device)

                def run_sparse(w=w, xwt=xwt, ht0=ht0, yt=yt):
                    h = ht0
                    for t in range(args.steps):
                        h = torch.tanh(torch.sparse.mm(w, h) + xwt[t])
                        yt[t].copy_(h)

                ms, graphed = graph_ms(torch, run_sparse, args.warmup, args.repeats)
                emit({**base, "density": d, "impl": "cusparse", "ms": ms, "graph": graphed})


def main(argv):
    try:
        args = parse_args(argv)
    except OptionError as e:
        print(f"sparse_rnn.py: {e}", file=sys.stderr)
        return 1
    try:
        import torch
    except ImportError as e:
        print(f"sparse_rnn.py: torch cannot be imported ({e})", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("sparse_rnn.py: no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 3
    out = open(args.out, "a", encoding="utf8") if args.out else None

    def emit(row):
        line = json.dumps(row)
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
    sys.exit(main(sys.argv[1:]))
