"""What every bare loop shares: its command line, the timing (one definition with dlbench's: global samples in the
measured steps / the wall time from before the first to after the last, synchronised with the device at the two
ends only), and the one JSON line it prints. Imports no framework."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable


def parse_args(doc: str | None) -> argparse.Namespace:
    """--batch-size, --input-size, --warmup, --steps, --device, --precision, --channels-last."""
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--input-size", type=int, default=224)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--precision", choices=("fp32", "tf32", "amp", "bf16"), default="fp32")
    p.add_argument("--channels-last", action="store_true")
    return p.parse_args()


def measure(step: Callable[[], None], sync: Callable[[], None], args: argparse.Namespace, canonical: str) -> None:
    """Warm up, time the measured steps as one window, print {"samples_per_s", "canonical"} as JSON."""
    for _ in range(args.warmup):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    elapsed = time.perf_counter() - start
    print(json.dumps({"samples_per_s": args.batch_size * args.steps / elapsed, "canonical": canonical}))
