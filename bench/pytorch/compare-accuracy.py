#!/usr/bin/env python3
"""Accuracy of vpps (autobatch engine) against the PyTorch references, within the bound of docs/MODELS.md.

For each model, 3 seeds of `node bin/vpps.js train <model> --engine autobatch --json` and 3 seeds of
`python3 bench/pytorch/<model>.py train --json`, same data, split, epochs and optimiser (Adam, lr 0.001, batch 16,
clip 5 on the global norm, loss summed over the batch), run in parallel (-j). Writes bench/results/<device>/
accuracy.json and accuracy.md: per model the per-seed dev metric of both sides (the best epoch's, as `vpps train`
reports it; --pick last for the last epoch's), their means and seed standard deviations, and the bound: sentence
models' root accuracy within max(1.5, 2σ) points, taggers' entity F1 within max(2, 2σ) points, σ the larger side's
sample standard deviation (n − 1). Each run's stderr goes to accuracy-logs/.

On the GPU machine (Node from ../shared/gpu/prepare):
    source .gpu/env.sh && python3 bench/pytorch/compare-accuracy.py -j 8
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import re
import shlex
import statistics
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = ["treelstm", "rvnn", "td-rnn", "td-lstm", "bilstm", "bilstm-char"]
TAGGERS = {"bilstm", "bilstm-char"}
# epochs per model unless --epochs: the taggers' training split (WikiNER, ~1.35k sentences) is 6× smaller than SST's
EPOCHS = {"treelstm": 10, "rvnn": 10, "td-rnn": 10, "td-lstm": 10, "bilstm": 20, "bilstm-char": 20}
# slowest first, so that the long runs start at once (relative cost of one epoch on the GPU, a guess)
COST = {"td-rnn": 6, "td-lstm": 5, "treelstm": 3, "rvnn": 2, "bilstm-char": 2, "bilstm": 1}


def device_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=60)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().split("\n")[0].strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    model = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
    except OSError:
        pass
    return f"{model} ({os.cpu_count()} cores)"


def device_slug(name):
    """As src/bench/device.ts: `NVIDIA H100 80GB HBM3` → h100; a CPU → cpu-<model>-<cores>c."""
    m = re.match(r"^(.*) \((\d+) cores\)$", name)
    if m:
        model = re.sub(r"\((R|TM)\)", "", m.group(1), flags=re.I)
        model = re.sub(r"@.*$", "", model)
        model = re.sub(r"\b(CPU|Processor|\d+-Core)\b", "", model, flags=re.I).strip()
        slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
        return f"cpu-{slug or 'cpu'}-{m.group(2)}c"
    g = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", re.sub(r"^NVIDIA\s+", "", name))
    return re.sub(r"[^a-z0-9]+", "-", (g.group(1) if g else name).lower())


def stats(xs):
    """Mean and sample standard deviation (n − 1; 0 for one value, None for none)."""
    if not xs:
        return None, None
    return statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0


def shown_path(path):
    """A path as the result files show it: relative to the repository when inside it or beside it."""
    rel = os.path.relpath(path, ROOT)
    return rel if not rel.startswith(os.path.join("..", "..")) else os.path.abspath(path)


class Stopped(Exception):
    """SIGTERM or SIGINT (`timeout` ran out): the runs still going are ended, the finished ones written."""


RUNNING = set()
RUNNING_LOCK = threading.Lock()
STOPPING = threading.Event()


def stop(signum, frame):
    STOPPING.set()
    raise Stopped(signal.Signals(signum).name)


class Job:
    def __init__(self, model, side, seed, argv, log):
        self.model, self.side, self.seed, self.argv, self.log = model, side, seed, argv, log
        self.result = None
        self.error = None
        self.seconds = None

    def run(self):
        t0 = time.perf_counter()
        with open(self.log, "w", encoding="utf-8") as err:
            err.write(f"$ {shlex.join(self.argv)}\n")
            err.flush()
            p = subprocess.Popen(self.argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True)
            with RUNNING_LOCK:
                RUNNING.add(p)
            try:
                stdout, _ = p.communicate()
            finally:
                with RUNNING_LOCK:
                    RUNNING.discard(p)
        self.seconds = time.perf_counter() - t0
        lines = [ln for ln in stdout.strip().split("\n") if ln.strip()]
        if p.returncode != 0:
            ended = "ended by the harness's stop" if STOPPING.is_set() else f"exit status {p.returncode}"
            self.error = f"{ended} (see {shown_path(self.log)})"
            return self
        try:
            self.result = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            self.error = f"no JSON result on stdout (see {shown_path(self.log)})"
        return self


def end_running():
    """Ends every run still going (SIGTERM, then SIGKILL after 10 s), so that nothing keeps the GPU busy."""
    with RUNNING_LOCK:
        procs = list(RUNNING)
    for p in procs:
        p.terminate()
    deadline = time.monotonic() + 10
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()


def epochs_of(job):
    """Per-epoch results of either side: vpps's `epochs` list, the reference's `perEpoch`."""
    r = job.result
    return r["perEpoch"] if "perEpoch" in r else r["epochs"]


def token_key(metrics):
    return next((k for k in metrics if "token" in k.lower()), None)


def summary(job, pick):
    eps = epochs_of(job)
    chosen = max(eps, key=lambda e: e["devAccuracy"]) if pick == "best" else eps[-1]
    tk = token_key(chosen["devMetrics"])
    return {
        "seed": job.seed,
        "metric": 100 * chosen["devAccuracy"],
        "epoch": chosen["epoch"],
        "tokenAccuracy": 100 * chosen["devMetrics"][tk] if tk else None,
        "lastEpochMetric": 100 * eps[-1]["devAccuracy"],
        "perEpoch": [100 * e["devAccuracy"] for e in eps],
        "seconds": job.seconds,
    }


def side_of(jobs, pick):
    ok = [j for j in jobs if j.result is not None]
    runs = [summary(j, pick) for j in ok]
    waiting = [f"seed {j.seed}: not finished yet" for j in jobs if j.result is None and j.error is None]
    mean, std = stats([r["metric"] for r in runs])
    tokens = [r["tokenAccuracy"] for r in runs if r["tokenAccuracy"] is not None]
    tmean, tstd = stats(tokens)
    return {
        "runs": runs,
        "errors": [f"seed {j.seed}: {j.error}" for j in jobs if j.error] + waiting,
        "mean": mean,
        "std": std,
        "tokenAccuracyMean": tmean if tokens else None,
        "tokenAccuracyStd": tstd if tokens else None,
    }


def verdict(model, ours, ref):
    floor = 2.0 if model in TAGGERS else 1.5
    complete = not ours["errors"] and not ref["errors"] and ours["runs"] and ref["runs"]
    if not complete:
        return {"sigma": None, "bound": None, "difference": None, "pass": None}
    sigma = max(ours["std"], ref["std"])
    bound = max(floor, 2 * sigma)
    diff = ours["mean"] - ref["mean"]
    return {"sigma": sigma, "bound": bound, "floor": floor, "difference": diff, "pass": abs(diff) <= bound}


def fmt(x, digits=2):
    return "–" if x is None else f"{x:.{digits}f}"


def markdown(result):
    o = result
    lines = [
        "# Accuracy: vpps against the PyTorch references",
        "",
        "Adam, learning rate 0.001, batch 16, clip 5 on the global gradient norm, loss summed over the batch; the same "
        "seeds on each side (initialisation and shuffling; the two sides' initial weights differ, drawn from the same "
        "distributions). Dev metric (root accuracy or entity F1) of the picked epoch, in points. Held-out split: SST "
        "dev.txt; the tagged data's dev part of the seeded split (--split-seed 1). Bound: |Δ mean| ≤ max(1.5, 2σ) for "
        "root accuracy, max(2, 2σ) for entity F1; σ the larger side's seed standard deviation (n − 1).",
        "",
        "| model | metric | epochs | training sentences | epoch | vpps per seed | vpps mean ± σ | PyTorch per seed | "
        "PyTorch mean ± σ | Δ | bound | pass |",
        "| --- | --- | ---: | ---: | --- | --- | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for m in o["models"]:
        per = lambda side: ", ".join(f"{r['metric']:.2f}" for r in side["runs"]) or "–"  # noqa: E731
        v = m["verdict"]
        ok = "–" if v["pass"] is None else "yes" if v["pass"] else "**no**"
        lines.append(
            f"| {m['model']} | {m['metric']} | {m['epochs']} | {m['maxSentences'] or 'all'} | {m['pick']} | "
            f"{per(m['vpps'])} | {fmt(m['vpps']['mean'])} ± {fmt(m['vpps']['std'])} | {per(m['reference'])} | "
            f"{fmt(m['reference']['mean'])} ± {fmt(m['reference']['std'])} | {fmt(v['difference'])} | "
            f"{fmt(v['bound'])} | {ok} |"
        )
    taggers = [m for m in o["models"] if m["model"] in TAGGERS]
    if taggers:
        lines += ["", "Token accuracy of the taggers (reported, not bounded: most WikiNER tokens are `O`):", "",
                  "| model | vpps mean ± σ | PyTorch mean ± σ |", "| --- | ---: | ---: |"]
        for m in taggers:
            a, b = m["vpps"], m["reference"]
            lines.append(f"| {m['model']} | {fmt(a['tokenAccuracyMean'])} ± {fmt(a['tokenAccuracyStd'])} | "
                         f"{fmt(b['tokenAccuracyMean'])} ± {fmt(b['tokenAccuracyStd'])} |")
    errors = [f"- {m['model']} {side}: {e}" for m in o["models"] for side in ("vpps", "reference")
              for e in m[side]["errors"]]
    if errors:
        lines += ["", "Runs that failed:", ""] + errors
    lines += ["", "Measured (model: device, date, data, command):", ""]
    lines += [f"- {m['model']}: {m['device']}, {m['date']}, {m['data']}, `{m['command']}`" for m in o["models"]]
    lines.append("")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--epochs", type=int, help="epochs for every model (default: " +
                   ", ".join(f"{k} {v}" for k, v in EPOCHS.items()) + ")")
    p.add_argument("--max-sentences", type=int, help="train on the first N training sentences only (both sides)")
    p.add_argument("--sst", default=os.path.join(ROOT, "..", "shared", "data", "sst"), help="SST directory")
    p.add_argument("--tagged", default=os.path.join(ROOT, "..", "shared", "data", "wikiner"),
                   help="tagged data: a directory (train.txt + dev.txt, or only dev.txt to split) or one file")
    p.add_argument("-j", "--jobs", type=int, default=8, help="runs at once (default 8)")
    p.add_argument("--engine", default="autobatch", help="vpps engine (default autobatch)")
    p.add_argument("--vpps-args", default="", help="more arguments of vpps train, e.g. '--rnn persistent'")
    p.add_argument("--pick", choices=["best", "last"], default="best", help="the epoch compared (default best)")
    p.add_argument("--node", default="node")
    p.add_argument("--python", default=sys.executable or "python3")
    p.add_argument("--device", help="--device of both sides: cpu, or cuda (vpps: cuda:N); default: each side's auto")
    p.add_argument("--out", help="results folder (default bench/results/<device>/)")
    p.add_argument("--fresh", action="store_true", help="drop the other models' entries of an earlier accuracy.json")
    p.add_argument("--dry-run", action="store_true", help="print the commands and stop")
    a = p.parse_args(argv)
    models = [m.strip() for m in a.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        p.error(f"--models: unknown {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    seeds = [int(s) for s in a.seeds.split(",")]
    device = device_name()
    out = a.out or os.path.join(ROOT, "bench", "results", device_slug(device))
    logs = os.path.join(out, "accuracy-logs")
    threads = max(1, (os.cpu_count() or 1) // max(1, a.jobs))
    jobs = []
    for model in sorted(models, key=lambda m: -COST[m]):
        epochs = a.epochs or EPOCHS[model]
        data = a.tagged if model in TAGGERS else a.sst
        common = ["--data", data, "--epochs", str(epochs)]
        if a.max_sentences:
            common += ["--max-sentences", str(a.max_sentences)]
        for seed in seeds:
            s = ["--seed", str(seed)]
            ours = [a.node, "bin/vpps.js", "train", model, "--engine", a.engine, *shlex.split(a.vpps_args), *common, *s,
                    "--json"]
            ref = [a.python, f"bench/pytorch/{model}.py", "train", *common, *s, "--threads", str(threads), "--json"]
            if a.device:
                ours += ["--device", "cuda:0" if a.device == "cuda" else a.device]
                ref += ["--device", a.device]
            jobs.append(Job(model, "vpps", seed, ours, os.path.join(logs, f"{model}-vpps-seed{seed}.log")))
            jobs.append(Job(model, "reference", seed, ref, os.path.join(logs, f"{model}-pytorch-seed{seed}.log")))
    if a.dry_run:
        for j in jobs:
            print(shlex.join(j.argv))
        return 0
    os.makedirs(logs, exist_ok=True)
    print(f"{len(jobs)} runs on {device}, {a.jobs} at once; logs in {logs}", file=sys.stderr)
    command = shlex.join([os.path.relpath(sys.argv[0], ROOT), *(argv if argv is not None else sys.argv[1:])])
    t0 = time.perf_counter()
    write = lambda: write_results(a, models, seeds, jobs, device, out, command, time.perf_counter() - t0)  # noqa: E731
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs)
    try:
        for f in concurrent.futures.as_completed([pool.submit(j.run) for j in jobs]):
            j = f.result()
            what = j.error or f"best {100 * j.result['bestDevAccuracy']:.2f}"
            print(f"{j.model} {j.side} seed {j.seed}: {what} ({j.seconds:.0f} s)", file=sys.stderr)
            write()  # after every run: a harness stopped early keeps what finished
    except Stopped as e:
        pool.shutdown(wait=False, cancel_futures=True)
        end_running()
        for j in jobs:
            if j.result is None and j.error is None:
                j.error = f"stopped by {e} before it finished"
        result = write()
        print(markdown(result))
        print(f"stopped by {e}: the runs that finished are in {os.path.join(out, 'accuracy.json')}", file=sys.stderr)
        return 2
    pool.shutdown()
    result = write()
    print(markdown(result))
    print(f"wrote {os.path.join(out, 'accuracy.json')} and accuracy.md", file=sys.stderr)
    verdicts = [m["verdict"]["pass"] for m in result["models"] if m["model"] in models]
    return 0 if all(v is True for v in verdicts) else 1


def write_results(a, models, seeds, jobs, device, out, command, wall):
    """accuracy.json and accuracy.md from the runs finished so far, with the other models' earlier entries."""
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    entries = {}
    for model in models:
        ours = side_of([j for j in jobs if j.model == model and j.side == "vpps"], a.pick)
        ref = side_of([j for j in jobs if j.model == model and j.side == "reference"], a.pick)
        entries[model] = {
            "model": model,
            "metric": "entity F1" if model in TAGGERS else "root accuracy",
            "epochs": a.epochs or EPOCHS[model],
            "maxSentences": a.max_sentences,
            "seeds": seeds,
            "pick": a.pick,
            "engine": a.engine,
            "vppsArgs": a.vpps_args,
            "data": shown_path(a.tagged if model in TAGGERS else a.sst),
            "date": now,
            "device": device,
            "command": command,
            "vpps": ours,
            "reference": ref,
            "verdict": verdict(model, ours, ref),
        }
    # models measured by earlier runs into the same folder stay (each entry says how and when it was measured)
    path = os.path.join(out, "accuracy.json")
    kept = []
    if os.path.exists(path) and not a.fresh:
        try:
            with open(path, encoding="utf-8") as f:
                kept = [m for m in json.load(f).get("models", []) if m.get("model") not in entries and "command" in m]
        except (OSError, ValueError):
            kept = []
    merged = sorted(kept + list(entries.values()), key=lambda m: MODELS.index(m["model"]))
    result = {
        "benchmark": "accuracy",
        "command": command,
        "date": now,
        "device": device,
        "machine": {"host": platform.node(), "cores": os.cpu_count(), "python": platform.python_version()},
        "training": {"optimizer": "adam", "learningRate": 0.001, "batch": 16, "clip": 5, "loss": "sum over batch",
                     "split": "tagged data: seeded split, --split-seed 1; SST: train.txt / dev.txt"},
        "jobs": a.jobs,
        "wallSeconds": wall,
        "models": merged,
    }
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    with open(os.path.join(out, "accuracy.md"), "w", encoding="utf-8") as f:
        f.write(markdown(result))
    return result


if __name__ == "__main__":
    sys.exit(main())
