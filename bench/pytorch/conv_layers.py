#!/usr/bin/env python3
"""cuDNN's batched convolution for the 16 layers of GLP4NN's Table 5 (src/bench/glp4nn/layers.ts), beside
`vpps bench glp4nn`: one training iteration per layer (weight, bias and input gradients zeroed, forward, backward
of sum(y * dy)), fp32, with TF32 off and on, cudnn.benchmark on (cuDNN picks its fastest algorithm per layer), median
ms over --repeats iterations timed with CUDA events. Writes JSON to --out (default: stdout only).

Usage: python3 bench/pytorch/conv_layers.py [--repeats 20] [--out conv_layers.json] [--layers CaffeNet-conv1,...]
"""

import argparse
import json
import statistics
import sys
import time

import common as C

# N, C, H/W, F, K, S, P — the same as TABLE5 in src/bench/glp4nn/layers.ts
TABLE5 = [
    ("CIFAR10 conv1", 100, 3, 32, 32, 5, 1, 2),
    ("CIFAR10 conv2", 100, 32, 16, 32, 5, 1, 2),
    ("CIFAR10 conv3", 100, 32, 8, 64, 5, 1, 2),
    ("Siamese conv1", 64, 1, 28, 20, 5, 1, 0),
    ("Siamese conv2", 64, 20, 12, 50, 5, 1, 0),
    ("CaffeNet conv1", 256, 3, 227, 96, 11, 4, 0),
    ("CaffeNet conv2", 256, 96, 27, 256, 5, 1, 2),
    ("CaffeNet conv3", 256, 256, 13, 384, 3, 1, 1),
    ("CaffeNet conv4", 256, 384, 13, 384, 3, 1, 1),
    ("CaffeNet conv5", 256, 384, 13, 256, 3, 1, 1),
    ("GoogLeNet conv_1", 32, 160, 7, 320, 3, 1, 1),
    ("GoogLeNet conv_2", 32, 832, 7, 32, 1, 1, 0),
    ("GoogLeNet conv_3", 32, 832, 7, 384, 1, 1, 0),
    ("GoogLeNet conv_4", 32, 192, 7, 384, 3, 1, 1),
    ("GoogLeNet conv_5", 32, 832, 7, 192, 1, 1, 0),
    ("GoogLeNet conv_6", 32, 832, 7, 48, 1, 1, 0),
]


def key(name):
    return "".join(ch for ch in name.lower() if ch.isalnum())


def time_layer(torch, layer, repeats, warmup):
    name, n, c, hw, f, k, s, p = layer
    dev = torch.device("cuda")
    g = torch.Generator(device="cpu").manual_seed(19)
    x = torch.randn(n, c, hw, hw, generator=g).to(dev).requires_grad_(True)
    conv = torch.nn.Conv2d(c, f, k, stride=s, padding=p).to(dev)
    with torch.no_grad():
        y0 = conv(x)
    dy = torch.randn(y0.shape, generator=g).to(dev)

    def iteration():
        conv.zero_grad(set_to_none=False)
        x.grad = None
        y = conv(x)
        y.backward(dy)

    times = C.cuda_event_times(torch, iteration, warmup, repeats)
    return {"ms": statistics.median(times), "minMs": min(times), "output": list(y0.shape)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--layers", default="", help="comma-separated nets or layers (CaffeNet, CaffeNet-conv1); default all")
    ap.add_argument("--out", default="", help="JSON file to write")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("conv_layers.py: PyTorch is not installed (pip install torch); skipped", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("conv_layers.py: no CUDA device visible to PyTorch; skipped", file=sys.stderr)
        return 2
    wanted = {key(w) for w in a.layers.split(",") if w.strip()}
    layers = [l for l in TABLE5 if not wanted or key(l[0]) in wanted or key(l[0].split(" ")[0]) in wanted]
    if not layers:
        print(f"conv_layers.py: --layers {a.layers!r} names no Table 5 layer", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    rows = []
    for layer in layers:
        row = {"layer": layer[0], "n": layer[1], "c": layer[2], "hw": layer[3], "f": layer[4], "k": layer[5], "s": layer[6], "p": layer[7]}
        for tf32 in (False, True):
            torch.backends.cudnn.allow_tf32 = tf32
            torch.backends.cuda.matmul.allow_tf32 = tf32
            r = time_layer(torch, layer, a.repeats, a.warmup)
            row["tf32" if tf32 else "fp32"] = r
        rows.append(row)
        print(f"{layer[0]:<18} cuDNN fp32 {row['fp32']['ms']:.3f} ms, TF32 {row['tf32']['ms']:.3f} ms", flush=True)
    result = {
        "benchmark": "conv_layers (cuDNN through PyTorch)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "method": "per layer: zero grads, forward, backward(dy); cudnn.benchmark; median of repeats (CUDA events)",
        "repeats": a.repeats,
        "layers": rows,
    }
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(result, fh, indent=2)
            fh.write("\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
