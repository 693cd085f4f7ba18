"""What every bare loop shares: its command line, the timing (one definition with dlbench's: global samples in the
measured steps / the wall time from before the first to after the last, synchronised with the device at the two
ends only), and the one JSON line it prints. Imports no framework.

The settings that make a loop take dlbench's path for the same point (optimizer constructor arguments, paddle
flags, layout and AMP level) come on the command line from benchmarks/fairness.py, which reads them from
dlbench's own decisions, so that a ratio measures the harness and nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path


def parser(doc: str | None, models: Sequence[str] = ("resnet50",)) -> argparse.ArgumentParser:
    """The loops' options: the point (--model ... --compile, `models` the ones this loop builds) and dlbench's
    settings for it."""
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--model", choices=models, default=models[0])
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--input-size", type=int, default=224)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--precision", choices=("fp32", "tf32", "amp", "bf16"), default="fp32")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--compile", action="store_true", help="the framework's default compiler (as dlbench --compile)")
    p.add_argument("--optimizer", type=json.loads, default={}, help="optimizer constructor keyword arguments (JSON)")
    p.add_argument(
        "--loss-scale-init",
        type=float,
        default=2.0**16,
        help="dynamic loss scaling's initial scale (torch's default 2^16; fairness.py passes dlbench's)",
    )
    p.add_argument("--flags", type=json.loads, default={}, help="framework flags to set (JSON; paddle)")
    p.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW", help="image layout (paddle)")
    p.add_argument("--amp-level", choices=("O1", "O2"), default="O1", help="autocast level (paddle)")
    return p


def parse_args(
    doc: str | None, argv: Sequence[str] | None = None, models: Sequence[str] = ("resnet50",)
) -> argparse.Namespace:
    """The loop's command line (argv: sys.argv[1:] when None; `models`: the ones this loop builds)."""
    return parser(doc, models).parse_args(argv)


def cpu_seconds() -> tuple[float, float, float]:
    """(busy, total) seconds of every CPU from /proc/stat (busy: user, nice, system, irq, softirq, steal), and
    this process's own CPU seconds (all its threads); NaNs where /proc/stat cannot be read."""
    try:
        lines = [ln.split() for ln in Path("/proc/stat").read_text().splitlines() if ln.startswith("cpu ")]
        values = [int(v) for v in lines[0][1:9]]
    except (OSError, IndexError, ValueError):
        return float("nan"), float("nan"), float("nan")
    hz = os.sysconf("SC_CLK_TCK")
    own = os.times()
    busy = sum(values) - values[3] - values[4]  # less idle and iowait
    return busy / hz, sum(values) / hz, own.user + own.system


def measure(step: Callable[[], None], sync: Callable[[], None], args: argparse.Namespace, canonical: str) -> None:
    """Warm up, time the measured steps as one window, print {"samples_per_s", "canonical", "others_share"} as
    JSON: others_share is the share of the CPUs' time other processes used during that window (as dlbench
    records a point's contention)."""
    for _ in range(args.warmup):
        step()
    sync()
    before = cpu_seconds()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    elapsed = time.perf_counter() - start
    after = cpu_seconds()
    total = after[1] - before[1]
    others = max(0.0, (after[0] - before[0] - (after[2] - before[2])) / total) if total > 0 else float("nan")
    print(
        json.dumps(
            {"samples_per_s": args.batch_size * args.steps / elapsed, "canonical": canonical, "others_share": others}
        )
    )
