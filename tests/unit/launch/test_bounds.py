"""Bounds (#25): a node's ranks at most what it can run side by side (logical CPUs, visible GPUs; a fixed cap for
machines dlbench cannot see), threads at most the logical CPUs, suite files likewise; --force goes past them."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.spec import PointSpec, preset

CliResult = tuple[int, str, str]
POINT = ("-f", "fake", "-m", "resnet50", "--steps", "1", "--warmup", "0", "--repeats", "1")


@pytest.fixture
def two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)


def test_more_ranks_or_threads_than_cpus_are_refused(
    two_cpus: None, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    db = tmp_path / "s.db"
    for extra, why in (
        (("--scale", "1n3c"), "3 ranks on a node, more than 2"),
        (("--threads", "3"), "--threads 3 is more than the 2 logical CPUs"),
    ):
        code, _, err = cli("run", *POINT, *extra, "--store", str(db))
        assert code == 2 and why in err and "--force" in err and err.count("\n") == 1, err
    assert not db.exists()  # nothing ran, nothing was written
    code, _, err = cli("run", *POINT, "--threads", "3", "--force", "--store", str(db))
    assert code == 0, err


def test_a_suite_file_is_under_the_same_bounds(two_cpus: None, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    suite = tmp_path / "wide.yaml"
    suite.write_text("name: wide\naxes: {framework: fake, model: resnet50, scale: [1n1c, 1n3c]}\n")
    code, _, err = cli("sweep", str(suite), "--dry-run", "--store", str(tmp_path / "s.db"))
    assert code == 2 and "1n3c starts 3 ranks" in err
    code, out, err = cli("sweep", str(suite), "--dry-run", "--force", "--store", str(tmp_path / "s.db"))
    assert code == 0 and "2 points" in out, err


def test_gpus_and_unseen_machines(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlbench.launch import bounds
    from dlbench.machine import env
    from dlbench.machine.nvml import GpuInfo

    def spec(**kw: object) -> PointSpec:
        return PointSpec(framework="fake", model="resnet50", batch_size=1, protocol=preset("quick"), **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(env, "gpus", lambda: GpuInfo(devices=({"name": "H100"},), driver="550"))  # type: ignore[arg-type]
    assert "1 visible GPU" in str(bounds.bound_problem(spec(device="cuda", devices_per_node=2), remote=False))
    assert bounds.bound_problem(spec(device="cuda", devices_per_node=1), remote=False) is None
    assert bounds.bound_problem(spec(devices_per_node=8, nodes=2), remote=True) is None  # a Slurm node's 8
    assert "fixed cap" in str(bounds.bound_problem(spec(devices_per_node=100_000), remote=True))


def test_ranks_that_would_share_a_gpu_here_are_refused_even_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    """#40: two ranks of a CUDA point on a machine that shows one GPU (CUDA_VISIBLE_DEVICES=0) would both take it
    and NCCL fails with a duplicate-GPU error: refused in one line, --force or not; on machines dlbench cannot see
    (Slurm, --hosts) the worker checks its own binding."""
    from dlbench.launch import bounds
    from dlbench.machine import env
    from dlbench.machine.nvml import GpuInfo
    from dlbench.spec import SpecError

    monkeypatch.setattr(env, "gpus", lambda: GpuInfo(devices=({"name": "H100"},), driver="550"))  # type: ignore[arg-type]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    two = PointSpec(
        framework="fake", model="resnet50", batch_size=1, protocol=preset("quick"), device="cuda", devices_per_node=2
    )
    for force in (False, True):
        with pytest.raises(SpecError) as refused:
            bounds.check_bounds([two], force=force)
        assert "2 ranks of a CUDA point on this machine, which shows 1 GPU(s) (CUDA_VISIBLE_DEVICES=0)" in str(
            refused.value
        )
        assert "\n" not in str(refused.value)
    bounds.check_bounds([two], force=True, remote_hosts=True)  # placed elsewhere: not this machine's GPUs
    bounds.check_bounds(
        [PointSpec(framework="fake", model="resnet50", batch_size=1, protocol=preset("quick"), device="cuda")],
        force=False,
    )
