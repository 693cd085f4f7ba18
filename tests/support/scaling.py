"""Helpers for the scaling tests: the emulated cluster's set-up (skipped, with the reason, where it cannot run),
the tiny torch point they all run, and reading back every rank a point stored."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from dlbench.records import PointResult
from dlbench.store.store import Store

ROOT = Path(__file__).resolve().parents[2]
EMULATE = ROOT / "scripts" / "emulate"
# In CI these tests must run: there, set DLBENCH_REQUIRE_ROOT_TESTS=1 and a skip becomes a failure.
REQUIRED = os.environ.get("DLBENCH_REQUIRE_ROOT_TESTS") == "1"
TINY = (
    "-f",
    "torch",
    "-m",
    "resnet50",
    "--input-size",
    "32",
    "-b",
    "2",
    "--steps",
    "2",
    "--warmup",
    "1",
    "--repeats",
    "1",
    "--timeout",
    "600",
)
HOSTS = ("dlbench-h1", "dlbench-h2")
HOST_ADDRS = ("10.200.0.1", "10.200.0.2")
NETNS_REACH = "nsenter --net=/run/netns/{host}"


def cannot(reason: str) -> None:
    """Skip with the reason, or fail where the root tests are required (CI)."""
    if REQUIRED:
        pytest.fail(f"required root test cannot run: {reason}")
    pytest.skip(reason)


def emulate(script: str) -> None:
    """Run scripts/emulate/<script>.sh (idempotent); skip where root or apt is missing (exit 77)."""
    if os.geteuid() != 0:
        cannot(f"needs root for scripts/emulate/{script}.sh (network namespaces, Slurm, MPI from apt)")
    try:
        proc = subprocess.run(
            ["bash", str(EMULATE / f"{script}.sh")], capture_output=True, text=True, timeout=900, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"scripts/emulate/{script}.sh did not finish within 900 s")
    if proc.returncode == 77:
        cannot(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"{script}.sh: unavailable")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def stored(store_path: Path) -> list[PointResult]:
    """Every point in the store, oldest first."""
    return [p.result for p in Store(store_path, readonly=True).points()]


def assert_ranks_in_sync(r: PointResult, world: int) -> None:
    """An ok point whose every rank stored its samples, with identical parameters and the right global batch."""
    assert r.status == "ok", r.error
    assert [k.rank for k in r.ranks] == list(range(world))
    # two measured steps: step by step (--sync-every-step), else in windows synchronised at their ends
    assert all(
        len(k.repeats) == 1 and (len(k.repeats[0].step_times) or sum(k.repeats[0].window_steps)) == 2 for k in r.ranks
    )
    sums = {k.param_checksum for k in r.ranks}
    assert len(sums) == 1 and None not in sums
    assert r.metrics is not None and r.metrics.global_batch == r.spec.batch_size * world
    assert r.env.descriptive["world_size"] == str(world)
