#!/usr/bin/env python3
"""What fp32 GEMM rate the recurrent layers' GEMMs can reach on this GPU (the LSTM 1152 forward+backward budget).

The persistent layer's non-recurrent work is cuBLAS SGEMMs: the input projection x·W_ihᵀ [N, G·H] before the forward,
and the weight gradients dpreᵀ·h(t−1), dpreᵀ·x and dx = dpre·W_ih after the backward. This times the same shapes through
PyTorch (cuBLAS / cuBLASLt, TF32 off) with CUDA events, median of 50 after warm-up, in each transposition a row-major
caller can ask for, and prints TFLOP/s. Usage: python3 bench/lab/rnn/gemm-probe.py [--hidden 1152] [--gates 4] [--rows 1024]
"""
import argparse
import json

import torch


def timeit(f, reps=50):
    for _ in range(5):
        f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, default=1152)
    p.add_argument("--gates", type=int, default=4)
    p.add_argument("--rows", type=int, default=1024, help="packed rows N = batch × T")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    H, GH, N = a.hidden, a.gates * a.hidden, a.rows
    dev = "cuda"
    x = torch.randn(N, H, device=dev)
    w = torch.randn(GH, H, device=dev)
    dpre = torch.randn(N, GH, device=dev)
    out = {"device": torch.cuda.get_device_name(), "hidden": H, "gates": a.gates, "rows": N}
    cases = {
        "proj x·Wᵀ": lambda: x @ w.t(),
        "proj x·W (W stored transposed)": lambda: x @ w.t().contiguous(),
        "dW dpreᵀ·h": lambda: dpre.t() @ x,
        "dW (dpre stored transposed)": lambda: dpre.t().contiguous() @ x,
        "dx dpre·W": lambda: dpre @ w,
    }
    wt = w.t().contiguous()
    dpret = dpre.t().contiguous()
    cases["proj x·W (W stored transposed)"] = lambda: x @ wt
    cases["dW (dpre stored transposed)"] = lambda: dpret @ x
    flops = 2.0 * N * GH * H
    for name, f in cases.items():
        ms = timeit(f)
        out[name] = {"ms": ms, "tflops": flops / ms / 1e9}
        print(f"{name:34s} {ms:7.4f} ms {flops / ms / 1e9:6.1f} TFLOP/s")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
