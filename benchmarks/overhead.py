"""Harness overhead: dlbench's throughput as a ratio of a bare PyTorch training loop, same config, one run.

    python benchmarks/overhead.py [--model resnet50] [--batch-size 8] [--input-size 128] [--steps 10] [--rounds 3]

Both sides run in fresh child processes with the same thread settings, interleaved round by round, and
both compute throughput the same way (samples in the measured steps / their wall time). The goal is a
median ratio >= 0.99 on the CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from dlbench.launch.point import execute
from dlbench.launch.worker_process import worker_env
from dlbench.spec import PointSpec, Protocol


def bare_loop(model_name: str, batch: int, size: int, warmup: int, steps: int) -> float:
    """A plain PyTorch loop (same model definition, SGD momentum): samples/s over the measured steps."""
    import torch

    from dlbench.backends.torch.models import build_model, train_loss

    torch.manual_seed(0)
    model = build_model(model_name)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.128, momentum=0.9)
    batch_data = {"images": torch.randn(batch, 3, size, size), "labels": torch.randint(0, 1000, (batch,))}

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        train_loss(model_name, model, batch_data).backward()
        opt.step()

    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return batch * steps / (time.perf_counter() - start)


def main() -> int:
    """Interleave bare and dlbench rounds; print each ratio and the median."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--input-size", type=int, default=128)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.bare:
        print(json.dumps(bare_loop(a.model, a.batch_size, a.input_size, a.warmup, a.steps)))
        return 0
    spec = PointSpec(framework="torch", model=a.model, batch_size=a.batch_size, input_size=a.input_size,
                     protocol=Protocol(a.warmup, a.steps, 1, "median", preset="overhead"))
    argv = [sys.executable, __file__, "--bare", "--model", a.model, "--batch-size", str(a.batch_size),
            "--input-size", str(a.input_size), "--warmup", str(a.warmup), "--steps", str(a.steps)]
    ratios = []
    for r in range(a.rounds):
        bare = float(subprocess.run(argv, capture_output=True, text=True, check=True,
                                    env=worker_env(spec)).stdout.strip().splitlines()[-1])
        result = execute(spec)
        if result.metrics is None:
            print(f"dlbench point failed: {result.status}: {result.error}", file=sys.stderr)
            return 1
        ratio = result.metrics.throughput / bare
        ratios.append(ratio)
        print(f"round {r + 1}: bare {bare:.2f} samples/s, dlbench {result.metrics.throughput:.2f} samples/s, "
              f"ratio {ratio:.4f}")
    print(f"median ratio dlbench / bare: {statistics.median(ratios):.4f} "
          f"({a.model} bs{a.batch_size} {a.input_size}px, {a.steps} steps, {a.rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
